//! What an agent does without asking is visible: a tool call that ends with no permission
//! request is followed by a `ranWithoutAsking` notice; one that was asked about is not. The
//! scripted agent (revisor) reads without asking and asks before writing; its `!fail-tool`
//! is a command that fails without asking, as Codex reports one. Real pipes, a real engine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{Event, EventKind, TaskState};
use legate_engine::{Engine, SubmitRequest, WorkspaceRequest};
use legate_testkit::{EngineHarness, TestAgent};
use std::time::Duration;

fn engine(dir: &std::path::Path) -> Engine {
    EngineHarness::builder()
        .agent(TestAgent::scripted("agent"))
        .acp_handshake(Duration::from_secs(10))
        .engine_in(dir)
}

fn unasked(events: &[Event]) -> Vec<serde_json::Value> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Notice { detail, .. } => detail.get("ranWithoutAsking").cloned(),
            _ => None,
        })
        .collect()
}

fn tool_call_ids(events: &[Event]) -> Vec<(String, String)> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::ToolCall(t) => Some((t.id.clone(), t.title.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_that_ran_without_asking_are_marked() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let mut req = SubmitRequest::new(
        "write made.txt: asked first\nread made.txt\n!fail-tool rm -rf build\nwhat is here?",
    );
    req.workspace = WorkspaceRequest::Sandbox;
    let task = engine.submit(req).unwrap();
    let task = tokio::time::timeout(Duration::from_secs(60), engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap();
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    let events = engine.events(&task.id, 0, 10_000).unwrap();
    let calls = tool_call_ids(&events);
    assert_eq!(calls.len(), 3, "{calls:?}");
    let marked = unasked(&events);
    // The read and the failed command, not the write (it was asked about and allowed).
    assert_eq!(marked.len(), 2, "{marked:#?}");
    let kinds: Vec<_> = marked.iter().map(|m| m["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["read", "execute"], "{marked:#?}");
    assert_eq!(marked[0]["status"], "completed");
    assert_eq!(marked[1]["status"], "failed");
    assert_eq!(marked[1]["title"], "rm -rf build");
    let write_id = &calls
        .iter()
        .find(|(_, title)| title.contains("made.txt") && title.to_lowercase().contains("write"))
        .expect("the write's tool call")
        .0;
    assert!(
        marked.iter().all(|m| m["toolCallId"] != write_id.as_str()),
        "{marked:#?}"
    );
    // Each mark follows the tool call's end.
    let at = |pred: &dyn Fn(&EventKind) -> bool| events.iter().position(|e| pred(&e.kind));
    let first_mark = at(&|k| matches!(k, EventKind::Notice { detail, .. } if detail.get("ranWithoutAsking").is_some())).unwrap();
    let first_end = at(&|k| matches!(k, EventKind::ToolCallUpdate(u) if u.status.is_some_and(|s| s != legate_core::ToolStatus::Pending && s != legate_core::ToolStatus::InProgress))).unwrap();
    assert!(first_end < first_mark, "{events:#?}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_pending_tool_calls_does_not_hide_the_next_unasked_one() {
    // A hostile agent fills what Legate remembers of tool calls with calls that never end,
    // then runs a command without asking: that command is still made visible.
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let mut req = SubmitRequest::new("!pending-tools 5000\n!fail-tool rm -rf build\nwhat is here?");
    req.workspace = WorkspaceRequest::Sandbox;
    let task = engine.submit(req).unwrap();
    let task = tokio::time::timeout(Duration::from_secs(120), engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap();
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    let events = engine.events(&task.id, 0, 100_000).unwrap();
    let notices: Vec<_> = events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Notice { message, detail } if detail.get("ranWithoutAsking").is_some() => {
                Some((message.clone(), detail["ranWithoutAsking"].clone()))
            }
            _ => None,
        })
        .collect();
    assert!(
        notices
            .iter()
            .any(|(message, d)| d["title"] == "rm -rf build"
                || (d["untracked"] == true && !message.is_empty())),
        "the unasked command is not visible: {notices:#?}"
    );
    // Bounded: one notice per call at most, never one per pending call.
    assert!(notices.len() <= 2, "{notices:#?}");
    engine.shutdown().await;
}
