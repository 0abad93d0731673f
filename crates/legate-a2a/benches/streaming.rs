//! A2A streaming benchmark (issue 4): concurrent `a2a-client-lf` clients, each streaming one
//! small revisor task from the real HTTP server (`legate_a2a::boot` + `legate_a2a::serve` on
//! 127.0.0.1) over an engine that runs the real scripted agent, against a baseline in the same
//! run: the same tasks submitted directly through the `Engine` API and followed by an engine
//! subscription (no HTTP, no A2A).
//!
//! Every client must reach a terminal status, and the frames it received must be exactly the
//! frames its task's stored events translate to (the task frame, then `Translator` over the
//! stored events, as the handler streams them); every baseline subscriber must receive exactly
//! the events stored for its task.
//!
//! Latency is from when the harness issues a task (before it is spawned, on both sides) to its
//! terminal frame or event. With every client sending at once on a small machine, that is close
//! to the time the whole batch takes, so p50 ≈ p99 is expected; throughput is the figure to
//! compare. The clients run in this process, so the A2A side also pays for their HTTP and JSON.
//!
//! Run: `cargo bench -p legate-a2a --bench streaming` (env `STREAM_CLIENTS`, default 100;
//! `STREAM_ROUNDS`, default 6, alternating which side goes first; the median is reported).
//! Needs the scripted agent: `cargo build --release -p legate-testkit --bin
//! legate-scripted-agent` (or `LEGATE_SCRIPTED_AGENT`). Figures go in `docs/BENCHMARKS.md`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use a2a::{Message, Part, Role, SendMessageRequest, StreamResponse};
use a2a_client::A2AClientFactory;
use a2a_client::agent_card::AgentCardResolver;
use a2a_client::auth::AuthInterceptor;
use futures::StreamExt;
use legate_a2a::{A2aOptions, Token};
use legate_backend::Backend;
use legate_backend::acp::AcpBackend;
use legate_core::{AgentKind, AgentSpec, EventKind, TaskId, TaskState};
use legate_engine::{Engine, EngineConfig, Paths, SubmitRequest};
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";
const PROMPT: &str = "write a.txt: x\nWhat is in this workspace?";

fn engine(home: &Path, tasks: usize) -> Engine {
    let agent = legate_testkit::find_scripted_agent()
        .expect(
            "legate-scripted-agent is not built; run `cargo build --release -p legate-testkit --bin legate-scripted-agent`",
        )
        .display()
        .to_string();
    let mut config = EngineConfig::new(Paths::new(home));
    let spec: AgentSpec = serde_json::from_value(json!({
        "name": "revisor", "kind": "acp", "command": agent,
    }))
    .unwrap();
    config.agents.insert("revisor".into(), spec);
    config.default_agent = "revisor".into();
    config.max_running = tasks;
    config.max_queued = tasks * 2 + 10;
    let backend: Arc<dyn Backend> = Arc::new(AcpBackend::new());
    Engine::start(
        config,
        HashMap::from([(AgentKind::ACP, backend)]),
        Arc::new(legate_supervisor::Rules),
    )
    .unwrap()
}

/// One finished task as a client saw it.
struct Run {
    id: TaskId,
    /// Frames (A2A) or events (baseline) received.
    received: usize,
    /// Send → terminal frame or event.
    latency: Duration,
    /// The state of the first frame (A2A): where the handler's stream starts.
    first_state: Option<TaskState>,
    terminal: Option<TaskState>,
}

