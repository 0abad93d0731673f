//! A hostile A2A agent on 127.0.0.1, for the tests that attack Legate from the remote side:
//! a real HTTP/1.1 server speaking A2A v1.0's JSON-RPC binding (its card at the well-known
//! path declaring Legate's supervision and copy-workspace extensions), that answers as a
//! [`Hostility`] says: an answer of gigabytes, an event that never ends, bytes dripped one
//! at a time (its card included), a task that never ends and ignores `CancelTask`, a patch
//! that expands.
//!
//! Huge answers are generated as they are written, a megabyte at a time: nothing large is
//! ever held in the test's memory. The server writes until the client hangs up. It runs on
//! its own thread and runtime, so a plain `#[test]` can use it; it stops when dropped.

use legate_core::remote::{
    COPY_WORKSPACE_EXTENSION, MANIFEST_KEY, PostState, ReturnedManifest, SUPERVISION_EXTENSION,
    sha256_hex,
};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the remote does wrong.
#[derive(Debug, Clone)]
pub enum Hostility {
    /// `SendMessage` starts a task; `GetTask` answers with a body of `bytes` bytes.
    HugeAnswer {
        /// The body's declared and written length.
        bytes: u64,
    },
    /// Like [`Hostility::HugeAnswer`], but the answer is valid A2A: a `working` status whose
    /// message is one text of about `bytes` bytes, on every `GetTask`.
    LargeValidAnswer {
        /// The body's length.
        bytes: u64,
    },
    /// Streams one status naming the task, then one event of `bytes` bytes.
    HugeEvent {
        /// The event's length.
        bytes: u64,
    },
    /// Streams a `working` status every few milliseconds, forever.
    Endless,
    /// Streams one status naming the task, then the next event one byte at a time.
    Drip,
    /// Serves its card one byte at a time, forever.
    DripCard,
    /// `SendMessage` starts a task that stays `working`; `CancelTask` is never answered.
    IgnoresCancel,
    /// Completes at once; `GetTask` returns `patch` as the copy task's `patch` artifact,
    /// claiming it writes `post_state`.
    Patch {
        /// The patch's text.
        patch: String,
        /// What it claims to write.
        post_state: Vec<PostState>,
    },
}

impl Hostility {
    fn streams(&self) -> bool {
        matches!(
            self,
            Hostility::HugeEvent { .. } | Hostility::Endless | Hostility::Drip
        )
    }
}

/// The running server.
#[derive(Debug)]
pub struct HostileRemote {
    /// Its base URL (`http://127.0.0.1:<port>`).
    pub url: String,
    state: Arc<State>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// What the server remembers across connections.
#[derive(Debug, Default)]
struct State {
    /// The A2A methods called, in order.
    seen: Mutex<Vec<String>>,
    /// The baseline id the copy task's message named.
    baseline: Mutex<String>,
}

const TASK: &str = "hostile-task-1";
const CONTEXT: &str = "hostile-context-1";

impl HostileRemote {
    /// Starts the server with `hostility`.
    pub fn start(hostility: Hostility) -> std::io::Result<HostileRemote> {
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let url = format!("http://{}", std_listener.local_addr()?);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let listener = {
            let _in_runtime = rt.enter();
            TcpListener::from_std(std_listener)?
        };
        let state = Arc::new(State::default());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (card_url, log) = (url.clone(), state.clone());
        std::thread::spawn(move || {
            rt.block_on(async move {
                let serve = async {
                    loop {
                        let Ok((socket, _)) = listener.accept().await else {
                            continue;
                        };
                        let (h, u, l) = (hostility.clone(), card_url.clone(), log.clone());
                        tokio::spawn(async move {
                            let _ = connection(socket, &h, &u, &l).await;
                        });
                    }
                };
                tokio::select! {
                    () = serve => {}
                    _ = stopped => {}
                }
            });
        });
        Ok(HostileRemote {
            url,
            state,
            stop: Some(stop),
        })
    }

