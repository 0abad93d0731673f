//! Legate's ACP backend (`legate_backend::acp`) driving `legate-scripted-agent` (revisor plus
//! faults) as a real subprocess, with the built-in supervisor rules.
//!
//! Owned by the backend; the rest of the test kit belongs to its own crate.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_backend::acp::{AcpBackend, AcpSession, process_group_alive};
use legate_backend::{AgentSession, EventSink, EventStream, SessionRequest, StopReason, Turn};
use legate_core::{
    AgentKind, AgentSpec, Boundary, Decision, ErrorCode, EventKind, PermissionRequest, Ruling,
    TaskId, TaskMode, ToolKind,
};
use legate_supervisor::options::pick_allow;
use legate_supervisor::{Preset, Rules, Supervision, Supervisor};
use legate_testkit::FAULT_ENV;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const AGENT: &str = env!("CARGO_BIN_EXE_legate-scripted-agent");

/// Allows whatever it can (to reach the backend's own `fs/*` checks).
#[derive(Debug)]
struct AllowAll;

impl Supervisor for AllowAll {
    fn decide(&self, s: &Supervision, request: &PermissionRequest) -> Ruling {
        Ruling::new(
            Decision::Allow,
            pick_allow(&request.options, &s.preset).map(|o| o.id.clone()),
            "test: allow all",
        )
    }
}

struct Workspace {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
}

fn workspace() -> Workspace {
    let tmp = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(tmp.path()).unwrap();
    let root = base.join("root");
    let outside = base.join("outside");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&outside).unwrap();
    Workspace {
        _tmp: tmp,
        root,
        outside,
    }
}

