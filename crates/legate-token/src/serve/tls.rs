//! TLS for the fronts' server: a certificate chain and its private key read from PEM files,
//! and the handshake each accepted connection makes before it is served.
//!
//! This module owns reading the two files (a key file other users may read is refused) and
//! the server's TLS settings (TLS 1.2 and 1.3 through `rustls` and `ring`, HTTP/1.1 by ALPN, no
//! client certificates). It never logs or quotes a key's bytes.

use legate_core::{Error, ErrorCode, Result};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::fmt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// The largest certificate or key file read, in bytes.
const MAX_PEM_BYTES: u64 = 1 << 20;

/// A front's TLS identity: what [`crate::serve::serve_tls`] presents to every client.
#[derive(Clone)]
pub struct ServerTls {
    acceptor: TlsAcceptor,
}

impl fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ServerTls(…)")
    }
}

impl ServerTls {
    /// The chain in `cert` (PEM, the server's certificate first) with the private key in `key`
    /// (PEM: PKCS#8, PKCS#1 or SEC1). `CONFIG_INVALID` naming the file when either cannot be
    /// read, holds nothing usable, or the key is readable by other users.
    pub fn from_pem_files(cert: &Path, key: &Path) -> Result<ServerTls> {
        let (cert_pem, _) = read_bounded(cert, "certificate")?;
        // The certificate file is not hidden from agents: it must hold no key.
        if String::from_utf8_lossy(&cert_pem).contains("PRIVATE KEY-----") {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "the TLS certificate file {} holds a private key; keep the key in tls_key_file alone",
                    cert.display()
                ),
            ));
        }
        // The mode of the file read, not of whatever the path names a moment later.
        let (key_pem, mode) = read_bounded(key, "key")?;
        if mode & 0o006 != 0 || mode & 0o020 != 0 {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "the TLS key file {} may be read or written by other users (mode {:o}); make it 0600 or 0640",
                    key.display(),
                    mode & 0o7777
                ),
            ));
        }
        Self::from_pem(&cert_pem, &key_pem).map_err(|mut e| {
            e.message = format!("{} and {}: {}", cert.display(), key.display(), e.message);
            e
        })
    }

    /// The chain in `cert_pem` with the private key in `key_pem`.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<ServerTls> {
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| {
                Error::quoting(
                    ErrorCode::ConfigInvalid,
                    "the TLS certificate is not PEM",
                    e,
                )
            })?;
        if chain.is_empty() {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                "the TLS certificate file holds no certificate",
            ));
        }
        // The key's parse error is not quoted: it could hold a fragment of the key.
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| {
            Error::new(
                ErrorCode::ConfigInvalid,
                "the TLS key file holds no private key in PEM (PKCS#8, PKCS#1 or SEC1)",
            )
        })?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::quoting(ErrorCode::Internal, "TLS could not be set up", e))?
            .with_no_client_auth()
            .with_single_cert(chain, key)
            .map_err(|e| {
                Error::quoting(
                    ErrorCode::ConfigInvalid,
                    "the TLS certificate and key do not make a server identity",
                    e,
                )
            })?;
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(ServerTls {
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }

    /// The handshake on `stream`, within `limit`: `None` when it fails or takes longer (a
    /// client that opens a connection and says nothing holds it no longer than a request head
    /// may take).
    pub(crate) async fn accept<S>(&self, stream: S, limit: Duration) -> Option<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        match tokio::time::timeout(limit, self.acceptor.accept(stream)).await {
            Ok(Ok(s)) => Some(s),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "a TLS handshake failed");
                None
            }
            Err(_) => {
                tracing::debug!("a TLS handshake did not finish in time");
                None
            }
        }
    }
}

/// `path`'s bytes, at most [`MAX_PEM_BYTES`], and the mode of the file they were read from (a
/// regular file only).
fn read_bounded(path: &Path, what: &str) -> Result<(Vec<u8>, u32)> {
    use std::io::Read;
    let unreadable = |e: std::io::Error| {
        Error::quoting(
            ErrorCode::ConfigInvalid,
            format!("the TLS {what} file {} cannot be read", path.display()),
            e,
        )
    };
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let meta = file.metadata().map_err(unreadable)?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!(
                "the TLS {what} file {} is not a regular file",
                path.display()
            ),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_PEM_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| {
            Error::quoting(
                ErrorCode::ConfigInvalid,
                format!("the TLS {what} file {} cannot be read", path.display()),
                e,
            )
        })?;
    if bytes.len() as u64 > MAX_PEM_BYTES {
        return Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!(
                "the TLS {what} file {} is larger than {MAX_PEM_BYTES} bytes",
                path.display()
            ),
        ));
    }
    Ok((bytes, meta.permissions().mode()))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn identity() -> (String, String) {
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        (cert.cert.pem(), cert.signing_key.serialize_pem())
    }

    #[test]
    fn a_certificate_and_its_key_make_an_identity() {
        let (cert, key) = identity();
        assert!(ServerTls::from_pem(cert.as_bytes(), key.as_bytes()).is_ok());
    }

    #[test]
    fn a_key_that_is_not_the_certificates_is_refused() {
        let (cert, _) = identity();
        let (_, other) = identity();
        let e = ServerTls::from_pem(cert.as_bytes(), other.as_bytes()).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
    }

    #[test]
    fn empty_or_garbled_files_are_refused_without_quoting_the_key() {
        let (cert, key) = identity();
        let e = ServerTls::from_pem(b"", key.as_bytes()).unwrap_err();
        assert!(e.message.contains("no certificate"), "{e}");
        let garbled = key.replace("PRIVATE KEY-----\n", "PRIVATE KEY-----\n!!");
        let e = ServerTls::from_pem(cert.as_bytes(), garbled.as_bytes()).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert!(!e.to_string().contains(&key[40..70]), "{e}");
    }

    #[test]
    fn a_key_file_other_users_may_read_or_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, key) = identity();
        let (c, k) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
        std::fs::write(&c, cert).unwrap();
        std::fs::write(&k, key).unwrap();
        std::fs::set_permissions(&k, std::fs::Permissions::from_mode(0o644)).unwrap();
        for mode in [0o644, 0o602, 0o620] {
            std::fs::set_permissions(&k, std::fs::Permissions::from_mode(mode)).unwrap();
            let e = ServerTls::from_pem_files(&c, &k).unwrap_err();
            assert!(e.message.contains("other users"), "{mode:o}: {e}");
        }
        for mode in [0o600, 0o640, 0o400] {
            std::fs::set_permissions(&k, std::fs::Permissions::from_mode(mode)).unwrap();
            assert!(ServerTls::from_pem_files(&c, &k).is_ok(), "{mode:o}");
        }
        // A certificate file that also holds the key: refused (it is not hidden from agents).
        let both = dir.path().join("both.pem");
        std::fs::write(
            &both,
            format!(
                "{}{}",
                std::fs::read_to_string(&c).unwrap(),
                std::fs::read_to_string(&k).unwrap()
            ),
        )
        .unwrap();
        let e = ServerTls::from_pem_files(&both, &k).unwrap_err();
        assert!(e.message.contains("holds a private key"), "{e}");
    }
}
