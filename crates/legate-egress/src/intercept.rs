//! TLS interception for the destinations whose credentials the proxy sets
//! ([`crate::Credentials`]): the agent's TLS is terminated here with a certificate this
//! [`Authority`] issues for the host it asked for (made on first use, then cached), each
//! HTTP/1.1 request on it gets its head's placeholders replaced, and goes on over a TLS
//! connection of the proxy's own to the address [`crate::dial`] screened, verified against
//! the Web PKI roots for the host's name.
//!
//! The authority is handed in (the backend keeps it, per Legate home); this module never
//! reads or writes a file, and never logs a header value.

use crate::Credentials;
use crate::conn::{Counted, Counts};
use crate::respond;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use legate_supervisor::network::Host;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// The common name of every Legate egress authority.
const CA_NAME: &str = "Legate egress proxy (credentials)";

/// Why an authority or an interception could not be made.
#[derive(Debug, thiserror::Error)]
pub enum InterceptError {
    /// Making or reading a certificate or key failed.
    #[error("certificate: {0}")]
    Certificate(String),
    /// Configuring TLS failed.
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
}

fn cert_error(e: impl std::fmt::Display) -> InterceptError {
    InterceptError::Certificate(e.to_string())
}

/// A certificate authority of one Legate home: it issues the certificates the proxy shows
/// agents for the hosts whose credentials it sets. Its key never leaves Legate.
pub struct Authority {
    cert_pem: String,
    cert_der: CertificateDer<'static>,
    key: KeyPair,
    leaves: Mutex<HashMap<String, Arc<rustls::ServerConfig>>>,
}

impl std::fmt::Debug for Authority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Authority").finish_non_exhaustive()
    }
}

/// The authority's own parameters: the same each time, so that an issuer rebuilt from the
/// kept key names the kept certificate's subject.
fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut name = DistinguishedName::new();
    name.push(DnType::OrganizationName, "Legate");
    name.push(DnType::CommonName, CA_NAME);
    params.distinguished_name = name;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Authority {
    /// A new authority (ECDSA P-256).
    pub fn generate() -> Result<Self, InterceptError> {
        let key = KeyPair::generate().map_err(cert_error)?;
        let cert = ca_params().self_signed(&key).map_err(cert_error)?;
        Ok(Self {
            cert_pem: cert.pem(),
            cert_der: cert.der().clone(),
            key,
            leaves: Mutex::default(),
        })
    }

    /// The authority kept as `cert_pem` and `key_pem` (as [`Authority::cert_pem`] and
    /// [`Authority::key_pem`] wrote them).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, InterceptError> {
        let key = KeyPair::from_pem(key_pem).map_err(cert_error)?;
        let cert_der = CertificateDer::from_pem_slice(cert_pem.as_bytes()).map_err(cert_error)?;
        Ok(Self {
            cert_pem: cert_pem.to_string(),
            cert_der,
            key,
            leaves: Mutex::default(),
        })
    }

    /// Its certificate (PEM), which agents are made to trust.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Its private key (PKCS#8 PEM), to be kept where no agent can read it.
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// The TLS configuration shown to an agent that asked for `host`: a certificate for it,
    /// issued on first use and cached.
    pub(crate) fn server_config(
        &self,
        host: &Host,
    ) -> Result<Arc<rustls::ServerConfig>, InterceptError> {
        let key = host.to_string();
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(config) = leaves.get(&key) {
            return Ok(Arc::clone(config));
        }
        let leaf_key = KeyPair::generate().map_err(cert_error)?;
        let mut params = CertificateParams::default();
        let mut name = DistinguishedName::new();
        name.push(DnType::CommonName, key.as_str());
        params.distinguished_name = name;
        params.subject_alt_names = vec![match host {
            Host::Ip(ip) => SanType::IpAddress(*ip),
            Host::Name(n) => SanType::DnsName(n.clone().try_into().map_err(cert_error)?),
        }];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let issuer = Issuer::new(ca_params(), &self.key);
        let cert = params.signed_by(&leaf_key, &issuer).map_err(cert_error)?;
        let chain = vec![cert.der().clone(), self.cert_der.clone()];
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
        let mut config = rustls::ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(chain, private)?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let config = Arc::new(config);
        leaves.insert(key, Arc::clone(&config));
        Ok(config)
    }
}

