//! A backend added outside `legate-backend`, through the registry alone: no engine, core or
//! binary edit. The `echo` backend below runs in process (no agent process, so nothing to
//! confine), answers each turn with an event, and describes itself: it offers structured
//! output, so the engine passes a JSON Schema to it, and its default preset is the one the
//! supervisor gets. A real engine, a real store, real events.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use async_trait::async_trait;
use legate_backend::{
    AgentInfo, AgentSession, Backend, Canceller, Capabilities, Continuation, EventSink, Registry,
    SessionFacts, SessionRequest, StopReason, Turn, TurnOutcome,
};
use legate_confine::Requirement;
use legate_core::{AgentKind, AgentSpec, ErrorCode, EventKind, Result, TaskState, Usage};
use legate_engine::{Engine, EngineConfig, Paths, SubmitRequest, TaskFilter};
use legate_supervisor::Preset;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What the backend saw, for the test to check.
#[derive(Debug, Default)]
struct Seen {
    presets: Vec<String>,
    schemas: Vec<Option<serde_json::Value>>,
}

#[derive(Debug)]
struct EchoBackend {
    seen: Arc<Mutex<Seen>>,
}

#[async_trait]
impl Backend for EchoBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            structured_output: true,
            effort: false,
            model_listing: false,
            local_process: false,
            continuation: Continuation::None,
            default_preset: Preset::codex(),
            reattach: false,
            tool_controls: false,
            copy_tool_controls: false,
        }
    }

    async fn open(
        &self,
        request: SessionRequest,
        _sink: EventSink,
    ) -> Result<Arc<dyn AgentSession>> {
        self.seen
            .lock()
            .unwrap()
            .presets
            .push(request.supervision.preset.name.clone());
        Ok(Arc::new(EchoSession {
            seen: self.seen.clone(),
            facts: SessionFacts::new(
                AgentInfo {
                    name: Some("echo".into()),
                    ..AgentInfo::default()
                },
                false,
            )
            .named("echo-1"),
            alive: Arc::new(AtomicBool::new(true)),
            root: request.boundary.root.clone(),
        }))
    }
}

#[derive(Debug)]
struct EchoSession {
    seen: Arc<Mutex<Seen>>,
    facts: SessionFacts,
    alive: Arc<AtomicBool>,
    /// The workspace's root.
    root: std::path::PathBuf,
}

#[derive(Debug)]
struct NoCancel;

impl Canceller for NoCancel {
    fn cancel(&self) {}
}

#[async_trait]
impl AgentSession for EchoSession {
    fn facts(&self) -> &SessionFacts {
        &self.facts
    }
    async fn prompt(&self, turn: Turn, sink: EventSink) -> Result<TurnOutcome> {
        if turn.prompt == "write late" {
            // Work in the workspace beside the turn, which outlives the turn's timeout; then
            // a turn that never answers.
            let late = self.root.join("late.txt");
            drop(turn.work.spawn_blocking(move || {
                std::thread::sleep(LATE);
                std::fs::write(late, "written late\n").unwrap();
            }));
            std::future::pending::<()>().await;
        }
        self.seen.lock().unwrap().schemas.push(turn.json_schema);
        sink.send(EventKind::Message {
            text: format!("echo: {}", turn.prompt),
        });
        let stop_reason = if turn.prompt.contains("which file?") {
            StopReason::InputRequired
        } else {
            StopReason::EndTurn
        };
        Ok(TurnOutcome {
            stop_reason,
            usage: Some(Usage {
                input_tokens: Some(3),
                output_tokens: Some(5),
                ..Usage::default()
            }),
        })
    }
    fn canceller(&self) -> Arc<dyn Canceller> {
        Arc::new(NoCancel)
    }
    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
    async fn shutdown(&self) {
        self.alive.store(false, Ordering::SeqCst);
    }
}

/// How long the late work takes: well past the turn's timeout (3 s) and cancel grace.
const LATE: Duration = Duration::from_secs(5);

