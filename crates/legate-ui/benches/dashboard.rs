//! The dashboard's server-side costs, each next to a baseline measured in the same run:
//!
//! - `tasks_page`: `GET /tasks` (the first page, 50 rows, through the real router: the
//!   allowlist, the bearer check, the store query and the HTML) over 10,000 stored tasks,
//!   against the same store query alone (`Engine::tasks`, the baseline) and that query
//!   serialized as the JSON listing the other fronts return.
//! - `live_pages`: 100 live pages opened at once on one server over real 127.0.0.1 sockets
//!   (each an SSE stream of `/approvals/live`, read until its first event), against 100 plain
//!   `GET /approvals` on the same server; and, printed, the process's resident memory (VmRSS)
//!   before the streams open, with the 100 open, and after they close.
//!
//! The server runs in the bench process (the router `legate serve --ui` serves, over the real
//! HTTP server); the clients are raw sockets, a few KiB each, so the memory delta is the
//! server's cost of a live page plus theirs.
//!
//! Run: `cargo bench -p legate-ui --bench dashboard` (env `DASHBOARD_TASKS`, default 10000;
//! `DASHBOARD_PAGES`, default 100). Figures go in `docs/BENCHMARKS.md`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use legate_core::{EventKind, Task, TaskState, Timestamp, Usage, WorkspaceKind};
use legate_engine::{Paths, TaskFilter};
use legate_store::Store;
use legate_testkit::EngineHarness;
use legate_ui::{Allowlist, Dashboard, Token, UiOptions};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `VmRSS` of this process, in KiB.
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Stores `n` finished tasks (four agents, a hundred contexts, usage on most) in one store.
fn seed(home: &std::path::Path, n: usize) {
    let store = Store::open(&Paths::new(home).db()).unwrap();
    let start = Timestamp::now().0 - (n as i64) * 60_000;
    for i in 0..n {
        let mut t = Task::new(
            format!("bench-{i:06}"),
            format!("ctx-{}", i % 100),
            ["agent", "claude", "codex", "gemini"][i % 4],
            format!("task number {i}: <b>hostile</b> prompt"),
        );
        t.created_at = Timestamp(start + i as i64 * 60_000);
        t.updated_at = Timestamp(t.created_at.0 + 30_000);
        t.workspace = if i % 3 == 0 {
            WorkspaceKind::Copy
        } else {
            WorkspaceKind::Sandbox
        };
        store
            .insert_task(
                &t,
                &EventKind::Status {
                    state: TaskState::Submitted,
                    message: None,
                    error: None,
                },
            )
            .unwrap();
        t.state = if i % 7 == 0 {
            TaskState::Failed
        } else {
            TaskState::Completed
        };
        t.usage = (i % 5 != 0).then(|| Usage {
            input_tokens: Some(100 + i as u64),
            output_tokens: Some(50),
            total_tokens: Some(150 + i as u64),
            ..Usage::default()
        });
        store.update_task(&t, &[]).unwrap();
    }
}

struct Server {
    h: EngineHarness,
    ui: Dashboard,
    caller: Token,
    addr: std::net::SocketAddr,
    shutdown: CancellationToken,
}

