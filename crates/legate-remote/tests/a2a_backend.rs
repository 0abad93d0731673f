//! The `a2a` backend against a real A2A server on 127.0.0.1: Legate's own A2A front
//! (`legate_a2a::boot`) over an engine driving the scripted agent (revisor) on real pipes
//! with a real SQLite store, and a local engine whose agent `far` is that remote. Plus a
//! plain HTTP server that is not A2A, a closed port, and a card that is not Legate's.
//!
//! The agent binary must be built first: `cargo build -p legate-testkit --bin
//! legate-scripted-agent` (a plain `cargo test --workspace` does it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{open_err, request, token_file};

use legate_a2a::{A2aOptions, Token};
use legate_backend::{Backend, EventSink, EventStream, RemoteLedger, StopReason, Turn};
use legate_core::{
    AgentSpec, ErrorCode, EventKind, RemoteRef, TaskId, TaskMode, TaskState, TokenRef,
};
use legate_engine::{Engine, SubmitRequest};
use legate_remote::A2aBackend;
use legate_testkit::{EngineHarness, TestAgent};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

/// A remote Legate: an engine serving revisor over A2A with a bearer token.
struct Back {
    url: String,
    engine: Engine,
    stop: CancellationToken,
}

impl Back {
    async fn start(base: &Path) -> Back {
        let engine = EngineHarness::builder()
            .agent(TestAgent::scripted("revisor"))
            .engine_in(base);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let options = A2aOptions {
            token: Some(Token::configured(TOKEN).unwrap()),
            public_url: url.clone(),
            max_body_bytes: 1 << 20,
            probe_limit: Duration::from_secs(20),
            copy_roots: Vec::new(),
            agents: vec!["revisor".into()],
        };
        let (router, report) = legate_a2a::boot(&engine, &options).await;
        assert_eq!(report.served.len(), 1, "{:?}", report.failed);
        let stop = CancellationToken::new();
        let s = stop.clone();
        tokio::spawn(async move { legate_a2a::serve(listener, router, s).await });
        Back { url, engine, stop }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.engine.shutdown().await;
    }
}

fn far(url: &str, token: Option<PathBuf>, allow_unsupervised: bool) -> AgentSpec {
    let mut spec = AgentSpec::url("far", legate_remote::kind(), url);
    if let legate_core::Transport::Url(r) = &mut spec.transport {
        r.token = token.map(TokenRef::File);
        r.agent = Some("revisor".into());
        r.allow_unsupervised = allow_unsupervised;
    }
    spec
}

/// A ledger that remembers each binding and what the sink had carried when it was called.
#[derive(Debug)]
struct Ledger {
    stream: Arc<Mutex<EventStream>>,
    calls: Mutex<Vec<(RemoteRef, Vec<EventKind>)>>,
}

impl RemoteLedger for Ledger {
    fn record(&self, _task: &TaskId, remote: &RemoteRef) -> legate_core::Result<()> {
        let mut before = Vec::new();
        while let Ok(e) = self.stream.lock().unwrap().try_recv() {
            before.push(e);
        }
        self.calls.lock().unwrap().push((remote.clone(), before));
        Ok(())
    }
}

