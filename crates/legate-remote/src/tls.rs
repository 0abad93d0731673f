//! The TLS a remote agent's `https://` URL is reached with: the server's certificate checked
//! against this machine's trusted roots (the system store, as `curl` and `git` read it, or
//! `SSL_CERT_FILE` and `SSL_CERT_DIR` alone when set; Mozilla's roots only when neither is set
//! and the system's store is empty), or against the agent's own `tls_ca_file` alone when it
//! names one (a private federation's CA, which then no public CA can stand in for). TLS 1.2
//! and 1.3 through `rustls` and `ring`.
//!
//! It also owns what may cross the network in clear: a bearer token to another machine over
//! plain `http://` is refused ([`token_in_clear`]), and a url carrying a user name or
//! password is refused outright ([`refuse_credentials_in_url`]). It never turns verification
//! off and never reads a key.

use legate_core::{Error, ErrorCode, RemoteEndpoint, Result};
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// The largest CA file read, in bytes.
const MAX_CA_BYTES: u64 = 4 << 20;

/// The roots every `https://` remote without a `tls_ca_file` is checked against: the system's
/// store, kept for the process once it was read without an error. Mozilla's roots stand in only
/// when neither `SSL_CERT_FILE` nor `SSL_CERT_DIR` is set and the store read cleanly holds
/// none; a store named by those variables that yields nothing, or one that could not be read
/// at all, is `CONFIG_INVALID` (never a wider trust than asked for).
fn system_roots(agent: &str) -> Result<RootCertStore> {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    if let Some(roots) = ROOTS.get() {
        return Ok(roots.clone());
    }
    let found = rustls_native_certs::load_native_certs();
    let overridden = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
        .iter()
        .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    if !found.errors.is_empty() {
        tracing::warn!(
            errors = found.errors.len(),
            added,
            "the system's trusted roots could not all be read; read again at the next connection"
        );
    }
    if roots.is_empty() {
        if overridden || !found.errors.is_empty() {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "agent `{agent}`: no trusted root certificate could be read from {}; fix it or name the remote's CA with tls_ca_file",
                    if overridden {
                        "SSL_CERT_FILE or SSL_CERT_DIR"
                    } else {
                        "the system's store"
                    }
                ),
            ));
        }
        tracing::warn!(
            "the system's store holds no trusted root certificate; remote agents' certificates are checked against Mozilla's roots"
        );
        roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    } else {
        tracing::debug!(added, ignored, "the system's trusted roots read");
    }
    if found.errors.is_empty() {
        let _ = ROOTS.set(roots.clone());
    }
    Ok(roots)
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
    let file = std::fs::File::open(path).map_err(unreadable)?;
    // A FIFO or a device would hold the connection (or never end): regular files only.
    if !file.metadata().map_err(unreadable)?.is_file() {
        return Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!(
                "agent `{agent}`: its tls_ca_file {} is not a regular file",
                path.display()
            ),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CA_BYTES + 1)
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
        Some(path) if !path.is_absolute() => {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "agent `{agent}`: its tls_ca_file must be an absolute path (got {})",
                    path.display()
                ),
            ));
        }
        Some(path) => roots_from(agent, path)?,
        None => system_roots(agent)?,
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

/// Whether `url` names a user or a password (`http://user:pw@host/`): the HTTP client would
/// send them as `Authorization: Basic`, past every rule for tokens, and they would be quoted
/// wherever the url is.
pub fn has_credentials(url: &str) -> bool {
    reqwest::Url::parse(url).is_ok_and(|u| !u.username().is_empty() || u.password().is_some())
}

/// `CONFIG_INVALID` when `endpoint`'s url carries a user name or password ([`has_credentials`]).
pub fn refuse_credentials_in_url(agent: &str, endpoint: &RemoteEndpoint) -> Result<()> {
    if has_credentials(&endpoint.url) {
        return Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!(
                "agent `{agent}`: its url carries a user name or password; name a bearer token with token_env or token_file instead"
            ),
        ));
    }
    Ok(())
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
    fn a_user_or_password_in_the_url_is_seen() {
        for url in [
            "http://svc:secret@10.0.0.7/",
            "https://svc@host/",
            "http://:pw@h/",
        ] {
            assert!(has_credentials(url), "{url}");
            let e = refuse_credentials_in_url("far", &RemoteEndpoint::new(url)).unwrap_err();
            assert!(!e.message.contains("secret"), "{e}");
        }
        for url in ["http://10.0.0.7/", "https://host/a@b", "not a url"] {
            assert!(!has_credentials(url), "{url}");
        }
    }

    #[test]
    fn a_ca_file_that_is_not_a_regular_file_or_not_absolute_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut endpoint = RemoteEndpoint::new("https://127.0.0.1:1/");
        endpoint.tls_ca_file = Some(dir.path().to_path_buf());
        let e = client_config("far", &endpoint).unwrap_err();
        assert!(e.message.contains("not a regular file"), "{e}");
        endpoint.tls_ca_file = Some("ca.pem".into());
        let e = client_config("far", &endpoint).unwrap_err();
        assert!(e.message.contains("absolute"), "{e}");
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
