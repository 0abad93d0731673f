//! Found attacking admission: it took a running place (`max_running`) before it waited for
//! room, and a session kept for a task waiting for input is never stopped for room. With one
//! place, a new task waited for room holding it, and the reply to the waiting task, which
//! needs no new session and would free the only session, waited for the place: neither ever
//! ran. Room now comes before the place. Alone in its test binary (the limit is the
//! process's).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_backend::Backend;
use legate_backend::acp::AcpBackend;
use legate_core::{AgentKind, AgentSpec, Event, EventKind, TaskId, TaskState};
use legate_engine::{Engine, EngineConfig, Paths, SubmitRequest};
use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const AGENT: &str = env!("CARGO_BIN_EXE_legate-scripted-agent");

fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1
}

/// Sets this process's soft descriptor limit with `prlimit`, keeping the hard one.
fn set_soft_nofile(soft: u64) {
    let pid = std::process::id().to_string();
    let out = Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={soft}:")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

fn soft_nofile() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

/// Follows `id` until an event satisfies `done`; returns everything up to it.
async fn until(engine: &Engine, id: &TaskId, done: impl Fn(&Event) -> bool) -> Vec<Event> {
    let mut sub = engine.subscribe(id, 0);
    let mut seen = Vec::new();
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(e) = sub.next().await.unwrap() {
            let stop = done(&e);
            seen.push(e);
            if stop {
                return;
            }
        }
    })
    .await;
    assert!(waited.is_ok(), "never came: {seen:?}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_to_a_waiting_task_is_not_starved_by_a_task_waiting_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(Paths::new(dir.path().join("home")));
    config.agents.insert(
        "agent".into(),
        AgentSpec {
            name: "agent".into(),
            kind: AgentKind::Acp,
            command: AGENT.into(),
            args: vec![],
            env: BTreeMap::new(),
            preset: None,
            allow_execute: false,
            terminal: false,
            description: None,
            model: None,
            inherit_env: Vec::new(),
        },
    );
    config.default_agent = "agent".into();
    config.max_running = 1;
    config.max_idle_sessions = 64;
    config.cancel_grace = Duration::from_secs(1);
    let backend: Arc<dyn Backend> = Arc::new(AcpBackend::new());
    let engine = Engine::start(
        config,
        HashMap::from([(AgentKind::Acp, backend)]),
        Arc::new(legate_supervisor::Rules),
    )
    .unwrap();

    // A session for context c1, then a task of c1 waiting for input (its session kept).
    let mut first = SubmitRequest::new("write x.txt: 1");
    first.context_id = Some("c1".into());
    let first = engine.submit(first).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(60), engine.wait(&first.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    let mut ask = SubmitRequest::new("");
    ask.context_id = Some("c1".into());
    let asking = engine.submit_or_ask(ask).unwrap();
    assert_eq!(asking.state, TaskState::InputRequired);

    // No room for a new agent; a new task takes the only place and waits for room.
    let original = soft_nofile();
    set_soft_nofile(open_fds() + 20);
    let waiting = engine.submit(SubmitRequest::new("write y.txt: 1")).unwrap();
    until(&engine, &waiting.id, |e| {
        matches!(&e.kind, EventKind::Status { state: TaskState::Submitted, message: Some(m), .. }
            if m.starts_with("waiting for file descriptors"))
    })
    .await;

    // The reply continues c1's live session: it needs no new descriptors.
    engine.reply(asking.id.as_str(), "write z.txt: 1").unwrap();
    let replied = tokio::time::timeout(Duration::from_secs(30), engine.wait(&asking.id)).await;
    let _ = engine.cancel(waiting.id.as_str());
    // Control: once the task waiting for room is canceled (its place freed), the reply runs.
    let after = tokio::time::timeout(Duration::from_secs(30), engine.wait(&asking.id)).await;
    set_soft_nofile(original);
    let after = after.map(|t| t.unwrap().state);
    assert!(
        replied.is_ok(),
        "the reply never ran while the other task held the place; after canceling it: {after:?}"
    );
    engine.shutdown().await;
}
