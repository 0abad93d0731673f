//! The cost of `legate_token::serve` (read timeouts, the connection registry, the timed body)
//! against a baseline in the same run: `axum::serve` (what both fronts used before) with the
//! same router, on 127.0.0.1.
//!
//! Each round, `BENCH_CONNECTIONS` (default 16) keep-alive connections each send
//! `BENCH_REQUESTS` (default 2000) requests one after the other, alternating `GET /` and a
//! `POST /echo` with a 1 KiB body, and check every answer. Rounds (`BENCH_ROUNDS`, default 6)
//! alternate which server goes first; the median requests per second of each is reported.
//!
//! TLS (`serve_tls`, a self-signed certificate the client trusts) against the same server
//! plain, in the same run: the same keep-alive rounds, and `BENCH_FRESH` (default 200) fresh
//! connections one after the other, each connecting (and shaking hands) for one `GET /`: the
//! median time to its answer.
//!
//! Run: `cargo bench -p legate-token --bench serve`. Figures go in `docs/BENCHMARKS.md`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::Router;
use axum::body::Bytes;
use axum::routing::{get, post};
use rustls::pki_types::ServerName;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_util::sync::CancellationToken;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn router() -> Router {
    Router::new().route("/", get(|| async { "ok" })).route(
        "/echo",
        post(|body: Bytes| async move { body.len().to_string() }),
    )
}

async fn start(legate: bool) -> (SocketAddr, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let s = stop.clone();
    if legate {
        tokio::spawn(legate_token::serve::serve(
            listener,
            router(),
            legate_token::serve::ServeOptions::default(),
            "bench",
            s,
        ));
    } else {
        tokio::spawn(async move {
            axum::serve(listener, router())
                .with_graceful_shutdown(async move { s.cancelled().await })
                .await
                .unwrap();
        });
    }
    (addr, stop)
}

/// A TLS server (`serve_tls`, a self-signed certificate for 127.0.0.1) and a connector that
/// trusts it.
async fn start_tls() -> (SocketAddr, CancellationToken, TlsConnector) {
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let tls = legate_token::serve::ServerTls::from_pem(
        cert.cert.pem().as_bytes(),
        cert.signing_key.serialize_pem().as_bytes(),
    )
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    tokio::spawn(legate_token::serve::serve_tls(
        listener,
        router(),
        legate_token::serve::ServeOptions::default(),
        tls,
        "bench",
        stop.clone(),
    ));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(cert.cert.der().clone()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    (addr, stop, TlsConnector::from(Arc::new(config)))
}

/// A connection to `addr`, over TLS when `tls` is given.
async fn connect(addr: SocketAddr, tls: Option<&TlsConnector>) -> Box<dyn Duplex> {
    let tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    match tls {
        None => Box::new(tcp),
        Some(c) => {
            let name = ServerName::try_from("127.0.0.1").unwrap();
            Box::new(c.connect(name, tcp).await.unwrap())
        }
    }
}

trait Duplex: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Duplex for T {}

/// Reads one response whose body is `expected`.
async fn expect(stream: &mut (impl AsyncRead + Unpin), buf: &mut Vec<u8>, expected: &[u8]) {
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n")
            && buf.len() >= i + 4 + expected.len()
        {
            assert!(
                buf.starts_with(b"HTTP/1.1 200"),
                "{:?}",
                String::from_utf8_lossy(buf)
            );
            assert_eq!(&buf[i + 4..i + 4 + expected.len()], expected);
            buf.drain(..i + 4 + expected.len());
            return;
        }
        let n = stream.read(&mut chunk).await.unwrap();
        assert!(n > 0, "closed");
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn round(
    addr: SocketAddr,
    tls: Option<&TlsConnector>,
    connections: usize,
    requests: usize,
) -> f64 {
    let body = "x".repeat(1024);
    let get = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_vec();
    let post = format!(
        "POST /echo HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes();
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..connections {
        let (get, post, tls) = (get.clone(), post.clone(), tls.cloned());
        clients.push(tokio::spawn(async move {
            let mut stream = connect(addr, tls.as_ref()).await;
            let mut buf = Vec::new();
            for i in 0..requests {
                if i % 2 == 0 {
                    stream.write_all(&get).await.unwrap();
                    // A TLS stream may hold what was written until flushed.
                    stream.flush().await.unwrap();
                    expect(&mut stream, &mut buf, b"ok").await;
                } else {
                    stream.write_all(&post).await.unwrap();
                    stream.flush().await.unwrap();
                    expect(&mut stream, &mut buf, b"1024").await;
                }
            }
        }));
    }
    for c in clients {
        c.await.unwrap();
    }
    (connections * requests) as f64 / started.elapsed().as_secs_f64()
}

/// `n` fresh connections one after the other, each for one `GET /`: the median time from
/// connecting to the answer.
async fn fresh(addr: SocketAddr, tls: Option<&TlsConnector>, n: usize) -> Duration {
    let get = b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let mut stream = connect(addr, tls).await;
        stream.write_all(get).await.unwrap();
        stream.flush().await.unwrap();
        expect(&mut stream, &mut Vec::new(), b"ok").await;
        times.push(started.elapsed());
    }
    times.sort();
    times[times.len() / 2]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let connections = env("BENCH_CONNECTIONS", 16);
    let requests = env("BENCH_REQUESTS", 2000);
    let rounds = env("BENCH_ROUNDS", 6);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let (axum_addr, axum_stop) = start(false).await;
        let (legate_addr, legate_stop) = start(true).await;
        let (tls_addr, tls_stop, connector) = start_tls().await;
        let tls = Some(&connector);
        // Warm up each.
        round(axum_addr, None, connections, 100).await;
        round(legate_addr, None, connections, 100).await;
        round(tls_addr, tls, connections, 100).await;
        let (mut base, mut ours, mut over_tls) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..rounds {
            if r % 2 == 0 {
                base.push(round(axum_addr, None, connections, requests).await);
                ours.push(round(legate_addr, None, connections, requests).await);
                over_tls.push(round(tls_addr, tls, connections, requests).await);
            } else {
                over_tls.push(round(tls_addr, tls, connections, requests).await);
                ours.push(round(legate_addr, None, connections, requests).await);
                base.push(round(axum_addr, None, connections, requests).await);
            }
        }
        let fresh_n = env("BENCH_FRESH", 200);
        let (plain_first, tls_first) = (
            fresh(legate_addr, None, fresh_n).await,
            fresh(tls_addr, tls, fresh_n).await,
        );
        let (b, o) = (median(base.clone()), median(ours.clone()));
        println!("{connections} connections x {requests} requests, {rounds} rounds (median req/s)");
        println!("  axum::serve (baseline)   {b:>10.0}   rounds {base:.0?}");
        println!("  legate_token::serve      {o:>10.0}   rounds {ours:.0?}");
        println!("  ratio legate/baseline    {:>10.3}", o / b);
        let t = median(over_tls.clone());
        println!("  serve_tls                {t:>10.0}   rounds {over_tls:.0?}");
        println!("  ratio tls/plain          {:>10.3}", t / o);
        println!(
            "{fresh_n} fresh connections, one GET each (median to the answer): plain {plain_first:.1?}, tls {tls_first:.1?}"
        );
        axum_stop.cancel();
        legate_stop.cancel();
        tls_stop.cancel();
    });
}
