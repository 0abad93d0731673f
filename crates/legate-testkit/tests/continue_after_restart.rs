//! `continue` of a task cut by a restart (`Engine::continue_task`), against the scripted agent
//! keeping its sessions on disk (`LEGATE_TESTKIT_SESSIONS`), over real ACP pipes: a turn is cut
//! by a `kill -9` of the Legate process running it; the next Legate starts nothing by itself;
//! the caller's `continue` resumes the agent's own session in a new task linked to the cut
//! one, once; an agent that cannot resume, a session the agent lost, and tasks not cut by a
//! restart are refused with nothing started.
//!
//! The Legate process that is killed is this test binary itself, run again as a child
//! (`child_engine`, ignored unless run by the parent): a real process with a real engine,
//! store and agent, killed with SIGKILL mid-turn.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, EventKind, Task, TaskState};
use legate_engine::{Engine, Inbound, Route, SubmitRequest, TaskFilter};
use legate_testkit::sessions::{LIFECYCLE_LOG, SESSIONS_ENV, STORE_DIR};
use legate_testkit::{EngineHarness, TestAgent};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// In the child: the Legate home to run the cut turn in.
const CHILD_HOME: &str = "LEGATE_TEST_CONTINUE_CHILD_HOME";
/// In the child: what its agent announces (`LEGATE_TESTKIT_SESSIONS`).
const CHILD_ANNOUNCE: &str = "LEGATE_TEST_CONTINUE_CHILD_ANNOUNCE";
/// What the child prints, with the task and session ids, once the turn runs in its session.
const READY: &str = "continue-child-ready";
const CONTEXT: &str = "ctx-continue";

fn engine_at(home: &Path, announce: &str) -> Engine {
    assert!(home.ends_with("home"), "{}", home.display());
    let base = home.parent().expect("a home has a parent");
    EngineHarness::builder()
        .agent(TestAgent::scripted("agent").env(SESSIONS_ENV, announce))
        .engine_in(base)
}

fn lifecycle_log(home: &Path) -> Vec<String> {
    std::fs::read_to_string(
        home.join("agents/agent")
            .join(STORE_DIR)
            .join(LIFECYCLE_LOG),
    )
    .unwrap_or_default()
    .lines()
    .map(str::to_owned)
    .collect()
}

async fn ended(engine: &Engine, task: &Task) -> Task {
    tokio::time::timeout(Duration::from_secs(60), engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap()
}

fn all_tasks(engine: &Engine) -> Vec<Task> {
    engine
        .tasks(&TaskFilter {
            limit: 100,
            ..TaskFilter::default()
        })
        .unwrap()
}

/// The child: starts a turn that never ends, says so once its session is recorded, and
/// waits to be killed.
#[test]
#[ignore = "the Legate process the tests of this file kill mid-turn; run by them"]
fn child_engine() {
    let home = PathBuf::from(std::env::var(CHILD_HOME).expect("run by the parent test"));
    let announce = std::env::var(CHILD_ANNOUNCE).expect("run by the parent test");
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = engine_at(&home, &announce);
        let mut req = SubmitRequest::new("!hang");
        req.context_id = Some(CONTEXT.into());
        // Started as an inbound message starts one: the tests continue it through `deliver`
        // too, which reaches only such a conversation.
        req.inbound = true;
        let task = engine.submit(req).unwrap();
        let mut events = engine.subscribe(&task.id, 0);
        while let Some(e) = events.next().await.unwrap() {
            if matches!(e.kind, EventKind::Session { .. }) {
                break;
            }
        }
        // The session event is sent as the session opens; its id is stored right after.
        let session = loop {
            if let Some(s) = engine.task(task.id.as_str()).unwrap().session_id {
                break s;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        println!("{READY} {} {session}", task.id);
        std::future::pending::<()>().await;
    });
}

/// Runs the child with `announce`, kills it mid-turn, and returns (cut task id, session id).
fn cut_a_turn(home: &Path, announce: &str) -> (String, String) {
    let home = home.to_str().unwrap();
    let ids = legate_testkit::killed_child::run_until_ready(
        "child_engine",
        &[(CHILD_HOME, home), (CHILD_ANNOUNCE, announce)],
        READY,
        std::process::Stdio::null(),
    );
    let (task, session) = ids.split_once(' ').unwrap();
    (task.to_string(), session.to_string())
}

/// An inbound message asking to continue `cut` (what A2A's `metadata.legateContinue` becomes).
fn continue_message(cut: &str) -> Inbound {
    Inbound {
        agent: "agent".into(),
        context_id: Some(CONTEXT.into()),
        continues: Some(cut.to_string()),
        ..Inbound::default()
    }
}

/// This process's group id (alive while the test runs), from `/proc/self/stat`.
fn own_process_group() -> i32 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    // After the command name in parentheses: state, ppid, pgrp.
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    rest.split(' ').nth(2).unwrap().parse().unwrap()
}

