//! Warm sessions (`[agents.NAME] warm = N`) against the scripted agent, real processes: a
//! session opened before the task is handed to the first task that fits (its `agent.warm`
//! notice names the session and when it was opened, before the task existed), never to a task
//! opened for another configuration, replaced after use, never carrying one task's prompt to
//! another, held within `max_idle_sessions` and stopped first when the cap is passed, stopped
//! at shutdown; and what a killed Legate left of them is swept at the next start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{Event, EventKind, Task, TaskMode, TaskState, ToolKind};
use legate_engine::{Engine, SubmitRequest, WorkspaceRequest};
use legate_testkit::directives::HISTORY_HEAD;
use legate_testkit::sessions::SESSIONS_ENV;
use legate_testkit::{EngineHarness, TestAgent};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const AGENT: &str = "agent";

fn harness(mark: &str, warm: usize, max_idle: usize) -> EngineHarness {
    EngineHarness::builder()
        .agent(
            TestAgent::scripted(AGENT)
                .env(SESSIONS_ENV, "resume")
                .env("LEGATE_TEST_MARK", mark),
        )
        .config(move |c| {
            c.warm.insert(AGENT.to_string(), warm);
            c.max_idle_sessions = max_idle;
        })
        .start()
}

fn mark() -> String {
    format!("warm-{}-{}", std::process::id(), rand_suffix())
}

fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

/// Waits (up to 60 s) until `done` holds.
async fn until(done: impl FnMut() -> bool) -> bool {
    legate_testkit::harness::until_holds(Duration::from_secs(60), done).await
}

/// Live processes whose environment carries `LEGATE_TEST_MARK=<mark>`.
fn processes_marked(mark: &str) -> usize {
    legate_testkit::procs::with_env(&format!("LEGATE_TEST_MARK={mark}")).len()
}

fn request(prompt: &str, context: &str) -> SubmitRequest {
    let mut req = SubmitRequest::new(prompt);
    req.agent = Some(AGENT.into());
    req.context_id = Some(context.into());
    req
}

/// The `agent.warm` notice's detail, if the task was handed a warm session.
fn warm_notice(events: &[Event]) -> Option<serde_json::Value> {
    events.iter().find_map(|e| match &e.kind {
        EventKind::Notice { detail, .. } if detail["event"] == "agent.warm" => Some(detail.clone()),
        _ => None,
    })
}

fn session_ids(events: &[Event]) -> Vec<(String, bool)> {
    legate_testkit::harness::session_events(events)
}

fn warm_dirs(home: &Path) -> Vec<PathBuf> {
    legate_testkit::harness::warm_sandboxes(home)
}

async fn run(h: &EngineHarness, req: SubmitRequest) -> (Task, Vec<Event>) {
    let task = h.run(req).await;
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    let events = h.events(&task.id);
    (task, events)
}

async fn ready(engine: &Engine, n: usize) {
    assert!(
        until(|| engine.warm_ready(AGENT) == n).await,
        "{n} warm session(s) never became ready (now {})",
        engine.warm_ready(AGENT)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_first_task_takes_the_warm_session_and_it_is_replaced_unseen() {
    let mark = mark();
    let h = harness(&mark, 1, 16);
    ready(&h.engine, 1).await;
    // The warm session's process runs before any task exists.
    assert_eq!(processes_marked(&mark), 1);

    let (task, events) = run(&h, request("remember the word marmalade", "ctx-a")).await;
    let notice = warm_notice(&events).expect("the task was handed the warm session");
    let sessions = session_ids(&events);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(notice["sessionId"], sessions[0].0.as_str());
    assert!(!sessions[0].1, "a warm session is a new session");
    // Opened before the task was submitted.
    let opened: legate_core::Timestamp =
        serde_json::from_value(notice["openedAt"].clone()).unwrap();
    assert!(
        opened <= task.created_at,
        "{opened:?} after {:?}",
        task.created_at
    );
    // The task works in the warm session's sandbox, now its context's.
    let root = task.root.clone().unwrap();
    let name = root.file_name().unwrap().to_str().unwrap();
    assert_eq!(
        legate_workspace::warm_runner(name),
        Some(h.engine.runner_id())
    );
    // The confinement notice of its opening is the task's.
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Notice { message, .. }
            if message.starts_with("agent process confinement"))),
        "{events:?}"
    );

    // Replaced in the background: a new session, ready before the next task.
    ready(&h.engine, 1).await;
    let (t2, second) = run(&h, request("!history", "ctx-b")).await;
    let notice2 = warm_notice(&second).expect("the replacement was handed over");
    assert_ne!(notice2["sessionId"], notice["sessionId"]);
    // It never saw the first task's prompt.
    let text = t2.result.unwrap().text;
    assert!(text.contains(&format!("{HISTORY_HEAD} 0")), "{text}");
    assert!(!text.contains("marmalade"), "{text}");

    // The first context goes on in its own session, which remembers its own prompt.
    let (t3, again) = run(&h, request("!history", "ctx-a")).await;
    assert!(warm_notice(&again).is_none());
    assert_eq!(session_ids(&again), vec![(sessions[0].0.clone(), true)]);
    let text = t3.result.unwrap().text;
    assert!(text.contains("marmalade"), "{text}");

    // The metrics: two hand-overs, the second's replacement ready, no failure.
    ready(&h.engine, 1).await;
    let m = h.engine.metrics().snapshot().await.unwrap();
    assert_eq!(
        m.warm,
        [legate_engine::WarmGauge {
            agent: AGENT.into(),
            wanted: 1,
            ready: 1,
            handed: 2,
            failed: 0,
        }]
    );
}