fn request(
    root: &Path,
    owned: bool,
    fault: &str,
    supervisor: Arc<dyn Supervisor>,
) -> SessionRequest {
    let boundary = Boundary {
        root: root.to_path_buf(),
        owned,
        allow_execute: false,
    };
    SessionRequest {
        agent: AgentSpec::command("revisor", AgentKind::ACP, AGENT)
            .envs(
                [(FAULT_ENV.to_string(), fault.to_string())]
                    .into_iter()
                    .collect(),
            )
            .preset("revisor"),
        boundary: boundary.clone(),
        supervisor,
        supervision: Supervision::new(boundary, TaskMode::Write, Preset::revisor()),
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

fn backend() -> AcpBackend {
    AcpBackend {
        handshake_timeout: Duration::from_secs(2),
        ..AcpBackend::new()
    }
}

async fn open(
    root: &Path,
    owned: bool,
    fault: &str,
    supervisor: Arc<dyn Supervisor>,
) -> (AcpSession, Vec<EventKind>) {
    let (sink, mut rx) = EventSink::channel();
    let session = backend()
        .open_session(request(root, owned, fault, supervisor), sink)
        .await
        .unwrap();
    (session, drain(&mut rx))
}

async fn open_err(root: &Path, fault: &str) -> legate_core::Error {
    let (sink, _rx) = EventSink::channel();
    backend()
        .open_session(request(root, true, fault, Arc::new(Rules)), sink)
        .await
        .unwrap_err()
}

fn drain(rx: &mut EventStream) -> Vec<EventKind> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

fn turn(prompt: &str, mode: TaskMode) -> Turn {
    Turn {
        task_id: TaskId("task-1".into()),
        prompt: prompt.into(),
        mode,
        model: None,
        timeout: None,
        message_id: None,
        json_schema: None,
        effort: None,
        work: Default::default(),
    }
}

async fn run(
    session: &AcpSession,
    prompt: &str,
    mode: TaskMode,
) -> (
    legate_core::Result<legate_backend::TurnOutcome>,
    Vec<EventKind>,
) {
    let (sink, mut rx) = EventSink::channel();
    let outcome = tokio::time::timeout(
        Duration::from_secs(30),
        session.prompt(turn(prompt, mode), sink),
    )
    .await
    .expect("turn timed out");
    (outcome, drain(&mut rx))
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

fn permissions(events: &[EventKind]) -> Vec<(ToolKind, Ruling)> {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::Permission {
                tool_kind, verdict, ..
            } => Some((*tool_kind, verdict.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_plain_question_is_answered_with_message_events() {
    let ws = workspace();
    std::fs::write(ws.root.join("notes.txt"), "one\ntwo\n").unwrap();
    let (session, opened) = open(&ws.root, true, "", Arc::new(Rules)).await;
    assert_eq!(session.agent_info().name.as_deref(), Some("revisor"));
    assert!(
        opened
            .iter()
            .any(|e| matches!(e, EventKind::Session { resumed: false, .. }))
    );
    let (outcome, events) = run(&session, "what is in notes.txt?", TaskMode::Write).await;
    let outcome = outcome.unwrap();
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    assert!(messages(&events).contains("notes.txt"), "{events:?}");
    assert!(events.iter().any(|e| matches!(e, EventKind::Plan { .. })));
    assert!(events.iter().any(|e| matches!(e, EventKind::Usage { .. })));
    session.shutdown().await;
}

#[tokio::test]
async fn a_write_is_allowed_inside_an_owned_sandbox() {
    let ws = workspace();
    let (session, _) = open(&ws.root, true, "", Arc::new(Rules)).await;
    let (outcome, events) = run(&session, "write hello.txt: hi there", TaskMode::Write).await;
    assert_eq!(outcome.unwrap().stop_reason, StopReason::EndTurn);
    assert_eq!(
        std::fs::read_to_string(ws.root.join("hello.txt")).unwrap(),
        "hi there"
    );
    let perms = permissions(&events);
    assert_eq!(perms.len(), 1, "{events:?}");
    assert_eq!(perms[0].0, ToolKind::Edit);
    assert_eq!(perms[0].1.decision, Decision::Allow);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, EventKind::ToolCall(t) if t.tool_kind == ToolKind::Edit))
    );
    assert!(
        events
            .iter()
            .any(|e| matches!(e, EventKind::FsAccess { op, allowed: true, .. } if op == "write")),
        "{events:?}"
    );
    session.shutdown().await;
}

#[tokio::test]
async fn a_command_is_refused_in_a_shared_root_and_the_turn_still_ends() {
    let ws = workspace();
    let (session, _) = open(&ws.root, false, "", Arc::new(Rules)).await;
    let (outcome, events) = run(&session, "run touch made-by-shell", TaskMode::Write).await;
    assert_eq!(outcome.unwrap().stop_reason, StopReason::EndTurn);
    let perms = permissions(&events);
    assert_eq!(perms.len(), 1, "{events:?}");
    assert_eq!(perms[0].0, ToolKind::Execute);
    assert_eq!(perms[0].1.decision, Decision::Deny);
    assert_eq!(perms[0].1.option_id.as_deref(), Some("reject"));
    assert!(!ws.root.join("made-by-shell").exists());
    session.shutdown().await;
}

#[tokio::test]
async fn a_write_outside_the_root_is_refused() {
    let ws = workspace();
    let target = ws.outside.join("escaped.txt");
    // By the supervisor, from the tool call's locations.
    let (session, _) = open(&ws.root, true, "", Arc::new(Rules)).await;
    let (outcome, events) = run(
        &session,
        &format!("write {}: x", target.display()),
        TaskMode::Write,
    )
    .await;
    assert_eq!(outcome.unwrap().stop_reason, StopReason::EndTurn);
    assert_eq!(
        permissions(&events)[0].1.decision,
        Decision::Deny,
        "{events:?}"
    );
    assert!(!target.exists());
    session.shutdown().await;

    // By the backend's own fs/write_text_file check, even when the supervisor allows.
    let (session, _) = open(&ws.root, true, "", Arc::new(AllowAll)).await;
    let (outcome, events) = run(
        &session,
        &format!("write {}: x", target.display()),
        TaskMode::Write,
    )
    .await;
    assert_eq!(outcome.unwrap().stop_reason, StopReason::EndTurn);
    assert!(
        events.iter().any(
            |e| matches!(e, EventKind::FsAccess { op, allowed: false, reason: Some(r), .. }
            if op == "write" && r.contains("outside the root"))
        ),
        "{events:?}"
    );
    assert!(!target.exists());
    session.shutdown().await;
}

#[tokio::test]
async fn a_read_only_turn_cannot_write_even_through_fs() {
    let ws = workspace();
    let (session, _) = open(&ws.root, true, "", Arc::new(AllowAll)).await;
    let (outcome, events) = run(&session, "write ro.txt: x", TaskMode::ReadOnly).await;
    assert_eq!(outcome.unwrap().stop_reason, StopReason::EndTurn);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, EventKind::FsAccess { op, allowed: false, .. } if op == "write")),
        "{events:?}"
    );
    assert!(!ws.root.join("ro.txt").exists());
    session.shutdown().await;
}

#[tokio::test]
async fn exit_at_start_is_a_start_failure() {
    let ws = workspace();
    let err = open_err(&ws.root, "exit-at-start").await;
    assert_eq!(err.code, ErrorCode::AgentStartFailed, "{err}");
    assert!(err.message.contains("exit status 3"), "{err}");
}

