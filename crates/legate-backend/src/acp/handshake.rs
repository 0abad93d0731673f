//! The ACP handshake: `initialize`, then resuming, loading or opening the session, then the
//! supervised mode, each step under its timeout, an agent's exit reported with its status.
//!
//! It owns only the protocol steps on a connection already made; it must never spawn or stop
//! the agent, nor send the `Session` event (that is [`super::backend`]'s).

use super::backend::{AGENT_NAME_MAX, AGENT_VERSION_MAX, agent_words, version_notice};
use super::failure::{exited, request_error};
use super::lifecycle::{Continue, Lifecycle};
use super::process::ProcessGroup;
use super::session::Connection;
use super::state::HandlerState;
use crate::{AgentInfo, EventSink, SessionRequest};
use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema as acp;
use legate_core::{Error, ErrorCode, EventKind, Result};
use std::future::Future;
use std::time::Duration;
use tracing::{info, warn};

/// What a session setup step returned about modes.
pub(super) struct Opened {
    pub(super) session_id: String,
    pub(super) modes: Option<acp::SessionModeState>,
    pub(super) config_options: Option<Vec<acp::SessionConfigOption>>,
    pub(super) resumed: bool,
}

/// The handshake, with what it needs at hand.
pub(super) struct Handshake<'a> {
    pub(super) timeout: Duration,
    pub(super) process: &'a ProcessGroup,
    pub(super) connection: &'a Connection,
    pub(super) shared: &'a HandlerState,
    pub(super) sink: &'a EventSink,
    /// Whether to advertise the `fs` client capability (not to Gemini: see `launch`).
    pub(super) advertise_fs: bool,
}

