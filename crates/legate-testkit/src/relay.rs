//! A remote agent on a real socket, for the engine's re-attachment tests: [`RelayServer`]
//! plays a server whose tasks outlive the Legate process that started them, and
//! [`RelayBackend`] is a backend with `Capabilities::reattach` that talks to it.
//!
//! The server runs on its own thread and runtime, listening on 127.0.0.1, so it outlives an
//! engine (and the runtime) a test drops to play a process that died. Its tasks move only when
//! the test says so ([`RelayServer::say`], [`RelayServer::finish`]) or a client cancels one,
//! so a test decides what happens while no Legate follows a task.
//!
//! The wire is one JSON object per line over TCP. A client's first line is a request:
//!
//! | request | answer, then |
//! |---|---|
//! | `{"op":"send","prompt":P}` | `{"task":ID,"context":C}`, then the task's lines from the start |
//! | `{"op":"subscribe","task":ID}` | `{"task":ID}` (or `{"error":…}` and the end), then the lines from now on |
//! | `{"op":"cancel","task":ID}` | `{"ok":true}`; the task ends `canceled` unless it had ended |
//!
//! A task's lines are `{"message":TEXT}` and, last, its end: `{"end":"completed","usage":…}`,
//! `{"end":"failed","code":CODE,"message":M}`, `{"end":"input-required","question":Q}` or
//! `{"end":"canceled"}`. The backend records the task (`RemoteLedger::record`) before it
//! relays any of its lines, and re-attaches by the recorded reference's URL alone.
//!
//! Test code only: it panics where a test would fail anyway and must never ship.

use async_trait::async_trait;
use legate_backend::{
    AgentInfo, AgentSession, Backend, Canceller, Capabilities, Continuation, EventSink,
    SessionFacts, SessionRequest, StopReason, Turn, TurnOutcome,
};
use legate_core::{Error, ErrorCode, EventKind, RemoteRef, Result, Usage};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::net::tcp::OwnedReadHalf;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The binding name the relay backend records.
pub const RELAY_BINDING: &str = "relay";

/// How a remote task ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteEnd {
    /// It completed, reporting this many output tokens.
    Completed { output_tokens: u64 },
    /// It failed with this error code (a Legate code's wire string) and message.
    Failed { code: String, message: String },
    /// It asks the caller a question.
    InputRequired { question: String },
    /// It was canceled.
    Canceled,
}

impl RemoteEnd {
    fn line(&self) -> Value {
        match self {
            RemoteEnd::Completed { output_tokens } => {
                json!({"end": "completed", "usage": {"outputTokens": output_tokens}})
            }
            RemoteEnd::Failed { code, message } => {
                json!({"end": "failed", "code": code, "message": message})
            }
            RemoteEnd::InputRequired { question } => {
                json!({"end": "input-required", "question": question})
            }
            RemoteEnd::Canceled => json!({"end": "canceled"}),
        }
    }
}

#[derive(Debug, Default)]
struct RemoteTask {
    prompt: String,
    lines: Vec<Value>,
    end: Option<Value>,
    cancels: usize,
}

#[derive(Debug, Default)]
struct State {
    tasks: BTreeMap<String, RemoteTask>,
    order: Vec<String>,
    subscriptions: usize,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    /// Bumped at every change; connections and tests wait on it.
    version: watch::Sender<u64>,
}

impl Shared {
    fn change(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
        self.version.send_modify(|v| *v += 1);
    }

