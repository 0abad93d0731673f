//! The MCP front served for a test: [`McpFront`] puts `LegateMcp` on one end of an in-memory
//! pipe and rmcp's own client ([`McpClient`]) on the other, over an engine from the harness;
//! [`McpHttp`] serves the front's HTTP router on 127.0.0.1 for tests that write raw requests.
//!
//! Owns the setup and the calls every MCP suite makes; it never decides what a tool should
//! answer (a test's assertions stay in the test).

use legate_engine::{ApprovalDesk, Engine};
use legate_mcp::http::{HttpOptions, SUPERVISOR_PATH, router_with_supervisor, serve_with};
use legate_mcp::{ApprovalsMcp, LegateMcp, McpOptions, Profile, ServeOptions, Token};
use legate_testkit::raw_http::{self, HOST, JSON, RawResponse, TOKEN, request};
use legate_testkit::{EngineHarness, git};
use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ElicitRequestParams, ElicitResult,
    ElicitationAction, ElicitationCapability, ErrorData, NumberOrString, ProgressNotificationParam,
    ProgressToken, RequestMetaObject,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;

/// An MCP client that records every progress notification and may answer elicitations:
/// `answer` is what it answers next (the capability is declared only when `elicits`; with no
/// answer set it cancels), and every form it was shown is kept in `asked`. With `tasks` it
/// declares the MCP Tasks extension.
#[derive(Clone, Default, Debug)]
pub struct McpClient {
    pub elicits: bool,
    pub tasks: bool,
    pub answer: Arc<Mutex<Option<ElicitResult>>>,
    pub asked: Arc<Mutex<Vec<(String, Value)>>>,
    pub progress: Arc<Mutex<Vec<ProgressNotificationParam>>>,
}

impl McpClient {
    /// A client that declares the elicitation capability.
    pub fn eliciting() -> Self {
        Self {
            elicits: true,
            ..Self::default()
        }
    }
}

impl ClientHandler for McpClient {
    fn get_info(&self) -> ClientConfig {
        let mut info = ClientConfig::default();
        if self.elicits {
            info.capabilities.elicitation = Some(ElicitationCapability::default());
        }
        if self.tasks {
            info.capabilities
                .extensions
                .get_or_insert_with(Default::default)
                .insert(rmcp::model::TASKS_EXTENSION_ID.into(), Default::default());
        }
        info
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams {
            message,
            requested_schema,
            ..
        } = request
        {
            self.asked
                .lock()
                .unwrap()
                .push((message, serde_json::to_value(requested_schema).unwrap()));
        }
        Ok(self
            .answer
            .lock()
            .unwrap()
            .clone()
            .unwrap_or(ElicitResult::new(ElicitationAction::Cancel)))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.progress.lock().unwrap().push(params);
    }
}

/// The options of a front serving `profile`, the rest default.
pub fn profile(profile: Profile) -> McpOptions {
    McpOptions {
        profile,
        ..McpOptions::default()
    }
}

/// A `tools/call` of `name` with `args` (an object; anything else is no arguments).
pub fn params(name: &str, args: Value) -> CallToolRequestParams {
    let mut p = CallToolRequestParams::new(name.to_string());
    p.arguments = Some(args.as_object().cloned().unwrap_or_default());
    p
}

/// The prompt [`McpFront::copy_task`] gives the scripted agent: it changes the greeting of
/// [`McpFront::project`] and writes `NOTES.md`.
pub const COPY_PROMPT: &str = "replace src/greeting.txt: hello => hi\nwrite NOTES.md: # Notes";

/// The criteria [`McpFront::copy_task`] runs with: `greets` (checked) and `notes`.
pub fn copy_criteria() -> Value {
    json!([
        {"id": "greets", "description": "the greeting says hi",
         "check": {"kind": "file-contains", "path": "src/greeting.txt", "text": "hi world"}},
        {"id": "notes", "description": "there are notes"}
    ])
}

/// `LegateMcp` over an engine from the harness, and rmcp's client talking to it.
#[allow(missing_debug_implementations)] // the harness and the engine have none
pub struct McpFront {
    /// The harness that owns the engine and its directory.
    pub kit: EngineHarness,
    /// The engine the front serves.
    pub engine: Engine,
    /// The harness's directory, resolved.
    pub base: PathBuf,
    /// The connected client.
    pub client: RunningService<RoleClient, McpClient>,
    /// The client's handler: what it recorded and what it answers.
    pub handler: McpClient,
}

impl McpFront {
    /// The default harness and options, a client that answers nothing.
    pub async fn start() -> Self {
        Self::serve(
            EngineHarness::start(),
            McpOptions::default(),
            McpClient::default(),
        )
        .await
    }

