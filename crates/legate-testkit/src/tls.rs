//! A certificate authority of a test's own, and the server identities it signs, for the tests
//! of Legate's TLS (a front serving `https://`, a remote agent reached over it). Real X.509
//! through `rcgen`, ECDSA P-256; nothing here is trusted outside the test that made it.
//!
//! This module owns making and writing test certificates. It never touches the system's
//! trusted roots.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// Makes `ring` the process's TLS provider, as the `legate` binary's `main` does: reqwest is
/// built with rustls and no provider of its own, so a client built with its defaults (an A2A
/// SDK client's, a test's own) panics without one. The engine harness calls it; idempotent.
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A CA: its certificate (PEM) and the key it signs with.
pub struct TestCa {
    cert_pem: String,
    issuer: Issuer<'static, KeyPair>,
}

impl std::fmt::Debug for TestCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestCa").finish_non_exhaustive()
    }
}

/// A server's certificate chain (its certificate, then the CA's) and private key, in PEM.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The chain.
    pub cert_pem: String,
    /// The private key (PKCS#8).
    pub key_pem: String,
}

fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params
}

impl TestCa {
    /// A new CA named `name`.
    ///
    /// # Panics
    ///
    /// When `rcgen` cannot make a key or a certificate (a test fails).
    #[allow(clippy::expect_used)]
    pub fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().expect("a CA key");
        let cert = ca_params(name).self_signed(&key).expect("a CA certificate");
        TestCa {
            cert_pem: cert.pem(),
            issuer: Issuer::new(ca_params(name), key),
        }
    }

    /// The CA's certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// Writes the CA's certificate to `dir/<stem>.pem` and returns its path.
    ///
    /// # Panics
    ///
    /// When the file cannot be written.
    #[allow(clippy::expect_used)]
    pub fn write(&self, dir: &Path, stem: &str) -> PathBuf {
        let path = dir.join(format!("{stem}.pem"));
        std::fs::write(&path, &self.cert_pem).expect("write the CA certificate");
        path
    }

    /// A server identity for `names` (an IP address or a DNS name each), signed by this CA.
    ///
    /// # Panics
    ///
    /// When a name is neither, or `rcgen` fails.
    #[allow(clippy::expect_used)]
    pub fn issue(&self, names: &[&str]) -> Identity {
        let key = KeyPair::generate().expect("a server key");
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(
            DnType::CommonName,
            names.first().copied().unwrap_or("server"),
        );
        params.distinguished_name = dn;
        params.subject_alt_names = names
            .iter()
            .map(|n| match n.parse() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*n).try_into().expect("a DNS name")),
            })
            .collect();
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.use_authority_key_identifier_extension = true;
        let cert = params
            .signed_by(&key, &self.issuer)
            .expect("a server certificate");
        Identity {
            cert_pem: format!("{}{}", cert.pem(), self.cert_pem),
            key_pem: key.serialize_pem(),
        }
    }
}

impl Identity {
    /// Writes the chain to `dir/<stem>.crt` and the key to `dir/<stem>.key` (mode 0600), and
    /// returns both paths.
    ///
    /// # Panics
    ///
    /// When a file cannot be written.
    #[allow(clippy::expect_used)]
    pub fn write(&self, dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
        let cert = dir.join(format!("{stem}.crt"));
        let key = dir.join(format!("{stem}.key"));
        std::fs::write(&cert, &self.cert_pem).expect("write the certificate");
        std::fs::write(&key, &self.key_pem).expect("write the key");
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600))
            .expect("make the key 0600");
        (cert, key)
    }
}
