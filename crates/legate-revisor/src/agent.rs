//! The ACP side of revisor: connection-wide state and the request handlers.
//!
//! This module owns what one connection remembers (the client's capabilities and the
//! sessions it opened) and the handlers for `initialize`, `session/new`, `session/load`,
//! `session/set_mode`, `session/prompt` and `session/cancel`, and (through a
//! [`crate::SessionHook`], else "method not found") `session/resume`, `session/close` and
//! `session/list`. Handlers run inside the
//! SDK's dispatch loop, so they must never await the client: a prompt is moved, with its
//! responder, into a spawned task ([`crate::turn`]). Spawned tasks must never return an
//! error (that would shut the whole connection down); they answer the request instead.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, ClientCapabilities, CloseSessionRequest,
    CloseSessionResponse, ContentBlock, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, LoadSessionRequest, LoadSessionResponse,
    NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse, ResumeSessionRequest,
    ResumeSessionResponse, SessionConfigOption, SessionConfigOptionCategory,
    SessionConfigSelectOption, SessionId, SessionMode, SessionModeId, SessionModeState,
    SetSessionConfigOptionRequest, SetSessionConfigOptionResponse, SetSessionModeRequest,
    SetSessionModeResponse, Usage,
};
use agent_client_protocol::{Agent, ConnectTo, Error};
use tokio_util::sync::CancellationToken;

use crate::RevisorOptions;

/// The mode in which revisor asks before every change.
pub(crate) const MODE_DEFAULT: &str = "default";
/// The mode in which revisor refuses every change itself.
pub(crate) const MODE_PLAN: &str = "plan";
/// The mode a plan approval may land in; recorded, but revisor still asks in it.
pub(crate) const MODE_ACCEPT_EDITS: &str = "acceptEdits";

/// The id of the config option (category `model`) through which a client picks a model.
pub const MODEL_CONFIG_ID: &str = "model";
/// The models revisor offers (it has none: they change nothing but their name), the first
/// being the default.
pub const MODELS: [(&str, &str); 2] = [
    ("revisor-standard", "Revisor standard"),
    ("revisor-thorough", "Revisor thorough"),
];

/// Locks a mutex, ignoring poisoning (the data are plain values that stay consistent).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What one connection remembers.
#[derive(Debug)]
pub(crate) struct Connection {
    pub(crate) options: RevisorOptions,
    pub(crate) client: Mutex<ClientCapabilities>,
    sessions: Mutex<HashMap<SessionId, Arc<Session>>>,
}

/// One session: where it works and what mode it is in.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) id: SessionId,
    pub(crate) cwd: PathBuf,
    mode: Mutex<String>,
    /// The model picked through the `model` config option.
    model: Mutex<String>,
    /// The running turn's cancellation; replaced at the start of every turn.
    cancel: Mutex<CancellationToken>,
    /// "Tokens" so far: whitespace-separated words of prompts and answers.
    pub(crate) words: AtomicU64,
    /// The MCP servers the client handed the session (revisor connects to none; a directive
    /// hook may report them).
    pub(crate) mcp_servers: Vec<agent_client_protocol::v1::schema::McpServer>,
}

impl Session {
    fn new(
        id: SessionId,
        cwd: PathBuf,
        mode: &str,
        mcp_servers: Vec<agent_client_protocol::v1::schema::McpServer>,
    ) -> Self {
        Self {
            id,
            cwd,
            mcp_servers,
            mode: Mutex::new(mode.to_owned()),
            model: Mutex::new(MODELS[0].0.to_owned()),
            cancel: Mutex::new(CancellationToken::new()),
            words: AtomicU64::new(0),
        }
    }

    pub(crate) fn mode(&self) -> String {
        lock(&self.mode).clone()
    }

    /// The model picked through the `model` config option.
    pub(crate) fn model(&self) -> String {
        lock(&self.model).clone()
    }

    pub(crate) fn set_mode(&self, mode: &str) {
        mode.clone_into(&mut lock(&self.mode));
    }

    /// Starts a turn: a fresh cancellation token that `session/cancel` will trip.
    pub(crate) fn begin_turn(&self) -> CancellationToken {
        let token = CancellationToken::new();
        *lock(&self.cancel) = token.clone();
        token
    }

