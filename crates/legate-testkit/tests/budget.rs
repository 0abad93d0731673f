//! Sessions within a budget, on the engine with the scripted agent over real pipes: the cap
//! on idle sessions holds, counted both through the engine and as live agent processes, and
//! the session it stops is the least recently used one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_backend::Backend;
use legate_backend::acp::AcpBackend;
use legate_core::{AgentKind, AgentSpec, Task, TaskState};
use legate_engine::{Engine, EngineConfig, Paths, SubmitRequest};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const AGENT: &str = env!("CARGO_BIN_EXE_legate-scripted-agent");

fn engine(dir: &Path, max_idle: usize) -> Engine {
    let mut config = EngineConfig::new(Paths::new(dir.join("home")));
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
    config.max_idle_sessions = max_idle;
    let backend: Arc<dyn Backend> = Arc::new(AcpBackend::new());
    Engine::start(
        config,
        HashMap::from([(AgentKind::Acp, backend)]),
        Arc::new(legate_supervisor::Rules),
    )
    .unwrap()
}

async fn run(engine: &Engine, req: SubmitRequest) -> Task {
    let task = engine.submit(req).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(60), engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap();
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    done
}

/// Live processes started by runner `runner` (they carry `LEGATE_RUNNER=<id>`), by the
/// directory they run in.
fn agents_of(runner: &str) -> Vec<PathBuf> {
    let marker = format!("LEGATE_RUNNER={runner}");
    let mut cwds = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|kv| kv == marker.as_bytes())
            && let Ok(cwd) = std::fs::read_link(entry.path().join("cwd"))
        {
            cwds.push(cwd);
        }
    }
    cwds.sort();
    cwds
}

/// Waits until the runner's agent processes run in exactly `roots` (the sessions it stops go
/// in the background); fails after 20 s with what is left.
async fn until_agents_in(runner: &str, roots: &[&Path]) {
    let mut want: Vec<PathBuf> = roots
        .iter()
        .map(|r| std::fs::canonicalize(r).unwrap())
        .collect();
    want.sort();
    for _ in 0..400 {
        if agents_of(runner) == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("agents run in {:?}, expected {want:?}", agents_of(runner));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_session_cap_holds_and_stops_the_least_recently_used() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 3);
    let runner = engine.runner_id().to_string();

    // Ten one-shot tasks, each in a new context: never more than three idle sessions.
    let mut roots = Vec::new();
    for i in 0..10 {
        let t = run(&engine, SubmitRequest::new(format!("write n.txt: {i}"))).await;
        let counts = engine.sessions();
        assert!(counts.idle <= 3, "after task {i}: {counts:?}");
        roots.push((t.context_id.clone(), t.root.clone().unwrap()));
    }
    let last: Vec<&Path> = roots[7..].iter().map(|(_, r)| r.as_path()).collect();
    until_agents_in(&runner, &last).await;
    assert_eq!(engine.sessions().live, 3);

    // Continuing the oldest kept context (task 7) makes it the most recently used: the next
    // new context stops task 8's session, not 7's.
    let mut again = SubmitRequest::new("write m.txt: again");
    again.context_id = Some(roots[7].0.clone());
    run(&engine, again).await;
    let fresh = run(&engine, SubmitRequest::new("write n.txt: fresh")).await;
    until_agents_in(
        &runner,
        &[&roots[7].1, &roots[9].1, fresh.root.as_deref().unwrap()],
    )
    .await;
    engine.shutdown().await;
    until_agents_in(&runner, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cap_of_zero_stops_each_session_when_its_turn_ends() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 0);
    let runner = engine.runner_id().to_string();
    for i in 0..3 {
        run(&engine, SubmitRequest::new(format!("write n.txt: {i}"))).await;
        until_agents_in(&runner, &[]).await;
        assert_eq!(engine.sessions().live, 0);
    }
    engine.shutdown().await;
}