async fn server(tasks: usize) -> Server {
    let h = EngineHarness::builder().start();
    seed(&h.home(), tasks);
    let caller = Token::random().unwrap();
    let shutdown = CancellationToken::new();
    let ui = Dashboard::new(
        h.engine.clone(),
        UiOptions {
            caller: caller.clone(),
            supervisor: Token::random().unwrap(),
            allowlist: Allowlist::loopback("ui"),
        },
        shutdown.clone(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(legate_ui::serve_with(
        listener,
        ui.router(),
        legate_ui::ServeOptions::default(),
        shutdown.clone(),
    ));
    Server {
        h,
        ui,
        caller,
        addr,
        shutdown,
    }
}

fn get(path: &str, token: &Token) -> axum::http::Request<axum::body::Body> {
    axum::http::Request::get(path)
        .header("host", "127.0.0.1")
        .header("authorization", format!("Bearer {}", token.expose()))
        .body(axum::body::Body::empty())
        .unwrap()
}

async fn render_tasks(s: &Server) -> usize {
    let r =
        s.ui.router()
            .oneshot(get("/tasks", &s.caller))
            .await
            .unwrap();
    assert_eq!(r.status(), 200);
    let body = axum::body::to_bytes(r.into_body(), usize::MAX)
        .await
        .unwrap();
    body.len()
}

/// Opens a raw HTTP/1.1 request on a fresh socket and reads until `until` appears.
async fn open(addr: std::net::SocketAddr, path: &str, token: &Token, until: &[u8]) -> TcpStream {
    let mut sock = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {}\r\naccept: text/event-stream\r\n\r\n",
        token.expose()
    );
    sock.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !got.windows(until.len()).any(|w| w == until) {
        let n = sock.read(&mut buf).await.unwrap();
        assert!(
            n > 0,
            "closed before {:?}: {}",
            String::from_utf8_lossy(until),
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&buf[..n]);
    }
    sock
}

fn tasks_page(c: &mut Criterion) {
    let n = env_usize("DASHBOARD_TASKS", 10_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let s = rt.block_on(server(n));
    let bytes = rt.block_on(render_tasks(&s));
    eprintln!("tasks_page: {n} stored tasks, the first page is {bytes} bytes of HTML");
    let mut g = c.benchmark_group("tasks_page");
    g.measurement_time(Duration::from_secs(8));
    let filter = TaskFilter {
        limit: 51,
        ..TaskFilter::default()
    };
    g.bench_function(BenchmarkId::new("store query (baseline)", n), |b| {
        b.iter(|| s.h.engine.tasks(&filter).unwrap())
    });
    g.bench_function(BenchmarkId::new("JSON listing", n), |b| {
        b.iter(|| serde_json::to_vec(&s.h.engine.tasks(&filter).unwrap()).unwrap())
    });
    g.bench_function(BenchmarkId::new("GET /tasks HTML", n), |b| {
        b.to_async(&rt).iter(|| render_tasks(&s))
    });
    g.finish();
    s.shutdown.cancel();
}

fn live_pages(c: &mut Criterion) {
    let pages = env_usize("DASHBOARD_PAGES", 100);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let s = rt.block_on(server(100));
    // Memory: once with the streams held open.
    let (before, open_rss, after, took) = rt.block_on(async {
        // Warm the paths once so the first figure is not the allocator's first growth.
        drop(open(s.addr, "/approvals/live", &s.caller, b"\n\n").await);
        let before = rss_kib();
        let t = Instant::now();
        let mut held = Vec::new();
        for _ in 0..pages {
            held.push(open(s.addr, "/approvals/live", &s.caller, b"\n\n").await);
        }
        let took = t.elapsed();
        let open_rss = rss_kib();
        drop(held);
        // The server notices each closed stream on its next write or keep-alive; read the
        // figure once it has let them go (a fresh request served proves it is responsive).
        drop(open(s.addr, "/approvals", &s.caller, b"</html>").await);
        (before, open_rss, rss_kib(), took)
    });
    eprintln!(
        "live_pages: {pages} SSE streams opened in {took:?}; VmRSS {:.1} MiB before, {:.1} MiB with them open (+{:.1} KiB each), {:.1} MiB after they closed",
        before as f64 / 1024.0,
        open_rss as f64 / 1024.0,
        (open_rss.saturating_sub(before)) as f64 / pages as f64,
        after as f64 / 1024.0
    );
    let mut g = c.benchmark_group("live_pages");
    g.sample_size(10);
    g.bench_function(BenchmarkId::new("GET /approvals (baseline)", pages), |b| {
        b.to_async(&rt).iter(|| async {
            let mut v = Vec::new();
            for _ in 0..pages {
                v.push(open(s.addr, "/approvals", &s.caller, b"</html>").await);
            }
        })
    });
    g.bench_function(BenchmarkId::new("open SSE /approvals/live", pages), |b| {
        b.to_async(&rt).iter(|| async {
            let mut v = Vec::new();
            for _ in 0..pages {
                v.push(open(s.addr, "/approvals/live", &s.caller, b"\n\n").await);
            }
        })
    });
    g.finish();
    s.shutdown.cancel();
}

criterion_group!(benches, tasks_page, live_pages);
criterion_main!(benches);