    fn cancel(&self) {
        lock(&self.cancel).cancel();
    }
}

/// The config options every session offers: the model, as a select of [`MODELS`].
fn config_options(current_model: &str) -> Vec<SessionConfigOption> {
    let options: Vec<SessionConfigSelectOption> = MODELS
        .iter()
        .map(|(id, name)| SessionConfigSelectOption::new(*id, *name))
        .collect();
    vec![
        SessionConfigOption::select(MODEL_CONFIG_ID, "Model", current_model.to_owned(), options)
            .category(SessionConfigOptionCategory::Model),
    ]
}

/// The modes every session offers.
fn mode_state(current: &str) -> SessionModeState {
    SessionModeState::new(
        SessionModeId::new(current),
        vec![
            SessionMode::new(MODE_DEFAULT, "Default")
                .description("Asks before every change or command"),
            SessionMode::new(MODE_PLAN, "Plan")
                .description("Reads and answers only; refuses every change or command"),
        ],
    )
}

/// An absolute, existing directory, or `invalid_params`.
fn checked_cwd(cwd: &Path) -> Result<PathBuf, Error> {
    if !cwd.is_absolute() {
        return Err(Error::invalid_params().data(serde_json::json!({
            "reason": "cwd must be an absolute path",
            "cwd": cwd,
        })));
    }
    if !cwd.is_dir() {
        return Err(Error::invalid_params().data(serde_json::json!({
            "reason": "cwd must be an existing directory",
            "cwd": cwd,
        })));
    }
    Ok(cwd.to_path_buf())
}

/// Whether a session id from the client looks like one revisor could have issued:
/// 1 to 128 characters of ASCII letters, digits, `-`, `_`, `.` or `:`.
fn well_formed_session_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 128
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
}

fn unknown_session(id: &SessionId) -> Error {
    agent_client_protocol::v1::schema::Error::session_not_found(id.clone()).into()
}

impl Connection {
    pub(crate) fn new(options: RevisorOptions) -> Self {
        Self {
            options,
            client: Mutex::new(ClientCapabilities::default()),
            sessions: Mutex::new(HashMap::new()),
        }
    }

    fn session(&self, id: &SessionId) -> Result<Arc<Session>, Error> {
        lock(&self.sessions)
            .get(id)
            .cloned()
            .ok_or_else(|| unknown_session(id))
    }

    fn initialize(&self, request: &InitializeRequest) -> InitializeResponse {
        *lock(&self.client) = request.client_capabilities.clone();
        tracing::debug!(
            read = request.client_capabilities.fs.read_text_file,
            write = request.client_capabilities.fs.write_text_file,
            terminal = request.client_capabilities.terminal,
            "client capabilities"
        );
        let load = self
            .options
            .sessions
            .as_ref()
            .is_none_or(|h| h.load_session());
        let mut capabilities = AgentCapabilities::new().load_session(load);
        if let Some(hook) = &self.options.sessions {
            capabilities = capabilities.session_capabilities(hook.capabilities());
        }
        InitializeResponse::new(ProtocolVersion::V1)
            .agent_capabilities(capabilities)
            .agent_info(match &self.options.agent_info {
                Some((name, version)) => Implementation::new(name.clone(), version.clone()),
                None => Implementation::new("revisor", env!("CARGO_PKG_VERSION"))
                    .title("Legate revisor (no model)"),
            })
    }

    fn new_session(&self, request: &NewSessionRequest) -> Result<NewSessionResponse, Error> {
        let cwd = checked_cwd(&request.cwd)?;
        let id = SessionId::new(format!("revisor-{}", uuid::Uuid::new_v4()));
        if let Some(hook) = &self.options.sessions {
            hook.created(&id, &cwd);
        }
        let session = Arc::new(Session::new(
            id.clone(),
            cwd,
            MODE_DEFAULT,
            request.mcp_servers.clone(),
        ));
        lock(&self.sessions).insert(id.clone(), session);
        Ok(NewSessionResponse::new(id)
            .modes(mode_state(MODE_DEFAULT))
            .config_options(config_options(MODELS[0].0)))
    }

