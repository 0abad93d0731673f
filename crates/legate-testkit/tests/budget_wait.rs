//! Admission against the descriptor limit, on the engine with the scripted agent: with this
//! test process's own `RLIMIT_NOFILE` lowered (by `prlimit`, a real process setting it) so
//! that two running agents leave no room for a third, a new task waits `submitted` with an
//! event saying why, and starts and completes once the running ones are canceled. Alone in its
//! test binary: the limit is the whole process's.

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
async fn a_task_without_room_waits_submitted_and_starts_when_room_is_freed() {
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
    config.max_running = 4;
    config.max_idle_sessions = 64;
    config.cancel_grace = Duration::from_secs(1);
    let backend: Arc<dyn Backend> = Arc::new(AcpBackend::new());
    let engine = Engine::start(
        config,
        HashMap::from([(AgentKind::Acp, backend)]),
        Arc::new(legate_supervisor::Rules),
    )
    .unwrap();

    // Two agents in their turns (busy: nothing idle to stop for room).
    let mut hanging = Vec::new();
    for _ in 0..2 {
        let t = engine.submit(SubmitRequest::new("!hang")).unwrap();
        until(&engine, &t.id, |e| {
            matches!(e.kind, EventKind::Session { .. })
        })
        .await;
        hanging.push(t);
    }
    // Room for 20 more descriptors: less than a new agent's 8 plus the reserve of 16.
    let original = soft_nofile();
    set_soft_nofile(open_fds() + 20);

    let waiting = engine.submit(SubmitRequest::new("write x.txt: 1")).unwrap();
    let said = until(&engine, &waiting.id, |e| {
        matches!(&e.kind, EventKind::Status { state: TaskState::Submitted, message: Some(m), .. }
            if m.starts_with("waiting for file descriptors"))
    })
    .await;
    assert!(
        !said.iter().any(|e| matches!(
            e.kind,
            EventKind::Status {
                state: TaskState::Working,
                ..
            }
        )),
        "{said:?}"
    );
    let stored = engine.task(waiting.id.as_str()).unwrap();
    assert_eq!(stored.state, TaskState::Submitted);
    assert!(
        stored
            .status_message
            .as_deref()
            .is_some_and(|m| m.contains("file descriptors")),
        "{stored:?}"
    );

    // Freeing room (the running tasks end, their agents stop) lets it start and complete.
    for t in &hanging {
        engine.cancel(t.id.as_str()).unwrap();
    }
    let done = tokio::time::timeout(Duration::from_secs(60), engine.wait(&waiting.id))
        .await
        .expect("the waiting task ends")
        .unwrap();
    set_soft_nofile(original);
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert_eq!(done.status_message, None, "{done:?}");
    for t in &hanging {
        assert_eq!(
            engine.task(t.id.as_str()).unwrap().state,
            TaskState::Canceled
        );
    }
    engine.shutdown().await;
}