/// Terminating and re-originating TLS: the authority that speaks to agents, and the client
/// configuration that speaks to destinations.
#[derive(Debug)]
pub struct Interception {
    authority: Arc<Authority>,
    upstream: Arc<rustls::ClientConfig>,
}

impl Interception {
    /// Interception by `authority`, destinations verified against the Web PKI roots
    /// (`webpki-roots`) and nothing else.
    pub fn new(authority: Arc<Authority>) -> Result<Self, InterceptError> {
        Self::with_roots(authority, Vec::new())
    }

    /// Test-only: destinations may also present a certificate issued by `root` (a local TLS
    /// origin). Compiled into test builds of this crate only.
    #[cfg(test)]
    pub(crate) fn trusting(
        authority: Arc<Authority>,
        root: CertificateDer<'static>,
    ) -> Result<Self, InterceptError> {
        Self::with_roots(authority, vec![root])
    }

    fn with_roots(
        authority: Arc<Authority>,
        extra: Vec<CertificateDer<'static>>,
    ) -> Result<Self, InterceptError> {
        let mut roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        };
        for root in extra {
            roots.add(root)?;
        }
        let mut upstream = rustls::ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self {
            authority,
            upstream: Arc::new(upstream),
        })
    }

    /// The authority.
    pub fn authority(&self) -> &Arc<Authority> {
        &self.authority
    }
}

/// How an intercepted tunnel went.
pub(crate) struct Intercepted {
    /// Bytes from the agent (TLS records), and to it.
    pub counts: (u64, u64),
    /// Whether any request on it had a placeholder replaced.
    pub injected: bool,
    /// What ended it, if something went wrong.
    pub error: Option<String>,
}

/// Serves an allowed `CONNECT` to `host` whose credentials the proxy sets: `200`, then TLS
/// with the agent (`rest`: bytes the agent sent after its head), TLS to the destination over
/// `upstream`, and each request of the agent's connection relayed with its head rewritten.
pub(crate) async fn relay(
    mut client: TcpStream,
    upstream: TcpStream,
    rest: Vec<u8>,
    host: &Host,
    credentials: &Credentials,
    tls: &Interception,
    head_timeout: Duration,
) -> Intercepted {
    let counters = Arc::new(Counts::default());
    let injected = Arc::new(AtomicBool::new(false));
    let ended = |error: String, counters: &Counts, injected: &AtomicBool| Intercepted {
        counts: counters.get(),
        injected: injected.load(Ordering::Relaxed),
        error: Some(error),
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let server_name = match host {
        Host::Ip(ip) => ServerName::IpAddress((*ip).into()),
        Host::Name(name) => match ServerName::try_from(name.clone()) {
            Ok(name) => name,
            Err(e) => return ended(e.to_string(), &counters, &injected),
        },
    };
    let upstream = match tokio_rustls::TlsConnector::from(Arc::clone(&tls.upstream))
        .connect(server_name, upstream)
        .await
    {
        Ok(stream) => stream,
        Err(e) => {
            let why = format!("TLS to the destination failed: {e}");
            respond::send(client, 502, &why, false).await;
            return ended(why, &counters, &injected);
        }
    };
    let config = match tls.authority.server_config(host) {
        Ok(config) => config,
        Err(e) => {
            let why = format!("no certificate for {host}: {e}");
            respond::send(client, 502, &why, false).await;
            return ended(why, &counters, &injected);
        }
    };
    if let Err(e) = client.write_all(respond::ESTABLISHED).await {
        return ended(e.to_string(), &counters, &injected);
    }
    // The agent's side: the bytes it sent after its `CONNECT` head first.
    let agent = Counted::new(client, rest, Arc::clone(&counters));
    let accepted = tokio::time::timeout(
        head_timeout,
        tokio_rustls::TlsAcceptor::from(config).accept(agent),
    )
    .await
    .unwrap_or_else(|_| {
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("no handshake within {head_timeout:?}"),
        ))
    });
    let agent = match accepted {
        Ok(stream) => stream,
        Err(e) => {
            return ended(
                format!("the agent's TLS handshake failed: {e}"),
                &counters,
                &injected,
            );
        }
    };
    let (sender, upstream_conn) =
        match hyper::client::conn::http1::handshake::<_, Incoming>(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => return ended(e.to_string(), &counters, &injected),
        };
    let sender = Arc::new(tokio::sync::Mutex::new(sender));
    let substitutions = Arc::new(credentials.clone());
    let flag = Arc::clone(&injected);
    let tunnel_host = Arc::new(host.clone());
    let service = hyper::service::service_fn(move |request: Request<Incoming>| {
        let sender = Arc::clone(&sender);
        let substitutions = Arc::clone(&substitutions);
        let flag = Arc::clone(&flag);
        let tunnel_host = Arc::clone(&tunnel_host);
        async move {
            let (request, replaced) = rewrite(request, &substitutions, &tunnel_host);
            if replaced {
                flag.store(true, Ordering::Relaxed);
            }
            let mut sender = sender.lock().await;
            sender.ready().await?;
            let response: Response<Incoming> = sender.send_request(request).await?;
            Ok::<_, hyper::Error>(response)
        }
    });
    let served = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(head_timeout)
        .serve_connection(TokioIo::new(agent), service);
    let (served, upstream_ended) = tokio::join!(served, upstream_conn);
    let error = match (served, upstream_ended) {
        (Err(e), _) => Some(e.to_string()),
        (Ok(()), Err(e)) => Some(format!("the destination's connection: {e}")),
        (Ok(()), Ok(())) => None,
    };
    Intercepted {
        counts: counters.get(),
        injected: injected.load(Ordering::Relaxed),
        error,
    }
}