    fn load_session(&self, request: &LoadSessionRequest) -> Result<LoadSessionResponse, Error> {
        let cwd = checked_cwd(&request.cwd)?;
        if !well_formed_session_id(&request.session_id.0) {
            return Err(Error::invalid_params().data(serde_json::json!({
                "reason": "malformed session id",
                "sessionId": request.session_id,
            })));
        }
        let mode = self.reopen(&request.session_id, cwd, request.mcp_servers.clone());
        Ok(LoadSessionResponse::new()
            .modes(mode_state(&mode))
            .config_options(config_options(MODELS[0].0)))
    }

    /// Opens session `id` again at `cwd` (a load or a resume), keeping the mode of a session
    /// this process knows: the cwd is the client's to choose. Returns that mode.
    fn reopen(
        &self,
        id: &SessionId,
        cwd: PathBuf,
        mcp_servers: Vec<agent_client_protocol::v1::schema::McpServer>,
    ) -> String {
        let mut sessions = lock(&self.sessions);
        let mode = sessions
            .get(id)
            .map_or_else(|| MODE_DEFAULT.to_owned(), |s| s.mode());
        let session = Arc::new(Session::new(id.clone(), cwd, &mode, mcp_servers));
        sessions.insert(id.clone(), session);
        mode
    }

    fn hook(&self) -> Result<&Arc<dyn crate::SessionHook>, Error> {
        self.options
            .sessions
            .as_ref()
            .ok_or_else(Error::method_not_found)
    }

    fn resume_session(
        &self,
        request: &ResumeSessionRequest,
    ) -> Result<ResumeSessionResponse, Error> {
        let cwd = checked_cwd(&request.cwd)?;
        if !well_formed_session_id(&request.session_id.0) {
            return Err(unknown_session(&request.session_id));
        }
        self.hook()?.resume(request)?;
        let mode = self.reopen(&request.session_id, cwd, request.mcp_servers.clone());
        Ok(ResumeSessionResponse::new()
            .modes(mode_state(&mode))
            .config_options(config_options(MODELS[0].0)))
    }

    fn close_session(&self, request: &CloseSessionRequest) -> Result<CloseSessionResponse, Error> {
        let hook = self.hook()?;
        if let Some(session) = lock(&self.sessions).remove(&request.session_id) {
            session.cancel();
        }
        hook.close(request)?;
        Ok(CloseSessionResponse::new())
    }

    fn list_sessions(&self, request: &ListSessionsRequest) -> Result<ListSessionsResponse, Error> {
        self.hook()?.list(request)
    }

    /// Tells the hook, if any, that a prompt is about to run.
    fn prompted(&self, request: &PromptRequest) {
        if let Some(hook) = &self.options.sessions {
            let text: Vec<&str> = request
                .prompt
                .iter()
                .filter_map(|block| match block {
                    ContentBlock::Text(t) => Some(t.text.as_str()),
                    _ => None,
                })
                .collect();
            hook.prompted(&request.session_id, &text.join("\n"));
        }
    }

    fn set_config_option(
        &self,
        request: &SetSessionConfigOptionRequest,
    ) -> Result<SetSessionConfigOptionResponse, Error> {
        let session = self.session(&request.session_id)?;
        let value = request.value.as_value_id().map(|v| v.0.to_string());
        let known = value
            .as_deref()
            .filter(|v| MODELS.iter().any(|(id, _)| id == v));
        match (&*request.config_id.0, known) {
            (MODEL_CONFIG_ID, Some(model)) => {
                model.clone_into(&mut lock(&session.model));
                Ok(SetSessionConfigOptionResponse::new(config_options(model)))
            }
            _ => Err(Error::invalid_params().data(serde_json::json!({
                "reason": "unknown config option or value",
                "configId": request.config_id,
                "value": value,
            }))),
        }
    }

