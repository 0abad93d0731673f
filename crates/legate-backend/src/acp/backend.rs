//! [`AcpBackend`]: spawns an ACP agent and performs the handshake.
//!
//! Before spawning: the preset's launch (environment, private `TMPDIR`, state directory) and
//! the Landlock ruleset that lets the agent write only there and in its root, reported as a
//! `Workspace` event (`{confinement, writable, tmpDir, isolation}`: the last says whether
//! Legate's home is hidden, its processes are hidden, the agent dies with Legate and its
//! capabilities were dropped); with `Requirement::Required` an agent the kernel cannot
//! confine, or whose view of Legate's home cannot be hidden, is not started
//! (`CONFINEMENT_UNAVAILABLE`).
//!
//! `initialize` (advertising `fs` read and write, except to Gemini, and `terminal` only when
//! the spec asks), then, when there is a session to continue, `session/resume` when the agent
//! announces it, else `session/load` when it can load one (see `lifecycle`); else (or when
//! that is refused) `session/new` in the root with the MCP servers selected for the context
//! (`mcp`); then `session/set_mode` when the preset
//! names a supervised mode the session is not in. Each step has a timeout; an agent that
//! exits during the handshake is reported with its exit status and last stderr line.

use super::handshake::Handshake;
use super::launch;
use super::process::{self, ProcessGroup};
use super::session::{AcpSession, Connection, record_cleanup};
use super::state::HandlerState;
use super::stderr;
use super::sys;
use crate::{
    AgentInfo, AgentSession, Backend, Capabilities, Continuation, EventSink, SessionFacts,
    SessionRequest,
};
use async_trait::async_trait;
use legate_confine::{Confinement, Requirement};
use legate_core::{Error, ErrorCode, EventKind, Result};
use legate_supervisor::Preset;
use std::sync::Arc;
use std::time::Duration;
use tracing::{info, warn};

/// The default timeout of each handshake step.
pub const DEFAULT_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// The default time between `SIGINT` and `SIGKILL` when the agent's group is stopped.
pub const DEFAULT_KILL_GRACE: Duration = super::process::KILL_GRACE;

/// The ACP backend.
#[derive(Debug, Clone)]
pub struct AcpBackend {
    /// How long each handshake step (`initialize`, `session/new`, …) may take.
    pub handshake_timeout: Duration,
    /// Whether an agent the kernel cannot confine may start (best effort) or not (required).
    pub confinement: Requirement,
    /// Time between `SIGINT` and `SIGKILL` when the agent's group is stopped.
    pub kill_grace: Duration,
    /// The supervisor preset of an agent whose spec names none (the generic one, or
    /// revisor's own for the built-in agent).
    pub default_preset: Preset,
}

impl Default for AcpBackend {
    fn default() -> Self {
        Self {
            handshake_timeout: DEFAULT_HANDSHAKE_TIMEOUT,
            confinement: Requirement::BestEffort,
            kill_grace: DEFAULT_KILL_GRACE,
            default_preset: Preset::generic(),
        }
    }
}

impl AcpBackend {
    /// A backend with the default timeouts; another setting is a field set over it
    /// (`AcpBackend { handshake_timeout, ..AcpBackend::new() }`).
    pub fn new() -> Self {
        Self::default()
    }

