//! Credentials set by the proxy, over real sockets on 127.0.0.1 only: a plain HTTP origin and
//! a local TLS origin whose certificate the proxy's upstream client trusts through the
//! test-only [`Interception::trusting`].

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::{
    Authority, ConnectRequest, ConnectionEvent, Credentials, Decided, Gate, Interception, Limits,
    serve,
};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use legate_core::{Decider, Decision};
use legate_supervisor::network::NetworkRules;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;

const REAL: &str = "sk-real-secret-0123456789";

#[derive(Debug)]
struct TestGate {
    policy: NetworkRules,
    credentials: Credentials,
    records: Mutex<Vec<ConnectionEvent>>,
}

#[async_trait::async_trait]
impl Gate for TestGate {
    async fn decide(&self, request: &ConnectRequest) -> Decided {
        let ruling = self.policy.decide(&request.destination);
        Decided {
            decision: ruling.decision,
            decider: Decider::Policy,
            rule_id: ruling.rule_id,
            reason: ruling.reason,
        }
    }

    fn names_exactly(&self, addr: IpAddr, port: u16) -> bool {
        self.policy.names_exactly(addr, port)
    }

    fn record(&self, record: ConnectionEvent) {
        self.records.lock().unwrap().push(record);
    }

    fn credentials(&self) -> Option<&Credentials> {
        Some(&self.credentials)
    }
}

