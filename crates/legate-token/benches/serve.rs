//! The cost of `legate_token::serve` (read timeouts, the connection registry, the timed body)
//! against a baseline in the same run: `axum::serve` (what both fronts used before) with the
//! same router, on 127.0.0.1.
//!
//! Each round, `BENCH_CONNECTIONS` (default 16) keep-alive connections each send
//! `BENCH_REQUESTS` (default 2000) requests one after the other, alternating `GET /` and a
//! `POST /echo` with a 1 KiB body, and check every answer. Rounds (`BENCH_ROUNDS`, default 6)
//! alternate which server goes first; the median requests per second of each is reported.
//!
//! Run: `cargo bench -p legate-token --bench serve`. Figures go in `docs/BENCHMARKS.md`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use axum::Router;
use axum::body::Bytes;
use axum::routing::{get, post};
use std::net::SocketAddr;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
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

/// Reads one response whose body is `expected`.
async fn expect(stream: &mut TcpStream, buf: &mut Vec<u8>, expected: &[u8]) {
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

async fn round(addr: SocketAddr, connections: usize, requests: usize) -> f64 {
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
        let (get, post) = (get.clone(), post.clone());
        clients.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.set_nodelay(true).unwrap();
            let mut buf = Vec::new();
            for i in 0..requests {
                if i % 2 == 0 {
                    stream.write_all(&get).await.unwrap();
                    expect(&mut stream, &mut buf, b"ok").await;
                } else {
                    stream.write_all(&post).await.unwrap();
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
        // Warm up both.
        round(axum_addr, connections, 100).await;
        round(legate_addr, connections, 100).await;
        let (mut base, mut ours) = (Vec::new(), Vec::new());
        for r in 0..rounds {
            if r % 2 == 0 {
                base.push(round(axum_addr, connections, requests).await);
                ours.push(round(legate_addr, connections, requests).await);
            } else {
                ours.push(round(legate_addr, connections, requests).await);
                base.push(round(axum_addr, connections, requests).await);
            }
        }
        let (b, o) = (median(base.clone()), median(ours.clone()));
        println!("{connections} connections x {requests} requests, {rounds} rounds (median req/s)");
        println!("  axum::serve (baseline)   {b:>10.0}   rounds {base:.0?}");
        println!("  legate_token::serve      {o:>10.0}   rounds {ours:.0?}");
        println!("  ratio legate/baseline    {:>10.3}", o / b);
        axum_stop.cancel();
        legate_stop.cancel();
    });
}
