//! Relay benchmark: message chunks from a scripted agent through backend, engine, store and a
//! live subscriber, against a baseline in the same run (the same agent read directly by an
//! ACP client, with no Legate in between).
//!
//! Throughput is measured on bursts (`!chunks N`: the agent writes as fast as it can), two
//! ways: the relay's, from the first chunk a reader receives to the last (the same span for
//! the bare client and for Legate's subscriber), and end to end (the bare client from its
//! prompt to the answer; Legate from the submit to the task's end, so with the agent's start,
//! its confinement and its stop, which the bare client does not pay). Latency at a steady
//! load (`!chunks N R`: R chunks per second), since a burst that outpaces any reader only
//! measures the queue.
//!
//! With tracing on (issue 34): the process's subscriber is the OpenTelemetry layer the binary
//! installs (`legate_trace::export::trace_layer`, batch export over OTLP/HTTP to the test
//! kit's receiver on 127.0.0.1), and a second engine runs the same bursts and paced runs on a
//! runtime of its own, interleaved with the first, whose runtime's threads (and the calling
//! thread while it drives it) have no subscriber at all: both see the same machine.
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
use legate_testkit::otlp::OtlpReceiver;
use std::collections::HashMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};
use tracing_subscriber::layer::SubscriberExt;

const AGENT: &str = env!("CARGO_BIN_EXE_legate-scripted-agent");

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// What one run of chunks took: end to end, and from the first chunk received to the last.
struct Took {
    elapsed: Duration,
    stream: Duration,
}

impl Took {
    /// Chunks per second from the first received to the last (`chunks - 1` gaps).
    fn stream_rate(&self, chunks: usize) -> f64 {
        chunks.saturating_sub(1) as f64 / self.stream.as_secs_f64().max(1e-9)
    }
}

/// When the first and the last chunk were received.
#[derive(Default)]
struct Span(Option<Instant>, Option<Instant>);

impl Span {
    fn saw(&mut self) {
        let now = Instant::now();
        self.0.get_or_insert(now);
        self.1 = Some(now);
    }

    fn length(&self) -> Duration {
        match (self.0, self.1) {
            (Some(a), Some(b)) => b - a,
            _ => Duration::ZERO,
        }
    }
}

