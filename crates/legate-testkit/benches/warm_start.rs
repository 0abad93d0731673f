//! How late the first event of a real agent's task arrives, with one warm session
//! (`[agents.NAME] warm = 1`) against none, in one run (issue 33).
//!
//! Two engines on two homes, the same agent and the same scripted model server on 127.0.0.1:
//! one keeps no warm session (the baseline), the other keeps one. Each round submits one task
//! in a new context to each (interleaved, so that load drifts hit both), the warm engine's once
//! its warm session is ready, and times from `submit` to the task's first event from the agent
//! (its first message chunk: the model's first token relayed) and to its session (the `session`
//! event). The warm engine's tasks must carry the `agent.warm` notice, the baseline's must not.
//!
//! The agent is Claude Code's ACP adapter (`@agentclientprotocol/claude-agent-acp`, installed by
//! `scripts/real-adapters.sh` under `$LEGATE_ADAPTERS_DIR/current`, default
//! `~/.cache/legate-adapters/current`), offline against the scripted model server. Without it
//! (or with `WARM_START_AGENT=scripted`) the bench says so and measures the testkit's scripted
//! ACP agent with an artificial start delay (`LEGATE_TESTKIT_START_DELAY_MS`,
//! `WARM_START_DELAY_MS`, default 1500) instead, labelled as such.
//!
//! Run: `cargo bench -p legate-testkit --bench warm_start` (env `WARM_START_RUNS`, default 8;
//! the figures are medians). `cargo test --benches` runs it with 1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{AgentKind, EventKind, TaskState};
use legate_engine::{Engine, SubmitRequest};
use legate_testkit::model_server::ModelServer;
use legate_testkit::{EngineHarness, START_DELAY_ENV, TestAgent};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const AGENT: &str = "claude";

fn claude_js() -> Option<PathBuf> {
    if std::env::var("WARM_START_AGENT").is_ok_and(|v| v == "scripted") {
        return None;
    }
    let base = std::env::var_os("LEGATE_ADAPTERS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/legate-adapters")
        });
    let js = base.join("current/node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js");
    js.exists().then_some(js)
}

fn agent(url: &str, js: Option<&Path>, delay_ms: u64) -> TestAgent {
    match js {
        Some(js) => TestAgent::command(AGENT, AgentKind::ACP, "node")
            .args([js.display().to_string()])
            .preset("claude")
            .env("ANTHROPIC_BASE_URL", url)
            .env("ANTHROPIC_API_KEY", "sk-ant-legate-test"),
        None => TestAgent::scripted(AGENT).env(START_DELAY_ENV, delay_ms.to_string()),
    }
}

fn engine(base: &Path, agent: TestAgent, warm: usize) -> Engine {
    let state = base.join("state");
    std::fs::create_dir_all(&state).unwrap();
    EngineHarness::builder()
        .agent(agent)
        .acp_handshake(Duration::from_secs(60))
        .config(move |c| {
            c.default_timeout = Duration::from_secs(180);
            c.state_dirs.insert(AGENT.to_string(), state);
            if warm > 0 {
                c.warm.insert(AGENT.to_string(), warm);
            }
        })
        .engine_in(base)
}