struct Summary {
    wall: Duration,
    runs: Vec<Run>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn report(name: &str, unit: &str, s: &Summary, stored: usize) {
    let n = s.runs.len();
    let received: usize = s.runs.iter().map(|r| r.received).sum();
    let mut lat: Vec<Duration> = s.runs.iter().map(|r| r.latency).collect();
    lat.sort();
    let secs = s.wall.as_secs_f64();
    println!(
        "  {name:<44} wall {:>6.0} ms, {:>6.1} tasks/s, {:>6.0} {unit}/s ({received} {unit} delivered, {stored} events stored), send -> terminal p50 {:>5.0} ms, p99 {:>5.0} ms, max {:>5.0} ms",
        secs * 1000.0,
        n as f64 / secs,
        received as f64 / secs,
        percentile(&lat, 0.50).as_secs_f64() * 1000.0,
        percentile(&lat, 0.99).as_secs_f64() * 1000.0,
        lat.last().unwrap().as_secs_f64() * 1000.0,
    );
}

/// The same tasks through the engine API: submit, subscribe from 0, count until the end.
async fn direct(engine: &Engine, tasks: usize) -> Summary {
    let started = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let engine = engine.clone();
        // Stamped before the spawn (as in `over_a2a`): the time this task waits for a worker,
        // behind other tasks' synchronous submits and agent spawns, is part of its latency.
        let sent = Instant::now();
        handles.push(tokio::spawn(async move {
            let task = engine.submit(SubmitRequest::new(PROMPT)).unwrap();
            let mut sub = engine.subscribe(&task.id, 0);
            let mut received = 0;
            let mut terminal = None;
            while let Some(e) = sub.next().await.unwrap() {
                received += 1;
                if let EventKind::Status { state, .. } = e.kind
                    && state.is_terminal()
                {
                    terminal = Some(state);
                }
            }
            Run {
                id: task.id,
                received,
                latency: sent.elapsed(),
                first_state: None,
                terminal,
            }
        }));
    }
    let mut runs = Vec::new();
    for h in handles {
        runs.push(h.await.unwrap());
    }
    Summary {
        wall: started.elapsed(),
        runs,
    }
}

/// The same tasks over HTTP: one A2A client each, `SendStreamingMessage`, count every frame
/// until the stream ends after the final status.
async fn over_a2a(base: &str, tasks: usize) -> Summary {
    let card = AgentCardResolver::new(None).resolve(base).await.unwrap();
    let mut clients = Vec::new();
    for _ in 0..tasks {
        clients.push(
            A2AClientFactory::builder()
                .with_interceptor(Arc::new(AuthInterceptor::bearer(TOKEN)))
                .preferred_bindings(vec![a2a::TRANSPORT_PROTOCOL_JSONRPC.into()])
                .build()
                .create_from_card(&card)
                .await
                .unwrap(),
        );
    }
    let started = Instant::now();
    let mut handles = Vec::new();
    for c in clients {
        let sent = Instant::now();
        handles.push(tokio::spawn(async move {
            let request = SendMessageRequest {
                message: Message::new(Role::User, vec![Part::text(PROMPT)]),
                configuration: None,
                metadata: None,
                tenant: None,
            };
            let mut stream = c.send_streaming_message(&request).await.unwrap();
            let mut received = 0;
            let mut id = None;
            let mut first_state = None;
            let mut terminal = None;
            let mut latency = None;
            while let Some(frame) = stream.next().await {
                let frame = frame.unwrap();
                received += 1;
                match &frame {
                    StreamResponse::Task(t) => {
                        id = Some(TaskId(t.id.clone()));
                        first_state = legate_a2a::convert::legate_state(t.status.state.clone());
                    }
                    StreamResponse::StatusUpdate(u) => {
                        if let Some(s) = legate_a2a::convert::legate_state(u.status.state.clone())
                            && s.is_terminal()
                        {
                            terminal = Some(s);
                            latency = Some(sent.elapsed());
                        }
                    }
                    _ => {}
                }
            }
            Run {
                id: id.expect("a task frame"),
                received,
                latency: latency.expect("a terminal status"),
                first_state,
                terminal,
            }
        }));
    }
    let mut runs = Vec::new();
    for h in handles {
        runs.push(h.await.unwrap());
    }
    Summary {
        wall: started.elapsed(),
        runs,
    }
}

/// The frames the handler streams for a stored task whose stream began in `first`.
fn expected_frames(engine: &Engine, id: &TaskId, first: TaskState) -> usize {
    let task = engine.records().stored_task(id).unwrap().unwrap();
    let mut current = task.clone();
    current.state = first;
    let mut translator = legate_a2a::convert::Translator::new();
    let mut frames = 1;
    for e in engine.events(id, 0, 100_000).unwrap() {
        if let EventKind::Status { state, .. } = &e.kind {
            if state.is_terminal() {
                current = task.clone();
            } else if *state == current.state {
                continue;
            } else {
                current.state = *state;
            }
        }
        frames += translator.event(&current, &e.kind).len();
    }
    frames
}