impl Handshake<'_> {
    /// Runs one step: its result, or AGENT_START_FAILED on timeout or exit. Errors the agent
    /// answered with are classified by `request_error`.
    async fn step<T>(
        &self,
        what: &str,
        fut: impl Future<Output = std::result::Result<T, agent_client_protocol::Error>>,
    ) -> Result<std::result::Result<T, agent_client_protocol::Error>> {
        let secs = self.timeout.as_secs_f64();
        tokio::select! {
            r = tokio::time::timeout(self.timeout, fut) => match r {
                Ok(r) => Ok(r),
                Err(_) => Err(Error::new(
                    ErrorCode::AgentStartFailed,
                    format!("the agent did not answer `{what}` within {secs} s"),
                )),
            },
            status = self.process.exited() => {
                let err = match status {
                    Some(status) => exited(&format!("the handshake (`{what}`)"), &status, self.process, self.shared, ErrorCode::AgentStartFailed).await,
                    None => Error::new(ErrorCode::AgentStartFailed, "the agent exited during the handshake"),
                };
                Err(err)
            }
        }
    }

    async fn fail(&self, what: &str, e: &agent_client_protocol::Error) -> Error {
        request_error(
            &format!("`{what}`"),
            e,
            self.process,
            self.connection,
            self.shared,
            ErrorCode::AgentStartFailed,
        )
        .await
    }

    pub(super) async fn run(
        &self,
        request: &SessionRequest,
    ) -> Result<(AgentInfo, Lifecycle, Opened)> {
        let cx = &self.connection.cx;
        let spec = &request.agent;
        let root = self.shared.root().clone();

        let init = acp::InitializeRequest::new(ProtocolVersion::V1)
            .client_capabilities(
                acp::ClientCapabilities::new()
                    .fs(acp::FileSystemCapabilities::new()
                        .read_text_file(self.advertise_fs)
                        .write_text_file(self.advertise_fs))
                    .terminal(
                        spec.terminal
                            && request
                                .supervision
                                .tools
                                .allows_kind(legate_core::ToolKind::Execute),
                    ),
            )
            .client_info(acp::Implementation::new(
                "legate",
                env!("CARGO_PKG_VERSION"),
            ));
        let init = match self
            .step("initialize", cx.send_request(init).block_task())
            .await?
        {
            Ok(r) => r,
            Err(e) => return Err(self.fail("initialize", &e).await),
        };
        let lifecycle = Lifecycle::of(&init.agent_capabilities);
        let info = AgentInfo {
            name: init
                .agent_info
                .as_ref()
                .map(|i| agent_words(&i.name, AGENT_NAME_MAX)),
            version: init
                .agent_info
                .as_ref()
                .map(|i| agent_words(&i.version, AGENT_VERSION_MAX)),
            load_session: init.agent_capabilities.load_session,
            capabilities: lifecycle.names(),
        };
        info!(agent = %spec.name, name = ?info.name, version = ?info.version, load_session = info.load_session, resume = lifecycle.resume, close = lifecycle.close, "agent initialized");
        if let Some(notice) = version_notice(&request.supervision.preset, &info) {
            warn!(agent = %spec.name, name = ?info.name, version = ?info.version, "adapter version outside its preset's verified range");
            self.sink.send(notice);
        }

        let mcp_servers = super::mcp::servers(
            &spec.name,
            &request.mcp_servers,
            &init.agent_capabilities.mcp_capabilities,
        )?;
        if !mcp_servers.is_empty() {
            let ids: Vec<&str> = request.mcp_servers.iter().map(|s| s.id.as_str()).collect();
            info!(agent = %spec.name, servers = ?ids, "MCP servers handed to the session");
        }
        let mut opened = None;
        if let Some(old) = &request.resume_session_id {
            // A stored id from before ids were checked is not sent back, nor quoted.
            let unusable = super::lifecycle::unusable_session_id(old);
            let answer = match lifecycle.continuation() {
                _ if unusable.is_some() => None,
                Some(Continue::Resume) => {
                    let resume = acp::ResumeSessionRequest::new(old.clone(), root.clone())
                        .mcp_servers(mcp_servers.clone());
                    let r = self
                        .step("session/resume", cx.send_request(resume).block_task())
                        .await?;
                    Some((
                        "session/resume",
                        r.map(|resp| (resp.modes, resp.config_options)),
                    ))
                }
                Some(Continue::Load) => {
                    // What a load replays is the earlier conversation, not this turn's.
                    self.shared.set_replaying(true);
                    let load = acp::LoadSessionRequest::new(old.clone(), root.clone())
                        .mcp_servers(mcp_servers.clone());
                    let r = self
                        .step("session/load", cx.send_request(load).block_task())
                        .await;
                    self.shared.set_replaying(false);
                    Some((
                        "session/load",
                        r?.map(|resp| (resp.modes, resp.config_options)),
                    ))
                }
                None => None,
            };
            let why_not = match answer {
                Some((how, Ok((modes, config_options)))) => {
                    info!(agent = %spec.name, session_id = %old, via = how, "earlier session continued");
                    opened = Some(Opened {
                        session_id: old.clone(),
                        modes,
                        config_options,
                        resumed: true,
                    });
                    None
                }
                Some((how, Err(e)))
                    if e.code == agent_client_protocol::ErrorCode::AUTH_REQUIRED =>
                {
                    return Err(self.fail(how, &e).await);
                }
                Some((how, Err(e))) => Some(format!(
                    "the agent refused `{how}` ({})",
                    super::translate::truncate(&e.message, 300)
                )),
                None => Some(match &unusable {
                    Some(why) => format!("its stored id is not one Legate keeps ({why})"),
                    None => "the agent can neither resume nor load sessions".to_string(),
                }),
            };
            if let Some(why) = why_not {
                let shown = if unusable.is_some() { "" } else { old.as_str() };
                warn!(agent = %spec.name, session_id = %shown, reason = %why, "earlier session not continued");
                self.sink.send(EventKind::Notice {
                    message: format!("the earlier session {shown} could not be continued: {why}; a new session was started"),
                    detail: serde_json::json!({ "sessionId": shown }),
                });
            }
        }
        let opened = match opened {
            Some(o) => o,
            None => {
                let new =
                    acp::NewSessionRequest::new(root.clone()).mcp_servers(mcp_servers.clone());
                match self
                    .step("session/new", cx.send_request(new).block_task())
                    .await?
                {
                    Ok(resp) => {
                        if let Some(why) = super::lifecycle::unusable_session_id(&resp.session_id.0)
                        {
                            warn!(agent = %spec.name, reason = %why, "the agent's session id is refused");
                            return Err(Error::new(
                                ErrorCode::AgentProtocolError,
                                format!(
                                    "agent `{}` named its session with an id Legate will not keep: {why}",
                                    spec.name
                                ),
                            ));
                        }
                        Opened {
                            session_id: resp.session_id.0.to_string(),
                            modes: resp.modes,
                            config_options: resp.config_options,
                            resumed: false,
                        }
                    }
                    Err(e) => return Err(self.fail("session/new", &e).await),
                }
            }
        };
        self.supervised_mode(request, &opened).await?;
        Ok((info, lifecycle, opened))
    }

    /// Puts the session in the preset's supervised mode, when the preset names one and the
    /// session reports modes. A new session already in it is left so; a continued one is
    /// always set (the mode it reports is the agent's word about a session Legate did not
    /// watch since).
    async fn supervised_mode(&self, request: &SessionRequest, opened: &Opened) -> Result<()> {
        let (Some(wanted), Some(modes)) =
            (&request.supervision.preset.supervised_mode, &opened.modes)
        else {
            return Ok(());
        };
        if !opened.resumed && modes.current_mode_id.0.as_ref() == wanted.as_str() {
            return Ok(());
        }
        if !modes
            .available_modes
            .iter()
            .any(|m| m.id.0.as_ref() == wanted.as_str())
        {
            let offered: Vec<&str> = modes
                .available_modes
                .iter()
                .map(|m| m.id.0.as_ref())
                .collect();
            return Err(Error::new(
                ErrorCode::AgentUnsupervised,
                format!(
                    "agent `{}` offers no `{wanted}` mode (it offers: {}), so it would act without asking",
                    request.agent.name,
                    offered.join(", ")
                ),
            ));
        }
        let set = acp::SetSessionModeRequest::new(opened.session_id.clone(), wanted.clone());
        match self
            .step(
                "session/set_mode",
                self.connection.cx.send_request(set).block_task(),
            )
            .await?
        {
            Ok(_) => {
                info!(agent = %request.agent.name, mode = %wanted, "supervised mode set");
                self.sink.send(EventKind::Mode {
                    mode_id: wanted.clone(),
                });
                Ok(())
            }
            Err(e) => {
                let err = self.fail("session/set_mode", &e).await;
                if err.code == ErrorCode::AgentStartFailed {
                    Err(Error::new(
                        ErrorCode::AgentUnsupervised,
                        format!(
                            "agent `{}` refused to switch to its `{wanted}` mode: {}",
                            request.agent.name, err.message
                        ),
                    ))
                } else {
                    Err(err)
                }
            }
        }
    }
}
