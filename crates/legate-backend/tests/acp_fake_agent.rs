//! The ACP driver against a bash agent (`tests/fixtures/fake-acp-agent.sh`): process-level
//! behaviour (exit, hang, garbage, auth, modes, string request ids, cancel, process groups)
//! that needs no real agent. The revisor-based tests live in
//! `crates/legate-testkit/tests/acp_backend.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_backend::acp::{AcpBackend, AcpSession, process_group_alive};
use legate_backend::{AgentSession, EventSink, EventStream, SessionRequest, StopReason, Turn};
use legate_core::{
    AgentKind, AgentSpec, Boundary, Decision, ErrorCode, EventKind, PermissionRequest, Ruling,
    TaskId, TaskMode, ToolKind,
};
use legate_supervisor::{Preset, Supervision, Supervisor};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Answers every request with a fixed option id (even one not offered) and records requests.
#[derive(Debug)]
struct Fixed {
    option: Option<String>,
    decision: Decision,
    seen: Mutex<Vec<PermissionRequest>>,
}

impl Fixed {
    fn new(option: Option<&str>, decision: Decision) -> Arc<Self> {
        Arc::new(Self {
            option: option.map(str::to_string),
            decision,
            seen: Mutex::new(Vec::new()),
        })
    }
}

impl Supervisor for Fixed {
    fn decide(&self, _s: &Supervision, request: &PermissionRequest) -> Ruling {
        self.seen.lock().unwrap().push(request.clone());
        Ruling::new(self.decision, self.option.clone(), "fixed")
    }
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-acp-agent.sh")
}

fn request(root: &Path, fake: &str, supervisor: Arc<dyn Supervisor>) -> SessionRequest {
    let boundary = Boundary {
        root: root.to_path_buf(),
        owned: true,
        allow_execute: false,
    };
    SessionRequest {
        agent: AgentSpec::command("fake", AgentKind::ACP, script().display().to_string()).envs(
            [("FAKE".to_string(), fake.to_string())]
                .into_iter()
                .collect(),
        ),
        boundary: boundary.clone(),
        supervisor,
        supervision: Supervision::new(
            boundary,
            TaskMode::Write,
            Preset {
                name: "fake".into(),
                supervised_mode: Some("default".into()),
                ..Preset::default()
            },
        ),
        channel: None,
        resume_session_id: None,
        state_dir: None,
        blocked_dir: None,
        hidden: Vec::new(),
        ledger: None,
        mcp_servers: Vec::new(),
        network: Default::default(),
        task: None,
    }
}

fn deny() -> Arc<dyn Supervisor> {
    Fixed::new(None, Decision::Deny)
}

fn drain(rx: &mut EventStream) -> Vec<EventKind> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

fn turn(prompt: &str) -> Turn {
    Turn {
        task_id: TaskId("t1".into()),
        prompt: prompt.into(),
        mode: TaskMode::Write,
        model: None,
        timeout: None,
        message_id: None,
        json_schema: None,
        effort: None,
        work: Default::default(),
    }
}

fn backend() -> AcpBackend {
    AcpBackend {
        handshake_timeout: Duration::from_secs(2),
        ..AcpBackend::new()
    }
}

async fn open(
    fake: &str,
    supervisor: Arc<dyn Supervisor>,
) -> (tempfile::TempDir, AcpSession, Vec<EventKind>) {
    let tmp = tempfile::tempdir().unwrap();
    let (sink, mut rx) = EventSink::channel();
    let session = backend()
        .open_session(request(tmp.path(), fake, supervisor), sink)
        .await
        .unwrap();
    (tmp, session, drain(&mut rx))
}

async fn open_err(req: SessionRequest) -> legate_core::Error {
    let (sink, _rx) = EventSink::channel();
    backend().open_session(req, sink).await.unwrap_err()
}