    /// Serves the engine of `kit` with `options` to a client with `handler`.
    pub async fn serve(kit: EngineHarness, options: McpOptions, handler: McpClient) -> Self {
        let engine = kit.engine.clone();
        let base = kit.base().to_path_buf();
        let server = LegateMcp::new(engine.clone(), options);
        let (server_io, client_io) = tokio::io::duplex(1 << 16);
        tokio::spawn(async move {
            if let Ok(running) = server.serve(server_io).await {
                let _ = running.waiting().await;
            }
        });
        let client = handler.clone().serve(client_io).await.unwrap();
        Self {
            kit,
            engine,
            base,
            client,
            handler,
        }
    }

    /// A call's result, whatever it is.
    pub async fn call_raw(&self, name: &str, args: Value) -> CallToolResult {
        self.client.call_tool(params(name, args)).await.unwrap()
    }

    /// Whether a call failed, and its structured content.
    pub async fn answer(&self, name: &str, args: Value) -> (bool, Value) {
        let r = self.call_raw(name, args).await;
        (r.is_error == Some(true), r.structured_content.unwrap())
    }

    /// A successful call's structured content.
    pub async fn call(&self, name: &str, args: Value) -> Value {
        let r = self.call_raw(name, args).await;
        assert_ne!(
            r.is_error,
            Some(true),
            "{name} failed: {:?}",
            r.structured_content
        );
        r.structured_content.unwrap()
    }

    /// A call to a tool not offered: a JSON-RPC protocol error `-32602` whose data carries
    /// the stable code; returns that code.
    pub async fn refused(&self, name: &str, args: Value) -> String {
        match self.client.call_tool(params(name, args)).await {
            Err(rmcp::ServiceError::McpError(e)) => {
                assert_eq!(
                    e.code,
                    rmcp::model::ErrorCode::INVALID_PARAMS,
                    "{name}: {e:?}"
                );
                assert!(!e.message.is_empty());
                e.data.as_ref().unwrap()["code"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
            other => panic!("{name} should be a protocol error: {other:?}"),
        }
    }

    /// A failed call's error code.
    pub async fn fail(&self, name: &str, args: Value) -> String {
        let r = self.call_raw(name, args).await;
        assert_eq!(
            r.is_error,
            Some(true),
            "{name} should fail: {:?}",
            r.structured_content
        );
        let body = r.structured_content.unwrap();
        assert!(body["error"]["message"].is_string());
        body["error"]["code"].as_str().unwrap().to_string()
    }

    /// A `wait` with `args` that asks for progress under `token`; its structured content.
    pub async fn wait_with_progress(&self, args: Value, token: &str) -> Value {
        let mut p = params("wait", args);
        p.meta = Some(RequestMetaObject::with_progress_token(ProgressToken(
            NumberOrString::String(token.to_string().into()),
        )));
        let r = self.client.call_tool(p).await.unwrap();
        assert_ne!(r.is_error, Some(true), "{:?}", r.structured_content);
        r.structured_content.unwrap()
    }

    /// Waits until the task ended, returning every event collected.
    pub async fn wait_done(&self, task_id: &str) -> Vec<Value> {
        let mut after = 0;
        let mut events = Vec::new();
        for _ in 0..30 {
            let w = self
                .call(
                    "wait",
                    json!({"taskId": task_id, "after": after, "timeoutSeconds": 10}),
                )
                .await;
            events.extend(w["events"].as_array().unwrap().iter().cloned());
            after = w["nextCursor"].as_u64().unwrap();
            if w["ready"] == true && w["hasMore"] == false {
                return events;
            }
        }
        panic!("task {task_id} did not end");
    }

    /// Waits until the task is ready; its `status`.
    pub async fn ended(&self, task_id: &str) -> Value {
        for _ in 0..30 {
            let w = self
                .call("wait", json!({"taskId": task_id, "timeoutSeconds": 10}))
                .await;
            if w["ready"] == true {
                return self.call("status", json!({"taskId": task_id})).await;
            }
        }
        panic!("task {task_id} did not end");
    }

    /// The directory `<base>/<name>`, created.
    pub fn dir(&self, name: &str) -> PathBuf {
        let d = self.base.join(name);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A fresh git project `<base>/<name>`: `src/greeting.txt` and `README.md` committed,
    /// `.env` untracked.
    pub fn project(&self, name: &str) -> PathBuf {
        let project = self.base.join(name);
        std::fs::create_dir_all(project.join("src")).unwrap();
        git(&project, &["init", "-q"]);
        std::fs::write(project.join("src/greeting.txt"), "hello world\nbye\n").unwrap();
        std::fs::write(project.join("README.md"), "# Project\n").unwrap();
        git(&project, &["add", "-A"]);
        git(&project, &["commit", "-q", "-m", "init"]);
        std::fs::write(project.join(".env"), "SECRET=do-not-copy\n").unwrap();
        project
    }

    /// Runs [`COPY_PROMPT`] on a copy of `project` with [`copy_criteria`] until it ends;
    /// returns the task id.
    pub async fn copy_task(&self, project: &Path) -> String {
        let run = self
            .call(
                "run",
                json!({"prompt": COPY_PROMPT, "workspace": {
                    "kind": "copy", "path": project.display().to_string(),
                    "criteria": copy_criteria(),
                }}),
            )
            .await;
        assert_eq!(run["workspace"], "copy", "{run}");
        let id = run["taskId"].as_str().unwrap().to_string();
        let events = self.wait_done(&id).await;
        let status = self.call("status", json!({"taskId": id})).await;
        assert_eq!(status["task"]["state"], "completed", "{status} {events:?}");
        id
    }
}

/// An `initialize` request (JSON-RPC id 1) as a client without capabilities sends it.
pub const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"frontkit-test","version":"0"}}}"#;