    /// The same backend with another confinement requirement.
    pub fn with_confinement(mut self, requirement: Requirement) -> Self {
        self.confinement = requirement;
        self
    }
}
impl AcpBackend {
    /// [`Backend::open`], returning the concrete session (for its process group id).
    pub async fn open_session(
        &self,
        request: SessionRequest,
        sink: EventSink,
    ) -> Result<AcpSession> {
        if let Some(settings) = request.agent.runtime.pod().cloned() {
            return super::pod::open(self.handshake_timeout, request, sink, &settings).await;
        }
        let root = workspace_root(&request)?;
        if let Some(dir) = &request.blocked_dir {
            crate::cleanup::check(dir, &root)?;
        }
        let preset = request.supervision.preset.name.as_str();
        let mut launch = launch::launch(
            preset,
            &root,
            request.state_dir.as_deref(),
            request
                .agent
                .local()?
                .env
                .get("HOME")
                .map(std::path::Path::new),
            sys::running_as_root(),
        )?;
        // Kept by the session: removed, when empty, once nothing of the session is left.
        let session_tmp = launch.session_tmp.take();
        let confinement = launch
            .writable
            .iter()
            .fold(Confinement::new(), |c, dir| c.allow_write(dir));
        let mut confinement = request
            .hidden
            .iter()
            .fold(confinement, |c, p| c.hide(p))
            .egress(legate_egress::PROXY_PORT)
            .limit(request.agent.limits)
            .prepare(self.confinement)?;
        let enforcement = confinement.enforcement();
        // The network: the namespace's one way out is the proxy, under the session's rules.
        let handoff = confinement.take_egress();
        let limits = confinement.take_limits();
        let marker = crate::cleanup::new_marker();
        let parent: Vec<_> = std::env::vars_os().collect();
        let mut env = process::environment(
            &request.agent,
            request.state_dir.as_deref(),
            &launch,
            &parent,
            &marker,
        )?;
        let rules = Arc::new(crate::egress::session_rules(
            &request.network,
            preset,
            &env,
            &request.mcp_servers,
        ));
        if handoff.is_some() {
            crate::egress::point_at_proxy(&mut env, &rules);
        }
        // `credentials = "proxy"`: placeholders in the agent's environment, the real values
        // held by its egress proxy (which only exists with the network namespace).
        let credentials = match request.agent.credentials {
            legate_core::AgentCredentials::Environment => None,
            legate_core::AgentCredentials::Proxy => {
                let but = |why: &str| {
                    format!(
                        "agent `{}` has credentials = \"proxy\", but {why}",
                        request.agent.name
                    )
                };
                let failed = |why: &str| Error::new(ErrorCode::AgentStartFailed, but(why));
                if handoff.is_none() {
                    return Err(failed(
                        "it runs without its own network namespace, so no proxy can hold them",
                    ));
                }
                let Some(state_dir) = request.state_dir.as_deref() else {
                    return Err(failed(
                        "it has no state directory for the certificate bundle it must trust",
                    ));
                };
                let home = request.legate_home();
                Some(
                    crate::egress::proxy_credentials(&mut env, preset, home.as_deref(), state_dir)
                        .map_err(|e| {
                            let what = but("the proxy's certificate authority failed");
                            Error::quoting(ErrorCode::AgentStartFailed, what, e)
                        })?,
                )
            }
        };
        sink.send(crate::spawn::confinement_notice(
            "agent",
            &crate::spawn::Facts::of(&confinement),
            &launch.writable,
            launch.tmp_dir.as_deref(),
        ));
        let mut child = process::spawn(&request.agent, &root, env, confinement, &marker)?;
        let (Some(stdin), Some(stdout), Some(stderr_pipe)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(Error::internal("the agent's pipes were not set up"));
        };
        let stdout = super::pipe::AgentStdout::widen(stdout);
        let process = ProcessGroup::watch(child, self.kill_grace, marker, limits);
        info!(agent = %request.agent.name, pgid = process.pgid(), root = %root.display(), confinement = enforcement.as_str(), "agent started");
        let covered = legate_confine::Covered::new(&root, &request.hidden, &launch.writable);
        let shared = Arc::new(
            HandlerState::new(
                request.supervisor.clone(),
                request.supervision.clone(),
                root,
            )
            .with_channel(request.channel.clone())
            .covering(covered)
            .keeping(session_tmp),
        );
        shared.route_to(sink.clone(), None);
        let egress = match handoff.map(|h| {
            let gate = crate::egress::SessionGate::new(shared.clone(), rules.clone())
                .with_credentials(credentials);
            crate::egress::Egress::start(h, Arc::new(gate))
        }) {
            None => None,
            Some(Ok(egress)) => Some(egress),
            Some(Err(e)) => {
                shared.clear();
                let _ = process.stop().await;
                return Err(Error::caused_by(
                    ErrorCode::AgentStartFailed,
                    "the agent's network namespace did not hand back its egress listener",
                    e,
                ));
            }
        };
        stderr::spawn(stderr_pipe, shared.clone());
        let connection = match Connection::start(stdin, stdout, shared.clone()).await {
            Ok(c) => c,
            Err(e) => {
                abandon(&shared, &process, &sink, request.blocked_dir.as_deref()).await;
                return Err(e);
            }
        };
        let handshake = Handshake {
            timeout: self.handshake_timeout,
            process: &process,
            connection: &connection,
            shared: &shared,
            sink: &sink,
            advertise_fs: launch.advertise_fs,
        };
        let result = handshake.run(&request).await;
        match result {
            Ok(handshaken) => Ok(opened(
                &request,
                &sink,
                Running {
                    shared,
                    connection,
                    process,
                    egress,
                    pod_copy: None,
                    blocked_dir: request.blocked_dir.clone(),
                },
                handshaken,
            )),
            Err(e) => {
                warn!(agent = %request.agent.name, code = %e.code, error = %e.message, "agent could not be opened");
                abandon(&shared, &process, &sink, request.blocked_dir.as_deref()).await;
                connection.stop();
                Err(e)
            }
        }
    }
}

/// The request's workspace root, canonical; `AGENT_START_FAILED` when it is unusable or not a
/// directory.
pub(super) fn workspace_root(request: &SessionRequest) -> Result<std::path::PathBuf> {
    let root = std::fs::canonicalize(&request.boundary.root).map_err(|e| {
        let root = request.boundary.root.display();
        Error::quoting(
            ErrorCode::AgentStartFailed,
            format!("the workspace root {root} is unusable"),
            e,
        )
    })?;
    if !root.is_dir() {
        return Err(Error::new(
            ErrorCode::AgentStartFailed,
            format!("the workspace root {} is not a directory", root.display()),
        ));
    }
    Ok(root)
}