fn engine(dir: &std::path::Path, seen: Arc<Mutex<Seen>>) -> Engine {
    let echo = AgentKind::new("echo").unwrap();
    let mut config = EngineConfig::new(Paths::new(dir.join("home")));
    config.cancel_grace = Duration::from_millis(200);
    config.agents = BTreeMap::from([
        (
            "echo".to_string(),
            AgentSpec::url("echo", echo.clone(), "http://127.0.0.1:9/echo"),
        ),
        (
            "local-at-url".to_string(),
            AgentSpec::url("local-at-url", AgentKind::ACP, "http://127.0.0.1:9/x"),
        ),
        (
            "acp".to_string(),
            AgentSpec::command("acp", AgentKind::ACP, "/bin/false"),
        ),
    ]);
    config.default_agent = "echo".into();
    let registry =
        Registry::builtin(Requirement::BestEffort).register(echo, Arc::new(EchoBackend { seen }));
    Engine::start(config, registry, Arc::new(legate_supervisor::Rules)).unwrap()
}

async fn wait(engine: &Engine, id: &legate_core::TaskId) -> legate_core::Task {
    tokio::time::timeout(Duration::from_secs(30), engine.wait(id))
        .await
        .expect("the task did not end")
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_added_through_the_registry_runs_a_task_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    let engine = engine(dir.path(), seen.clone());

    let schema = serde_json::json!({"type": "object"});
    let mut request = SubmitRequest::new("hello");
    request.json_schema = Some(schema.clone());
    let task = engine.submit(request).unwrap();
    let task = wait(&engine, &task.id).await;
    assert_eq!(task.state, TaskState::Completed, "{:?}", task.error);
    let result = task.result.as_ref().unwrap();
    assert_eq!(result.text, "echo: hello");
    assert_eq!(result.stop_reason.as_deref(), Some("end_turn"));

    // Its events are stored: the answer, then the final status.
    let events = engine.events(&task.id, 0, 1000).unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(&e.kind, EventKind::Message { text } if text == "echo: hello"))
    );
    assert!(matches!(
        events.last().map(|e| &e.kind),
        Some(EventKind::Status {
            state: TaskState::Completed,
            ..
        })
    ));
    {
        let seen = seen.lock().unwrap();
        // The engine asked the backend: the schema reached its turn, and its default preset
        // is the supervisor's.
        assert_eq!(seen.schemas, [Some(schema)]);
        assert_eq!(seen.presets, ["codex"]);
    }

    // A typed stop reason decides the state, and keeps its wire string.
    let task = engine.submit(SubmitRequest::new("which file?")).unwrap();
    let task = wait(&engine, &task.id).await;
    assert_eq!(task.state, TaskState::InputRequired);
    assert_eq!(
        task.result.unwrap().stop_reason.as_deref(),
        Some("input_required")
    );
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_backend_cannot_do_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), Arc::default());

    // A URL given to a backend that spawns a local process: refused at submit.
    let mut request = SubmitRequest::new("hello");
    request.agent = Some("local-at-url".into());
    let err = engine.submit(request).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput, "{}", err.message);
    assert!(err.message.contains("URL"), "{}", err.message);

    // Structured output from a backend that does not offer it: refused at submit.
    let mut request = SubmitRequest::new("hello");
    request.agent = Some("acp".into());
    request.json_schema = Some(serde_json::json!({"type": "object"}));
    let err = engine.submit(request).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput, "{}", err.message);
    assert!(err.message.contains("structured output"), "{}", err.message);
    // Nothing was stored for either.
    assert!(engine.tasks(&TaskFilter::default()).unwrap().is_empty());
    engine.shutdown().await;
}

/// A turn given up on (its timeout) is dropped, but work it started in its workspace beside
/// it (a remote's patch applied, a file written for the agent) runs on: the engine waits for
/// that work before it reads the workspace and stores the end, so nothing still writes when a
/// review, an integration or the next turn begins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn work_a_turn_started_in_its_workspace_ends_before_the_task_does() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), Arc::default());
    let mut request = SubmitRequest::new("write late");
    // Time enough to open the session on a loaded machine; the work outlasts it.
    request.timeout = Some(Duration::from_secs(3));
    let task = engine.submit(request).unwrap();
    let task = wait(&engine, &task.id).await;
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(task.error.as_ref().unwrap().code, ErrorCode::TaskTimeout);
    // Ended, so written: the end waited for the work.
    let root = task.root.clone().unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("late.txt")).unwrap(),
        "written late\n"
    );
    engine.shutdown().await;
}