/// What an MCP client sends with every request over HTTP.
pub const ACCEPT: &str = "Accept: application/json, text/event-stream";

/// The front's HTTP router (`/mcp`, and `/supervisor/mcp` when a supervisor token is given)
/// served by `serve_with` on 127.0.0.1 over an engine from the harness.
#[allow(missing_debug_implementations)] // the harness and the engine have none
pub struct McpHttp {
    /// The harness that owns the engine and its directory.
    pub kit: EngineHarness,
    /// The engine the front serves.
    pub engine: Engine,
    /// Where the router listens.
    pub addr: SocketAddr,
    /// The supervisor's token, when its server is on `/supervisor/mcp`.
    pub supervisor_token: Option<String>,
    /// Cancels the server.
    pub stop: CancellationToken,
}

impl McpHttp {
    /// The default harness served with `limits`, no supervisor's server.
    pub async fn start(limits: ServeOptions) -> Self {
        Self::serve(EngineHarness::start(), limits, None).await
    }

    /// Serves the engine of `kit` with `limits`, the caller's token [`TOKEN`], and the
    /// supervisor's server on `/supervisor/mcp` when `supervisor_token` is given.
    pub async fn serve(
        kit: EngineHarness,
        limits: ServeOptions,
        supervisor_token: Option<&str>,
    ) -> Self {
        let engine = kit.engine.clone();
        let stop = CancellationToken::new();
        let options = HttpOptions {
            supervisor_token: supervisor_token.map(|t| Token::configured(t).unwrap()),
            ..HttpOptions::loopback(Token::configured(TOKEN).unwrap())
        };
        let supervisor =
            supervisor_token.map(|_| ApprovalsMcp::new(ApprovalDesk::Engine(engine.clone())));
        let app = router_with_supervisor(
            LegateMcp::new(engine.clone(), McpOptions::default()),
            supervisor,
            options,
            stop.clone(),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve_with(listener, app, limits, stop.clone()));
        Self {
            kit,
            engine,
            addr,
            supervisor_token: supervisor_token.map(str::to_string),
            stop,
        }
    }

    /// A POST of `body` to `/mcp` with the caller's token ([`TOKEN`]), then `headers`.
    pub async fn post(&self, headers: &[&str], body: &str) -> RawResponse {
        self.post_as("/mcp", TOKEN, headers, body).await
    }

    /// A POST of `body` to `path` with `token`, JSON and [`ACCEPT`], then `headers`, on a
    /// connection of its own.
    pub async fn post_as(
        &self,
        path: &str,
        token: &str,
        headers: &[&str],
        body: &str,
    ) -> RawResponse {
        let auth = format!("Authorization: Bearer {token}");
        let mut all = vec![HOST, JSON, ACCEPT, auth.as_str(), "Connection: close"];
        all.extend_from_slice(headers);
        raw_http::call(self.addr, &request("POST", path, &all, body))
            .await
            .unwrap()
    }

    /// An initialized session on `path` (opened with [`INITIALIZE`]): its `Mcp-Session-Id`
    /// header line.
    pub async fn session(&self, path: &str, token: &str) -> String {
        let init = self.post_as(path, token, &[], INITIALIZE).await;
        assert_eq!(init.status, 200, "{}", init.body);
        let session = format!("Mcp-Session-Id: {}", init.header("mcp-session-id").unwrap());
        let done = self
            .post_as(
                path,
                token,
                &[&session],
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            )
            .await;
        assert_eq!(done.status, 202, "{}", done.body);
        session
    }

    /// A `tools/call` (JSON-RPC id `id`) on the supervisor's server in `session`; the first
    /// message of its answer.
    pub async fn supervisor_call(&self, session: &str, id: u64, name: &str, args: Value) -> Value {
        let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": name, "arguments": args}})
        .to_string();
        let token = self.supervisor_token.as_deref().unwrap();
        let r = self
            .post_as(SUPERVISOR_PATH, token, &[session], &body)
            .await;
        assert_eq!(r.status, 200, "{}", r.body);
        messages(&r).remove(0)
    }

    /// Stops the server and shuts the engine down.
    pub async fn stop(self) {
        self.stop.cancel();
        self.engine.shutdown().await;
    }
}

/// The JSON-RPC messages of an answer, JSON or SSE.
pub fn messages(r: &RawResponse) -> Vec<Value> {
    if r.header("content-type")
        .is_some_and(|c| c.starts_with("text/event-stream"))
    {
        r.body
            .lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    } else {
        serde_json::from_str(&r.body).into_iter().collect()
    }
}
