//! The fronts' server over TLS (`serve_tls`) on a real socket: a client that trusts the
//! certificate is served as over plain HTTP; a client that opens a connection and never
//! completes a handshake is closed at the header timeout; plain HTTP gets no HTTP answer.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{BOUND, authorized_get, router};
use legate_token::serve::{ServeOptions, ServerTls};
use rustls::pki_types::{CertificateDer, ServerName};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

/// A TLS server on 127.0.0.1 with a self-signed certificate for that address, whose head
/// (and handshake) timeout is `header`; the certificate is returned for a client to trust.
async fn start(header: Duration) -> (SocketAddr, CertificateDer<'static>, CancellationToken) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let tls = ServerTls::from_pem(
        cert.cert.pem().as_bytes(),
        cert.signing_key.serialize_pem().as_bytes(),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let options = ServeOptions {
        header_timeout: header,
        ..ServeOptions::default()
    };
    tokio::spawn(legate_token::serve::serve_tls(
        listener,
        router(),
        options,
        tls,
        "test",
        stop.clone(),
    ));
    (addr, cert.cert.der().clone(), stop)
}

/// Everything `stream` sends until it closes (or [`BOUND`] passes: a failure).
async fn read_to_close(stream: &mut (impl AsyncRead + Unpin)) -> Vec<u8> {
    let mut all = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(BOUND, stream.read(&mut chunk))
            .await
            .expect("the server did not close the connection in time");
        match read {
            Ok(0) | Err(_) => return all,
            Ok(n) => all.extend_from_slice(&chunk[..n]),
        }
    }
}

#[tokio::test]
async fn a_client_that_trusts_the_certificate_is_served() {
    let (addr, cert, stop) = start(Duration::from_secs(10)).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from("127.0.0.1").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    let request = authorized_get().replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await.unwrap();
    // A TLS stream may hold what was written until flushed.
    tls.flush().await.unwrap();
    let answer = String::from_utf8(read_to_close(&mut tls).await).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("ok"), "{answer}");
    stop.cancel();
}

#[tokio::test]
async fn a_connection_that_never_completes_its_handshake_is_closed_at_the_header_timeout() {
    let (addr, _, stop) = start(Duration::from_millis(300)).await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    // Waits for the server to close it: a bounded read, failing after BOUND.
    assert!(read_to_close(&mut silent).await.is_empty());
    stop.cancel();
}

#[tokio::test]
async fn plain_http_on_the_tls_port_gets_no_http_answer() {
    let (addr, _, stop) = start(Duration::from_secs(10)).await;
    let mut plain = TcpStream::connect(addr).await.unwrap();
    plain.write_all(authorized_get().as_bytes()).await.unwrap();
    let answer = read_to_close(&mut plain).await;
    assert!(
        !answer.starts_with(b"HTTP/"),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    stop.cancel();
}
