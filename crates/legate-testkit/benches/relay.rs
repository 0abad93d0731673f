//! Relay benchmark: message chunks from a scripted agent through backend, engine, store and a
//! live subscriber, against a baseline in the same run (the same agent read directly by an
//! ACP client, with no Legate in between).
//!
//! Throughput is measured on bursts (`!chunks N`: the agent writes as fast as it can);
//! latency at a steady load (`!chunks N R`: R chunks per second), since a burst that outpaces
//! any reader only measures the queue.
//!
//! Run: `cargo bench -p legate-testkit --bench relay` (env `RELAY_CHUNKS`, default 10000;
//! `RELAY_RATE`, default 5000/s; `RELAY_ROUNDS`, default 5). Figures go in
//! `docs/BENCHMARKS.md`. Memory is measured on the real binary by
//! `cargo bench -p legate --bench memory`, not here: this harness is not `legate`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    ContentBlock, InitializeRequest, NewSessionRequest, PromptRequest, SessionNotification,
    SessionUpdate, TextContent,
};
use agent_client_protocol::{Agent, ByteStreams, Client};
use legate_backend::Backend;
use legate_backend::acp::AcpBackend;
use legate_core::{AgentKind, AgentSpec, EventKind, TaskState};
use legate_engine::{Engine, EngineConfig, Paths, SubmitRequest};
use legate_testkit::directives::chunk_time;
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

const AGENT: &str = env!("CARGO_BIN_EXE_legate-scripted-agent");

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// The agent read directly by an ACP client, no Legate: how fast and how soon can chunks
/// cross the pipe at all?
async fn baseline(chunks: usize, rate: Option<u64>) -> (Duration, Vec<f64>) {
    let mut child = tokio::process::Command::new(AGENT)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cwd = dir.path().canonicalize().unwrap();
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let latencies = Arc::new(std::sync::Mutex::new(Vec::with_capacity(chunks)));
    let sink = latencies.clone();
    let prompt = chunks_prompt(chunks, rate);
    let mut elapsed = Duration::ZERO;
    let elapsed_ref = &mut elapsed;
    Client
        .v1()
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                if let SessionUpdate::AgentMessageChunk(chunk) = n.update {
                    counter.fetch_add(1, Ordering::Relaxed);
                    if let ContentBlock::Text(t) = chunk.content
                        && let Some(at) = chunk_time(&t.text)
                    {
                        sink.lock()
                            .unwrap()
                            .push(now_ns().saturating_sub(at) as f64 / 1000.0);
                    }
                }
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .connect_with(
            ByteStreams::new(stdin.compat_write(), stdout.compat()),
            async |cx: ConnectionTo<Agent>| {
                cx.send_request(InitializeRequest::new(ProtocolVersion::V1))
                    .block_task()
                    .await?;
                let session = cx
                    .send_request(NewSessionRequest::new(cwd.clone()))
                    .block_task()
                    .await?
                    .session_id;
                let started = Instant::now();
                cx.send_request(PromptRequest::new(
                    session,
                    vec![ContentBlock::Text(TextContent::new(prompt.clone()))],
                ))
                .block_task()
                .await?;
                *elapsed_ref = started.elapsed();
                Ok(())
            },
        )
        .await
        .unwrap();
    assert_eq!(seen.load(Ordering::Relaxed), chunks);
    let latencies = std::mem::take(&mut *latencies.lock().unwrap());
    (elapsed, latencies)
}

fn chunks_prompt(chunks: usize, rate: Option<u64>) -> String {
    match rate {
        Some(r) => format!("!chunks {chunks} {r}"),
        None => format!("!chunks {chunks}"),
    }
}

fn engine(home: &std::path::Path, max_running: usize) -> Engine {
    let mut config = EngineConfig::new(Paths::new(home));
    config.max_running = max_running;
    config.max_queued = 100;
    config.agents.insert(
        "agent".into(),
        AgentSpec::command("agent", AgentKind::ACP, AGENT),
    );
    config.default_agent = "agent".into();
    let backend: Arc<dyn Backend> = Arc::new(AcpBackend::new());
    Engine::start(
        config,
        HashMap::from([(AgentKind::ACP, backend)]),
        Arc::new(legate_supervisor::Rules),
    )
    .unwrap()
}

