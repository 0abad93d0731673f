//! The engine's running and queued places against the scripted agent on real pipes and a real
//! SQLite store: a task gives its places back however and wherever it ends (canceled while it
//! waits for its context's turn or for a running place, an agent that fails to start, a
//! canceled or timed-out turn, a refused submit, a reply that runs again). Counts are read
//! through `Engine::slot_counts` and `Engine::sessions`; every wait is on the task's events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, Event, EventKind, Task, TaskId, TaskState};
use legate_engine::{Engine, SlotCounts, SubmitRequest};
use legate_testkit::{EngineHarness, TestAgent};
use std::time::Duration;

/// An engine in `dir/home` on the scripted agent (`agent`, and `exit-at-start`, which fails
/// to start), with `max_running` running and `max_queued` queued places.
fn engine(dir: &std::path::Path, max_running: usize, max_queued: usize) -> Engine {
    EngineHarness::builder()
        .agent(TestAgent::scripted("agent"))
        .agent(TestAgent::scripted("exit-at-start").fault("exit-at-start"))
        .acp_handshake(Duration::from_secs(2))
        .config(move |c| {
            c.max_running = max_running;
            c.max_queued = max_queued;
        })
        .engine_in(dir)
}

fn slots(running: usize, queued: usize) -> SlotCounts {
    SlotCounts { running, queued }
}

/// Follows `id` until an event satisfies `done`.
async fn until(engine: &Engine, id: &TaskId, done: impl Fn(&Event) -> bool) {
    legate_testkit::harness::until(engine, id, done).await;
}

/// Waits until the task's turn has its agent session (it holds a running place).
async fn in_turn(engine: &Engine, task: &Task) {
    until(engine, &task.id, |e| {
        matches!(e.kind, EventKind::Session { .. })
    })
    .await;
}

/// Waits for the task's end (or its wait for input) and returns it.
async fn ended(engine: &Engine, task: &Task) -> Task {
    tokio::time::timeout(Duration::from_secs(60), engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap()
}

fn in_context(prompt: &str, context: &Task) -> SubmitRequest {
    let mut r = SubmitRequest::new(prompt);
    r.context_id = Some(context.context_id.clone());
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_canceled_while_it_waits_gives_its_queued_place_back() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 1, 2);
    assert_eq!(engine.slot_counts(), slots(0, 0));

    let running = engine.submit(SubmitRequest::new("!hang")).unwrap();
    in_turn(&engine, &running).await;
    assert_eq!(engine.slot_counts(), slots(1, 0));

    // Waiting for its context's turn (the running task's context).
    let behind = engine.submit(in_context("hello", &running)).unwrap();
    // Waiting for the one running place (a context of its own).
    let placeless = engine.submit(SubmitRequest::new("hello")).unwrap();
    assert_eq!(engine.slot_counts(), slots(1, 2));
    // Both queued places are taken, and a refused submit takes none.
    let err = engine
        .submit(SubmitRequest::new("one too many"))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::QueueFull);
    assert_eq!(engine.slot_counts(), slots(1, 2));

    engine.cancel(behind.id.as_str()).unwrap();
    assert_eq!(ended(&engine, &behind).await.state, TaskState::Canceled);
    assert_eq!(engine.slot_counts(), slots(1, 1));
    engine.cancel(placeless.id.as_str()).unwrap();
    assert_eq!(ended(&engine, &placeless).await.state, TaskState::Canceled);
    assert_eq!(engine.slot_counts(), slots(1, 0));

    // The places are free again: two more can wait.
    let a = engine.submit(SubmitRequest::new("hello")).unwrap();
    let b = engine.submit(SubmitRequest::new("hello")).unwrap();
    assert_eq!(engine.slot_counts(), slots(1, 2));

    // A canceled turn gives its running place back; the queued ones then run and end.
    engine.cancel(running.id.as_str()).unwrap();
    assert_eq!(ended(&engine, &running).await.state, TaskState::Canceled);
    assert_eq!(ended(&engine, &a).await.state, TaskState::Completed);
    assert_eq!(ended(&engine, &b).await.state, TaskState::Completed);
    assert_eq!(engine.slot_counts(), slots(0, 0));
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_no_queue_a_task_is_taken_exactly_when_a_running_place_is_free() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 1, 0);
    // The running place is free: the task is taken and runs (it was QUEUE_FULL before).
    let running = engine.submit(SubmitRequest::new("!hang")).unwrap();
    in_turn(&engine, &running).await;
    assert_eq!(engine.slot_counts(), slots(1, 0));
    // The place is taken and no one may wait.
    let err = engine.submit(SubmitRequest::new("hello")).unwrap_err();
    assert_eq!(err.code, ErrorCode::QueueFull);
    assert_eq!(engine.slot_counts(), slots(1, 0));
    // Once it is given back, the next task is taken and ends.
    engine.cancel(running.id.as_str()).unwrap();
    assert_eq!(ended(&engine, &running).await.state, TaskState::Canceled);
    let next = engine.submit(SubmitRequest::new("hello")).unwrap();
    assert_eq!(ended(&engine, &next).await.state, TaskState::Completed);
    assert_eq!(engine.slot_counts(), slots(0, 0));
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_that_fails_or_times_out_gives_its_running_place_back() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 1, 1);

    // An agent that fails to start.
    let mut r = SubmitRequest::new("hello");
    r.agent = Some("exit-at-start".into());
    let failed = engine.submit(r).unwrap();
    let failed = ended(&engine, &failed).await;
    assert_eq!(failed.state, TaskState::Failed, "{failed:?}");
    assert_eq!(engine.slot_counts(), slots(0, 0));

    // A turn that runs past its timeout.
    let mut r = SubmitRequest::new("!hang");
    r.timeout = Some(Duration::from_secs(1));
    let hung = engine.submit(r).unwrap();
    let hung = ended(&engine, &hung).await;
    assert_eq!(
        hung.error.map(|e| e.code),
        Some(ErrorCode::TaskTimeout),
        "{:?}",
        hung.status_message
    );
    assert_eq!(engine.slot_counts(), slots(0, 0));
    assert_eq!(engine.agents().sessions().live, 0);

    // The one running place and the one queued place are both still there.
    let done = engine.submit(SubmitRequest::new("hello")).unwrap();
    assert_eq!(ended(&engine, &done).await.state, TaskState::Completed);
    assert_eq!(engine.slot_counts(), slots(0, 0));
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_input_holds_no_place_and_a_reply_takes_one_and_gives_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 1, 1);
    let waiting = engine.submit_or_ask(SubmitRequest::new("")).unwrap();
    assert_eq!(waiting.state, TaskState::InputRequired);
    assert_eq!(engine.slot_counts(), slots(0, 0));
    // Its place is free for another task.
    let other = engine.submit(SubmitRequest::new("hello")).unwrap();
    assert_eq!(ended(&engine, &other).await.state, TaskState::Completed);

    let replied = engine.reply(waiting.id.as_str(), "!hang").unwrap();
    in_turn(&engine, &replied).await;
    assert_eq!(engine.slot_counts(), slots(1, 0));
    engine.cancel(replied.id.as_str()).unwrap();
    assert_eq!(ended(&engine, &replied).await.state, TaskState::Canceled);
    assert_eq!(engine.slot_counts(), slots(0, 0));
    engine.shutdown().await;
}