impl TestGate {
    async fn wait_records(&self, n: usize) -> Vec<ConnectionEvent> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let records = self.records.lock().unwrap().clone();
            if records.len() >= n || Instant::now() > deadline {
                return records;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

async fn start(gate: Arc<TestGate>) -> (SocketAddr, oneshot::Sender<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, gate, Limits::default(), async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}

/// A plain HTTP origin answering one request; sends what it received (head and body).
async fn http_origin() -> (SocketAddr, oneshot::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        // Head, then the 4-byte body the tests send.
        let whole = |got: &[u8]| {
            got.windows(4)
                .position(|w| w == b"\r\n\r\n")
                .is_some_and(|i| got.len() >= i + 4 + 4)
        };
        while !whole(&got) {
            let n = s.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&chunk[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            .await
            .unwrap();
        let _ = tx.send(String::from_utf8_lossy(&got).into_owned());
    });
    (addr, rx)
}

fn gate(policy: NetworkRules, placeholder: &str, tls: Option<Interception>) -> Arc<TestGate> {
    // The origins here are plain `http://` model URLs (a local model server).
    let mut credentials =
        Credentials::new("preset:gemini", vec![(placeholder.into(), REAL.into())])
            .with_plain_http(true);
    if let Some(tls) = tls {
        credentials = credentials.with_tls(Arc::new(tls));
    }
    Arc::new(TestGate {
        policy,
        credentials,
        records: Mutex::new(Vec::new()),
    })
}

async fn send(proxy: SocketAddr, request: String) -> String {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

#[tokio::test]
async fn plain_http_gets_the_real_key_only_where_the_preset_rule_allows() {
    let placeholder = Credentials::placeholder();
    let (model, model_saw) = http_origin().await;
    let (other, other_saw) = http_origin().await;
    let policy = NetworkRules::default()
        .with_allow(model.to_string().parse().unwrap(), "preset:gemini")
        .with_allow(other.to_string().parse().unwrap(), "network.allow[0]");
    let gate = gate(policy, &placeholder, None);
    let (proxy, _stop) = start(gate.clone()).await;

    let request = |to: SocketAddr| {
        format!(
            "POST http://{to}/v1beta/models?key={placeholder} HTTP/1.1\r\nx-goog-api-key: {placeholder}\r\nContent-Length: 4\r\n\r\n{}",
            &placeholder[..4]
        )
    };
    let answer = send(proxy, request(model)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let saw = model_saw.await.unwrap();
    assert!(
        saw.starts_with(&format!("POST /v1beta/models?key={REAL} HTTP/1.1\r\n")),
        "{saw}"
    );
    assert!(
        saw.contains(&format!("x-goog-api-key: {REAL}\r\n")),
        "{saw}"
    );
    assert!(!saw.contains(&placeholder), "{saw}");
    // The body is never rewritten.
    assert!(saw.ends_with(&placeholder[..4]), "{saw}");

    let answer = send(proxy, request(other)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let saw = other_saw.await.unwrap();
    assert!(!saw.contains(REAL), "{saw}");
    assert!(
        saw.contains(&format!("x-goog-api-key: {placeholder}\r\n")),
        "{saw}"
    );
    assert!(saw.contains(&format!("?key={placeholder} ")), "{saw}");

    let records = gate.wait_records(2).await;
    assert_eq!(records.len(), 2);
    let of = |addr: SocketAddr| {
        records
            .iter()
            .find(|r| r.destination == addr.to_string())
            .unwrap()
            .clone()
    };
    let model_record = of(model);
    assert!(model_record.credentials_injected);
    assert!(
        model_record
            .reason
            .ends_with("; credentials set by the proxy"),
        "{}",
        model_record.reason
    );
    let json = serde_json::to_value(&model_record).unwrap();
    assert_eq!(json["credentialsInjected"], true);
    let other_record = of(other);
    assert!(!other_record.credentials_injected);
    let json = serde_json::to_value(&other_record).unwrap();
    assert!(json.get("credentialsInjected").is_none());
    for r in &records {
        assert!(!format!("{r:?}").contains(REAL));
    }
}

/// A TLS origin on 127.0.0.1 (its own self-signed certificate) serving HTTP/1.1 keep-alive;
/// each response's body is the request's target and its `x-api-key`.
async fn tls_origin() -> (SocketAddr, CertificateDer<'static>) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let der = cert.cert.der().clone();
    let key = PrivateKeyDer::from_pem_slice(cert.signing_key.serialize_pem().as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![der.clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let service = hyper::service::service_fn(|r: Request<Incoming>| async move {
                    let key = r
                        .headers()
                        .get("x-api-key")
                        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                        .unwrap_or_default();
                    let body = format!("{} {key}", r.uri());
                    Ok::<_, hyper::Error>(Response::new(body))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (addr, der)
}

#[tokio::test]
async fn connect_to_the_preset_host_is_terminated_and_every_request_gets_the_key() {
    let placeholder = Credentials::placeholder();
    let (origin, origin_root) = tls_origin().await;
    let authority = Arc::new(Authority::generate().unwrap());
    let tls = Interception::trusting(Arc::clone(&authority), origin_root).unwrap();
    let policy =
        NetworkRules::default().with_allow(origin.to_string().parse().unwrap(), "preset:gemini");
    let gate = gate(policy, &placeholder, Some(tls));
    let (proxy, _stop) = start(gate.clone()).await;

    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut b = [0u8; 1];
        assert_eq!(s.read(&mut b).await.unwrap(), 1);
        head.push(b[0]);
    }
    assert!(head.starts_with(b"HTTP/1.1 200"), "{head:?}");

    // The agent trusts Legate's authority only (not the origin's own certificate).
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(authority.cert_pem().as_bytes()).unwrap())
        .unwrap();
    let client = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(client))
        .connect(ServerName::IpAddress(origin.ip().into()), s)
        .await
        .unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake::<_, String>(TokioIo::new(tls))
        .await
        .unwrap();
    tokio::spawn(conn);
    for n in 0..2 {
        let request = Request::builder()
            .uri(format!("/v1/messages/{n}?key={placeholder}"))
            .header("host", origin.to_string())
            .header("x-api-key", &placeholder)
            .body(String::new())
            .unwrap();
        sender.ready().await.unwrap();
        let response = sender.send_request(request).await.unwrap();
        assert_eq!(response.status(), 200);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            String::from_utf8_lossy(&body),
            format!("/v1/messages/{n}?key={REAL} {REAL}")
        );
    }
    drop(sender);

    let records = gate.wait_records(1).await;
    assert_eq!(records.len(), 1, "one tunnel, one record");
    let r = &records[0];
    assert_eq!(r.method, "CONNECT");
    assert_eq!(r.decision, Decision::Allow);
    assert!(r.credentials_injected, "{r:?}");
    assert!(r.sent > 0 && r.received > 0, "{r:?}");
}

#[tokio::test]
async fn an_untrusted_destination_certificate_is_refused() {
    let placeholder = Credentials::placeholder();
    let (origin, _root) = tls_origin().await;
    // No extra root: the origin's self-signed certificate is not trusted upstream.
    let tls = Interception::new(Arc::new(Authority::generate().unwrap())).unwrap();
    let policy =
        NetworkRules::default().with_allow(origin.to_string().parse().unwrap(), "preset:gemini");
    let gate = gate(policy, &placeholder, Some(tls));
    let (proxy, _stop) = start(gate.clone()).await;
    let answer = send(
        proxy,
        format!("CONNECT {origin} HTTP/1.1\r\nHost: {origin}\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    let records = gate.wait_records(1).await;
    assert!(!records[0].credentials_injected);
    assert!(
        records[0].reason.contains("TLS to the destination failed"),
        "{}",
        records[0].reason
    );
}