/// An agent that cannot be warmed (its process exits at once) is counted as failing in the
/// metrics, tried again with a growing delay, and never has a session ready.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_cannot_be_warmed_counts_its_failures() {
    let h = EngineHarness::builder()
        .agent(TestAgent::scripted(AGENT).fault("exit-at-start"))
        .config(|c| {
            c.warm.insert(AGENT.to_string(), 1);
        })
        .start();
    let deadline = Instant::now() + Duration::from_secs(60);
    let warm = loop {
        let m = h.engine.metrics().snapshot().await.unwrap();
        if m.warm.first().is_some_and(|w| w.failed >= 1) {
            break m.warm;
        }
        assert!(
            Instant::now() < deadline,
            "no failure counted: {:?}",
            m.warm
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(warm.len(), 1, "{warm:?}");
    assert_eq!(
        (
            warm[0].agent.as_str(),
            warm[0].wanted,
            warm[0].ready,
            warm[0].handed
        ),
        (AGENT, 1, 0, 0)
    );
    assert_eq!(h.engine.warm_ready(AGENT), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_opened_for_another_configuration_never_gets_the_warm_session() {
    let mark = mark();
    let h = harness(&mark, 1, 16);
    ready(&h.engine, 1).await;
    let warm_pid_count = processes_marked(&mark);

    let shared = h.base().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let mut differing = Vec::new();
    let mut ro = request("!say read-only", "ctx-ro");
    ro.mode = Some(TaskMode::ReadOnly);
    differing.push(("read-only mode", ro));
    let mut tools = request("!say narrowed tools", "ctx-tools");
    tools.allowed_tools = Some(vec![ToolKind::Read]);
    differing.push(("allowed tools", tools));
    let mut in_shared = request("!say shared", "ctx-shared");
    in_shared.workspace = WorkspaceRequest::Shared(shared.clone());
    differing.push(("a shared directory", in_shared));
    let mut tapped = request("!say tapped", "ctx-tap");
    tapped.tap = true;
    differing.push(("the wire tap", tapped));
    let mut role = request("!say planner", "ctx-role");
    role.role = Some("planner".into());
    differing.push(("a read-only role", role));

    for (what, req) in differing {
        let task = h.engine.submit(req).unwrap();
        let task = h.wait(&task.id).await;
        let events = h.events(&task.id);
        assert!(
            warm_notice(&events).is_none(),
            "{what}: handed a warm session"
        );
        assert!(
            task.root.as_deref().is_none_or(|r| {
                legate_workspace::warm_runner(r.file_name().unwrap().to_str().unwrap()).is_none()
            }),
            "{what}: works in a warm sandbox"
        );
        // The warm session is still there, untouched.
        assert_eq!(h.engine.warm_ready(AGENT), 1, "{what}");
    }
    // A later turn of a context that has its sandbox and session already continues them.
    let (_, first) = run(&h, request("!say one", "ctx-two-turns")).await;
    assert!(warm_notice(&first).is_some());
    ready(&h.engine, 1).await;
    let (_, second) = run(&h, request("!say two", "ctx-two-turns")).await;
    assert!(warm_notice(&second).is_none());
    assert_eq!(h.engine.warm_ready(AGENT), 1);
    assert!(warm_pid_count >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn warm_sessions_stay_within_the_idle_cap_go_first_and_stop_at_shutdown() {
    let mark = mark();
    // Two wanted, one spare session allowed: one warm session at most.
    let h = harness(&mark, 2, 1);
    let engine = h.engine.clone();
    let watching = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let most = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let sampler = {
        let (engine, watching, most) = (engine.clone(), watching.clone(), most.clone());
        tokio::spawn(async move {
            while watching.load(std::sync::atomic::Ordering::SeqCst) {
                most.fetch_max(engine.spare_sessions(), std::sync::atomic::Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    ready(&engine, 1).await;

    // A task that cannot take it (a shared directory) leaves an idle session of its context:
    // with the warm one that is two, over the cap of one: the warm session goes, not the
    // context's.
    let shared = h.base().join("shared");
    std::fs::create_dir_all(&shared).unwrap();
    let mut req = request("!say keep me", "ctx-shared");
    req.workspace = WorkspaceRequest::Shared(shared.clone());
    let (_, first) = run(&h, req).await;
    assert!(warm_notice(&first).is_none());
    assert!(until(|| engine.warm_ready(AGENT) == 0 && processes_marked(&mark) == 1).await);
    let mut req = request("!say still here", "ctx-shared");
    req.workspace = WorkspaceRequest::Context;
    let (_, next) = run(&h, req).await;
    assert_eq!(
        session_ids(&next),
        vec![(session_ids(&first)[0].0.clone(), true)]
    );

    watching.store(false, std::sync::atomic::Ordering::SeqCst);
    sampler.await.unwrap();
    // `spare_sessions` is sampled between a turn's end and its cap being applied too: at most
    // one over, for that moment, never a warm session on top.
    assert!(most.load(std::sync::atomic::Ordering::SeqCst) <= 2);
    assert_eq!(
        engine.warm_ready(AGENT),
        0,
        "the cap leaves no room for a warm session"
    );

    // Shutdown stops every agent process and removes the warm sandboxes no task took.
    let h2 = harness(&format!("{mark}-2"), 2, 16);
    ready(&h2.engine, 2).await;
    assert_eq!(processes_marked(&format!("{mark}-2")), 2);
    assert_eq!(warm_dirs(&h2.home()).len(), 2);
    h2.engine.shutdown().await;
    assert!(until(|| processes_marked(&format!("{mark}-2")) == 0).await);
    assert!(
        warm_dirs(&h2.home()).is_empty(),
        "{:?}",
        warm_dirs(&h2.home())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_legates_warm_leftovers_are_swept_at_start_and_a_handed_sandbox_kept() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let home = base.join("home");
    let sandboxes = home.join("sandboxes");
    // What a `kill -9` of runner `dead00000000` left: two warm sandboxes (one handed to a
    // context before the kill), and a process of its warm agent.
    let dead = "dead00000000";
    let left = legate_workspace::warm_sandbox(&sandboxes, dead)
        .unwrap()
        .root;
    let handed = legate_workspace::warm_sandbox(&sandboxes, dead)
        .unwrap()
        .root;
    std::fs::write(left.join("note"), "x").unwrap();
    {
        let store = legate_store::Store::open(&home.join("legate.db")).unwrap();
        let mut record = legate_store::ContextRecord::new("ctx-handed", AGENT);
        record.sandbox_root = Some(handed.clone());
        store.put_context(&record).unwrap();
    }
    let mut orphan = std::process::Command::new("sleep")
        .arg("120")
        .env(legate_engine::runner::RUNNER_ENV, dead)
        .spawn()
        .unwrap();
    // Once it carries the marker where `/proc` shows it (in `exec` it reads empty; the sweep's
    // looks for such a process are `leftover_processes.rs`'s own tests).
    let marker = format!("{}={dead}", legate_engine::runner::RUNNER_ENV);
    assert!(
        until(|| legate_testkit::procs::with_env(&marker)
            .iter()
            .any(|(pid, _)| *pid == orphan.id()))
        .await
    );

    let engine = EngineHarness::builder()
        .agent(TestAgent::scripted(AGENT))
        .engine_in(&base);
    assert!(
        !left.exists(),
        "an unhanded warm sandbox of a dead runner was left"
    );
    assert!(handed.exists(), "a sandbox handed to a context was removed");
    let status = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(s) = orphan.try_wait().unwrap() {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the dead runner's warm agent process was killed");
    assert!(!status.success());
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_replacement_waits_while_the_taking_turn_starts_then_comes_anyway() {
    let mark = mark();
    let h = harness(&mark, 1, 16);
    ready(&h.engine, 1).await;
    // From before the submit: the hold that keeps the replacement back (2 s) begins after it,
    // so a window that ends 1.8 s after the submit is inside it, however late the session
    // event comes. It must come inside the window for the window to show anything.
    let submitted = Instant::now();
    let task = h.engine.submit(request("!hang", "ctx-hang")).unwrap();
    h.until(&task.id, |e| matches!(e.kind, EventKind::Session { .. }))
        .await;
    // For a while no second agent process starts beside the taking turn's...
    let mut looked = 0;
    while submitted.elapsed() < Duration::from_millis(1800) {
        assert_eq!(processes_marked(&mark), 1, "a replacement started at once");
        looked += 1;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(looked > 0, "the session came after the window");
    // ...but a turn that goes on does not keep it back for long.
    ready(&h.engine, 1).await;
    assert_eq!(processes_marked(&mark), 2);
    h.engine.cancel(task.id.as_str()).unwrap();
    h.wait(&task.id).await;
}