/// What runs once the agent's process (or pod) is up and connected.
pub(super) struct Running {
    pub(super) shared: Arc<HandlerState>,
    pub(super) connection: Connection,
    pub(super) process: ProcessGroup,
    pub(super) egress: Option<crate::egress::Egress>,
    pub(super) pod_copy: Option<super::pod::PodCopy>,
    pub(super) blocked_dir: Option<std::path::PathBuf>,
}

/// The session a finished handshake opened: its `Session` event sent and its events no
/// longer routed to the opening sink.
pub(super) fn opened(
    request: &SessionRequest,
    sink: &EventSink,
    running: Running,
    (info, lifecycle, opened): (
        crate::AgentInfo,
        super::lifecycle::Lifecycle,
        super::handshake::Opened,
    ),
) -> AcpSession {
    sink.send(EventKind::Session {
        session_id: opened.session_id.clone(),
        resumed: opened.resumed,
    });
    running.shared.clear();
    info!(agent = %request.agent.name, session_id = %opened.session_id, resumed = opened.resumed, "session opened");
    AcpSession {
        facts: SessionFacts::new(info, opened.resumed).named(opened.session_id),
        lifecycle,
        closed: std::sync::atomic::AtomicBool::new(false),
        shared: running.shared,
        connection: running.connection,
        process: running.process,
        turn: tokio::sync::Mutex::new(()),
        blocked_dir: running.blocked_dir,
        legate_home: request.legate_home(),
        cleanup_recorded: std::sync::Mutex::new(false),
        model: std::sync::Mutex::new(
            opened
                .config_options
                .as_deref()
                .and_then(super::models::model_option),
        ),
        agent_name: request.agent.name.clone(),
        _egress: running.egress,
        default_model: request.agent.model.clone(),
        pod_copy: running.pod_copy,
    }
}

/// A session that could not be opened: its events no longer routed, the agent's process
/// group stopped and the cleanup recorded.
async fn abandon(
    shared: &HandlerState,
    process: &ProcessGroup,
    sink: &EventSink,
    blocked_dir: Option<&std::path::Path>,
) {
    shared.clear();
    let cleanup = process.stop().await;
    record_cleanup(
        &cleanup,
        process,
        |e| sink.send(e),
        blocked_dir,
        shared.root(),
    );
}

#[async_trait]
impl Backend for AcpBackend {
    /// ACP has no structured output; models come from the session's `model` config option;
    /// one live process per session, continued with `session/load` when the agent can.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            structured_output: false,
            effort: false,
            model_listing: true,
            local_process: true,
            continuation: Continuation::LiveSession,
            default_preset: self.default_preset.clone(),
            reattach: false,
            tool_controls: true,
            copy_tool_controls: false,
        }
    }

    fn confinement(&self) -> legate_confine::Enforcement {
        Confinement::probe()
    }

    async fn open(
        &self,
        request: SessionRequest,
        sink: EventSink,
    ) -> Result<Arc<dyn AgentSession>> {
        Ok(Arc::new(self.open_session(request, sink).await?))
    }

    /// Opens a session (in the request's throwaway root), reads the models its `model`
    /// config option offers, and shuts it down.
    async fn models(&self, request: SessionRequest) -> Result<crate::selection::ModelList> {
        let (sink, _events) = EventSink::channel();
        let session = self.open_session(request, sink).await?;
        let list = session.models();
        session.shutdown().await;
        Ok(list)
    }
}

/// The longest `agentInfo.name` kept (in bytes); `legate agents`, MCP `health` and the logs
/// print it.
pub const AGENT_NAME_MAX: usize = 128;
/// The longest `agentInfo.version` kept (in bytes).
pub const AGENT_VERSION_MAX: usize = 64;

/// What an agent says of itself, made fit to print: control characters (a terminal escape,
/// a newline forging a line) and bidirectional overrides become spaces, and the text is cut
/// to `max` bytes.
pub(crate) fn agent_words(text: &str, max: usize) -> String {
    let clean: String = text
        .chars()
        .map(|c| {
            let bidi = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
            if c.is_control() || bidi { ' ' } else { c }
        })
        .collect();
    super::translate::truncate(&clean, max)
}

/// The notice for an adapter whose announced `agentInfo` lies outside its preset's verified
/// range (`None` when it lies inside, or the preset tracks no versions). Sent among a task's
/// first events, before the session opens; the agent still runs, under the same rules.
pub fn version_notice(preset: &legate_supervisor::Preset, info: &AgentInfo) -> Option<EventKind> {
    match preset.check_version(info.name.as_deref(), info.version.as_deref()) {
        legate_supervisor::VersionCheck::Outside {
            announced,
            verified,
        } => Some(EventKind::Notice {
            message: format!(
                "adapter version not verified: the agent announced {announced}; the {} preset was verified against {verified}; its options and modes may have changed",
                preset.name
            ),
            detail: serde_json::json!({
                "warning": "adapterVersion",
                "announced": announced,
                "verified": verified,
                "preset": preset.name,
            }),
        }),
        _ => None,
    }
}