struct Relay {
    elapsed: Duration,
    events: usize,
    latencies_us: Vec<f64>,
}

/// One task of `chunks` chunks through Legate, read by a live subscriber.
async fn relay(engine: &Engine, chunks: usize, rate: Option<u64>) -> Relay {
    let started = Instant::now();
    let task = engine
        .submit(SubmitRequest::new(chunks_prompt(chunks, rate)))
        .unwrap();
    let mut sub = engine.subscribe(&task.id, 0);
    let mut events = 0;
    let mut latencies_us = Vec::with_capacity(chunks);
    while let Some(e) = sub.next().await.unwrap() {
        events += 1;
        if let EventKind::Message { text } = &e.kind
            && let Some(t) = chunk_time(text)
        {
            latencies_us.push((now_ns().saturating_sub(t)) as f64 / 1000.0);
        }
        if let EventKind::Status { state, .. } = &e.kind
            && state.is_terminal()
        {
            assert_eq!(*state, TaskState::Completed);
        }
    }
    assert_eq!(
        latencies_us.len(),
        chunks,
        "every chunk reached the subscriber"
    );
    Relay {
        elapsed: started.elapsed(),
        events,
        latencies_us,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    percentile(&v, 0.5)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run small then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let chunks: usize = std::env::var("RELAY_CHUNKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 200 } else { 10_000 });
    let rounds: usize = std::env::var("RELAY_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 1 } else { 5 });
    let rate: u64 = std::env::var("RELAY_RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|r| *r > 0)
        .unwrap_or(5_000);
    let paced = if quick { 200 } else { 5_000 };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let home = tempfile::tempdir().unwrap();
        let engine = engine(home.path(), 16);

        let mut base_rates = Vec::new();
        let mut rates = Vec::new();
        let mut base_lat = Vec::new();
        let mut all_lat = Vec::new();
        for _ in 0..rounds {
            // Throughput: a burst, as fast as the agent can write.
            let (b, _) = baseline(chunks, None).await;
            base_rates.push(chunks as f64 / b.as_secs_f64());
            let r = relay(&engine, chunks, None).await;
            rates.push(r.events as f64 / r.elapsed.as_secs_f64());
            // Latency: a steady load the pipe itself keeps up with.
            let (_, l) = baseline(paced, Some(rate)).await;
            base_lat.extend(l);
            let r = relay(&engine, paced, Some(rate)).await;
            all_lat.extend(r.latencies_us);
        }
        all_lat.sort_by(f64::total_cmp);
        base_lat.sort_by(f64::total_cmp);

        engine.shutdown().await;

        println!("relay: bursts of {chunks} chunks and paced runs of {paced}, x {rounds} rounds, one live subscriber");
        println!(
            "  baseline (agent -> ACP client, no Legate): {:>9.0} chunks/s (median)",
            median(base_rates)
        );
        println!(
            "  legate (agent -> backend -> engine -> SQLite -> subscriber): {:>9.0} events/s (median)",
            median(rates)
        );
        println!("  latency at a steady {rate} chunks/s, agent write -> reader:");
        println!(
            "    baseline (ACP client):      p50 {:>6.0} us, p99 {:>6.0} us, max {:>6.0} us ({} samples)",
            percentile(&base_lat, 0.5),
            percentile(&base_lat, 0.99),
            base_lat.last().copied().unwrap_or(0.0),
            base_lat.len()
        );
        println!(
            "    legate (live subscriber):   p50 {:>6.0} us, p99 {:>6.0} us, max {:>6.0} us ({} samples)",
            percentile(&all_lat, 0.5),
            percentile(&all_lat, 0.99),
            all_lat.last().copied().unwrap_or(0.0),
            all_lat.len()
        );
    });
}