    /// The A2A methods it was called with, in order.
    pub fn seen(&self) -> Vec<String> {
        self.state
            .seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }
}

impl Drop for HostileRemote {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// One request: its HTTP method and body.
async fn read_request(socket: &mut TcpStream) -> std::io::Result<Option<(String, Vec<u8>)>> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = socket.read(&mut byte).await?;
        if n == 0 {
            return Ok(None);
        }
        buf.extend_from_slice(&byte[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut words = head.split_whitespace();
    let method = words.next().unwrap_or_default().to_string();
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = buf[head_end..].to_vec();
    while body.len() < length {
        let n = socket.read(&mut byte).await?;
        if n == 0 {
            break;
        }
        body.extend_from_slice(&byte[..n]);
    }
    Ok(Some((method, body)))
}

async fn respond(socket: &mut TcpStream, content_type: &str, body: &[u8]) -> std::io::Result<()> {
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    socket.write_all(head.as_bytes()).await?;
    socket.write_all(body).await
}

fn rpc(result: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": "1", "result": result})
        .to_string()
        .into_bytes()
}

fn task(state: &str, artifacts: Value) -> Value {
    json!({"id": TASK, "contextId": CONTEXT, "status": {"state": state}, "artifacts": artifacts})
}

fn card(url: &str, streaming: bool) -> Value {
    json!({
        "name": "Hostile", "description": "a hostile remote", "version": "1",
        "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
        "capabilities": {"streaming": streaming, "extensions": [
            {"uri": SUPERVISION_EXTENSION}, {"uri": COPY_WORKSPACE_EXTENSION}
        ]},
        "defaultInputModes": ["text/plain"], "defaultOutputModes": ["text/plain"], "skills": []
    })
}

/// Writes `total` bytes of `prefix` then filler, a megabyte at a time, until the client
/// hangs up (a write error, returned).
async fn flood(socket: &mut TcpStream, prefix: &[u8], total: u64) -> std::io::Result<()> {
    socket.write_all(prefix).await?;
    let chunk = vec![b'A'; 1 << 20];
    let mut left = total.saturating_sub(prefix.len() as u64);
    while left > 0 {
        let n = usize::try_from(left.min(chunk.len() as u64)).unwrap_or(chunk.len());
        socket.write_all(&chunk[..n]).await?;
        left -= n as u64;
    }
    Ok(())
}

/// The start of a `GetTask` answer whose status message's one text part is the rest.
const HUGE_PREFIX: &[u8] = br#"{"jsonrpc":"2.0","id":"1","result":{"id":"hostile-task-1","contextId":"hostile-context-1","status":{"state":"TASK_STATE_WORKING","message":{"messageId":"m","role":"ROLE_AGENT","parts":[{"text":""#;

const SSE_HEAD: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n";

fn working_event() -> Vec<u8> {
    let update = json!({"statusUpdate": {"taskId": TASK, "contextId": CONTEXT, "status": {"state": "TASK_STATE_WORKING"}}});
    format!("data: {}\n\n", String::from_utf8_lossy(&rpc(update))).into_bytes()
}

async fn stream(socket: &mut TcpStream, hostility: &Hostility) -> std::io::Result<()> {
    socket.write_all(SSE_HEAD).await?;
    socket.write_all(&working_event()).await?;
    match hostility {
        Hostility::HugeEvent { bytes } => flood(socket, b"data: ", *bytes).await,
        Hostility::Drip => loop {
            for b in working_event() {
                socket.write_all(&[b]).await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        },
        _ => loop {
            socket.write_all(&working_event()).await?;
            tokio::time::sleep(Duration::from_millis(5)).await;
        },
    }
}

/// The `patch` artifact for a copy task whose message carried `baseline_id`.
fn patch_artifact(patch: &str, post_state: &[PostState], baseline_id: &str) -> Value {
    let manifest = ReturnedManifest {
        baseline_id: baseline_id.to_string(),
        patch_sha256: sha256_hex(patch.as_bytes()),
        patch_length: patch.len() as u64,
        post_state: post_state.to_vec(),
    };
    json!([{"artifactId": "patch", "name": "patch", "parts": [
        {"text": patch, "mediaType": "text/x-diff"},
        {"data": {MANIFEST_KEY: manifest}}
    ]}])
}

async fn connection(
    mut socket: TcpStream,
    hostility: &Hostility,
    url: &str,
    state: &State,
) -> std::io::Result<()> {
    while let Some((verb, body)) = read_request(&mut socket).await? {
        if verb == "GET" && matches!(hostility, Hostility::DripCard) {
            let head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n";
            socket.write_all(head).await?;
            loop {
                socket.write_all(b" ").await?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        if verb == "GET" {
            let c = card(url, hostility.streams()).to_string();
            respond(&mut socket, "application/json", c.as_bytes()).await?;
            continue;
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or_default();
        let method = request["method"].as_str().unwrap_or_default().to_string();
        let id = request["params"]["id"].as_str().unwrap_or_default();
        if let Some(b) =
            request["params"]["message"]["metadata"][MANIFEST_KEY]["baselineId"].as_str()
            && let Ok(mut held) = state.baseline.lock()
        {
            *held = b.to_string();
        }
        if let Ok(mut s) = state.seen.lock() {
            s.push(method.clone());
        }
        match (method.as_str(), hostility) {
            ("GetTask", _) if id == "legate-token-check" => {
                let e = json!({"jsonrpc": "2.0", "id": "1", "error": {"code": -32001, "message": "task not found"}});
                respond(&mut socket, "application/json", e.to_string().as_bytes()).await?;
            }
            ("SendStreamingMessage", h) => return stream(&mut socket, h).await,
            ("SendMessage", Hostility::Patch { .. }) => {
                let t = rpc(json!({"task": task("TASK_STATE_COMPLETED", json!([]))}));
                respond(&mut socket, "application/json", &t).await?;
            }
            ("SendMessage", _) => {
                let t = rpc(json!({"task": task("TASK_STATE_WORKING", json!([]))}));
                respond(&mut socket, "application/json", &t).await?;
            }
            ("GetTask", Hostility::HugeAnswer { bytes }) => {
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {bytes}\r\n\r\n"
                );
                socket.write_all(head.as_bytes()).await?;
                return flood(&mut socket, HUGE_PREFIX, *bytes).await;
            }
            ("GetTask", Hostility::LargeValidAnswer { bytes }) => {
                let suffix = br#""}]}}}}"#;
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {bytes}\r\n\r\n"
                );
                socket.write_all(head.as_bytes()).await?;
                flood(&mut socket, HUGE_PREFIX, *bytes - suffix.len() as u64).await?;
                socket.write_all(suffix).await?;
            }
            ("GetTask", Hostility::Patch { patch, post_state }) => {
                let baseline = state.baseline.lock().map(|b| b.clone()).unwrap_or_default();
                let artifacts = patch_artifact(patch, post_state, &baseline);
                let t = rpc(task("TASK_STATE_COMPLETED", artifacts));
                respond(&mut socket, "application/json", &t).await?;
            }
            ("GetTask", _) => {
                let t = rpc(task("TASK_STATE_WORKING", json!([])));
                respond(&mut socket, "application/json", &t).await?;
            }
            // Never answered: the connection is held open until the client gives up.
            ("CancelTask", _) => {
                std::future::pending::<()>().await;
            }
            _ => {
                let e = json!({"jsonrpc": "2.0", "id": "1", "error": {"code": -32601, "message": "no such method"}});
                respond(&mut socket, "application/json", e.to_string().as_bytes()).await?;
            }
        }
    }
    Ok(())
}