#[tokio::test]
async fn a_hung_initialize_times_out() {
    let ws = workspace();
    let started = std::time::Instant::now();
    let err = open_err(&ws.root, "hang-initialize").await;
    assert_eq!(err.code, ErrorCode::AgentStartFailed, "{err}");
    assert!(err.message.contains("initialize"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn garbage_is_reported_and_tolerated() {
    let ws = workspace();
    let (session, opened) = open(&ws.root, true, "garbage-at-start", Arc::new(Rules)).await;
    let notice = |events: &[EventKind]| {
        events.iter().any(
            |e| matches!(e, EventKind::Notice { message, .. } if message.contains("not JSON-RPC")),
        )
    };
    assert!(notice(&opened), "{opened:?}");
    let (outcome, events) = run(&session, "!garbage\nhello?", TaskMode::Write).await;
    assert_eq!(outcome.unwrap().stop_reason, StopReason::EndTurn);
    assert!(notice(&events), "{events:?}");
    session.shutdown().await;
}

/// The `malformed` problems of the stdout notices among `events`.
fn malformed(events: &[EventKind]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::Notice { detail, .. } if detail["stream"] == "stdout" => {
                detail["malformed"].as_str().map(str::to_string)
            }
            _ => None,
        })
        .collect()
}

/// The session is dead after a protocol error, and its process group goes with shutdown.
async fn broken_and_stopped(session: AcpSession) {
    assert!(!session.is_alive());
    let pgid = session.pgid();
    session.shutdown().await;
    assert!(!process_group_alive(pgid));
}

#[tokio::test]
async fn json_that_is_not_json_rpc_is_reported_and_the_third_in_a_turn_ends_it() {
    let ws = workspace();
    let (session, _) = open(&ws.root, true, "", Arc::new(Rules)).await;
    // Two in a turn are reported and tolerated; the count starts again each turn.
    for _ in 0..2 {
        let (outcome, events) = run(
            &session,
            "!not-jsonrpc 2
hello?",
            TaskMode::Write,
        )
        .await;
        assert_eq!(outcome.unwrap().stop_reason, StopReason::EndTurn);
        let problems = malformed(&events);
        assert_eq!(problems.len(), 2, "{events:?}");
        assert!(problems[0].contains("\"jsonrpc\": \"2.0\""), "{problems:?}");
        assert!(problems[1].contains("array"), "{problems:?}");
    }
    assert!(session.is_alive());

    let (outcome, events) = run(
        &session,
        "!not-jsonrpc 3
!hang",
        TaskMode::Write,
    )
    .await;
    let err = outcome.unwrap_err();
    assert_eq!(err.code, ErrorCode::AgentProtocolError, "{err}");
    assert!(
        err.message.contains("3 malformed JSON-RPC messages"),
        "{err}"
    );
    let problems = malformed(&events);
    assert!(
        problems[2].contains("session/update with params that do not fit"),
        "{problems:?}"
    );
    broken_and_stopped(session).await;
}

#[tokio::test]
async fn a_response_to_no_request_ends_the_turn_at_once() {
    let ws = workspace();
    let (session, _) = open(&ws.root, true, "", Arc::new(Rules)).await;
    // Without the check, this turn would wait for its answer until its timeout.
    let (outcome, events) = run(&session, "!unknown-response", TaskMode::Write).await;
    let err = outcome.unwrap_err();
    assert_eq!(err.code, ErrorCode::AgentProtocolError, "{err}");
    let id = legate_testkit::directives::UNKNOWN_RESPONSE_ID.to_string();
    assert!(err.message.contains(&id), "{err}");
    assert!(
        malformed(&events).iter().any(|p| p.contains(&id)),
        "{events:?}"
    );
    broken_and_stopped(session).await;
}

#[tokio::test]
async fn an_exit_mid_turn_is_agent_exited() {
    let ws = workspace();
    let (session, _) = open(&ws.root, true, "", Arc::new(Rules)).await;
    let (outcome, _) = run(&session, "!exit 3", TaskMode::Write).await;
    let err = outcome.unwrap_err();
    assert_eq!(err.code, ErrorCode::AgentExited, "{err}");
    assert!(err.message.contains("exit status 3"), "{err}");
    assert!(!session.is_alive());
    session.shutdown().await;
}

#[tokio::test]
async fn a_hung_turn_is_cancelled_or_killed_and_the_group_is_gone_after_shutdown() {
    let ws = workspace();
    let (session, _) = open(&ws.root, true, "", Arc::new(Rules)).await;
    let session = Arc::new(session);
    let pgid = session.pgid();
    let (sink, mut rx) = EventSink::channel();
    let running = {
        let session = session.clone();
        tokio::spawn(async move {
            // The failed tool call tells the test the turn has started; then it hangs.
            let prompt = "!fail-tool hanging\n!hang";
            session.prompt(turn(prompt, TaskMode::Write), sink).await
        })
    };
    let started = async {
        while let Some(event) = rx.recv().await {
            if matches!(&event, EventKind::ToolCallUpdate(u) if u.status == Some(legate_core::ToolStatus::Failed))
            {
                return;
            }
        }
        panic!("the turn's events ended before it started");
    };
    tokio::time::timeout(Duration::from_secs(30), started)
        .await
        .expect("the turn started");
    session.canceller().cancel();
    let mut running = running;
    match tokio::time::timeout(Duration::from_secs(3), &mut running).await {
        Ok(done) => {
            assert_eq!(done.unwrap().unwrap().stop_reason, StopReason::Cancelled);
            session.shutdown().await;
        }
        Err(_) => {
            // The agent ignored the cancel: shutdown ends the turn.
            session.shutdown().await;
            let err = running.await.unwrap().unwrap_err();
            assert_eq!(err.code, ErrorCode::AgentExited, "{err}");
        }
    }
    assert!(!session.is_alive());
    assert!(!process_group_alive(pgid));
}

/// The `processCleanup` detail among `events`, if any.
fn cleanup_of(events: &[EventKind]) -> Option<serde_json::Value> {
    events.iter().find_map(|e| match e {
        EventKind::Notice { detail, .. } if detail.get("processCleanup").is_some() => {
            Some(detail["processCleanup"].clone())
        }
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sends_sigint_then_sigkill_after_3_s_and_records_a_verified_cleanup() {
    let ws = workspace();
    let (session, _) = open(&ws.root, true, "", Arc::new(AllowAll)).await;
    let session = Arc::new(session);
    let pgid = session.pgid();
    let (sink, mut rx) = EventSink::channel();
    let running = {
        let session = session.clone();
        tokio::spawn(async move {
            // A member of the agent's group that ignores SIGINT: only SIGKILL ends it.
            // It touches `trapped` once the trap is set, which is what the test waits for.
            let prompt = "run trap '' INT; touch trapped; sleep 30";
            session.prompt(turn(prompt, TaskMode::Write), sink).await
        })
    };
    // No event marks the trap being set: a bounded retry on the file it then creates.
    let trapped = ws.root.join("trapped");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !trapped.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the trap was never set"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = std::time::Instant::now();
    session.shutdown().await;
    let took = started.elapsed();
    let _ = running.await.unwrap();
    let events = drain(&mut rx);
    let cleanup = cleanup_of(&events).expect("the shutdown is recorded on the running turn");
    assert_eq!(cleanup["verified"], true, "{cleanup}");
    assert_eq!(cleanup["pgid"], pgid);
    assert_eq!(cleanup["stopped"], true);
    if legate_confine::Confinement::probe_namespaces() {
        // The agent exits on SIGINT; its PID namespace dies with it, taking the member that
        // ignores SIGINT along: nothing is left for SIGKILL.
        assert_eq!(cleanup["signals"], serde_json::json!(["SIGINT"]));
    } else {
        assert_eq!(cleanup["signals"], serde_json::json!(["SIGINT", "SIGKILL"]));
        assert!(took >= Duration::from_millis(2900), "{took:?}");
    }
    assert!(took < Duration::from_secs(6), "{took:?}");
    assert!(!process_group_alive(pgid));
    // Idempotent: a second shutdown records nothing more and returns at once.
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_exits_mid_turn_has_its_cleanup_recorded_on_the_turn() {
    let ws = workspace();
    let (session, _) = open(&ws.root, true, "", Arc::new(Rules)).await;
    let pgid = session.pgid();
    let (outcome, events) = run(&session, "!exit 3", TaskMode::Write).await;
    assert_eq!(outcome.unwrap_err().code, ErrorCode::AgentExited);
    let cleanup = cleanup_of(&events).expect("a processCleanup event");
    assert_eq!(cleanup["verified"], true, "{cleanup}");
    assert_eq!(cleanup["pgid"], pgid);
    assert!(!process_group_alive(pgid));
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unverified_cleanup_blocks_the_workspace_for_acp_agents_until_the_group_is_gone() {
    let ws = workspace();
    let blocked = ws.outside.join("blocked");
    let with_state = || {
        let mut r = request(&ws.root, true, "", Arc::new(Rules));
        r.blocked_dir = Some(blocked.clone());
        r
    };
    // A clean shutdown outside a turn blocks nothing.
    let (sink, _rx) = EventSink::channel();
    let session = backend().open_session(with_state(), sink).await.unwrap();
    session.shutdown().await;

    let (mut survivor, pgid) = legate_testkit::sleeping_group();
    let root = std::fs::canonicalize(&ws.root).unwrap();
    legate_backend::cleanup::block(
        &blocked,
        &root,
        &legate_backend::cleanup::Processes::new(pgid, None),
    )
    .unwrap();
    let (sink, _rx) = EventSink::channel();
    let err = backend()
        .open_session(with_state(), sink)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ProcessCleanupUnverified, "{err}");
    assert!(
        err.message.contains(&format!("kill -KILL -{pgid}")),
        "{err}"
    );
    survivor.kill().await.unwrap();
    survivor.wait().await.unwrap();
    let (sink, _rx) = EventSink::channel();
    let session = backend().open_session(with_state(), sink).await.unwrap();
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_revisor_offers_is_selected_and_an_unknown_one_is_not_available() {
    let ws = workspace();
    let (session, _) = open(&ws.root, true, "", Arc::new(Rules)).await;
    let with_model = |model: &str| Turn {
        model: Some(model.into()),
        ..turn("how big is this workspace?", TaskMode::ReadOnly)
    };
    let selected = |events: &[EventKind]| {
        events.iter().any(|e| {
            matches!(e, EventKind::Notice { detail, .. }
                if detail["model"] == legate_revisor::MODELS[1].0 && detail["configId"] == "model")
        })
    };
    let (sink, mut rx) = EventSink::channel();
    let outcome = session
        .prompt(with_model(legate_revisor::MODELS[1].0), sink)
        .await
        .unwrap();
    assert_eq!(outcome.stop_reason, StopReason::EndTurn);
    assert!(selected(&drain(&mut rx)));
    // Already selected: nothing is sent again.
    let (sink, mut rx) = EventSink::channel();
    session
        .prompt(with_model(legate_revisor::MODELS[1].0), sink)
        .await
        .unwrap();
    assert!(!selected(&drain(&mut rx)));
    // `auto` (or no model) is the agent's own choice: the model it chose when the session
    // opened, set back after a turn chose another; then nothing more is sent.
    let back = |events: &[EventKind]| {
        events.iter().any(|e| {
            matches!(e, EventKind::Notice { detail, .. }
                if detail["model"] == legate_revisor::MODELS[0].0 && detail["configId"] == "model")
        })
    };
    let (sink, mut rx) = EventSink::channel();
    session.prompt(with_model("auto"), sink).await.unwrap();
    assert!(back(&drain(&mut rx)), "the agent's own model is set back");
    let (sink, mut rx) = EventSink::channel();
    session
        .prompt(turn("how big is this workspace?", TaskMode::ReadOnly), sink)
        .await
        .unwrap();
    assert!(!back(&drain(&mut rx)));
    let (sink, _rx) = EventSink::channel();
    let err = session
        .prompt(with_model("no-such-model"), sink)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::ModelNotAvailable, "{err}");
    assert!(err.message.contains(legate_revisor::MODELS[0].0), "{err}");
    assert!(session.is_alive());
    session.shutdown().await;
}

/// The pid (in this namespace) of a live process whose raw command line is `cmdline`.
fn pid_of(cmdline: &[u8]) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
        (std::fs::read(e.path().join("cmdline")).ok()? == cmdline).then_some(pid)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_process_an_acp_agent_left_outside_its_group_is_stopped_at_shutdown() {
    let ws = workspace();
    let (session, _) = open(&ws.root, true, "", Arc::new(Rules)).await;
    // The agent starts a process in a new session (out of its group) that ignores SIGINT.
    let (outcome, _) = run(
        &session,
        "run setsid sh -c 'trap \"\" INT; exec sleep 600.4242' > /dev/null 2>&1 &",
        TaskMode::Write,
    )
    .await;
    assert_eq!(outcome.unwrap().stop_reason, StopReason::EndTurn);
    // Found by its command line: a pid it reads for itself is its PID namespace's.
    let mut pid = None;
    for _ in 0..500 {
        pid = pid_of(b"sleep\x00600.4242\x00");
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = pid.expect("the orphan runs");
    assert!(process_group_alive(pid), "the orphan leads its own group");
    assert_ne!(pid, session.pgid());
    session.shutdown().await;
    assert!(
        !process_group_alive(pid),
        "found by its LEGATE_RUN marker and killed"
    );
}
