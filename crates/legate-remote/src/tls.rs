//! The TLS a remote agent's `https://` URL is reached with: the server's certificate checked
//! against this machine's trusted roots (the system store, as `curl` and `git` read it,
//! `SSL_CERT_FILE` and `SSL_CERT_DIR` included; Mozilla's roots when the system has none), or
//! against the agent's own `tls_ca_file` alone when it names one (a private federation's CA,
//! which then no public CA can stand in for). TLS 1.2 and 1.3 through `rustls` and `ring`.
//!
//! This module owns the client's TLS settings and the plain-HTTP rule's error. It never turns
//! verification off and never reads a key.

use legate_core::{Error, ErrorCode, RemoteEndpoint, Result};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The largest CA file read, in bytes.
const MAX_CA_BYTES: u64 = 4 << 20;

/// The roots every `https://` remote without a `tls_ca_file` is checked against, read once per
/// process.
fn system_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let found = rustls_native_certs::load_native_certs();
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(found.certs);
        if roots.is_empty() {
            tracing::info!(
                errors = found.errors.len(),
                "no trusted root certificates in the system's store; remote agents' certificates are checked against Mozilla's roots"
            );
            roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        } else {
            tracing::debug!(added, ignored, "the system's trusted roots read");
        }
        roots
    })
}

/// The roots in `path` (PEM): `CONFIG_INVALID` naming `agent` when it cannot be read or holds
/// no certificate a root store takes.
fn roots_from(agent: &str, path: &Path) -> Result<RootCertStore> {
    let unreadable = |e: std::io::Error| {
        Error::quoting(
            ErrorCode::ConfigInvalid,
            format!(
                "agent `{agent}`: its tls_ca_file {} cannot be read",
                path.display()
            ),
            e,
        )
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(unreadable)?
        .take(MAX_CA_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_CA_BYTES {
        return Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!(
                "agent `{agent}`: its tls_ca_file {} is larger than {MAX_CA_BYTES} bytes",
                path.display()
            ),
        ));
    }
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&bytes)
        .filter_map(std::result::Result::ok)
        .collect();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(certs);
    if roots.is_empty() {
        return Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!(
                "agent `{agent}`: its tls_ca_file {} holds no CA certificate in PEM",
                path.display()
            ),
        ));
    }
    Ok(roots)
}

/// The TLS client settings for `endpoint` of the agent `agent`.
pub fn client_config(agent: &str, endpoint: &RemoteEndpoint) -> Result<rustls::ClientConfig> {
    let roots = match &endpoint.tls_ca_file {
        Some(path) => roots_from(agent, path)?,
        None => system_roots().clone(),
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::quoting(ErrorCode::Internal, "TLS could not be set up", e))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Whether `endpoint`'s bearer token would cross a network in clear: one is configured, the
/// url is plain `http://`, its host (as the HTTP client parses it) is not this machine
/// (`localhost`, a loopback address), and `allow_plain_http` is unset. A url that does not
/// parse counts as another host.
pub fn token_in_clear(endpoint: &RemoteEndpoint) -> bool {
    endpoint.token.is_some()
        && !endpoint.allow_plain_http
        && plain_http_beyond_loopback(&endpoint.url)
}

/// Whether `url` is plain `http://` to a host other than this machine's loopback.
fn plain_http_beyond_loopback(url: &str) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return true;
    };
    if parsed.scheme() != "http" {
        return false;
    }
    let loopback = match parsed.host() {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(v4)) => v4.is_loopback(),
        Some(url::Host::Ipv6(v6)) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        None => false,
    };
    !loopback
}

/// `CONFIG_INVALID` when `endpoint` would send its bearer token across a network in clear
/// ([`token_in_clear`]).
pub fn refuse_token_in_clear(agent: &str, endpoint: &RemoteEndpoint) -> Result<()> {
    if token_in_clear(endpoint) {
        return Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!(
                "agent `{agent}`: its bearer token would cross the network in clear (an http:// url on a host that is not this machine); use https://, or set allow_plain_http = true on a network you trust"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    use legate_core::TokenRef;
    use proptest::prelude::*;

    fn with_token(url: &str) -> RemoteEndpoint {
        let mut e = RemoteEndpoint::new(url);
        e.token = Some(TokenRef::Env("T".into()));
        e
    }

    #[test]
    fn a_token_is_in_clear_over_http_beyond_loopback_only() {
        for url in [
            "http://10.0.0.7:8080/",
            "HTTP://build-1/agents/x",
            "http://127.0.0.1.evil.example/",
            "http://localhost.evil.example:80",
            "http://[::2]:1/",
            "http://127.0.0.1@10.0.0.7/",
            "http://10.0.0.7\\@127.0.0.1/",
            "http://[::1",
            "not a url",
        ] {
            assert!(token_in_clear(&with_token(url)), "{url}");
        }
        for url in [
            "https://10.0.0.7:8080/",
            "http://127.0.0.1:8080/x",
            "http://127.9.9.9/",
            "http://LOCALHOST:1",
            "http://[::1]:9/",
            "http://[::ffff:127.0.0.1]/",
            "http://user:pw@localhost/",
            "http://localhost?x",
            "http://0x7f.1/",
        ] {
            assert!(!token_in_clear(&with_token(url)), "{url}");
        }
        let mut allowed = with_token("http://10.0.0.7/");
        allowed.allow_plain_http = true;
        assert!(!token_in_clear(&allowed));
        assert!(!token_in_clear(&RemoteEndpoint::new("http://10.0.0.7/")));
    }

    proptest! {
        /// Any url is judged without a panic, and a loopback url stays loopback whatever
        /// path, query or fragment it carries.
        #[test]
        fn the_plain_http_rule_never_panics(url in "\\PC{0,80}", tail in "[/?#][a-z0-9@:/.]{0,30}") {
            let _ = plain_http_beyond_loopback(&url);
            let loopback = format!("http://127.0.0.1:8080{tail}");
            prop_assert!(!plain_http_beyond_loopback(&loopback), "{}", loopback);
        }
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused_naming_the_agent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let mut endpoint = RemoteEndpoint::new("https://127.0.0.1:1/");
        endpoint.tls_ca_file = Some(path);
        let e = client_config("far", &endpoint).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert!(e.message.contains("agent `far`"), "{e}");
        endpoint.tls_ca_file = Some(dir.path().join("missing.pem"));
        let e = client_config("far", &endpoint).unwrap_err();
        assert!(e.message.contains("cannot be read"), "{e}");
    }

    #[test]
    fn a_ca_files_certificate_is_the_only_root() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ca.pem");
        let ca = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        std::fs::write(&path, ca.cert.pem()).unwrap();
        assert_eq!(roots_from("far", &path).unwrap().len(), 1);
    }
}
