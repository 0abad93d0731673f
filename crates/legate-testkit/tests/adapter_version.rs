//! An adapter announcing a version outside its preset's verified range is named among the
//! task's first events and by `Engine::version_warning` (what `legate agents` and MCP
//! `health` print); one inside the range is not. The scripted agent plays the adapter
//! (`LEGATE_TESTKIT_AGENT_INFO`), on real pipes, through a real engine and store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{Event, EventKind, Task, TaskState};
use legate_engine::{Engine, SubmitRequest};
use legate_testkit::{EngineHarness, TestAgent};
use std::time::Duration;

fn engine(dir: &std::path::Path) -> Engine {
    let mut harness = EngineHarness::builder();
    for (name, preset, info) in [
        ("verified", "gemini", "gemini-cli 0.61.0"),
        ("too-new", "gemini", "gemini-cli 0.62.0"),
        // A hostile name: a newline and an escape sequence, and far too long.
        (
            "hostile",
            "gemini",
            &format!("gemini-cli\n\u{1b}[2J{} 0.61.0", "x".repeat(300)),
        ),
        (
            "codex-too-new",
            "codex",
            "@agentclientprotocol/codex-acp 2.7.0",
        ),
    ] {
        harness = harness.agent(
            TestAgent::scripted(name)
                .preset(preset)
                .env("LEGATE_TESTKIT_AGENT_INFO", info),
        );
    }
    harness
        .default_agent("verified")
        .acp_handshake(Duration::from_secs(10))
        .engine_in(dir)
}

async fn run(engine: &Engine, agent: &str) -> (Task, Vec<Event>) {
    let mut req = SubmitRequest::new("how many files are here?");
    req.agent = Some(agent.into());
    let task = engine.submit(req).unwrap();
    let task = tokio::time::timeout(Duration::from_secs(60), engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap();
    let events = engine.events(&task.id, 0, 10_000).unwrap();
    (task, events)
}

/// The version notice, and the position of the first event of the session itself.
fn version_notice(events: &[Event]) -> Option<(usize, serde_json::Value, String)> {
    events.iter().enumerate().find_map(|(i, e)| match &e.kind {
        EventKind::Notice { message, detail } if detail["warning"] == "adapterVersion" => {
            Some((i, detail.clone(), message.clone()))
        }
        _ => None,
    })
}

fn session_event(events: &[Event]) -> Option<usize> {
    events
        .iter()
        .position(|e| matches!(e.kind, EventKind::Session { .. }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_too_new_adapter_is_named_in_the_first_events() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());

    let (task, events) = run(&engine, "too-new").await;
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    let (at, detail, message) = version_notice(&events).expect("a version notice");
    assert_eq!(detail["announced"], "gemini-cli 0.62.0");
    assert!(
        detail["verified"]
            .as_str()
            .unwrap()
            .contains("gemini-cli >=0.61.0, <0.62.0"),
        "{detail}"
    );
    assert!(message.contains("not verified"), "{message}");
    // Among the first events: before the session is reported open, and before any tool
    // call or message of the turn.
    assert!(at < session_event(&events).unwrap(), "{events:#?}");
    assert!(
        events[..at]
            .iter()
            .all(|e| !matches!(e.kind, EventKind::Message { .. } | EventKind::ToolCall(_))),
        "{events:#?}"
    );

    // What `legate agents` and MCP `health` print, from a probe.
    let info = engine
        .agents()
        .probe("too-new", Duration::from_secs(20))
        .await
        .unwrap();
    let warning = engine
        .agents()
        .version_warning("too-new", &info)
        .expect("a warning");
    assert!(warning.contains("gemini-cli 0.62.0"), "{warning}");

    // Inside the range: nothing to say, anywhere.
    let (task, events) = run(&engine, "verified").await;
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    assert!(version_notice(&events).is_none(), "{events:#?}");
    let info = engine
        .agents()
        .probe("verified", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(engine.agents().version_warning("verified", &info), None);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notice_quotes_a_hostile_name_bounded_and_clean() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let (_, events) = run(&engine, "hostile").await;
    let (_, detail, message) = version_notice(&events).expect("a version notice");
    assert!(!message.chars().any(char::is_control), "{message:?}");
    let announced = detail["announced"].as_str().unwrap();
    assert!(!announced.chars().any(char::is_control), "{announced:?}");
    assert!(announced.chars().count() < 200, "{announced}");
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_name_reaches_agents_and_health_bounded_and_clean() {
    // `legate agents` and MCP `health` print the probed name and version themselves, next
    // to the warning: an escape sequence there would reach a person's terminal.
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let info = engine
        .agents()
        .probe("hostile", Duration::from_secs(20))
        .await
        .unwrap();
    let name = info.name.as_deref().unwrap();
    assert!(!name.chars().any(char::is_control), "{name:?}");
    assert!(name.chars().count() <= 130, "{}", name.len());
    assert!(name.starts_with("gemini-cli"), "{name}");
    assert_eq!(info.version.as_deref(), Some("0.61.0"));
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_notice_comes_even_when_the_session_cannot_open() {
    // The codex preset's supervised mode (`read-only`) is not one the scripted agent has:
    // the task fails AGENT_UNSUPERVISED, and the version is still named first.
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let (task, events) = run(&engine, "codex-too-new").await;
    assert_eq!(task.state, TaskState::Failed, "{task:?}");
    let (_, detail, _) = version_notice(&events).expect("a version notice");
    assert_eq!(detail["announced"], "@agentclientprotocol/codex-acp 2.7.0");
    engine.shutdown().await;
}
