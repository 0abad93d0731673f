//! Supervision that holds: the kernel stops a write the agent never asked about, the task
//! says how it was confined, and refusals travel into the status of a task that ends
//! canceled, failed or rejected.
//! Real processes (the scripted agent), the real kernel (Landlock) and a real store.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_backend::Backend;
use legate_backend::acp::AcpBackend;
use legate_confine::{Confinement, Enforcement, Requirement};
use legate_core::{AgentKind, ErrorCode, Event, EventKind, Task, TaskState};
use legate_engine::{EngineConfig, SubmitRequest};
use legate_testkit::EngineHarness;
use std::sync::Arc;

fn harness(tune: impl FnOnce(&mut EngineConfig) + 'static) -> EngineHarness {
    EngineHarness::builder().config(tune).start()
}

async fn run(h: &EngineHarness, prompt: &str) -> (Task, Vec<Event>) {
    let task = h.run_prompt(prompt).await;
    let events = h.events(&task.id);
    (task, events)
}

fn workspace_details(events: &[Event]) -> Vec<&serde_json::Value> {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Notice { detail, .. } => Some(detail),
            _ => None,
        })
        .collect()
}

fn messages(events: &[Event]) -> String {
    events
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Message { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernel_stops_a_write_outside_the_root_that_was_never_asked_about() {
    let enforcement = Confinement::probe();
    if enforcement == Enforcement::None {
        eprintln!("no Landlock on this kernel: nothing to test");
        return;
    }
    let h = harness(|_| {});
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped.txt");
    let (task, events) = run(&h, &format!("!write-outside {}", target.display())).await;

    // The file is absent: the kernel refused, not the supervisor (no permission was asked).
    assert!(!target.exists(), "the unasked write went through");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Permission { .. })),
        "the write was never asked about"
    );
    // The failure is visible in the task's events, with the kernel's answer.
    let text = messages(&events);
    // Landlock's EACCES, or EROFS where the namespace is sealed (read-only mounts first).
    assert!(
        text.contains("failed: Permission denied (os error 13)")
            || text.contains("failed: Read-only file system (os error 30)"),
        "{text}"
    );
    assert_eq!(task.state, TaskState::Completed, "{task:?}");

    // The task's first workspace event says how the agent is confined; the backend's says
    // exactly where it may write.
    let details = workspace_details(&events);
    assert_eq!(
        details[0]["confinement"],
        enforcement.as_str(),
        "{details:?}"
    );
    let spawn = details
        .iter()
        .find(|d| d.get("writable").is_some())
        .expect("the backend reports the confinement it applied");
    assert_eq!(spawn["confinement"], enforcement.as_str());
    let writable: Vec<String> = serde_json::from_value(spawn["writable"].clone()).unwrap();
    let root = task.root.clone().unwrap();
    assert_eq!(writable[0], root.display().to_string());
    assert!(
        writable
            .iter()
            .all(|w| !outside.path().starts_with(w) && !w.is_empty()),
        "{writable:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_the_root_and_the_private_temp_dir_the_agent_still_writes() {
    let h = harness(|_| {});
    let (task, events) = run(&h, "write inside.txt: kept").await;
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    let root = task.root.clone().unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("inside.txt")).unwrap(),
        "kept"
    );
    let details = workspace_details(&events);
    let spawn = details.iter().find(|d| d.get("tmpDir").is_some()).unwrap();
    let tmp = std::path::PathBuf::from(spawn["tmpDir"].as_str().unwrap());
    assert!(tmp.is_dir(), "{tmp:?}");
    // The scripted agent may write its temp dir: `!write-outside` into it succeeds.
    let (_, events) = run(
        &h,
        &format!("!write-outside {}", tmp.join("scratch").display()),
    )
    .await;
    assert!(
        messages(&events).contains(": written"),
        "{}",
        messages(&events)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_confinement_that_cannot_be_had_fails_the_task_with_its_code() {
    // A backend that confines nothing stands in for a kernel without Landlock.
    #[derive(Debug)]
    struct Unconfined(AcpBackend);
    #[async_trait::async_trait]
    impl Backend for Unconfined {
        fn capabilities(&self) -> legate_backend::Capabilities {
            self.0.capabilities()
        }

        async fn open(
            &self,
            request: legate_backend::SessionRequest,
            sink: legate_backend::EventSink,
        ) -> legate_core::Result<Arc<dyn legate_backend::AgentSession>> {
            self.0.open(request, sink).await
        }
    }
    let h = EngineHarness::builder()
        .config(|c| c.confinement = Requirement::Required)
        .backend(AgentKind::ACP, Arc::new(Unconfined(AcpBackend::new())))
        .start();
    let engine = &h.engine;

    assert_eq!(
        engine.agents().confinement("agent").unwrap_err().code,
        ErrorCode::ConfinementUnavailable
    );
    let task = engine.submit(SubmitRequest::new("write a.txt: x")).unwrap();
    let task = h.wait(&task.id).await;
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(
        task.error.as_ref().map(|e| e.code),
        Some(ErrorCode::ConfinementUnavailable)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canceled_task_still_lists_what_the_supervisor_refused() {
    let h = harness(|_| {});
    let task = h
        .engine
        .submit(SubmitRequest::new(
            "write ../escape.txt: should be refused\n!hang",
        ))
        .unwrap();
    // Wait for the refusal to be stored, then cancel the hanging turn.
    h.until(
        &task.id,
        |e| matches!(&e.kind, EventKind::Permission { verdict, .. } if !verdict.is_allow()),
    )
    .await;
    h.engine.cancel(task.id.as_str()).unwrap();
    let task = h.wait(&task.id).await;
    assert_eq!(task.state, TaskState::Canceled, "{task:?}");
    let message = task.status_message.clone().unwrap();
    assert!(
        message.starts_with("canceled; refused by the supervisor: "),
        "{message}"
    );
    assert!(message.contains("escape.txt"), "{message}");
    assert_eq!(task.result.as_ref().unwrap().refusals.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_and_rejected_tasks_still_list_what_the_supervisor_refused() {
    let h = harness(|_| {});
    // Failed: the agent exits mid-turn after a refusal.
    let (task, _) = run(&h, "write ../escape.txt: should be refused\n!exit 3").await;
    assert_eq!(task.state, TaskState::Failed, "{task:?}");
    assert_eq!(task.error_code(), Some(ErrorCode::AgentExited), "{task:?}");
    let message = task.status_message.clone().unwrap();
    let error = task.error.as_ref().unwrap().message.clone();
    assert!(
        message.starts_with(&format!("{error}; refused by the supervisor: ")),
        "{message}"
    );
    assert!(message.contains("escape.txt"), "{message}");

    // Rejected: the agent ends its turn with `refusal` after a refusal.
    let (task, _) = run(&h, "write ../escape.txt: should be refused\n!stop refusal").await;
    assert_eq!(task.state, TaskState::Rejected, "{task:?}");
    let message = task.status_message.clone().unwrap();
    assert!(
        message.contains("; refused by the supervisor: "),
        "{message}"
    );
    assert!(message.contains("escape.txt"), "{message}");
    assert_eq!(task.result.as_ref().unwrap().refusals.len(), 1);
}
