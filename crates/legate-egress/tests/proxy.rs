//! The egress proxy over real sockets, on 127.0.0.1 only: every listener here is one the test
//! binds itself, and no destination is ever resolved off the machine (denied names are never
//! resolved; the one name resolved is `localhost`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{Decider, Decision};
use legate_egress::{ConnectRequest, ConnectionEvent, Decided, Gate, Limits, serve};
use legate_supervisor::network::{Host, NetworkRules, Otherwise};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Decides by a network policy (an ask is refused), after a delay for one host; keeps records.
#[derive(Debug)]
struct TestGate {
    policy: NetworkRules,
    slow: Option<(String, Duration)>,
    records: Mutex<Vec<ConnectionEvent>>,
}

#[async_trait::async_trait]
impl Gate for TestGate {
    async fn decide(&self, request: &ConnectRequest) -> Decided {
        if let (Some((slow, delay)), Host::Name(name)) = (&self.slow, &request.destination.host)
            && slow == name
        {
            tokio::time::sleep(*delay).await;
        }
        let ruling = self.policy.decide(&request.destination);
        Decided {
            decision: if ruling.decision == Decision::Allow {
                Decision::Allow
            } else {
                Decision::Deny
            },
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
}

impl TestGate {
    fn records(&self) -> Vec<ConnectionEvent> {
        self.records.lock().unwrap().clone()
    }

    /// Waits for `n` records (an allowed connection is recorded when it closes).
    async fn wait_records(&self, n: usize) -> Vec<ConnectionEvent> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let records = self.records();
            if records.len() >= n || Instant::now() > deadline {
                return records;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

struct Proxy {
    addr: SocketAddr,
    gate: Arc<TestGate>,
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<()>,
}

async fn proxy_with(policy: NetworkRules, slow: Option<(&str, Duration)>, limits: Limits) -> Proxy {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let gate = Arc::new(TestGate {
        policy,
        slow: slow.map(|(h, d)| (h.to_string(), d)),
        records: Mutex::new(Vec::new()),
    });
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, gate.clone(), limits, async move {
        let _ = stopped.await;
    }));
    Proxy {
        addr,
        gate,
        stop: Some(stop),
        task,
    }
}

async fn proxy(policy: NetworkRules) -> Proxy {
    proxy_with(policy, None, Limits::default()).await
}

/// An echo server on 127.0.0.1 that counts the connections it accepts.
async fn echo() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, accepted)
}

/// Reads until the end of a response head; returns it and the bytes after it.
async fn read_head(s: &mut TcpStream) -> (String, Vec<u8>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(i + 4);
            return (String::from_utf8(buf).unwrap(), rest);
        }
        let n = s.read(&mut chunk).await.unwrap();
        assert!(
            n > 0,
            "closed before a head: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Sends `request` and reads the whole answer until the proxy closes.
async fn ask(addr: SocketAddr, request: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request).await.unwrap();
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn allow(rule: &str) -> NetworkRules {
    NetworkRules::default().with_allow(rule.parse().unwrap(), "network.allow[0]")
}

#[tokio::test]
async fn connect_to_an_exactly_named_address_relays_and_counts() {
    let (echo, _) = echo().await;
    let p = proxy(allow(&format!("127.0.0.1:{}", echo.port()))).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let req = format!(
        "CONNECT 127.0.0.1:{0} HTTP/1.1\r\nHost: 127.0.0.1:{0}\r\n\r\n",
        echo.port()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let (head, rest) = read_head(&mut s).await;
    assert_eq!(head, "HTTP/1.1 200 Connection Established\r\n\r\n");
    assert!(rest.is_empty());
    let payload = vec![7u8; 100_000];
    s.write_all(&payload).await.unwrap();
    let mut back = vec![0u8; payload.len()];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(back, payload);
    s.shutdown().await.unwrap();
    let mut tail = Vec::new();
    s.read_to_end(&mut tail).await.unwrap();
    drop(s);

    let records = p.gate.wait_records(1).await;
    assert_eq!(records.len(), 1, "{records:?}");
    let r = &records[0];
    assert!(r.id.starts_with("net-"));
    assert_eq!(r.method, "CONNECT");
    assert_eq!(r.decision, Decision::Allow);
    assert_eq!(r.decider, Decider::Policy);
    assert_eq!(r.rule_id.as_deref(), Some("network.allow[0]"));
    assert_eq!(r.address, Some(echo.to_string()));
    assert_eq!(r.destination, format!("127.0.0.1:{}", echo.port()));
    assert_eq!((r.sent, r.received), (100_000, 100_000));
    let json = serde_json::to_value(r).unwrap();
    assert!(json.get("durationMs").is_some() && json.get("ruleId").is_some());
}

#[tokio::test]
async fn a_wildcard_never_reaches_loopback() {
    let (echo, accepted) = echo().await;
    let p = proxy(allow("*")).await;
    let req = format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port());
    let answer = ask(p.addr, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(answer.contains("X-Legate-Decision: deny\r\n"));
    assert!(
        answer.contains("which no allow rule names exactly"),
        "{answer}"
    );
    let records = p.gate.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].decision, Decision::Deny);
    assert_eq!(records[0].address, None);
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_name_that_resolves_to_loopback_is_refused() {
    let (echo, accepted) = echo().await;
    let p = proxy(allow("localhost")).await;
    let req = format!("CONNECT localhost:{} HTTP/1.1\r\n\r\n", echo.port());
    let answer = ask(p.addr, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer.contains("localhost resolves only to loopback addresses (127.0.0.1"),
        "{answer}"
    );
    let records = p.gate.records();
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].decision, Decision::Deny);
    assert_eq!(records[0].decider, Decider::Policy);
    assert_eq!(records[0].rule_id.as_deref(), Some("network.allow[0]"));
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