/// `request` with the real values in its credential slots ([`Credentials::header`],
/// [`Credentials::target`]); whether one was set. Only for a request to the host the tunnel
/// was opened for (its `Host`, or its absolute URI's authority): a request naming another
/// virtual host behind the same address gets nothing.
fn rewrite(
    mut request: Request<Incoming>,
    credentials: &Credentials,
    host: &Host,
) -> (Request<Incoming>, bool) {
    let named = request
        .uri()
        .authority()
        .map(|a| a.host().to_string())
        .or_else(|| {
            request
                .headers()
                .get(hyper::header::HOST)
                .and_then(|v| v.to_str().ok())
                .map(|v| match v.rsplit_once(':') {
                    Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h.to_string(),
                    _ => v.to_string(),
                })
        });
    let expected = host.to_string();
    let matches = named.is_some_and(|n| {
        n.trim_end_matches('.')
            .trim_start_matches('[')
            .trim_end_matches(']')
            .eq_ignore_ascii_case(expected.trim_start_matches('[').trim_end_matches(']'))
    });
    if !matches {
        return (request, false);
    }
    let mut replaced = false;
    for (name, value) in request.headers_mut().iter_mut() {
        if let Some(real) = credentials.header(name.as_str(), value.as_bytes())
            && let Ok(real) = hyper::header::HeaderValue::from_bytes(&real)
        {
            *value = real;
            replaced = true;
        }
    }
    let target = request
        .uri()
        .path_and_query()
        .and_then(|pq| credentials.target(pq.as_str()))
        .and_then(|real| hyper::http::uri::PathAndQuery::try_from(real).ok());
    if let Some(target) = target {
        let mut parts = request.uri().clone().into_parts();
        parts.path_and_query = Some(target);
        if let Ok(uri) = hyper::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
            replaced = true;
        }
    }
    (request, replaced)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn an_authority_survives_being_kept_and_issues_per_host() {
        let a = Authority::generate().unwrap();
        let again = Authority::from_pem(a.cert_pem(), &a.key_pem()).unwrap();
        assert_eq!(again.cert_der, a.cert_der);
        let host = Host::Name("api.anthropic.com".into());
        let one = again.server_config(&host).unwrap();
        let two = again.server_config(&host).unwrap();
        assert!(Arc::ptr_eq(&one, &two), "cached per host");
        let ip = again
            .server_config(&Host::Ip("127.0.0.1".parse().unwrap()))
            .unwrap();
        assert!(!Arc::ptr_eq(&one, &ip));
        assert!(Authority::from_pem("not a pem", "nor this").is_err());
        assert!(!format!("{a:?}").contains("PRIVATE"));
    }
}