fn turn(prompt: &str, mode: TaskMode) -> Turn {
    Turn {
        task_id: TaskId("local-1".into()),
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

fn drain(stream: &Mutex<EventStream>) -> Vec<EventKind> {
    let mut out = Vec::new();
    while let Ok(e) = stream.lock().unwrap().try_recv() {
        out.push(e);
    }
    out
}

fn text(events: &[EventKind]) -> String {
    events
        .iter()
        .filter_map(|e| match e {
            EventKind::Message { text } => Some(text.as_str()),
            _ => None,
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_streams_and_the_ledger_comes_before_any_event() {
    let dir = tempfile::tempdir().unwrap();
    let back = Back::start(&dir.path().join("back")).await;
    let (sink, stream) = EventSink::channel();
    let stream = Arc::new(Mutex::new(stream));
    let ledger = Arc::new(Ledger {
        stream: stream.clone(),
        calls: Mutex::new(Vec::new()),
    });
    let spec = far(&back.url, Some(token_file(dir.path(), TOKEN)), true);
    let session = A2aBackend::default()
        .open(
            request(dir.path(), spec, Some(ledger.clone())),
            sink.clone(),
        )
        .await
        .unwrap();
    let info = session.agent_info();
    assert!(
        info.capabilities.iter().any(|c| c == "a2a JSONRPC"),
        "{info:?}"
    );
    assert!(
        info.capabilities.iter().any(|c| c.starts_with("skill: ")),
        "{info:?}"
    );
    let out = session
        .prompt(
            turn("!say first line\\nsecond line", TaskMode::Write),
            sink.clone(),
        )
        .await
        .unwrap();
    assert_eq!(out.stop_reason, StopReason::EndTurn);
    let calls = ledger.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    let (bound, before) = &calls[0];
    // Before the binding was durable, only the session's opening notice had been sent.
    assert!(
        before.iter().all(|e| matches!(e, EventKind::Notice { .. })),
        "{before:?}"
    );
    assert_eq!(bound.binding, "JSONRPC");
    assert_eq!(bound.url, format!("{}/agents/revisor", back.url));
    let events = drain(&stream);
    // The remote task is the one bound, and it completed there; its answer is relayed
    // whole, line by line, and once (not again from its answer artifact).
    let remote = back.engine.task(&bound.task_id).unwrap();
    assert_eq!(remote.state, TaskState::Completed);
    let relayed = text(&events);
    assert!(
        relayed.starts_with("first line\nsecond line\n"),
        "{events:?}"
    );
    // The back hides its workspace's path from its caller (issue 29, finding 8).
    let root = remote.root.as_ref().unwrap().to_string_lossy().into_owned();
    assert_eq!(
        relayed.trim_end(),
        remote
            .result
            .as_ref()
            .unwrap()
            .text
            .trim_end()
            .replace(&root, "<workspace>")
    );
    assert_eq!(session.session_id(), remote.context_id);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, EventKind::Session { .. }))
    );
    back.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_answered_in_the_same_remote_task() {
    let dir = tempfile::tempdir().unwrap();
    let back = Back::start(&dir.path().join("back")).await;
    let (sink, stream) = EventSink::channel();
    let spec = far(&back.url, Some(token_file(dir.path(), TOKEN)), true);
    let session = A2aBackend::default()
        .open(request(dir.path(), spec, None), sink.clone())
        .await
        .unwrap();
    // An empty message asks for input on a remote Legate.
    let out = session
        .prompt(turn("", TaskMode::Write), sink.clone())
        .await
        .unwrap();
    assert_eq!(out.stop_reason, StopReason::InputRequired);
    let stream = Mutex::new(stream);
    let question = text(&drain(&stream));
    assert!(question.contains("reply into this task"), "{question}");
    let waiting = back
        .engine
        .tasks(&legate_engine::TaskFilter::default())
        .unwrap();
    assert_eq!(waiting.len(), 1);
    assert_eq!(waiting[0].state, TaskState::InputRequired);
    let out = session
        .prompt(turn("!say the answer", TaskMode::Write), sink.clone())
        .await
        .unwrap();
    assert_eq!(out.stop_reason, StopReason::EndTurn);
    assert!(text(&drain(&stream)).starts_with("the answer\n"));
    // The reply went into the same remote task.
    let after = back.engine.task(&waiting[0].id.0).unwrap();
    assert_eq!(after.state, TaskState::Completed);
    assert_eq!(after.prompt, "!say the answer");
    back.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_the_remote_through_the_local_engine() {
    let dir = tempfile::tempdir().unwrap();
    let back = Back::start(&dir.path().join("back")).await;
    let spec = far(&back.url, Some(token_file(dir.path(), TOKEN)), true);
    let front = EngineHarness::builder()
        .config(move |c| {
            c.agents.insert("far".into(), spec);
        })
        .engine_in(&dir.path().join("front"));
    let mut req = SubmitRequest::new("!hang");
    req.agent = Some("far".into());
    let task = front.submit(req).unwrap();
    // Wait for the remote task to be running there.
    let remote = loop {
        let tasks = back
            .engine
            .tasks(&legate_engine::TaskFilter::default())
            .unwrap();
        if let Some(t) = tasks.into_iter().find(|t| t.state == TaskState::Working) {
            break t;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    front.cancel(&task.id.0).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(30), front.wait(&task.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.state, TaskState::Canceled);
    let there = tokio::time::timeout(Duration::from_secs(30), back.engine.wait(&remote.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(there.state, TaskState::Canceled);
    front.shutdown().await;
    back.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_task_on_the_remote_completes_with_its_answer() {
    let dir = tempfile::tempdir().unwrap();
    let back = Back::start(&dir.path().join("back")).await;
    let spec = far(&back.url, Some(token_file(dir.path(), TOKEN)), true);
    let front = EngineHarness::builder()
        .config(move |c| {
            c.agents.insert("far".into(), spec);
        })
        .engine_in(&dir.path().join("front"));
    let mut req = SubmitRequest::new("!usage 11 4\n!say done remotely");
    req.agent = Some("far".into());
    let task = front.submit(req).unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(60), front.wait(&task.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ended.state, TaskState::Completed, "{:?}", ended.error);
    assert!(
        ended
            .result
            .as_ref()
            .unwrap()
            .text
            .starts_with("done remotely\n")
    );
    let usage = ended.usage.expect("the remote's usage is counted");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (Some(11), Some(4))
    );
    front.shutdown().await;
    back.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_is_unauthenticated_and_never_echoed() {
    let dir = tempfile::tempdir().unwrap();
    let back = Back::start(&dir.path().join("back")).await;
    let wrong = "wrong-token-wrong-token-wrong-token-00";
    let e = open_err(far(&back.url, Some(token_file(dir.path(), wrong)), true)).await;
    assert_eq!(e.code, ErrorCode::RemoteUnauthenticated, "{e}");
    assert!(
        e.message.contains("bearer token is wrong"),
        "the remote's words: {e}"
    );
    assert!(!e.message.contains(wrong), "{e}");
    let e = open_err(far(&back.url, None, true)).await;
    assert_eq!(e.code, ErrorCode::RemoteUnauthenticated, "{e}");
    back.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_is_unreachable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let e = open_err(far(&url, None, true)).await;
    assert_eq!(e.code, ErrorCode::RemoteUnreachable, "{e}");
}

/// Serves `router` on 127.0.0.1 and returns its URL.
async fn plain(router: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_is_not_a2a_is_a_protocol_error() {
    let url = plain(
        axum::Router::new()
            .fallback(|| async { (axum::http::StatusCode::OK, "<html>\x1b[2J hello</html>") }),
    )
    .await;
    let mut spec = far(&url, None, true);
    if let legate_core::Transport::Url(r) = &mut spec.transport {
        r.agent = None;
    }
    let e = open_err(spec).await;
    assert_eq!(e.code, ErrorCode::RemoteProtocolError, "{e}");
    assert!(!e.message.contains('\x1b'), "{e}");
}

/// A foreign A2A card (no Legate supervision extension) whose interface is this server.
async fn foreign() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let card = serde_json::json!({
        "name": "Foreign", "description": "not a Legate", "version": "0.1",
        "supportedInterfaces": [{"url": format!("{url}/rpc"), "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": true},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"],
        "skills": [{"id": "s", "name": "Answers", "description": "d", "tags": []}]
    });
    let router = axum::Router::new()
        .route(
            "/.well-known/agent-card.json",
            axum::routing::get(move || {
                let card = card.clone();
                async move { axum::Json(card) }
            }),
        )
        .route(
            "/rpc",
            axum::routing::post(|| async {
                axum::Json(serde_json::json!({"jsonrpc": "2.0", "id": "x", "error": {"code": -32001, "message": "no such task"}}))
            }),
        );
    tokio::spawn(async move { axum::serve(listener, router).await });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_task_on_an_unsupervised_remote_is_refused() {
    let url = foreign().await;
    let dir = tempfile::tempdir().unwrap();
    let mut spec = far(&url, None, false);
    if let legate_core::Transport::Url(r) = &mut spec.transport {
        r.agent = None;
    }
    let (sink, _stream) = EventSink::channel();
    let session = A2aBackend::default()
        .open(request(dir.path(), spec, None), sink.clone())
        .await
        .unwrap();
    assert!(
        session
            .agent_info()
            .capabilities
            .iter()
            .any(|c| c == "unsupervised")
    );
    assert_eq!(session.agent_info().name.as_deref(), Some("Foreign"));
    let e = session
        .prompt(turn("change things", TaskMode::Write), sink.clone())
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::AgentUnsupervised, "{e}");
    assert!(e.message.contains("allow_unsupervised"), "{e}");
}

/// A copy task on a remote whose card does not declare the copy-workspace extension is
/// refused before any file leaves: `REMOTE_WORKSPACE_UNSUPPORTED`, and the remote saw nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_task_needs_the_workspace_extension() {
    let url = foreign().await;
    let mut spec = far(&url, None, true);
    if let legate_core::Transport::Url(r) = &mut spec.transport {
        r.agent = None;
    }
    let front = EngineHarness::builder()
        .project(&[("a.txt", "hello\n")])
        .config(move |c| {
            c.agents.insert("far".into(), spec);
        })
        .start();
    let mut req = front.on_copy("change a.txt");
    req.agent = Some("far".into());
    let task = front.run(req).await;
    assert_eq!(task.state, TaskState::Failed);
    let error = task.error.unwrap();
    assert_eq!(
        error.code,
        ErrorCode::RemoteWorkspaceUnsupported,
        "{error:?}"
    );
}

/// The binding is recorded before the first relayed event even when the remote's first
/// update already carries an answer (a status update naming the task, with text).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_update_is_recorded_before_it_is_relayed() {
    let url = foreign().await;
    let mut spec = far(&url, None, true);
    if let legate_core::Transport::Url(r) = &mut spec.transport {
        r.agent = None;
    }
    let remote = legate_remote::connect::Remote::connect(&spec, &EventSink::channel().0)
        .await
        .unwrap();
    let (sink, stream) = EventSink::channel();
    let stream = Arc::new(Mutex::new(stream));
    let ledger = Arc::new(Ledger {
        stream: stream.clone(),
        calls: Mutex::new(Vec::new()),
    });
    let as_ledger: Arc<dyn RemoteLedger> = ledger.clone();
    let cancel = CancellationToken::new();
    let task = TaskId("local".into());
    let mut follow = legate_remote::follow::Follow {
        remote: &remote,
        task: &task,
        ledger: Some(&as_ledger),
        sink: &sink,
        cancel: &cancel,
        relay: legate_remote::translate::Relay::new(Default::default()),
        recorded: false,
        cancel_sent: false,
    };
    let mut m = a2a::Message::new(a2a::Role::Agent, vec![a2a::Part::text("the answer")]);
    m.task_id = Some("r1".into());
    let first = a2a::StreamResponse::StatusUpdate(a2a::TaskStatusUpdateEvent {
        task_id: "r1".into(),
        context_id: "c1".into(),
        status: a2a::TaskStatus {
            state: a2a::TaskState::Completed,
            message: Some(m),
            timestamp: None,
        },
        metadata: None,
    });
    follow.relay_update(&first).unwrap();
    let calls = ledger.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].0.task_id, "r1");
    assert_eq!(calls[0].0.context_id.as_deref(), Some("c1"));
    assert!(
        calls[0].1.is_empty(),
        "relayed before recorded: {:?}",
        calls[0].1
    );
    assert_eq!(text(&drain(&stream)), "the answer");
}

/// A hostile remote names its task with hostile text: empty, control characters, a
/// megabyte of id, or a second task id in the middle of the turn. Each is refused as
/// `REMOTE_PROTOCOL_ERROR` before it is recorded or relayed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_remote_task_ids_are_refused_before_they_are_recorded() {
    let url = foreign().await;
    let mut spec = far(&url, None, true);
    if let legate_core::Transport::Url(r) = &mut spec.transport {
        r.agent = None;
    }
    let remote = legate_remote::connect::Remote::connect(&spec, &EventSink::channel().0)
        .await
        .unwrap();
    let status = |task: &str, context: &str| {
        let m = a2a::Message::new(a2a::Role::Agent, vec![a2a::Part::text("hostile")]);
        a2a::StreamResponse::StatusUpdate(a2a::TaskStatusUpdateEvent {
            task_id: task.into(),
            context_id: context.into(),
            status: a2a::TaskStatus {
                state: a2a::TaskState::Working,
                message: Some(m),
                timestamp: None,
            },
            metadata: None,
        })
    };
    let huge = "x".repeat(1 << 20);
    let cases: Vec<(Vec<a2a::StreamResponse>, usize)> = vec![
        (vec![status("", "c1")], 0),
        (vec![status("r1\x1b[2J\nforged", "c1")], 0),
        (vec![status(&huge, "c1")], 0),
        (vec![status("r1", &huge)], 0),
        (vec![status("r1", "c1"), status("r2", "c1")], 1),
    ];
    for (updates, recorded) in cases {
        let (sink, stream) = EventSink::channel();
        let stream = Arc::new(Mutex::new(stream));
        let ledger = Arc::new(Ledger {
            stream: stream.clone(),
            calls: Mutex::new(Vec::new()),
        });
        let as_ledger: Arc<dyn RemoteLedger> = ledger.clone();
        let cancel = CancellationToken::new();
        let task = TaskId("local".into());
        let mut follow = legate_remote::follow::Follow {
            remote: &remote,
            task: &task,
            ledger: Some(&as_ledger),
            sink: &sink,
            cancel: &cancel,
            relay: legate_remote::translate::Relay::new(Default::default()),
            recorded: false,
            cancel_sent: false,
        };
        let (last, first) = updates.split_last().unwrap();
        for u in first {
            follow.relay_update(u).unwrap();
        }
        drain(&stream);
        let e = follow.relay_update(last).unwrap_err();
        assert_eq!(e.code, ErrorCode::RemoteProtocolError, "{e}");
        assert!(e.message.len() < 1024, "the id is not echoed whole");
        assert!(!e.message.contains('\x1b'), "{e}");
        assert_eq!(ledger.calls.lock().unwrap().len(), recorded);
        assert!(drain(&stream).is_empty(), "nothing of it is relayed");
    }
}

/// The bounded transport speaks HTTP+JSON too (Legate's own server prefers JSON-RPC, so the
/// sessions above never use it): a send, a `GetTask` and a streamed message, against the
/// back's HTTP+JSON interface.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bounded_transport_speaks_http_json() {
    use a2a_client::{Transport, TransportFactory};
    use futures::StreamExt;
    let dir = tempfile::tempdir().unwrap();
    let back = Back::start(&dir.path().join("back")).await;
    let http = reqwest::Client::new();
    let found = legate_remote::card::fetch(
        &http,
        &back.url,
        Some("revisor"),
        None,
        &legate_remote::tap::TapRoute::default(),
    )
    .await
    .unwrap();
    let iface = found
        .card
        .supported_interfaces
        .iter()
        .find(|i| i.protocol_binding == a2a::TRANSPORT_PROTOCOL_HTTP_JSON)
        .unwrap();
    let limits = legate_remote::wire::Limits::default();
    let rest = legate_remote::wire::BoundedFactory::rest(http, limits, Default::default())
        .create(&found.card, iface)
        .await
        .unwrap();
    let params = a2a_client::ServiceParams::from([
        ("authorization".to_string(), vec![format!("Bearer {TOKEN}")]),
        (
            a2a::SVC_PARAM_VERSION.to_string(),
            vec![a2a::VERSION.to_string()],
        ),
    ]);
    let send = |text: &str, id: &str| a2a::SendMessageRequest {
        message: {
            let mut m = a2a::Message::new(a2a::Role::User, vec![a2a::Part::text(text)]);
            m.message_id = id.into();
            m
        },
        configuration: None,
        metadata: None,
        tenant: None,
    };
    let a2a::SendMessageResponse::Task(t) = rest
        .send_message(&params, &send("!say over rest", "rest-1"))
        .await
        .unwrap()
    else {
        panic!("not a task");
    };
    let get = a2a::GetTaskRequest {
        id: t.id.clone(),
        history_length: Some(0),
        tenant: None,
    };
    assert_eq!(rest.get_task(&params, &get).await.unwrap().id, t.id);
    let updates: Vec<_> = rest
        .send_streaming_message(&params, &send("!say streamed over rest", "rest-2"))
        .await
        .unwrap()
        .collect()
        .await;
    assert!(updates.len() > 1, "{updates:?}");
    assert!(updates.iter().all(Result::is_ok), "{updates:?}");
    // An unknown task is the server's A2A error, read from a bounded error body.
    let missing = a2a::GetTaskRequest {
        id: "no-such-task".into(),
        ..get
    };
    assert!(rest.get_task(&params, &missing).await.is_err());
    back.stop().await;
}

/// Every frame a tapped turn hands over, as handed.
#[derive(Debug, Default)]
struct Frames(Mutex<Vec<(legate_core::TapDirection, legate_core::TapProtocol, String)>>);

impl legate_backend::TapRecorder for Frames {
    fn record(
        &self,
        direction: legate_core::TapDirection,
        protocol: legate_core::TapProtocol,
        frame: &str,
    ) {
        self.0
            .lock()
            .unwrap()
            .push((direction, protocol, frame.to_string()));
    }
}

/// The wire tap of a remote agent's turn (issue 34): the A2A request Legate sent and the
/// answers it read, both ways, as `a2a` frames; and the session keeps no sink once the turn
/// is over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tapped_turn_hands_over_its_a2a_requests_and_answers() {
    use legate_core::{TapDirection, TapProtocol};
    let dir = tempfile::tempdir().unwrap();
    let back = Back::start(&dir.path().join("back")).await;
    let frames = Arc::new(Frames::default());
    let (sink, _stream) = EventSink::channel();
    let sink = sink.with_tap(frames.clone());
    let spec = far(&back.url, Some(token_file(dir.path(), TOKEN)), true);
    let session = A2aBackend::default()
        .open(request(dir.path(), spec, None), sink.clone())
        .await
        .unwrap();
    let out = session
        .prompt(turn("!say over the tapped wire", TaskMode::Write), sink)
        .await
        .unwrap();
    assert_eq!(out.stop_reason, StopReason::EndTurn);
    let got = frames.0.lock().unwrap().clone();
    assert!(
        got.iter().all(|(_, p, _)| *p == TapProtocol::A2a),
        "{got:?}"
    );
    assert!(
        got.iter().any(|(d, _, f)| *d == TapDirection::ToAgent
            && f.contains("SendStreamingMessage")
            && f.contains("over the tapped wire")),
        "{got:?}"
    );
    assert!(
        got.iter()
            .any(|(d, _, f)| *d == TapDirection::FromAgent && f.contains("over the tapped wire")),
        "{got:?}"
    );
    // The turn's sink (and its recorder) went with the turn.
    assert_eq!(Arc::strong_count(&frames), 1);
    back.stop().await;
}