    fn read<T>(&self, f: impl FnOnce(&State) -> T) -> T {
        f(&self.state.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The remote server. Stopped (its listener closed, its connections dropped) when dropped.
#[derive(Debug)]
pub struct RelayServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RelayServer {
    /// Starts the server on 127.0.0.1, on a port of the kernel's choosing.
    pub fn start() -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap_or_else(|e| panic!("bind 127.0.0.1: {e}"));
        listener
            .set_nonblocking(true)
            .unwrap_or_else(|e| panic!("nonblocking listener: {e}"));
        let addr = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("listener address: {e}"));
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            version: watch::channel(0).0,
        });
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let serving = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap_or_else(|e| panic!("relay runtime: {e}"));
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener)
                    .unwrap_or_else(|e| panic!("listener: {e}"));
                tokio::pin!(stopped);
                loop {
                    tokio::select! {
                        _ = &mut stopped => return,
                        accepted = listener.accept() => {
                            if let Ok((conn, _)) = accepted {
                                tokio::spawn(serve(conn, serving.clone()));
                            }
                        }
                    }
                }
            });
        });
        Self {
            addr,
            shared,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The URL a reference to one of its tasks carries.
    pub fn url(&self) -> String {
        format!("tcp://{}", self.addr)
    }

    /// Closes the listener and every connection: the remote is unreachable from now on.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }

    /// Waits until `ready` says `Some`, re-checking at every change of the server's state;
    /// panics after [`crate::harness::WAIT_LIMIT`] saying what it waited for.
    async fn until<T>(&self, what: &str, ready: impl Fn(&State) -> Option<T>) -> T {
        let mut version = self.shared.version.subscribe();
        let waited = tokio::time::timeout(crate::harness::WAIT_LIMIT, async {
            loop {
                if let Some(found) = self.shared.read(&ready) {
                    return found;
                }
                version
                    .changed()
                    .await
                    .unwrap_or_else(|e| panic!("the relay server stopped: {e}"));
            }
        })
        .await;
        waited.unwrap_or_else(|_| panic!("the relay server never saw {what}"))
    }

    /// Waits until the server has `n` tasks; returns the id of the `n`th (1-based).
    pub async fn task(&self, n: usize) -> String {
        self.until(&format!("task {n}"), |s| s.order.get(n - 1).cloned())
            .await
    }

    /// Waits until `n` subscriptions (re-attachments) have been accepted in all.
    pub async fn subscribed(&self, n: usize) {
        self.until(&format!("{n} subscriptions"), |s| {
            (s.subscriptions >= n).then_some(())
        })
        .await;
    }

    /// How many subscriptions were accepted in all.
    pub fn subscriptions(&self) -> usize {
        self.shared.read(|s| s.subscriptions)
    }

    /// How many cancels task `id` received.
    pub fn cancels(&self, id: &str) -> usize {
        self.shared
            .read(|s| s.tasks.get(id).map_or(0, |t| t.cancels))
    }

    /// Waits until task `id` received a cancel.
    pub async fn canceled(&self, id: &str) {
        self.until(&format!("a cancel of {id}"), |s| {
            s.tasks.get(id).filter(|t| t.cancels > 0).map(|_| ())
        })
        .await;
    }

    /// The prompt task `id` was sent with.
    pub fn prompt(&self, id: &str) -> Option<String> {
        self.shared
            .read(|s| s.tasks.get(id).map(|t| t.prompt.clone()))
    }

    /// The remote agent says `text` in task `id`.
    pub fn say(&self, id: &str, text: &str) {
        self.shared.change(|s| {
            if let Some(t) = s.tasks.get_mut(id) {
                t.lines.push(json!({ "message": text }));
            }
        });
    }

    /// Task `id` ends so, unless it had ended.
    pub fn finish(&self, id: &str, end: RemoteEnd) {
        self.shared.change(|s| {
            if let Some(t) = s.tasks.get_mut(id) {
                t.end.get_or_insert_with(|| end.line());
            }
        });
    }
}

impl Drop for RelayServer {
    fn drop(&mut self) {
        self.stop();
    }
}

async fn serve(conn: TcpStream, shared: Arc<Shared>) {
    let (read, mut write) = conn.into_split();
    let mut lines = BufReader::new(read).lines();
    let Ok(Some(first)) = lines.next_line().await else {
        return;
    };
    let request: Value = serde_json::from_str(&first).unwrap_or(Value::Null);
    let op = request["op"].as_str().unwrap_or("");
    let task = request["task"].as_str().unwrap_or("").to_string();
    let (id, from) = match op {
        "send" => {
            let mut id = String::new();
            shared.change(|s| {
                id = format!("remote-{}", s.order.len() + 1);
                s.order.push(id.clone());
                s.tasks.insert(
                    id.clone(),
                    RemoteTask {
                        prompt: request["prompt"].as_str().unwrap_or("").to_string(),
                        ..RemoteTask::default()
                    },
                );
            });
            let context = format!("context-of-{id}");
            if send(&mut write, &json!({"task": id, "context": context}))
                .await
                .is_err()
            {
                return;
            }
            (id, 0)
        }
        "subscribe" => {
            let Some(from) = shared.read(|s| s.tasks.get(&task).map(|t| t.lines.len())) else {
                let _ = send(&mut write, &json!({"error": "no such task"})).await;
                return;
            };
            shared.change(|s| s.subscriptions += 1);
            if send(&mut write, &json!({ "task": task })).await.is_err() {
                return;
            }
            (task, from)
        }
        "cancel" => {
            shared.change(|s| {
                if let Some(t) = s.tasks.get_mut(&task) {
                    t.cancels += 1;
                    t.end.get_or_insert_with(|| RemoteEnd::Canceled.line());
                }
            });
            let _ = send(&mut write, &json!({"ok": true})).await;
            return;
        }
        _ => {
            let _ = send(&mut write, &json!({"error": "unknown request"})).await;
            return;
        }
    };
    // Stream the task's lines from `from`, then its end.
    let mut version = shared.version.subscribe();
    let mut next = from;
    loop {
        let (fresh, end) = shared.read(|s| {
            let t = &s.tasks[&id];
            (t.lines[next.min(t.lines.len())..].to_vec(), t.end.clone())
        });
        next += fresh.len();
        for line in &fresh {
            if send(&mut write, line).await.is_err() {
                return;
            }
        }
        if let Some(end) = end {
            let _ = send(&mut write, &end).await;
            return;
        }
        if version.changed().await.is_err() {
            return;
        }
    }
}