fn stored_events(engine: &Engine, s: &Summary) -> usize {
    s.runs
        .iter()
        .map(|r| engine.events(&r.id, 0, 100_000).unwrap().len())
        .sum()
}

fn main() {
    // The SDK's clients are reqwest's defaults: the process needs its TLS provider first.
    legate_testkit::tls::install_provider();
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run small then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let tasks: usize = std::env::var("STREAM_CLIENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(if quick { 5 } else { 100 });
    let rounds: usize = std::env::var("STREAM_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(if quick { 2 } else { 6 });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let home = tempfile::tempdir().unwrap();
        let engine = engine(home.path(), tasks);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let options = A2aOptions {
            token: Some(Token::configured(TOKEN).unwrap()),
            public_url: url.clone(),
            max_body_bytes: 64 * 1024,
            probe_limit: Duration::from_secs(30),
            copy_roots: Vec::new(),
            agents: engine.config().agents.keys().cloned().collect(),
        };
        let (router, boot) = legate_a2a::boot(&engine, &options).await;
        assert_eq!(boot.served.len(), 1, "the revisor is served");
        let stop = CancellationToken::new();
        let s = stop.clone();
        let server = tokio::spawn(async move {
            legate_a2a::serve(listener, router, s).await.unwrap();
        });
        let base = format!("{url}/agents/revisor");

        println!(
            "a2a streaming: {tasks} concurrent clients, one revisor task each ({PROMPT:?}), real agent processes"
        );
        // Warm-up: one task each way (page cache, the agent binary, SQLite).
        let _ = direct(&engine, 1).await;
        let _ = over_a2a(&base, 1).await;

        // Rounds alternate which side goes first (ABBA…): whichever runs second inherits the
        // first's idle agent sessions and a larger process, which alone moved walls by ~25%.
        let mut walls: (Vec<Duration>, Vec<Duration>) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            println!("round {} ({} first):", round + 1, if round % 2 == 0 { "baseline" } else { "a2a" });
            for side in if round % 2 == 0 { [false, true] } else { [true, false] } {
                if side {
                    let a = over_a2a(&base, tasks).await;
                    for r in &a.runs {
                        assert_eq!(r.terminal, Some(TaskState::Completed), "task {}", r.id);
                        let first = r.first_state.expect("the task frame has a state");
                        let expected = expected_frames(&engine, &r.id, first);
                        assert_eq!(r.received, expected, "every frame of {}", r.id);
                    }
                    let a_stored = stored_events(&engine, &a);
                    report("a2a (HTTP, JSON-RPC SSE, a2a-client-lf):", "frames", &a, a_stored);
                    walls.1.push(a.wall);
                } else {
                    let d = direct(&engine, tasks).await;
                    for r in &d.runs {
                        assert_eq!(r.terminal, Some(TaskState::Completed), "task {}", r.id);
                        let stored = engine.events(&r.id, 0, 100_000).unwrap().len();
                        assert_eq!(r.received, stored, "every stored event of {}", r.id);
                    }
                    let d_stored = stored_events(&engine, &d);
                    report("baseline (Engine API, subscription):", "events", &d, d_stored);
                    walls.0.push(d.wall);
                }
            }
        }
        walls.0.sort();
        walls.1.sort();
        let median = |w: &[Duration]| percentile(w, 0.5).as_secs_f64();
        println!(
            "median of {rounds} rounds: baseline {:.1} tasks/s, a2a {:.1} tasks/s (a2a/baseline wall {:.2})",
            tasks as f64 / median(&walls.0),
            tasks as f64 / median(&walls.1),
            median(&walls.1) / median(&walls.0),
        );
        println!(
            "  every client reached `completed`; every subscriber got all its stored events; every A2A stream got exactly the frames its stored events translate to"
        );

        stop.cancel();
        let _ = server.await;
        engine.shutdown().await;
    });
}