/// A one-shot HTTP server: answers `hello` and hands over the head it received.
async fn http_server() -> (SocketAddr, oneshot::Receiver<String>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let (head, rest) = read_head(&mut s).await;
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
            .await
            .unwrap();
        let _ = tx.send(format!("{head}{}", String::from_utf8_lossy(&rest)));
    });
    (addr, rx)
}

#[tokio::test]
async fn absolute_form_http_is_forwarded_in_origin_form() {
    let (server, seen) = http_server().await;
    let p = proxy(allow(&format!("127.0.0.1:{}", server.port()))).await;
    let req = format!(
        "GET http://127.0.0.1:{}/path?q=1 HTTP/1.1\r\nHost: elsewhere.test\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: Basic c2VjcmV0\r\nUser-Agent: t\r\n\r\n",
        server.port()
    );
    let answer = ask(p.addr, req.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    assert!(answer.ends_with("\r\n\r\nhello"));
    let seen = seen.await.unwrap();
    assert_eq!(
        seen,
        format!(
            "GET /path?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nUser-Agent: t\r\nConnection: close\r\n\r\n",
            server.port()
        )
    );
    let records = p.gate.wait_records(1).await;
    assert_eq!(records[0].method, "GET");
    assert_eq!(records[0].decision, Decision::Allow);
    assert_eq!(records[0].sent, seen.len() as u64);
    assert_eq!(records[0].received, answer.len() as u64);
}

#[tokio::test]
async fn a_denied_host_is_recorded_before_the_answer() {
    let p = proxy(NetworkRules::default()).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"CONNECT example.invalid:443 HTTP/1.1\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = read_head(&mut s).await;
    // The record exists as soon as the answer's head can be read.
    let records = p.gate.records();
    assert_eq!(records.len(), 1, "not recorded before the answer");
    assert!(head.starts_with("HTTP/1.1 403 Forbidden\r\n"));
    assert!(head.contains("X-Legate-Decision: deny\r\n"));
    let mut body = body;
    s.read_to_end(&mut body).await.unwrap();
    assert_eq!(
        String::from_utf8(body).unwrap(),
        "legate: connection to example.invalid:443 refused: no network rule allows example.invalid:443\n"
    );
    let r = &records[0];
    assert_eq!(r.destination, "example.invalid:443");
    assert_eq!((r.decision, r.rule_id.clone()), (Decision::Deny, None));
    assert_eq!((r.sent, r.received, r.address.clone()), (0, 0, None));
}

#[tokio::test]
async fn malformed_requests_are_answered_and_not_recorded() {
    let limits = Limits {
        head_bytes: 1024,
        ..Limits::default()
    };
    let p = proxy_with(allow("*"), None, limits).await;
    let big = format!(
        "CONNECT a.test:443 HTTP/1.1\r\nX: {}\r\n\r\n",
        "y".repeat(4000)
    );
    let answer = ask(p.addr, big.as_bytes()).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
    let answer = ask(p.addr, b"\x00\x01\x02garbage\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let answer = ask(p.addr, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(answer.contains("Legate's egress proxy"), "{answer}");
    let answer = ask(p.addr, b"GET https://a.test/ HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let answer = ask(p.addr, b"OPTIONS * HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 405 "), "{answer}");
    let answer = ask(p.addr, b"CONNECT a.test HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    assert!(p.gate.records().is_empty());
}

#[tokio::test]
async fn a_slow_head_times_out() {
    let limits = Limits {
        head_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let p = proxy_with(allow("*"), None, limits).await;
    let answer = ask(p.addr, b"CONNECT a.test:443 HTTP/1.1\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 408 "), "{answer}");
}

#[tokio::test]
async fn a_slow_decision_does_not_block_another() {
    let policy = NetworkRules::new(Otherwise::Deny);
    let p = proxy_with(
        policy,
        Some(("slow.test", Duration::from_secs(3))),
        Limits::default(),
    )
    .await;
    let addr = p.addr;
    let slow =
        tokio::spawn(async move { ask(addr, b"CONNECT slow.test:443 HTTP/1.1\r\n\r\n").await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let started = Instant::now();
    let answer = ask(p.addr, b"CONNECT fast.test:443 HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 403 "));
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert!(!slow.is_finished());
    let answer = slow.await.unwrap();
    assert!(
        answer.contains("connection to slow.test:443 refused"),
        "{answer}"
    );
    let destinations: Vec<String> = p
        .gate
        .records()
        .into_iter()
        .map(|r| r.destination)
        .collect();
    assert_eq!(destinations, ["fast.test:443", "slow.test:443"]);
}

#[tokio::test]
async fn connections_beyond_the_limit_get_503() {
    let (echo, _) = echo().await;
    let limits = Limits {
        max_connections: 1,
        ..Limits::default()
    };
    let p = proxy_with(allow(&format!("127.0.0.1:{}", echo.port())), None, limits).await;
    let mut first = TcpStream::connect(p.addr).await.unwrap();
    first
        .write_all(format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port()).as_bytes())
        .await
        .unwrap();
    let (head, _) = read_head(&mut first).await;
    assert!(head.starts_with("HTTP/1.1 200 "));
    let answer = ask(p.addr, b"").await;
    assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
    drop(first);
}

#[tokio::test]
async fn shutdown_ends_serve_and_drops_tunnels() {
    let (echo, _) = echo().await;
    let mut p = proxy(allow(&format!("127.0.0.1:{}", echo.port()))).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(format!("CONNECT 127.0.0.1:{} HTTP/1.1\r\n\r\n", echo.port()).as_bytes())
        .await
        .unwrap();
    let (head, _) = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200 "));
    p.stop.take().unwrap().send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(2), &mut p.task)
        .await
        .expect("serve did not end")
        .unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut rest)).await;
    assert!(read.is_ok(), "the tunnel was not dropped");
    assert!(TcpStream::connect(p.addr).await.is_err());
}

#[tokio::test]
async fn a_name_reaches_a_special_address_that_a_rule_names_exactly() {
    let (echo, accepted) = echo().await;
    let policy = allow("localhost").with_allow(
        format!("127.0.0.1:{}", echo.port()).parse().unwrap(),
        "network.allow[1]",
    );
    let p = proxy(policy).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(format!("CONNECT localhost:{} HTTP/1.1\r\n\r\n", echo.port()).as_bytes())
        .await
        .unwrap();
    let (head, _) = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    s.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"ping");
    drop(s);
    let records = p.gate.wait_records(1).await;
    assert_eq!(records[0].address, Some(echo.to_string()));
    assert_eq!(records[0].rule_id.as_deref(), Some("network.allow[0]"));
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}