async fn send(write: &mut tokio::net::tcp::OwnedWriteHalf, line: &Value) -> std::io::Result<()> {
    let mut bytes = line.to_string().into_bytes();
    bytes.push(b'\n');
    write.write_all(&bytes).await
}

/// The backend that runs turns on a [`RelayServer`] and follows them after a restart.
#[derive(Debug)]
pub struct RelayBackend {
    addr: String,
    reattaches: AtomicUsize,
}

impl RelayBackend {
    /// A backend whose new turns go to `server`.
    pub fn new(server: &RelayServer) -> Self {
        Self {
            addr: server.addr.to_string(),
            reattaches: AtomicUsize::new(0),
        }
    }

    /// How many times `reattach` was called on this backend.
    pub fn reattaches(&self) -> usize {
        self.reattaches.load(Ordering::SeqCst)
    }
}

fn unreachable(addr: &str, e: &std::io::Error) -> Error {
    Error::new(
        ErrorCode::RemoteUnreachable,
        format!("the relay server at {addr} could not be reached: {e}"),
    )
}

async fn connect(addr: &str, request: &Value) -> Result<(BufReader<OwnedReadHalf>, Value)> {
    let conn = TcpStream::connect(addr)
        .await
        .map_err(|e| unreachable(addr, &e))?;
    let (read, mut write) = conn.into_split();
    send(&mut write, request)
        .await
        .map_err(|e| unreachable(addr, &e))?;
    // The write half stays open until the answer is read: the server answers on this socket.
    let mut reader = BufReader::new(read);
    let mut first = String::new();
    reader
        .read_line(&mut first)
        .await
        .map_err(|e| unreachable(addr, &e))?;
    drop(write);
    let answer: Value = serde_json::from_str(&first).map_err(|_| {
        Error::new(
            ErrorCode::RemoteProtocolError,
            "the relay server's answer is not JSON",
        )
    })?;
    if let Some(e) = answer["error"].as_str() {
        return Err(Error::new(
            ErrorCode::RemoteProtocolError,
            format!("the relay server refused: {e}"),
        ));
    }
    // The reader keeps what came after the answer: the task's first lines may be in it.
    Ok((reader, answer))
}

/// Relays a task's lines to `sink` until its end, which becomes the turn's outcome. When
/// `cancel` fires, the task is canceled on `addr` (once) and its end still awaited.
async fn relay(
    addr: &str,
    task: &str,
    read: BufReader<OwnedReadHalf>,
    sink: &EventSink,
    cancel: &CancellationToken,
) -> Result<TurnOutcome> {
    let mut lines = read.lines();
    let mut asked = false;
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line,
            _ = cancel.cancelled(), if !asked => {
                asked = true;
                cancel_remote(addr, task).await?;
                continue;
            }
        };
        let Some(line) = line.map_err(|e| unreachable(addr, &e))? else {
            return Err(Error::new(
                ErrorCode::RemoteUnreachable,
                "the relay server closed the stream before the task ended",
            ));
        };
        let v: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
        if let (None, Some(text)) = (v.get("end"), v["message"].as_str()) {
            sink.send(EventKind::Message {
                text: text.to_string(),
            });
            continue;
        }
        let stop_reason = match v["end"].as_str() {
            Some("completed") => StopReason::EndTurn,
            Some("canceled") => StopReason::Cancelled,
            Some("input-required") => {
                sink.send(EventKind::Message {
                    text: v["question"].as_str().unwrap_or("").to_string(),
                });
                StopReason::InputRequired
            }
            Some("failed") => {
                let code = v["code"]
                    .as_str()
                    .and_then(ErrorCode::parse)
                    .unwrap_or(ErrorCode::RemoteProtocolError);
                return Err(Error::new(
                    code,
                    v["message"].as_str().unwrap_or("the remote task failed"),
                ));
            }
            _ => {
                return Err(Error::new(
                    ErrorCode::RemoteProtocolError,
                    "the relay server sent a line that is neither a message nor an end",
                ));
            }
        };
        let usage = v["usage"]["outputTokens"].as_u64().map(|n| Usage {
            output_tokens: Some(n),
            ..Usage::default()
        });
        return Ok(TurnOutcome { stop_reason, usage });
    }
}