/// A new turn of the test's context, as its caller sends one: an inbound message started
/// the context, and no other front may join it (`another_fronts_task_never_joins_…`).
fn resume(engine: &Engine, prompt: &str) -> Task {
    engine
        .messages()
        .deliver(Inbound {
            agent: "agent".into(),
            context_id: Some(CONTEXT.into()),
            text: prompt.into(),
            ..Inbound::default()
        })
        .unwrap()
        .task
}

fn code(result: legate_core::Result<Task>) -> ErrorCode {
    result.expect_err("refused").code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_turn_is_continued_on_request_in_the_agents_own_session_once() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (cut_id, session) = cut_a_turn(&home, "resume");

    let engine = engine_at(&home, "resume");
    // The restart alone started nothing: the cut task is SERVER_RESTARTED, no other task
    // exists, and the agent was not asked to resume anything.
    let cut = engine.task(&cut_id).unwrap();
    assert_eq!(cut.state, TaskState::Failed);
    assert_eq!(cut.error.as_ref().unwrap().code, ErrorCode::ServerRestarted);
    assert_eq!(all_tasks(&engine).len(), 1);
    assert_eq!(lifecycle_log(&home), [format!("new {session}")]);

    // While a run's processes may still change the workspace, it is not worked in again.
    let blocked = home.join("blocked");
    let root = cut.root.clone().unwrap().canonicalize().unwrap();
    let alive = legate_backend::cleanup::Processes::new(own_process_group(), None);
    legate_backend::cleanup::block(&blocked, &root, &alive).unwrap();
    assert_eq!(
        code(engine.continue_task(&cut_id, None)),
        ErrorCode::ProcessCleanupUnverified
    );
    assert_eq!(all_tasks(&engine).len(), 1);
    std::fs::remove_dir_all(&blocked).unwrap();

    let next = engine.continue_task(&cut_id, None).unwrap();
    assert_ne!(next.id.as_str(), cut_id);
    assert_eq!(next.context_id, CONTEXT);
    assert_eq!(
        next.controls.continued_from.as_ref().unwrap().as_str(),
        cut_id
    );
    assert!(next.prompt.contains(&cut_id), "{}", next.prompt);
    let next = ended(&engine, &next).await;
    assert_eq!(next.state, TaskState::Completed, "{next:?}");
    assert_eq!(next.session_id.as_deref(), Some(session.as_str()));
    let events = engine.events(&next.id, 0, 10_000).unwrap();
    let sessions = legate_testkit::harness::session_events(&events);
    assert_eq!(sessions, [(session.clone(), true)]);
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Notice { message, detail }
            if detail["event"] == "continued" && detail["continuedFrom"] == cut_id.as_str()
                && message.contains(&cut_id))),
        "{events:#?}"
    );
    assert_eq!(
        lifecycle_log(&home),
        [format!("new {session}"), format!("resume {session}")]
    );
    // The cut task stays as it ended, with no event added.
    let cut_events = engine.events(&cut.id, 0, 10_000).unwrap();
    assert_eq!(engine.task(&cut_id).unwrap(), cut);
    assert!(!cut_events.iter().any(
        |e| matches!(&e.kind, EventKind::Notice { detail, .. } if detail["event"] == "continued")
    ));

    // Twice: the same continuation, nothing new (also through an inbound message, as A2A
    // asks for it).
    let again = engine.continue_task(&cut_id[..8], None).unwrap();
    assert_eq!(again.id, next.id);
    let delivered = engine
        .messages()
        .deliver(continue_message(&cut_id))
        .unwrap();
    assert_eq!(delivered.route, Route::Continued);
    assert_eq!(delivered.task.id, next.id);
    assert_eq!(all_tasks(&engine).len(), 2);
    // A completed task, an unknown one: refused, nothing started.
    assert_eq!(
        code(engine.continue_task(next.id.as_str(), None)),
        ErrorCode::TaskNotContinuable
    );
    assert_eq!(
        code(engine.continue_task("00000000-no-such-task", None)),
        ErrorCode::TaskNotFound
    );
    // A turn that failed otherwise is not continued either.
    let failed = ended(&engine, &resume(&engine, "!exit 3")).await;
    assert_eq!(failed.state, TaskState::Failed);
    assert_eq!(
        code(engine.continue_task(failed.id.as_str(), None)),
        ErrorCode::TaskNotContinuable
    );
    assert_eq!(all_tasks(&engine).len(), 3);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_cannot_resume_is_not_continued_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (cut_id, _) = cut_a_turn(&home, "no-load");

    let engine = engine_at(&home, "no-load");
    // A message asking for the continue: of another agent's task (not disclosed), with
    // text, or also replying into a task, or in another context, is refused first.
    let deliver = |inbound: Inbound| engine.messages().deliver(inbound).map(|d| d.task);
    let hostile = [
        (
            Inbound {
                agent: "other".into(),
                ..continue_message(&cut_id)
            },
            ErrorCode::TaskNotFound,
        ),
        (
            Inbound {
                text: "do something else".into(),
                ..continue_message(&cut_id)
            },
            ErrorCode::InvalidInput,
        ),
        (
            Inbound {
                task_id: Some(cut_id.clone()),
                ..continue_message(&cut_id)
            },
            ErrorCode::InvalidInput,
        ),
        (
            Inbound {
                context_id: Some("ctx-elsewhere".into()),
                ..continue_message(&cut_id)
            },
            ErrorCode::InvalidInput,
        ),
    ];
    for (inbound, expected) in hostile {
        assert_eq!(code(deliver(inbound)), expected);
    }
    assert_eq!(
        code(deliver(continue_message(&cut_id))),
        ErrorCode::ContinueUnsupported
    );
    let refused = engine.continue_task(&cut_id, None).unwrap_err();
    assert_eq!(refused.code, ErrorCode::ContinueUnsupported, "{refused}");
    assert!(refused.message.contains("session/resume"), "{refused}");
    assert_eq!(all_tasks(&engine).len(), 1);
    // Once the context took another turn, the cut task is no longer its latest.
    ended(&engine, &resume(&engine, "hello")).await;
    assert_eq!(
        code(engine.continue_task(&cut_id, None)),
        ErrorCode::TaskNotContinuable
    );
    assert_eq!(all_tasks(&engine).len(), 2);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_the_agent_lost_fails_the_continuation_before_its_prompt() {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    let (cut_id, session) = cut_a_turn(&home, "resume");
    // The agent lost the session: it will refuse session/resume and a new one would open.
    std::fs::remove_file(
        home.join("agents/agent")
            .join(STORE_DIR)
            .join(format!("{session}.json")),
    )
    .unwrap();

    let engine = engine_at(&home, "resume");
    let next = engine.continue_task(&cut_id, None).unwrap();
    let next = ended(&engine, &next).await;
    assert_eq!(next.state, TaskState::Failed);
    assert_eq!(
        next.error.as_ref().unwrap().code,
        ErrorCode::ContinueUnsupported,
        "{next:?}"
    );
    // The continuation's prompt never reached an agent, and the context still names the
    // agent's earlier session.
    let log = lifecycle_log(&home);
    assert_eq!(
        log[..2],
        [format!("new {session}"), format!("resume {session}")]
    );
    let fresh = log.get(2).expect("a new session was opened").clone();
    let fresh_id = fresh.strip_prefix("new ").unwrap();
    let prompts = std::fs::read_to_string(
        home.join("agents/agent")
            .join(STORE_DIR)
            .join(format!("{fresh_id}.json")),
    )
    .unwrap();
    assert!(!prompts.contains("continuing task"), "{prompts}");
    let context = engine.records().contexts(10).unwrap();
    assert_eq!(context[0].session_id.as_deref(), Some(session.as_str()));
    assert_eq!(next.session_id, None);
    engine.shutdown().await;
}
