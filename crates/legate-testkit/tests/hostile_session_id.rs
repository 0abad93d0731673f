//! A hostile agent names its session with an id Legate would store, show and send back:
//! a terminal escape, a newline and 100 000 bytes (`hostile-session-id`). Legate must not
//! keep it (in the task, its events or the context's record), and must not continue it.
//! The scripted agent, on real pipes, through a real engine and store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, TaskState};
use legate_engine::SubmitRequest;
use legate_testkit::{EngineHarness, FAULT_ENV, TestAgent};
use std::time::Duration;

fn clean(text: &str) -> bool {
    !text.chars().any(char::is_control) && text.len() < 4096
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_session_id_is_refused_not_kept() {
    let dir = tempfile::tempdir().unwrap();
    let engine = EngineHarness::builder()
        .agent(TestAgent::scripted("agent").env(FAULT_ENV, "hostile-session-id"))
        .engine_in(dir.path());
    let mut req = SubmitRequest::new("how many files are here?");
    req.context_id = Some("ctx-hostile".into());
    let task = engine.submit(req).unwrap();
    let task = tokio::time::timeout(Duration::from_secs(60), engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap();

    // Nothing Legate keeps or shows carries the agent's id.
    if let Some(id) = &task.session_id {
        assert!(
            clean(id),
            "the task keeps the hostile id ({} bytes)",
            id.len()
        );
    }
    let events = engine.events(&task.id, 0, 10_000).unwrap();
    for e in &events {
        let json = serde_json::to_string(&e.kind).unwrap();
        assert!(
            !json.contains("\\u001b") && json.len() < 8192,
            "an event carries the hostile id: {}",
            &json[..json.len().min(200)]
        );
    }
    // The session is refused: the agent cannot be talked to under a name Legate will not
    // keep, so the turn fails with a clean, bounded message.
    assert_eq!(task.state, TaskState::Failed, "{:?}", task.status_message);
    let error = task.error.as_ref().expect("an error");
    assert_eq!(error.code, ErrorCode::AgentProtocolError, "{error}");
    assert!(
        clean(&error.message),
        "{:?}",
        &error.message[..200.min(error.message.len())]
    );
    for context in engine.records().contexts(100).unwrap() {
        if let Some(id) = &context.session_id {
            assert!(
                clean(id),
                "the context keeps the hostile id ({} bytes)",
                id.len()
            );
        }
    }
    engine.shutdown().await;
}