async fn cancel_remote(addr: &str, task: &str) -> Result<()> {
    connect(addr, &json!({"op": "cancel", "task": task}))
        .await
        .map(|_| ())
}

#[async_trait]
impl Backend for RelayBackend {
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            structured_output: false,
            effort: false,
            model_listing: false,
            local_process: false,
            continuation: Continuation::None,
            default_preset: legate_supervisor::Preset::generic(),
            reattach: true,
            tool_controls: false,
            copy_tool_controls: false,
        }
    }

    async fn open(
        &self,
        request: SessionRequest,
        _sink: EventSink,
    ) -> Result<Arc<dyn AgentSession>> {
        Ok(Arc::new(RelaySession {
            addr: self.addr.clone(),
            ledger: request.ledger,
            current: Arc::default(),
            facts: SessionFacts::new(
                AgentInfo {
                    name: Some("relay".into()),
                    ..AgentInfo::default()
                },
                false,
            ),
            alive: AtomicBool::new(true),
        }))
    }

    async fn reattach(
        &self,
        _request: SessionRequest,
        _turn: Turn,
        remote: RemoteRef,
        sink: EventSink,
        cancel: CancellationToken,
    ) -> Result<TurnOutcome> {
        self.reattaches.fetch_add(1, Ordering::SeqCst);
        let addr = remote
            .url
            .strip_prefix("tcp://")
            .ok_or_else(|| Error::new(ErrorCode::RemoteProtocolError, "not a relay URL"))?;
        let (read, _) = connect(addr, &json!({"op": "subscribe", "task": remote.task_id})).await?;
        relay(addr, &remote.task_id, read, &sink, &cancel).await
    }
}

#[derive(Debug)]
struct RelaySession {
    addr: String,
    ledger: Option<Arc<dyn legate_backend::RemoteLedger>>,
    /// The remote task of the running turn, and the token that cancels it.
    current: Arc<Mutex<Option<CancellationToken>>>,
    facts: SessionFacts,
    alive: AtomicBool,
}

#[derive(Debug)]
struct RelayCanceller(Arc<Mutex<Option<CancellationToken>>>);

impl Canceller for RelayCanceller {
    fn cancel(&self) {
        if let Some(token) = self.0.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            token.cancel();
        }
    }
}

#[async_trait]
impl AgentSession for RelaySession {
    fn facts(&self) -> &SessionFacts {
        &self.facts
    }
    async fn prompt(&self, turn: Turn, sink: EventSink) -> Result<TurnOutcome> {
        let (read, answer) =
            connect(&self.addr, &json!({"op": "send", "prompt": turn.prompt})).await?;
        let remote = RemoteRef {
            url: format!("tcp://{}", self.addr),
            binding: RELAY_BINDING.into(),
            task_id: answer["task"].as_str().unwrap_or("").to_string(),
            context_id: answer["context"].as_str().map(str::to_string),
        };
        // Durable before told: nothing of the turn is relayed before the binding is stored.
        if let Some(ledger) = &self.ledger {
            ledger.record(&turn.task_id, &remote)?;
        }
        let token = CancellationToken::new();
        *self.current.lock().unwrap_or_else(|p| p.into_inner()) = Some(token.clone());
        relay(&self.addr, &remote.task_id, read, &sink, &token).await
    }
    fn canceller(&self) -> Arc<dyn Canceller> {
        Arc::new(RelayCanceller(self.current.clone()))
    }
    fn is_alive(&self) -> bool {
        self.alive.load(Ordering::SeqCst)
    }
    async fn shutdown(&self) {
        self.alive.store(false, Ordering::SeqCst);
    }
}
