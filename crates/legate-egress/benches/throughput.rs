//! Throughput through the egress proxy against a direct connection, in the same run: each
//! iteration moves `BENCH_MIB` MiB (default 64) from a client to a sink on 127.0.0.1, which
//! answers with the count when the client closes; once directly, once through `serve` with
//! `CONNECT` (the sink's address named exactly by an allow rule). The ratio of the two
//! throughputs is the proxy's cost (target: at least 0.8x).
//!
//! Run: `cargo bench -p legate-egress --bench throughput`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use legate_core::{Decider, Decision};
use legate_egress::{ConnectRequest, ConnectionEvent, Decided, Gate, Limits, serve};
use legate_supervisor::network::NetworkRules;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const CHUNK: usize = 64 * 1024;

fn mib() -> usize {
    std::env::var("BENCH_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

#[derive(Debug)]
struct BenchGate(NetworkRules);

#[async_trait::async_trait]
impl Gate for BenchGate {
    async fn decide(&self, request: &ConnectRequest) -> Decided {
        let ruling = self.0.decide(&request.destination);
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
        self.0.names_exactly(addr, port)
    }

    fn record(&self, record: ConnectionEvent) {
        assert_eq!(record.decision, Decision::Allow, "{record:?}");
    }
}

/// A sink: reads until the client closes, then answers the byte count.
async fn sink() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; CHUNK];
                let mut total = 0u64;
                loop {
                    match s.read(&mut buf).await.unwrap() {
                        0 => break,
                        n => total += n as u64,
                    }
                }
                s.write_all(&total.to_be_bytes()).await.unwrap();
            });
        }
    });
    addr
}

/// Moves `bytes` over `s` and checks the sink's count.
async fn push(mut s: TcpStream, bytes: usize) {
    let chunk = vec![0x5au8; CHUNK];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(CHUNK);
        s.write_all(&chunk[..n]).await.unwrap();
        left -= n;
    }
    s.shutdown().await.unwrap();
    let mut count = [0u8; 8];
    s.read_exact(&mut count).await.unwrap();
    assert_eq!(u64::from_be_bytes(count), bytes as u64);
}

async fn through_proxy(proxy: SocketAddr, sink: SocketAddr, bytes: usize) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(format!("CONNECT {sink} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let expected = b"HTTP/1.1 200 Connection Established\r\n\r\n";
    let mut head = vec![0u8; expected.len()];
    s.read_exact(&mut head).await.unwrap();
    assert_eq!(&head[..], expected);
    push(s, bytes).await;
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let bytes = mib() * 1024 * 1024;
    let (sink, proxy) = rt.block_on(async {
        let sink = sink().await;
        let policy =
            NetworkRules::default().with_allow(format!("{sink}").parse().unwrap(), "bench");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy = listener.local_addr().unwrap();
        tokio::spawn(serve(
            listener,
            Arc::new(BenchGate(policy)),
            Limits::default(),
            std::future::pending(),
        ));
        (sink, proxy)
    });
    let mut group = c.benchmark_group(format!("{} MiB over loopback", mib()));
    group.throughput(Throughput::Bytes(bytes as u64));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(15));
    group.bench_function("direct", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    push(TcpStream::connect(sink).await.unwrap(), bytes).await;
                }
                started.elapsed()
            })
        });
    });
    group.bench_function("through the egress proxy (CONNECT)", |b| {
        b.iter_custom(|iters| {
            rt.block_on(async {
                let started = Instant::now();
                for _ in 0..iters {
                    through_proxy(proxy, sink, bytes).await;
                }
                started.elapsed()
            })
        });
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
