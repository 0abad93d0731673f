//! Attacks on the engine split's seams, against the scripted agent on real pipes and a real
//! SQLite store: a task launched after shutdown has begun (submit or reply) must not run on
//! unseen, and its stored end says what happened. Every wait follows the task's events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{EventKind, TaskState};
use legate_engine::SubmitRequest;
use legate_testkit::harness::WAIT_LIMIT;
use legate_testkit::{EngineHarness, TestAgent};
use std::time::Duration;

fn harness() -> EngineHarness {
    EngineHarness::builder()
        .agent(TestAgent::scripted("agent"))
        .acp_handshake(Duration::from_secs(2))
        .config(|c| c.cancel_grace = Duration::from_millis(200))
        .start()
}

/// Without the fix the task launched after shutdown keeps its agent hanging forever (no
/// cancel reaches it) and this test runs into its wait limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_submitted_after_shutdown_began_is_canceled_not_left_running() {
    let h = harness();
    let engine = h.engine.clone();
    let first = engine.submit(SubmitRequest::new("!hang")).unwrap();
    h.until(&first.id, |e| matches!(e.kind, EventKind::Session { .. }))
        .await;
    tokio::time::timeout(WAIT_LIMIT, engine.shutdown())
        .await
        .expect("shutdown ends");
    assert_eq!(h.wait(&first.id).await.state, TaskState::Canceled);

    // A front that has not heard of the shutdown yet submits a hanging turn.
    let late = engine.submit(SubmitRequest::new("!hang")).unwrap();
    // (Without the fix, this wait panics at its limit: the agent hangs, never canceled.)
    let ended = h.wait(&late.id).await;
    assert_eq!(ended.state, TaskState::Canceled);
    assert_eq!(engine.slot_counts().running, 0);
    assert_eq!(engine.slot_counts().queued, 0);
    // Its end is durable: the store holds it canceled, with no runner claiming it.
    let stored = engine.task(late.id.as_str()).unwrap();
    assert_eq!(stored.state, TaskState::Canceled);
}

/// The reply path through the launcher: a reply into a waiting task after shutdown began is
/// canceled with its task, not run on a hanging agent that nothing will stop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_after_shutdown_began_ends_its_task_canceled() {
    let h = harness();
    let engine = h.engine.clone();
    let waiting = engine.submit_or_ask(SubmitRequest::new("")).unwrap();
    assert_eq!(waiting.state, TaskState::InputRequired);
    tokio::time::timeout(WAIT_LIMIT, engine.shutdown())
        .await
        .expect("shutdown ends");

    let replied = engine.reply(waiting.id.as_str(), "!hang").unwrap();
    // (Without the fix, this wait panics at its limit.)
    let ended = h.wait(&replied.id).await;
    assert_eq!(ended.state, TaskState::Canceled);
    assert_eq!(engine.slot_counts().running, 0);
    assert_eq!(engine.slot_counts().queued, 0);
}

/// A turn's timeout is the engine's rule, whichever front passed it: over seven days (the
/// most MCP's `timeoutSeconds` and the configured default may be) it is `INVALID_INPUT` and
/// nothing is stored. Without the rule in the engine, the CLI's `--timeout` (or any future
/// front) started a task MCP would refuse, and `u64::MAX` seconds reached the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_over_the_engines_limit_is_refused_for_every_front() {
    let h = harness();
    let engine = h.engine.clone();
    for secs in [7 * 24 * 3600 + 1, u64::MAX] {
        let mut request = SubmitRequest::new("hello");
        request.timeout = Some(Duration::from_secs(secs));
        let err = engine.submit(request).expect_err("refused");
        assert_eq!(err.code, legate_core::ErrorCode::InvalidInput, "{err}");
        assert!(err.message.contains("timeout"), "{err}");
    }
    let stored = engine
        .tasks(&legate_engine::TaskFilter {
            limit: 10,
            ..legate_engine::TaskFilter::default()
        })
        .unwrap();
    assert!(stored.is_empty(), "{stored:?}");
    // The limit itself is accepted.
    let mut request = SubmitRequest::new("hello");
    request.timeout = Some(legate_engine::MAX_TASK_TIMEOUT);
    let ok = engine.submit(request).unwrap();
    assert_eq!(h.wait(&ok.id).await.state, TaskState::Completed);
    engine.shutdown().await;
}
