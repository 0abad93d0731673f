//! "Nothing happens silently": a turn whose answer claims tool work Legate never saw carries a
//! `silent_turn` notice, against the scripted agent on real pipes and a real store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{EventKind, NOTICE_SILENT_TURN, Task, TaskState};
use legate_engine::{Engine, SubmitRequest, WorkspaceRequest};
use legate_testkit::{EngineHarness, TestAgent};
use std::time::Duration;

fn engine(dir: &std::path::Path) -> Engine {
    EngineHarness::builder()
        .agent(TestAgent::scripted("agent"))
        .engine_in(dir)
}

async fn run(engine: &Engine, req: SubmitRequest) -> Task {
    let task = engine.submit(req).unwrap();
    let task = tokio::time::timeout(Duration::from_secs(60), engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap();
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    task
}

fn in_context(prompt: &str, context: &str) -> SubmitRequest {
    let mut req = SubmitRequest::new(prompt);
    req.context_id = Some(context.into());
    req
}

/// The task's silent-turn notices, checked against its events and status message.
fn silent_notices(engine: &Engine, task: &Task) -> usize {
    let result = task.result.clone().unwrap();
    let on_result = result
        .notices
        .iter()
        .filter(|n| n.code == NOTICE_SILENT_TURN)
        .count();
    let events = engine.events(&task.id, 0, 10_000).unwrap();
    let as_events = events
        .iter()
        .filter(|e| {
            matches!(&e.kind, EventKind::Notice { detail, .. } if detail["event"] == "turn.silent" && detail["code"] == NOTICE_SILENT_TURN)
        })
        .count();
    assert_eq!(on_result, as_events, "{events:?}");
    let in_status = task
        .status_message
        .as_deref()
        .is_some_and(|m| m.contains("claims tool work"));
    assert_eq!(on_result > 0, in_status, "{task:?}");
    on_result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_turn_that_claims_a_write_it_never_made_carries_the_notice() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());

    // Claims a write, makes no tool call, changes nothing.
    let silent = run(&engine, in_context("!say I wrote hello.txt for you.", "c1")).await;
    assert_eq!(silent_notices(&engine, &silent), 1);
    let notice = &silent.result.clone().unwrap().notices[0];
    assert!(notice.message.contains("\"i wrote\""), "{notice:?}");
    assert!(!silent.root.as_ref().unwrap().join("hello.txt").exists());

    // The same claim after a real write: no notice.
    let wrote = run(
        &engine,
        in_context("write hello.txt: hi\n!say I wrote hello.txt for you.", "c1"),
    )
    .await;
    assert_eq!(silent_notices(&engine, &wrote), 0);
    assert_eq!(
        std::fs::read_to_string(wrote.root.as_ref().unwrap().join("hello.txt")).unwrap(),
        "hi"
    );

    // A file changed without any tool call (the agent wrote it itself): the fingerprint sees
    // it, so no notice.
    let inside = wrote.root.as_ref().unwrap().join("itself.txt");
    let itself = run(
        &engine,
        in_context(
            &format!(
                "!write-outside {}\n!say I created itself.txt.",
                inside.display()
            ),
            "c1",
        ),
    )
    .await;
    assert!(inside.exists());
    assert_eq!(silent_notices(&engine, &itself), 0);

    // An answer that claims nothing: no notice.
    let plain = run(&engine, in_context("how many files?", "c1")).await;
    assert_eq!(silent_notices(&engine, &plain), 0);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shared_root_turn_that_claims_a_command_with_no_tool_call_carries_the_notice() {
    let dir = tempfile::tempdir().unwrap();
    let shared = dir.path().join("project");
    std::fs::create_dir(&shared).unwrap();
    let engine = engine(dir.path());
    let shared_req = |prompt: &str| {
        let mut req = SubmitRequest::new(prompt);
        req.workspace = WorkspaceRequest::Shared(shared.clone());
        req
    };
    let silent = run(&engine, shared_req("!say I've run the tests: all green.")).await;
    assert_eq!(silent_notices(&engine, &silent), 1);

    let wrote = run(
        &engine,
        shared_req("write a.txt: x\n!say I have written a.txt."),
    )
    .await;
    assert_eq!(silent_notices(&engine, &wrote), 0);
    assert!(shared.join("a.txt").exists());
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_turn_that_claims_an_edit_with_no_change_carries_the_notice() {
    let dir = tempfile::tempdir().unwrap();
    let project = std::fs::canonicalize(dir.path()).unwrap().join("project");
    std::fs::create_dir(&project).unwrap();
    legate_testkit::git(&project, &["init", "-q"]);
    std::fs::write(project.join("lib.txt"), "hello\n").unwrap();
    legate_testkit::git(&project, &["add", "-A"]);
    legate_testkit::git(&project, &["commit", "-q", "-m", "init"]);
    let engine = engine(dir.path());
    let copy_req = |prompt: &str| {
        let mut req = SubmitRequest::new(prompt);
        req.workspace = WorkspaceRequest::Copy {
            source: project.clone(),
            include_paths: vec![],
            criteria: vec![],
        };
        req
    };
    let silent = run(&engine, copy_req("!say I have edited lib.txt as asked.")).await;
    assert_eq!(silent_notices(&engine, &silent), 1);

    let edited = run(
        &engine,
        copy_req("replace lib.txt: hello => bye\n!say I have edited lib.txt as asked."),
    )
    .await;
    assert_eq!(silent_notices(&engine, &edited), 0);
    engine.shutdown().await;
}