    fn set_mode(&self, request: &SetSessionModeRequest) -> Result<SetSessionModeResponse, Error> {
        let session = self.session(&request.session_id)?;
        let mode = &*request.mode_id.0;
        if mode != MODE_DEFAULT && mode != MODE_PLAN {
            return Err(Error::invalid_params().data(serde_json::json!({
                "reason": "unknown mode",
                "modeId": mode,
                "available": [MODE_DEFAULT, MODE_PLAN],
            })));
        }
        session.set_mode(mode);
        Ok(SetSessionModeResponse::new())
    }

    fn cancel(&self, notification: &CancelNotification) {
        if let Ok(session) = self.session(&notification.session_id) {
            session.cancel();
        }
    }
}

/// A source of tool call ids, unique within the process.
pub(crate) fn next_tool_call_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    format!("revisor_tool_{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// `builder` with a handler for each `Request => method` pair that answers the request with
/// `shared.method(&request)` (each handler holding its own clone of `shared`).
macro_rules! answered_by {
    ($builder:expr, $shared:expr, { $($request:ty => $method:ident),* $(,)? }) => {
        $builder
        $(
            .on_receive_request(
                {
                    let shared = $shared.clone();
                    async move |request: $request, responder, _cx| {
                        responder.respond_with_result(shared.$method(&request))
                    }
                },
                agent_client_protocol::on_receive_request!(),
            )
        )*
    };
}

/// Serves revisor on `transport` until the client goes away.
pub(crate) async fn run(
    options: RevisorOptions,
    transport: impl ConnectTo<Agent> + 'static,
) -> Result<(), Error> {
    let shared = Arc::new(Connection::new(options));
    let (initializing, prompting, canceling) = (shared.clone(), shared.clone(), shared.clone());
    let agent = Agent.v1().name("revisor").on_receive_request(
        async move |request: InitializeRequest, responder, _cx| {
            responder.respond(initializing.initialize(&request))
        },
        agent_client_protocol::on_receive_request!(),
    );
    // Each of these requests is answered at once by the connection's method of that name.
    answered_by!(agent, shared, {
        NewSessionRequest => new_session,
        LoadSessionRequest => load_session,
        SetSessionModeRequest => set_mode,
        SetSessionConfigOptionRequest => set_config_option,
        ResumeSessionRequest => resume_session,
        CloseSessionRequest => close_session,
        ListSessionsRequest => list_sessions,
    })
    .on_receive_request(
        async move |request: PromptRequest, responder, cx| {
            let session = match prompting.session(&request.session_id) {
                Ok(session) => session,
                Err(error) => return responder.respond_with_error(error),
            };
            prompting.prompted(&request);
            let shared = prompting.clone();
            let token = session.begin_turn();
            // The turn awaits the client (permissions, fs): never inside the dispatch loop.
            cx.spawn({
                let cx = cx.clone();
                async move {
                    let result: Result<PromptResponse, Error> =
                        crate::turn::run_turn(&shared, &session, &cx, &request, &token)
                            .await
                            .map(|stop| {
                                // Revisor runs no model: its turns' consumption is known,
                                // and it is zero (not unknown), so a token budget can count
                                // them.
                                PromptResponse::new(stop).usage(Usage::new(0, 0, 0))
                            });
                    if let Err(error) = responder.respond_with_result(result) {
                        tracing::debug!(%error, "could not answer session/prompt");
                    }
                    Ok(())
                }
            })
        },
        agent_client_protocol::on_receive_request!(),
    )
    .on_receive_notification(
        async move |notification: CancelNotification, _cx| {
            canceling.cancel(&notification);
            Ok(())
        },
        agent_client_protocol::on_receive_notification!(),
    )
    .connect_to(transport)
    .await
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn session_ids_are_checked() {
        assert!(well_formed_session_id("revisor-0b1c"));
        assert!(well_formed_session_id("a:b.c_d"));
        assert!(!well_formed_session_id(""));
        assert!(!well_formed_session_id("../etc"));
        assert!(!well_formed_session_id(&"x".repeat(129)));
    }

    #[test]
    fn cwd_must_be_an_absolute_directory() {
        assert!(checked_cwd(Path::new("relative")).is_err());
        assert!(checked_cwd(Path::new("/definitely/not/here/revisor")).is_err());
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(checked_cwd(dir.path()).unwrap(), dir.path());
    }
}