fn messages(events: &[EventKind]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::Message { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_turn_reports_every_event_before_it_returns() {
    let (_tmp, session, opened) = open("", deny()).await;
    assert_eq!(session.session_id(), "s-new");
    assert_eq!(session.agent_info().name.as_deref(), Some("fake"));
    assert!(!session.resumed());
    // The session started in `plan`: Legate switched it to the supervised `default`.
    assert!(opened.contains(&EventKind::Mode {
        mode_id: "default".into()
    }));
    assert!(opened.contains(&EventKind::Session {
        session_id: "s-new".into(),
        resumed: false
    }));

    let (sink, mut rx) = EventSink::channel();
    let outcome = session.prompt(turn("hi"), sink).await.unwrap();
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    let usage = outcome.usage.unwrap();
    assert_eq!(usage.total_tokens, Some(30));
    assert_eq!(usage.input_tokens, Some(10));
    // Everything is already there, in order, and the sink was dropped by the session.
    let events = drain(&mut rx);
    let kinds: Vec<&str> = events
        .iter()
        .filter(|e| !matches!(e, EventKind::Stderr { .. }))
        .map(EventKind::type_name)
        .collect();
    assert_eq!(kinds, ["thought", "message", "usage", "message"]);
    assert_eq!(messages(&events), "hello world");
    assert!(
        rx.recv().await.is_none(),
        "the session kept a clone of the sink"
    );

    assert!(session.is_alive());
    let pgid = session.pgid();
    session.shutdown().await;
    session.shutdown().await;
    assert!(!session.is_alive());
    assert!(!process_group_alive(pgid));
}

#[tokio::test]
async fn permission_replies_use_offered_ids_and_string_request_ids_round_trip() {
    let reject = Fixed::new(Some("reject"), Decision::Deny);
    let (_tmp, session, _) = open("perm", reject.clone()).await;
    let (sink, mut rx) = EventSink::channel();
    session.prompt(turn("go"), sink).await.unwrap();
    let events = drain(&mut rx);
    assert!(
        messages(&events).contains("reply outcome:selected,optionId:reject"),
        "{events:?}"
    );
    let perm = events
        .iter()
        .find_map(|e| match e {
            EventKind::Permission {
                tool_call_id,
                title,
                tool_kind,
                offered,
                verdict,
            } => Some((tool_call_id, title, tool_kind, offered, verdict)),
            _ => None,
        })
        .unwrap();
    assert_eq!(perm.0, "call-1");
    // Title and kind came from the earlier tool_call; the request carried only the id.
    assert_eq!(perm.1, "rm -rf /");
    assert_eq!(*perm.2, ToolKind::Execute);
    assert_eq!(perm.3, &["allow".to_string(), "reject".to_string()]);
    assert_eq!(perm.4.option_id.as_deref(), Some("reject"));
    let seen = reject.seen.lock().unwrap().clone();
    assert_eq!(
        seen[0].raw_input,
        Some(serde_json::json!({"command": "rm -rf /"}))
    );
    session.shutdown().await;
}

#[tokio::test]
async fn an_option_that_was_not_offered_is_answered_cancelled() {
    let bogus = Fixed::new(Some("yes-please"), Decision::Allow);
    let (_tmp, session, _) = open("perm", bogus).await;
    let (sink, mut rx) = EventSink::channel();
    session.prompt(turn("go"), sink).await.unwrap();
    let events = drain(&mut rx);
    assert!(
        messages(&events).contains("reply outcome:cancelled"),
        "{events:?}"
    );
    let verdict = events
        .iter()
        .find_map(|e| match e {
            EventKind::Permission { verdict, .. } => Some(verdict.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(verdict.decision, Decision::Deny);
    assert_eq!(verdict.option_id, None);
    session.shutdown().await;
}

#[tokio::test]
async fn non_json_lines_are_reported_and_the_session_carries_on() {
    let (_tmp, session, opened) = open("garbage", deny()).await;
    let notice = |events: &[EventKind]| {
        events.iter().any(|e| {
            matches!(e, EventKind::Notice { message, detail }
                if message.contains("not JSON-RPC") && detail["stream"] == "stdout")
        })
    };
    assert!(notice(&opened), "{opened:?}");
    let (sink, mut rx) = EventSink::channel();
    let outcome = session.prompt(turn("hi"), sink).await.unwrap();
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    let events = drain(&mut rx);
    assert!(notice(&events), "{events:?}");
    assert_eq!(messages(&events), "hello world");
    session.shutdown().await;
}

#[tokio::test]
async fn exit_at_start_is_a_start_failure_with_status_and_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let err = open_err(request(tmp.path(), "exit-at-start", deny())).await;
    assert_eq!(err.code, ErrorCode::AgentStartFailed, "{err}");
    assert!(err.message.contains("exit status 7"), "{err}");
    assert!(err.message.contains("no configuration found"), "{err}");
}

#[tokio::test]
async fn a_hung_handshake_times_out() {
    let tmp = tempfile::tempdir().unwrap();
    let started = Instant::now();
    let err = open_err(request(tmp.path(), "hang-initialize", deny())).await;
    assert_eq!(err.code, ErrorCode::AgentStartFailed, "{err}");
    assert!(err.message.contains("`initialize`"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn auth_errors_and_missing_supervised_modes_are_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let err = open_err(request(tmp.path(), "auth", deny())).await;
    assert_eq!(err.code, ErrorCode::AgentAuthRequired, "{err}");
    assert!(
        err.message.contains("log in with the agent's own CLI"),
        "{err}"
    );

    let err = open_err(request(tmp.path(), "modes-unsupervised", deny())).await;
    assert_eq!(err.code, ErrorCode::AgentUnsupervised, "{err}");
    assert!(err.message.contains("yolo"), "{err}");

    // No modes reported: nothing to check.
    let (_tmp, session, _) = open("modes-none", deny()).await;
    session.shutdown().await;
}

#[tokio::test]
async fn a_loader_variable_in_the_spec_is_refused_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let mut req = request(tmp.path(), "", deny());
    req.agent = req.agent.env("NODE_OPTIONS", "--require /tmp/x.js");
    let err = open_err(req).await;
    assert_eq!(err.code, ErrorCode::AgentStartFailed);
    assert!(err.message.contains("NODE_OPTIONS"));
    assert!(!err.message.contains("/tmp/x.js"));
}

#[tokio::test]
async fn sessions_are_loaded_when_the_agent_can_and_replay_is_not_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let mut req = request(tmp.path(), "load modes-none", deny());
    req.resume_session_id = Some("s-old".into());
    let (sink, mut rx) = EventSink::channel();
    let session = backend().open_session(req, sink).await.unwrap();
    assert!(session.resumed());
    assert_eq!(session.session_id(), "s-old");
    let opened = drain(&mut rx);
    assert_eq!(messages(&opened), "", "history replay leaked: {opened:?}");
    session.shutdown().await;

    let mut req = request(tmp.path(), "modes-none", deny());
    req.resume_session_id = Some("s-old".into());
    let (sink, mut rx) = EventSink::channel();
    let session = backend().open_session(req, sink).await.unwrap();
    assert!(!session.resumed());
    assert_eq!(session.session_id(), "s-new");
    let opened = drain(&mut rx);
    assert!(
        opened
            .iter()
            .any(|e| matches!(e, EventKind::Notice { message, .. } if message.contains("could not be continued"))),
        "{opened:?}"
    );
    session.shutdown().await;
}

#[tokio::test]
async fn an_exit_mid_turn_is_agent_exited() {
    let (_tmp, session, _) = open("exit-mid-turn", deny()).await;
    let (sink, mut rx) = EventSink::channel();
    let err = session.prompt(turn("hi"), sink).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::AgentExited, "{err}");
    assert!(err.message.contains("exit status 3"), "{err}");
    assert!(messages(&drain(&mut rx)).contains("hello"));
    assert!(!session.is_alive());
    session.shutdown().await;
}

/// Waits until the `hang-prompt` agent says its turn is hung (its `sleep 1000` started and the
/// prompt's id kept for a cancel), with a generous overall deadline.
async fn hung(rx: &mut EventStream) {
    let said = async {
        while let Some(event) = rx.recv().await {
            if matches!(&event, EventKind::Message { text } if text == "hanging") {
                return;
            }
        }
        panic!("the agent's events ended before it said it hangs");
    };
    tokio::time::timeout(Duration::from_secs(30), said)
        .await
        .expect("the agent said it hangs");
}

#[tokio::test]
async fn cancel_ends_a_hung_turn_and_shutdown_kills_the_group() {
    let (_tmp, session, _) = open("hang-prompt", deny()).await;
    let session = Arc::new(session);
    let canceller = session.canceller();
    let (sink, mut rx) = EventSink::channel();
    let running = {
        let session = session.clone();
        tokio::spawn(async move { session.prompt(turn("hang"), sink).await })
    };
    hung(&mut rx).await;
    canceller.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(outcome.stop_reason, StopReason::Cancelled);
    // The turn left a `sleep 1000` behind in the group.
    let pgid = session.pgid();
    assert!(process_group_alive(pgid));
    session.shutdown().await;
    assert!(!process_group_alive(pgid));
}

#[tokio::test]
async fn shutdown_during_a_turn_ends_it() {
    let (_tmp, session, _) = open("hang-prompt", deny()).await;
    let session = Arc::new(session);
    let (sink, mut rx) = EventSink::channel();
    let running = {
        let session = session.clone();
        tokio::spawn(async move { session.prompt(turn("hang"), sink).await })
    };
    hung(&mut rx).await;
    let pgid = session.pgid();
    session.shutdown().await;
    assert!(!process_group_alive(pgid));
    let err = tokio::time::timeout(Duration::from_secs(5), running)
        .await
        .unwrap()
        .unwrap()
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::AgentExited, "{err}");
}

#[tokio::test]
async fn stderr_is_capped_per_turn() {
    let (_tmp, session, opened) = open("stderr-flood", deny()).await;
    assert!(opened.contains(&EventKind::Stderr {
        line: "fake agent starting".into()
    }));
    let (sink, mut rx) = EventSink::channel();
    session.prompt(turn("hi"), sink).await.unwrap();
    let events = drain(&mut rx);
    let stderr = events
        .iter()
        .filter(|e| matches!(e, EventKind::Stderr { .. }))
        .count();
    assert_eq!(stderr, 1_000);
    assert!(events.iter().any(
        |e| matches!(e, EventKind::Notice { message, .. } if message.contains("rest were dropped"))
    ));
    session.shutdown().await;
}

#[tokio::test]
async fn an_agent_that_closes_its_output_but_keeps_running_is_a_protocol_error() {
    let (_tmp, session, _) = open("close-stdout", deny()).await;
    let (sink, _rx) = EventSink::channel();
    let err = session.prompt(turn("hi"), sink).await.unwrap_err();
    assert_eq!(err.code, ErrorCode::AgentProtocolError, "{err}");
    assert!(!session.is_alive());
    let pgid = session.pgid();
    session.shutdown().await;
    assert!(!process_group_alive(pgid));
}

#[tokio::test]
async fn a_model_asked_of_an_agent_that_offers_none_is_ignored_with_a_notice() {
    let (_tmp, session, _) = open("", deny()).await;
    let (sink, mut rx) = EventSink::channel();
    let mut t = turn("hello");
    t.model = Some("some-model".into());
    let outcome = session.prompt(t, sink).await.unwrap();
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    let events = drain(&mut rx);
    assert!(
        events.iter().any(|e| matches!(e,
            EventKind::Notice { message, detail }
                if message.contains("offers no model selection") && detail["model"] == "some-model")),
        "{events:?}"
    );
    session.shutdown().await;
}