/// The agent read directly by an ACP client, no Legate: how fast and how soon can chunks
/// cross the pipe at all?
async fn baseline(chunks: usize, rate: Option<u64>) -> (Took, Vec<f64>) {
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
    let span = Arc::new(std::sync::Mutex::new(Span::default()));
    let span_sink = span.clone();
    let prompt = chunks_prompt(chunks, rate);
    let mut elapsed = Duration::ZERO;
    let elapsed_ref = &mut elapsed;
    Client
        .v1()
        .on_receive_notification(
            async move |n: SessionNotification, _cx| {
                if let SessionUpdate::AgentMessageChunk(chunk) = n.update {
                    span_sink.lock().unwrap().saw();
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
    let stream = span.lock().unwrap().length();
    (Took { elapsed, stream }, latencies)
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
    took: Took,
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
    let mut span = Span::default();
    while let Some(e) = sub.next().await.unwrap() {
        events += 1;
        if let EventKind::Message { text } = &e.kind
            && let Some(t) = chunk_time(text)
        {
            span.saw();
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
        took: Took {
            elapsed: started.elapsed(),
            stream: span.length(),
        },
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

/// A runtime whose threads (workers and blocking) all have `dispatch` as their default
/// subscriber instead of the process's (none: the process's).
fn runtime(dispatch: Option<tracing::Dispatch>) -> tokio::runtime::Runtime {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(dispatch) = dispatch {
        builder.on_thread_start(move || {
            // The thread keeps it until it ends: the guard is never dropped.
            std::mem::forget(tracing::dispatcher::set_default(&dispatch));
        });
    }
    builder.build().unwrap()
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

#[derive(Default)]
struct Figures {
    /// Events per second, submit to end.
    rates: Vec<f64>,
    /// Chunks per second, first chunk received to last.
    stream_rates: Vec<f64>,
    latencies: Vec<f64>,
}

fn runs(rates: &[f64]) -> String {
    rates
        .iter()
        .map(|r| format!("{r:.0}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl Figures {
    fn add(&mut self, r: &Relay, chunks: usize) {
        self.rates
            .push(r.events as f64 / r.took.elapsed.as_secs_f64());
        self.stream_rates.push(r.took.stream_rate(chunks));
    }

    /// Prints the figures; returns the relay's rate (first to last chunk) and the p99.
    fn print(&mut self, label: &str) -> (f64, f64) {
        self.latencies.sort_by(f64::total_cmp);
        let stream = median(self.stream_rates.clone());
        let rate = median(self.rates.clone());
        let p99 = percentile(&self.latencies, 0.99);
        println!(
            "  {label}: relay {stream:>9.0} chunks/s first to last (median; runs {}); end to end {rate:>9.0} events/s (runs {}); paced p50 {:>6.0} us, p99 {p99:>6.0} us, max {:>6.0} us ({} samples)",
            runs(&self.stream_rates),
            runs(&self.rates),
            percentile(&self.latencies, 0.5),
            self.latencies.last().copied().unwrap_or(0.0),
            self.latencies.len()
        );
        (stream, p99)
    }
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
    let load_before = load();

    // Tracing on as the binary turns it on: an OTLP endpoint in the environment, the batch
    // exporter with the SDK's defaults.
    let receiver = OtlpReceiver::start();
    // SAFETY: no runtime has started; the only other thread is the receiver's accept loop,
    // which never reads the environment, so nothing reads it while it changes.
    #[allow(unsafe_code)]
    unsafe {
        std::env::set_var("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint());
        std::env::set_var("OTEL_SERVICE_NAME", "relay-bench");
    }
    let setup = runtime(None);
    let (layer, provider) = setup
        .block_on(async {
            legate_trace::export::trace_layer::<tracing_subscriber::Registry>("serve")
        })
        .expect("the OTEL_* variables turn traces on");
    // The process's subscriber, as the binary's; the engine without tracing runs where the
    // default is no subscriber at all (its runtime's threads and the calling thread).
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(layer)).unwrap();
    // A registered subscriber that records nothing (not `Dispatch::none()`, which is not
    // registered: with one registered dispatcher, tracing caches each callsite's interest from
    // the first thread to reach it, and a callsite first reached here would be off for all).
    let untraced = tracing::Dispatch::new(tracing::subscriber::NoSubscriber::default());
    let rt = runtime(Some(untraced.clone()));
    let rt_traced = runtime(None);

    let home = tempfile::tempdir().unwrap();
    let home_traced = tempfile::tempdir().unwrap();
    // The calling thread drives `block_on`'s future: it has the same subscriber.
    let off = |f: &mut dyn FnMut()| tracing::dispatcher::with_default(&untraced, f);
    let mut plain = None;
    off(&mut || plain = Some(rt.block_on(async { engine(home.path(), 16) })));
    let engine_traced = rt_traced.block_on(async { engine(home_traced.path(), 16) });
    let engine = plain.unwrap();

    let mut base_rates = Vec::new();
    let mut base_stream_rates = Vec::new();
    let mut base_lat = Vec::new();
    let mut untraced_figures = Figures::default();
    let mut traced_figures = Figures::default();
    for round in 0..rounds {
        // Throughput: a burst, as fast as the agent can write.
        let (b, _) = setup.block_on(baseline(chunks, None));
        base_rates.push(chunks as f64 / b.elapsed.as_secs_f64());
        base_stream_rates.push(b.stream_rate(chunks));
        // Which of the two goes first alternates, so neither always follows the other.
        for traced_now in [round % 2 == 1, round % 2 == 0] {
            if traced_now {
                let r = rt_traced.block_on(relay(&engine_traced, chunks, None));
                traced_figures.add(&r, chunks);
            } else {
                off(&mut || {
                    let r = rt.block_on(relay(&engine, chunks, None));
                    untraced_figures.add(&r, chunks);
                });
            }
        }
        // Latency: a steady load the pipe itself keeps up with.
        let (_, l) = setup.block_on(baseline(paced, Some(rate)));
        base_lat.extend(l);
        for traced_now in [round % 2 == 1, round % 2 == 0] {
            if traced_now {
                let r = rt_traced.block_on(relay(&engine_traced, paced, Some(rate)));
                traced_figures.latencies.extend(r.latencies_us);
            } else {
                off(&mut || {
                    let r = rt.block_on(relay(&engine, paced, Some(rate)));
                    untraced_figures.latencies.extend(r.latencies_us);
                });
            }
        }
    }
    base_lat.sort_by(f64::total_cmp);
    off(&mut || rt.block_on(engine.shutdown()));
    rt_traced.block_on(engine_traced.shutdown());
    drop((engine, engine_traced));
    provider.shutdown().unwrap();
    let spans = receiver.spans();

    println!(
        "relay: bursts of {chunks} chunks and paced runs of {paced}, x {rounds} rounds, one live subscriber"
    );
    println!("  load average before: {load_before}; after: {}", load());
    let base_stream = median(base_stream_rates.clone());
    println!(
        "  baseline (agent -> ACP client, no Legate): relay {base_stream:>9.0} chunks/s first to last (median; runs {}); prompt to answer {:>9.0} chunks/s (runs {})",
        runs(&base_stream_rates),
        median(base_rates.clone()),
        runs(&base_rates)
    );
    println!(
        "  baseline latency at a steady {rate} chunks/s: p50 {:>6.0} us, p99 {:>6.0} us, max {:>6.0} us ({} samples)",
        percentile(&base_lat, 0.5),
        percentile(&base_lat, 0.99),
        base_lat.last().copied().unwrap_or(0.0),
        base_lat.len()
    );
    println!(
        "  legate (agent -> backend -> engine -> SQLite -> subscriber), latency at a steady {rate} chunks/s:"
    );
    let (rate_off, p99_off) = untraced_figures.print("tracing off");
    let (rate_on, p99_on) = traced_figures.print("tracing on ");
    println!(
        "  relay against the bare client (first to last chunk, medians): {:.2}x with tracing off, {:.2}x on",
        rate_off / base_stream,
        rate_on / base_stream
    );
    println!(
        "  tracing on against off: events/s {:+.1}%, p99 {:+.1}%; {} spans exported ({} requests)",
        (rate_on / rate_off - 1.0) * 100.0,
        (p99_on / p99_off - 1.0) * 100.0,
        spans.len(),
        receiver.requests().len()
    );
    let mut names: std::collections::BTreeMap<&str, usize> = Default::default();
    for s in &spans {
        *names.entry(s.name.as_str()).or_default() += 1;
    }
    println!("  spans by name: {names:?}");
}
