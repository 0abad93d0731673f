//! Sessions within a budget, on the engine with the scripted agent over real pipes: the cap
//! on idle sessions holds, counted both through the engine and as live agent processes, and
//! the session it stops is the least recently used one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{Task, TaskState};
use legate_engine::{Engine, SubmitRequest};
use legate_testkit::{EngineHarness, procs};
use std::path::{Path, PathBuf};
use std::time::Duration;

fn engine(dir: &Path, max_idle: usize) -> Engine {
    EngineHarness::builder()
        .config(move |c| c.max_idle_sessions = max_idle)
        .engine_in(dir)
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

/// Waits until the runner's agent processes (they carry `LEGATE_RUNNER=<id>`) run in
/// exactly `roots`: the sessions it stops go in the background, and each one's exit is waited
/// for on its pidfd. Fails after 20 s, or at once when one in `roots` is missing (sessions
/// are only ever stopped here, never started).
async fn until_agents_in(runner: &str, roots: &[&Path]) {
    let marker = format!("LEGATE_RUNNER={runner}");
    let mut want: Vec<PathBuf> = roots
        .iter()
        .map(|r| std::fs::canonicalize(r).unwrap())
        .collect();
    want.sort();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let live = procs::with_env(&marker);
        let mut cwds: Vec<PathBuf> = live.iter().filter_map(|(_, cwd)| cwd.clone()).collect();
        cwds.sort();
        if cwds == want {
            return;
        }
        let extra: Vec<u32> = live
            .iter()
            .filter(|(_, cwd)| cwd.as_ref().is_none_or(|c| !want.contains(c)))
            .map(|(pid, _)| *pid)
            .collect();
        assert!(
            !extra.is_empty(),
            "agents run in {cwds:?}, expected {want:?}"
        );
        for pid in extra {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            assert!(
                procs::exited(pid, left).await,
                "agents run in {cwds:?}, expected {want:?}"
            );
        }
    }
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
        let counts = engine.agents().sessions();
        assert!(counts.idle <= 3, "after task {i}: {counts:?}");
        roots.push((t.context_id.clone(), t.root.clone().unwrap()));
    }
    let last: Vec<&Path> = roots[7..].iter().map(|(_, r)| r.as_path()).collect();
    until_agents_in(&runner, &last).await;
    assert_eq!(engine.agents().sessions().live, 3);

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
        assert_eq!(engine.agents().sessions().live, 0);
    }
    engine.shutdown().await;
}
