//! Drives revisor through the SDK's `Client` over a real in-memory pipe.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::{
    CancelNotification, ClientCapabilities, ContentBlock, FileSystemCapabilities,
    InitializeRequest, LoadSessionRequest, NewSessionRequest, PromptRequest, ReadTextFileRequest,
    ReadTextFileResponse, RequestPermissionOutcome, RequestPermissionRequest,
    RequestPermissionResponse, SelectedPermissionOutcome, SessionId, SessionNotification,
    SessionUpdate, SetSessionModeRequest, StopReason, TextContent, ToolCallContent, ToolCallStatus,
    ToolKind, WriteTextFileRequest, WriteTextFileResponse,
};
use agent_client_protocol::{Agent, ByteStreams, Client, Error, ErrorCode};
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

/// What the client saw, and how it answers permission requests.
#[derive(Default)]
struct Recorder {
    updates: Mutex<Vec<SessionUpdate>>,
    permissions: Mutex<Vec<RequestPermissionRequest>>,
    /// Option ids to pick, in order; `"cancelled"` answers the cancelled outcome.
    answers: Mutex<VecDeque<String>>,
    fs_calls: Mutex<Vec<String>>,
    /// Send `session/cancel` as soon as a tool call goes `in_progress`.
    cancel_when_running: Mutex<bool>,
}

impl Recorder {
    fn new(answers: &[&str]) -> Arc<Self> {
        let recorder = Self::default();
        recorder
            .answers
            .lock()
            .unwrap()
            .extend(answers.iter().map(|a| (*a).to_owned()));
        Arc::new(recorder)
    }

    fn updates(&self) -> Vec<SessionUpdate> {
        self.updates.lock().unwrap().clone()
    }