/// One task in a new context: (first agent event, session event), from `submit`.
async fn task(engine: &Engine, context: &str, warm: bool) -> (Duration, Duration) {
    let mut req = SubmitRequest::new("Say hello.");
    req.agent = Some(AGENT.into());
    req.context_id = Some(context.into());
    let start = Instant::now();
    let wall = std::time::SystemTime::now();
    let task = engine.submit(req).unwrap();
    let mut sub = engine.subscribe(&task.id, 0);
    let (mut first, mut session, mut handed) = (None, None, false);
    let followed = tokio::time::timeout(Duration::from_secs(180), async {
        while let Some(e) = sub.next().await.unwrap() {
            match &e.kind {
                EventKind::Message { .. } if first.is_none() => first = Some(start.elapsed()),
                EventKind::Session { .. } if session.is_none() => session = Some(start.elapsed()),
                EventKind::Notice { detail, .. } if detail["event"] == "agent.warm" => {
                    handed = true
                }
                EventKind::Status { state, .. } if state.is_terminal() => {
                    assert_eq!(*state, TaskState::Completed, "{e:?}");
                    break;
                }
                _ => {}
            }
        }
    })
    .await;
    assert!(followed.is_ok(), "the task did not end in 180 s");
    if std::env::var("WARM_START_TRACE").is_ok_and(|v| v == "1") {
        trace(engine, &task.id, wall);
    }
    assert_eq!(
        handed, warm,
        "warm session handed over: {handed}, expected {warm}"
    );
    (
        first.expect("the agent sent a message"),
        session.expect("a session event"),
    )
}

/// Prints the task's events with when each was stored, from `submit` (`WARM_START_TRACE=1`).
fn trace(engine: &Engine, id: &legate_core::TaskId, wall: std::time::SystemTime) {
    let since = |at: std::time::SystemTime| at.duration_since(wall).map_or(0.0, ms);
    for e in engine.events(id, 0, 1000).unwrap() {
        let at = std::time::UNIX_EPOCH + Duration::from_millis(e.at.0.max(0) as u64);
        let kind = serde_json::to_string(&e.kind).unwrap_or_default();
        println!("    {:8.1} ms  {}", since(at), &kind[..kind.len().min(140)]);
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::var("WARM_START_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            8
        } else {
            1
        });
    let delay_ms: u64 = std::env::var("WARM_START_DELAY_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1500);
    let server = ModelServer::start().unwrap();
    let js = claude_js();
    let label = match &js {
        Some(js) => format!(
            "claude-agent-acp ({}), offline, scripted model",
            js.display()
        ),
        None => format!(
            "NOT claude-agent-acp (not installed, or WARM_START_AGENT=scripted): the testkit's scripted ACP agent with an artificial start delay of {delay_ms} ms"
        ),
    };
    let dir = tempfile::tempdir().unwrap();
    let cold = engine(
        &dir.path().join("cold"),
        agent(&server.url(), js.as_deref(), delay_ms),
        0,
    );
    let warm = engine(
        &dir.path().join("warm"),
        agent(&server.url(), js.as_deref(), delay_ms),
        1,
    );
    // One untimed task each: the agent's state directory made, its files cached.
    task(&cold, "prime", false).await;
    wait_ready(&warm).await;
    task(&warm, "prime", true).await;

    println!("warm start: {label}; first agent event and session after submit, medians of {runs}");
    let (mut cold_first, mut cold_session, mut warm_first, mut warm_session) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for i in 0..runs {
        let (f, s) = task(&cold, &format!("cold-{i}"), false).await;
        cold_first.push(f);
        cold_session.push(s);
        wait_ready(&warm).await;
        let (f, s) = task(&warm, &format!("warm-{i}"), true).await;
        warm_first.push(f);
        warm_session.push(s);
    }
    let (cf, cs, wf, ws) = (
        median(cold_first),
        median(cold_session),
        median(warm_first),
        median(warm_session),
    );
    println!(
        "  warm = 0 (baseline): first event {:8.1} ms, session {:8.1} ms",
        ms(cf),
        ms(cs)
    );
    println!(
        "  warm = 1           : first event {:8.1} ms, session {:8.1} ms",
        ms(wf),
        ms(ws)
    );
    println!(
        "  warm against baseline: first event {:.3}x, session {:.3}x",
        ms(wf) / ms(cf),
        ms(ws) / ms(cs)
    );
    cold.shutdown().await;
    warm.shutdown().await;
}

async fn wait_ready(engine: &Engine) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while engine.warm_ready(AGENT) == 0 {
        assert!(
            Instant::now() < deadline,
            "no warm session became ready in 120 s"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