    fn answer_text(&self) -> String {
        self.updates()
            .into_iter()
            .filter_map(|u| match u {
                SessionUpdate::AgentMessageChunk(chunk) => match chunk.content {
                    ContentBlock::Text(text) => Some(text.text),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    /// Final status of each tool call, in announcement order: (title, kind, status, text).
    fn tool_calls(&self) -> Vec<(String, ToolKind, ToolCallStatus, String)> {
        let mut calls: Vec<(String, String, ToolKind, ToolCallStatus, String)> = Vec::new();
        for update in self.updates() {
            match update {
                SessionUpdate::ToolCall(call) => calls.push((
                    call.tool_call_id.0.to_string(),
                    call.title,
                    call.kind,
                    call.status,
                    String::new(),
                )),
                SessionUpdate::ToolCallUpdate(update) => {
                    let call = calls
                        .iter_mut()
                        .find(|c| *c.0 == *update.tool_call_id.0)
                        .expect("update of an announced tool call");
                    if let Some(status) = update.fields.status {
                        call.3 = status;
                    }
                    for content in update.fields.content.unwrap_or_default() {
                        if let ToolCallContent::Content(content) = content
                            && let ContentBlock::Text(text) = content.content
                        {
                            call.4 = text.text;
                        }
                    }
                }
                _ => {}
            }
        }
        calls
            .into_iter()
            .map(|(_, title, kind, status, text)| (title, kind, status, text))
            .collect()
    }
}

fn text(prompt: &str) -> Vec<ContentBlock> {
    vec![ContentBlock::Text(TextContent::new(prompt))]
}

/// Starts revisor on one end of a duplex pipe and runs `body` as a client on the other.
async fn with_revisor<T>(
    recorder: Arc<Recorder>,
    fs: bool,
    body: impl AsyncFnOnce(ConnectionTo<Agent>) -> Result<T, Error>,
) -> T {
    let (client_io, agent_io) = tokio::io::duplex(1 << 16);
    let (agent_read, agent_write) = tokio::io::split(agent_io);
    let agent = tokio::spawn(legate_revisor::serve(
        agent_read.compat(),
        agent_write.compat_write(),
    ));
    let (client_read, client_write) = tokio::io::split(client_io);
    let transport = ByteStreams::new(client_write.compat_write(), client_read.compat());

    let (r1, r2, r3, r4) = (
        recorder.clone(),
        recorder.clone(),
        recorder.clone(),
        recorder,
    );
    let result = Client
        .v1()
        .on_receive_notification(
            async move |notification: SessionNotification, cx: ConnectionTo<Agent>| {
                let running = matches!(
                    &notification.update,
                    SessionUpdate::ToolCallUpdate(u)
                        if u.fields.status == Some(ToolCallStatus::InProgress)
                );
                if running && *r1.cancel_when_running.lock().unwrap() {
                    cx.send_notification(CancelNotification::new(notification.session_id.clone()))?;
                }
                r1.updates.lock().unwrap().push(notification.update);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_request(
            async move |request: RequestPermissionRequest, responder, _cx| {
                let answer = r2
                    .answers
                    .lock()
                    .unwrap()
                    .pop_front()
                    .unwrap_or_else(|| "reject".to_owned());
                r2.permissions.lock().unwrap().push(request);
                let outcome = if answer == "cancelled" {
                    RequestPermissionOutcome::Cancelled
                } else {
                    RequestPermissionOutcome::Selected(SelectedPermissionOutcome::new(answer))
                };
                responder.respond(RequestPermissionResponse::new(outcome))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ReadTextFileRequest, responder, _cx| {
                r3.fs_calls
                    .lock()
                    .unwrap()
                    .push(format!("read {}", request.path.display()));
                match std::fs::read_to_string(&request.path) {
                    Ok(content) => responder.respond(ReadTextFileResponse::new(content)),
                    Err(error) => responder.respond_with_error(Error::into_internal_error(error)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: WriteTextFileRequest, responder, _cx| {
                r4.fs_calls
                    .lock()
                    .unwrap()
                    .push(format!("write {}", request.path.display()));
                match std::fs::write(&request.path, &request.content) {
                    Ok(()) => responder.respond(WriteTextFileResponse::new()),
                    Err(error) => responder.respond_with_error(Error::into_internal_error(error)),
                }
            },
            agent_client_protocol::on_receive_request!(),
        )
        .connect_with(transport, async |cx: ConnectionTo<Agent>| {
            let caps = ClientCapabilities::new().fs(FileSystemCapabilities::new()
                .read_text_file(fs)
                .write_text_file(fs));
            let init = cx
                .send_request(InitializeRequest::new(ProtocolVersion::V1).client_capabilities(caps))
                .block_task()
                .await?;
            let info = init.agent_info.expect("agent info");
            assert_eq!(info.name, "revisor");
            assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
            assert!(init.agent_capabilities.load_session);
            body(cx).await
        })
        .await;
    let value = tokio::time::timeout(Duration::from_secs(5), agent)
        .await
        .expect("revisor stops when the client goes away")
        .expect("revisor task");
    value.expect("revisor served cleanly");
    result.expect("client session")
}

async fn new_session(cx: &ConnectionTo<Agent>, dir: &Path) -> Result<SessionId, Error> {
    let response = cx
        .send_request(NewSessionRequest::new(dir.to_path_buf()))
        .block_task()
        .await?;
    let modes = response.modes.expect("modes");
    assert_eq!(&*modes.current_mode_id.0, "default");
    let ids: Vec<&str> = modes.available_modes.iter().map(|m| &*m.id.0).collect();
    assert_eq!(ids, vec!["default", "plan"]);
    Ok(response.session_id)
}

async fn prompt(
    cx: &ConnectionTo<Agent>,
    session: &SessionId,
    prompt: &str,
) -> Result<StopReason, Error> {
    Ok(cx
        .send_request(PromptRequest::new(session.clone(), text(prompt)))
        .block_task()
        .await?
        .stop_reason)
}

#[tokio::test]
async fn writes_refusals_commands_and_plan_exit() {
    let dir = tempfile::tempdir().unwrap();
    let root: PathBuf = dir.path().canonicalize().unwrap();
    let recorder = Recorder::new(&[
        "allow",
        "reject",
        "allow",
        "allow_always",
        "exit-plan-default",
    ]);
    let stop = with_revisor(recorder.clone(), false, async |cx| {
        let session = new_session(&cx, &root).await?;
        prompt(
            &cx,
            &session,
            "Write notes/hello.txt: hello\\nworld\\n\n\
             write refused.txt: nope\n\
             run echo from-run\n\
             run echo oops >&2; exit 4\n\
             plan: ship it\n\
             What is in hello.txt?",
        )
        .await
    })
    .await;
    assert_eq!(stop, StopReason::EndTurn);
    assert_eq!(
        std::fs::read_to_string(root.join("notes/hello.txt")).unwrap(),
        "hello\nworld\n"
    );
    assert!(!root.join("refused.txt").exists());

    let permissions = recorder.permissions.lock().unwrap().clone();
    assert_eq!(permissions.len(), 5);
    let ids: Vec<&str> = permissions[0]
        .options
        .iter()
        .map(|o| &*o.option_id.0)
        .collect();
    assert_eq!(ids, vec!["allow_always", "allow", "reject"]);
    let plan_ids: Vec<&str> = permissions[4]
        .options
        .iter()
        .map(|o| &*o.option_id.0)
        .collect();
    assert_eq!(
        plan_ids,
        vec!["exit-plan-default", "exit-plan-accept-edits", "reject"]
    );
    assert_eq!(
        permissions[4].tool_call.fields.kind,
        Some(ToolKind::SwitchMode)
    );

    let calls = recorder.tool_calls();
    let summary: Vec<(&str, ToolKind, ToolCallStatus)> = calls
        .iter()
        .map(|(title, kind, status, _)| (title.as_str(), *kind, *status))
        .collect();
    assert_eq!(
        summary,
        vec![
            (
                "Write notes/hello.txt",
                ToolKind::Edit,
                ToolCallStatus::Completed
            ),
            ("Write refused.txt", ToolKind::Edit, ToolCallStatus::Failed),
            (
                "echo from-run",
                ToolKind::Execute,
                ToolCallStatus::Completed
            ),
            (
                "echo oops >&2; exit 4",
                ToolKind::Execute,
                ToolCallStatus::Failed
            ),
            (
                "Ready to code?",
                ToolKind::SwitchMode,
                ToolCallStatus::Completed
            ),
        ]
    );
    assert_eq!(calls[1].3, legate_revisor::REFUSED);
    assert_eq!(calls[2].3, "exit 0\nfrom-run\n");
    assert_eq!(calls[3].3, "exit 4\noops\n");

    let updates = recorder.updates();
    assert!(
        matches!(&updates[0], SessionUpdate::Plan(plan) if plan.entries.len() == 6),
        "a turn starts with its plan: {:?}",
        updates[0]
    );
    assert!(updates.iter().any(|u| matches!(u,
        SessionUpdate::CurrentModeUpdate(m) if &*m.current_mode_id.0 == "default")));
    assert!(
        matches!(updates.last(), Some(SessionUpdate::UsageUpdate(u)) if u.used > 0),
        "a turn ends with usage"
    );
    let answer = recorder.answer_text();
    assert!(
        answer.contains("notes/hello.txt (hello.txt): 2 lines"),
        "{answer}"
    );
    assert!(answer.contains("- Write refused.txt: refused."), "{answer}");
}

#[tokio::test]
async fn refusing_to_leave_plan_mode_ends_the_turn_cancelled() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let recorder = Recorder::new(&["reject"]);
    let stop = with_revisor(recorder.clone(), false, async |cx| {
        let session = new_session(&cx, &root).await?;
        prompt(&cx, &session, "plan: refactor\nwrite after.txt: no").await
    })
    .await;
    assert_eq!(stop, StopReason::Cancelled);
    assert!(!root.join("after.txt").exists());
    assert_eq!(recorder.permissions.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn plan_mode_refuses_changes_without_asking() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("keep.txt"), "one\ntwo\n").unwrap();
    let recorder = Recorder::new(&[]);
    let stop = with_revisor(recorder.clone(), false, async |cx| {
        let session = new_session(&cx, &root).await?;
        cx.send_request(SetSessionModeRequest::new(session.clone(), "plan"))
            .block_task()
            .await?;
        let bad = cx
            .send_request(SetSessionModeRequest::new(session.clone(), "yolo"))
            .block_task()
            .await
            .expect_err("unknown mode");
        assert_eq!(bad.code, ErrorCode::INVALID_PARAMS);
        prompt(
            &cx,
            &session,
            "write a.txt: x\ndelete keep.txt\nrun touch ran\nread keep.txt",
        )
        .await
    })
    .await;
    assert_eq!(stop, StopReason::EndTurn);
    assert!(recorder.permissions.lock().unwrap().is_empty());
    assert!(!root.join("a.txt").exists() && !root.join("ran").exists());
    assert!(root.join("keep.txt").exists());
    let calls = recorder.tool_calls();
    for call in &calls[..3] {
        assert_eq!(call.2, ToolCallStatus::Failed);
        assert_eq!(call.3, legate_revisor::PLAN_MODE_REFUSAL);
    }
    assert_eq!(calls[3].1, ToolKind::Read);
    assert_eq!(calls[3].2, ToolCallStatus::Completed);
    assert!(recorder.answer_text().contains("    two"));
}

#[tokio::test]
async fn edits_go_through_client_fs_when_offered() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::write(root.join("log.txt"), "a\n").unwrap();
    std::fs::write(root.join("lib.rs"), "fn old() {}\n").unwrap();
    let recorder = Recorder::new(&["allow", "allow", "allow", "allow"]);
    with_revisor(recorder.clone(), true, async |cx| {
        let session = new_session(&cx, &root).await?;
        prompt(
            &cx,
            &session,
            "append log.txt: b\\n\nreplace lib.rs: old => new\nmove log.txt -> logs/log.txt\ndelete lib.rs",
        )
        .await
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(root.join("logs/log.txt")).unwrap(),
        "a\nb\n"
    );
    assert!(!root.join("lib.rs").exists());
    let fs_calls = recorder.fs_calls.lock().unwrap().clone();
    let log = root.join("log.txt");
    let lib = root.join("lib.rs");
    assert_eq!(
        fs_calls,
        vec![
            format!("read {}", log.display()),
            format!("write {}", log.display()),
            format!("read {}", lib.display()),
            format!("write {}", lib.display()),
        ]
    );
    let permissions = recorder.permissions.lock().unwrap().clone();
    let move_locations: Vec<PathBuf> = permissions[2]
        .tool_call
        .fields
        .locations
        .clone()
        .unwrap()
        .into_iter()
        .map(|l| l.path)
        .collect();
    assert_eq!(move_locations, vec![log, root.join("logs/log.txt")]);
}

#[tokio::test]
async fn cancel_stops_a_running_command() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let recorder = Recorder::new(&["allow"]);
    *recorder.cancel_when_running.lock().unwrap() = true;
    let started = std::time::Instant::now();
    let stop = with_revisor(recorder.clone(), false, async |cx| {
        let session = new_session(&cx, &root).await?;
        prompt(&cx, &session, "run sleep 30\nwrite never.txt: x").await
    })
    .await;
    assert_eq!(stop, StopReason::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(!root.join("never.txt").exists());
}

#[tokio::test]
async fn bad_sessions_are_rejected_and_load_accepts_well_formed_ids() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let recorder = Recorder::new(&[]);
    with_revisor(recorder.clone(), false, async |cx| {
        let relative = cx
            .send_request(NewSessionRequest::new("relative/dir"))
            .block_task()
            .await
            .expect_err("relative cwd");
        assert_eq!(relative.code, ErrorCode::INVALID_PARAMS);
        let missing = cx
            .send_request(NewSessionRequest::new(root.join("missing")))
            .block_task()
            .await
            .expect_err("missing cwd");
        assert_eq!(missing.code, ErrorCode::INVALID_PARAMS);
        let unknown = cx
            .send_request(PromptRequest::new("nobody", text("hi")))
            .block_task()
            .await
            .expect_err("unknown session");
        assert_ne!(unknown.code, ErrorCode::INTERNAL_ERROR);
        let malformed = cx
            .send_request(LoadSessionRequest::new("../../x", root.clone()))
            .block_task()
            .await
            .expect_err("malformed id");
        assert_eq!(malformed.code, ErrorCode::INVALID_PARAMS);
        let loaded = cx
            .send_request(LoadSessionRequest::new(
                "from-another-process",
                root.clone(),
            ))
            .block_task()
            .await?;
        assert_eq!(&*loaded.modes.expect("modes").current_mode_id.0, "default");
        let stop = prompt(&cx, &SessionId::new("from-another-process"), "how big?").await?;
        assert_eq!(stop, StopReason::EndTurn);
        Ok(())
    })
    .await;
    assert!(recorder.answer_text().contains("holds 0 files, 0 bytes"));
}

#[tokio::test]
async fn raw_wire_accepts_string_and_number_ids_and_rejects_bad_params() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
    let (client_io, agent_io) = tokio::io::duplex(1 << 16);
    let (agent_read, agent_write) = tokio::io::split(agent_io);
    let agent = tokio::spawn(legate_revisor::serve(
        agent_read.compat(),
        agent_write.compat_write(),
    ));
    let (client_read, mut client_write) = tokio::io::split(client_io);
    let mut lines = BufReader::new(client_read).lines();
    let mut exchange = async |line: &str| -> serde_json::Value {
        client_write.write_all(line.as_bytes()).await.unwrap();
        client_write.write_all(b"\n").await.unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), lines.next_line())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        serde_json::from_str(&reply).unwrap()
    };
    let init = exchange(
        r#"{"jsonrpc":"2.0","id":"init-1","method":"initialize","params":{"protocolVersion":1}}"#,
    )
    .await;
    assert_eq!(init["id"], "init-1");
    assert_eq!(init["result"]["agentInfo"]["name"], "revisor");
    let bad =
        exchange(r#"{"jsonrpc":"2.0","id":7,"method":"session/new","params":{"cwd":5}}"#).await;
    assert_eq!(bad["id"], 7);
    assert_eq!(bad["error"]["code"], -32602);
    let relative = exchange(
        r#"{"jsonrpc":"2.0","id":8,"method":"session/new","params":{"cwd":"x","mcpServers":[]}}"#,
    )
    .await;
    assert_eq!(relative["error"]["code"], -32602);
    drop(client_write);
    drop(lines);
    tokio::time::timeout(Duration::from_secs(5), agent)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
}
