//! Backends: how Legate runs one turn of an agent and turns what it does into `EventKind`s.
//!
//! The [`Backend`] trait is the seam between the engine and each protocol driver. A backend
//! opens an [`AgentSession`] (one conversation with one agent process), runs prompts on it one
//! at a time, answers permission requests through the [`Supervisor`] it was given, and reports
//! everything as events on the turn's [`EventSink`].
//!
//! A backend describes itself ([`Backend::capabilities`]): the engine asks what it can do
//! (structured output, model listing, a local process to confine, how a conversation
//! continues, which supervisor preset applies) instead of testing an agent's kind. The
//! [`Registry`] maps each [`legate_core::AgentKind`] to its backend: adding a backend is one
//! module and one line there.
//!
//! Backends never touch the store and never decide a task's state: they report, the engine
//! decides.

pub mod acp;
pub mod agy;
pub mod approvals;
pub mod cleanup;
mod egress;
pub mod env;
mod held;
pub mod marked;
pub mod registry;
pub mod selection;
mod sink;
mod spawn;
mod stop;
pub mod tap;
mod turns;
mod work;

pub use agy::Model;
pub use approvals::{Abort, AbortHandle, Answered, ApprovalChannel, Ask, Sent};
pub use registry::Registry;
pub use sink::{EventSink, EventStream};
pub use stop::StopReason;
pub use tap::TapRecorder;
pub use turns::TurnGate;
pub use work::WorkspaceWork;

use async_trait::async_trait;
use legate_core::{AgentSpec, Boundary, Result, TaskId, TaskMode, Usage};
use legate_supervisor::{Preset, Supervision, Supervisor};
use std::fmt::Debug;
use std::path::PathBuf;
use std::sync::Arc;

/// Everything a backend needs to open a session.
#[derive(Debug, Clone)]
pub struct SessionRequest {
    /// The agent to start.
    pub agent: AgentSpec,
    /// Where it works. Its `root` becomes the process's `cwd` and the session's `cwd`.
    pub boundary: Boundary,
    /// Who answers permission requests, and under which rules.
    pub supervisor: Arc<dyn Supervisor>,
    /// The rules' inputs (boundary, preset, mode) for this session.
    pub supervision: Supervision,
    /// Where an `ask` ruling goes and every decision is recorded (the engine's approval
    /// queue). `None`: an `ask` is refused and nothing is audited (probes, tests).
    pub channel: Option<Arc<dyn ApprovalChannel>>,
    /// An earlier session id of this context, to continue when the agent can load sessions.
    pub resume_session_id: Option<String>,
    /// Directory for the agent's private state (`HOME`-like), when its preset wants one.
    pub state_dir: Option<PathBuf>,
    /// Where workspaces blocked by an unverified process cleanup are marked, shared by every
    /// agent (`$LEGATE_HOME/blocked`, see [`cleanup`]). `None`: no mark is checked or made.
    pub blocked_dir: Option<PathBuf>,
    /// Paths the agent's processes must not see (`$LEGATE_HOME`, token files, the
    /// configuration file): hidden in their own mount namespace, except the workspace and
    /// the agent's own directories beneath them (`legate_confine::Confinement::hide`).
    pub hidden: Vec<PathBuf>,
    /// Where a remote backend records the remote task each turn is bound to, before it relays
    /// anything else (the engine's store). `None`: nothing is recorded, and a restart cannot
    /// re-attach (probes, tests).
    pub ledger: Option<Arc<dyn RemoteLedger>>,
    /// The catalogued MCP servers selected for the task's context, handed to the agent in
    /// `session/new` (and `session/load`/`session/resume`). Only for backends whose
    /// [`Capabilities::tool_controls`] says so; empty otherwise.
    pub mcp_servers: Vec<legate_core::McpServerSpec>,
    /// The rules the agent's connections run under (`[network]`, the agent's and the role's
    /// rules); the backend adds the preset's model host. A connection no rule names is
    /// refused, or put to `channel` when the policy says `ask`.
    pub network: Arc<legate_supervisor::network::NetworkRules>,
    /// The task the session is opened for, when there is one (an agent's pod is annotated
    /// with it).
    pub task: Option<TaskId>,
}

/// Records which remote task a local task's turn runs as (see [`legate_core::RemoteRef`]).
///
/// A remote backend calls [`RemoteLedger::record`] as soon as the remote server names its
/// task, and relays nothing of the turn until it returned `Ok`: durable before told, so a
/// local restart finds the reference and re-attaches ([`Backend::reattach`]).
pub trait RemoteLedger: Send + Sync + Debug {
    /// Binds local task `task` to `remote`, replacing any earlier binding.
    fn record(&self, task: &TaskId, remote: &legate_core::RemoteRef) -> Result<()>;
}

impl SessionRequest {
    /// `$LEGATE_HOME`, where saved model preferences are ([`selection::preference_file`]):
    /// the directory [`SessionRequest::blocked_dir`] is in. `None` without a blocked
    /// directory: no preference is read.
    pub fn legate_home(&self) -> Option<PathBuf> {
        self.blocked_dir
            .as_deref()
            .and_then(std::path::Path::parent)
            .map(std::path::Path::to_path_buf)
    }
}

/// What the agent said about itself at `initialize`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentInfo {
    /// Its name.
    pub name: Option<String>,
    /// Its version.
    pub version: Option<String>,
    /// Whether it can load an earlier session (`session/load`).
    pub load_session: bool,
    /// Optional capabilities it announced (e.g. agy's `--mode plan`, `models`), for health
    /// listings; empty when the protocol has no such notion.
    pub capabilities: Vec<String>,
}

/// What a session says about itself, kept once for every backend: its id (named at most
/// once: when it opens, or by the agent's first answer), the agent's [`AgentInfo`], and
/// whether it continued an earlier session.
#[derive(Debug, Default)]
pub struct SessionFacts {
    id: std::sync::OnceLock<String>,
    /// What the agent said about itself.
    pub info: AgentInfo,
    /// Whether the session was continued from an earlier one.
    pub resumed: bool,
}

impl SessionFacts {
    /// Facts of a session not yet named.
    pub fn new(info: AgentInfo, resumed: bool) -> Self {
        Self {
            id: std::sync::OnceLock::new(),
            info,
            resumed,
        }
    }

    /// The same facts with the session named `id`.
    pub fn named(self, id: impl Into<String>) -> Self {
        let _ = self.id.set(id.into());
        self
    }

    /// Names the session `id` unless it is named already; whether this was its first name.
    pub fn name(&self, id: String) -> bool {
        self.id.set(id).is_ok()
    }

    /// The session's id; empty until it is named.
    pub fn id(&self) -> &str {
        self.id.get().map_or("", String::as_str)
    }
}

/// One turn to run.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The task this turn belongs to.
    pub task_id: TaskId,
    /// What the caller asked.
    pub prompt: String,
    /// Write or read-only.
    pub mode: TaskMode,
    /// The model the task asked for (an id, `legate_core::AUTO_MODEL`, or `None`).
    pub model: Option<String>,
    /// How long the engine lets the turn run (backends whose agent takes a timeout of its own
    /// pass it on); `None` when unknown.
    pub timeout: Option<std::time::Duration>,
    /// The caller's id for the message this turn answers (an A2A `messageId`), when a front
    /// gave one. The ACP driver passes it in `session/prompt`'s `_meta` (see
    /// [`acp::ext`]); other backends ignore it.
    pub message_id: Option<String>,
    /// A JSON Schema the answer must follow (structured output), only for backends whose
    /// [`Capabilities::structured_output`] says so. The agy driver passes it as
    /// `--json-schema`; the ACP driver refuses a turn that carries one (`INVALID_INPUT`).
    pub json_schema: Option<serde_json::Value>,
    /// How much reasoning the caller asked for, only for backends whose
    /// [`Capabilities::effort`] says so. The agy driver passes it as `--effort`.
    pub effort: Option<legate_core::Effort>,
    /// The turn's blocking work in its workspace ([`WorkspaceWork`]): a backend runs through
    /// it whatever writes the workspace from a thread of its own, and the engine waits for it
    /// before it reads the workspace after the turn.
    pub work: WorkspaceWork,
}

/// How a turn ended, when it ended without a transport failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    /// Why the agent stopped; [`StopReason::InputRequired`] when it asked for more input.
    pub stop_reason: StopReason,
    /// Usage reported with the prompt's response, if any.
    pub usage: Option<Usage>,
}

/// How a backend continues a conversation from one turn to the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Continuation {
    /// One live process per session, prompted turn after turn; after a restart, the agent
    /// may load an earlier session by id when it announces it can (ACP `session/load`).
    LiveSession,
    /// One process per turn, each resuming the conversation by an id the backend keeps
    /// (agy's `--resume`).
    ProcessPerTurn,
    /// Each turn starts afresh: nothing of an earlier turn is carried over.
    None,
}

/// What a backend can do: the engine asks this instead of testing an agent's kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Whether a turn may carry a JSON Schema its answer must follow ([`Turn::json_schema`]).
    pub structured_output: bool,
    /// Whether a turn may carry an effort ([`Turn::effort`]).
    pub effort: bool,
    /// Whether [`Backend::models`] can list the agent's models.
    pub model_listing: bool,
    /// Whether it runs a local process (and so needs an [`legate_core::Transport::Local`]
    /// spec, and can be confined: see [`Backend::confinement`]).
    pub local_process: bool,
    /// How a conversation continues.
    pub continuation: Continuation,
    /// The supervisor preset of an agent whose spec names none.
    pub default_preset: Preset,
    /// Whether a turn outlives this process: its work runs elsewhere, and after a restart
    /// [`Backend::reattach`] follows it to its end (a remote A2A agent). When false, recovery
    /// ends an interrupted task with `SERVER_RESTARTED`.
    pub reattach: bool,
    /// Whether the task's tool controls hold: every tool call the agent makes is asked about
    /// (or served through the client) here, where the allowed kinds and MCP selections are
    /// enforced, and MCP servers can be handed to the agent ([`SessionRequest::mcp_servers`]).
    /// When false, a task naming `allowedTools` or `mcpServers`, or under a configured
    /// ceiling, is refused (`TOOL_NOT_ALLOWED`), never run unchecked.
    pub tool_controls: bool,
    /// Whether the task's tool controls hold in a copy workspace only, through hooks the
    /// backend stages in the copy (agy: `.agents/hooks.json` and `.agents/mcp_config.json`),
    /// when [`Capabilities::tool_controls`] is false. A controlled task in any other
    /// workspace is refused (`TOOL_NOT_ALLOWED`).
    pub copy_tool_controls: bool,
}

/// Cancels the running turn of a session from another task.
pub trait Canceller: Send + Sync + Debug {
    /// Asks the agent to stop the current turn (ACP `session/cancel`). Idempotent.
    fn cancel(&self);
}

/// One conversation with one agent process.
#[async_trait]
pub trait AgentSession: Send + Sync + Debug {
    /// Its id, its agent's info and whether it was resumed.
    fn facts(&self) -> &SessionFacts;
    /// The agent's session id (empty until the agent named it).
    fn session_id(&self) -> &str {
        self.facts().id()
    }
    /// What the agent said about itself.
    fn agent_info(&self) -> &AgentInfo {
        &self.facts().info
    }
    /// Whether the session was continued from an earlier one (`session/load`).
    fn resumed(&self) -> bool {
        self.facts().resumed
    }
    /// Runs one turn. Every event of the turn is sent to `sink` before this returns, and the
    /// session keeps no clone of `sink` afterwards.
    async fn prompt(&self, turn: Turn, sink: EventSink) -> Result<TurnOutcome>;
    /// A handle that cancels the running turn.
    fn canceller(&self) -> Arc<dyn Canceller>;
    /// Whether the agent process is still running.
    fn is_alive(&self) -> bool;
    /// Stops the agent: its whole process group is killed. Idempotent.
    async fn shutdown(&self);
}

/// A protocol driver.
#[async_trait]
pub trait Backend: Send + Sync + Debug {
    /// What it can do.
    fn capabilities(&self) -> Capabilities;

    /// Starts the agent and opens (or continues) a session. Failures carry
    /// `AGENT_START_FAILED`, `AGENT_AUTH_REQUIRED`, `AGENT_UNSUPERVISED` or
    /// `AGENT_PROTOCOL_ERROR`. Events that happen while opening (stderr, mode) go to `sink`.
    async fn open(&self, request: SessionRequest, sink: EventSink)
    -> Result<Arc<dyn AgentSession>>;

    /// The models the agent of `request` offers (`legate models`), its session opened in
    /// `request`'s root when the protocol needs one. The default is for backends whose agents
    /// cannot say: `INVALID_INPUT`.
    async fn models(&self, request: SessionRequest) -> Result<selection::ModelList> {
        Err(legate_core::Error::invalid_input(format!(
            "agent `{}` cannot list its models",
            request.agent.name
        )))
    }

    /// Whether the agent of `request` is logged in, as far as its CLI shows without running a
    /// task: `Some(true)` or `Some(false)`, or `None` when this backend cannot tell (the
    /// default). Never logs in and never reads a credential.
    async fn logged_in(&self, request: SessionRequest) -> Result<Option<bool>> {
        let _ = request;
        Ok(None)
    }

    /// Follows the remote task `remote`, which the turn `turn` of a local task was bound to
    /// before this process (or an earlier one) stopped, to its end: what happens from now on
    /// goes to `sink`, and the outcome is the remote task's. When `cancel` fires (the caller
    /// canceled, or the local timeout passed) the backend asks the remote to cancel
    /// (`CancelTask`) and returns once the remote task ended or could not be reached. Only for
    /// backends whose [`Capabilities::reattach`] says so; the default refuses with `INTERNAL`.
    async fn reattach(
        &self,
        request: SessionRequest,
        turn: Turn,
        remote: legate_core::RemoteRef,
        sink: EventSink,
        cancel: tokio_util::sync::CancellationToken,
    ) -> Result<TurnOutcome> {
        let _ = (turn, remote, sink, cancel);
        Err(legate_core::Error::new(
            legate_core::ErrorCode::Internal,
            format!(
                "agent `{}`'s backend cannot re-attach to a task after a restart",
                request.agent.name
            ),
        ))
    }

    /// How much of `legate-confine`'s confinement the kernel enforces on the processes this
    /// backend spawns. The default is for backends that do not confine what they spawn.
    fn confinement(&self) -> legate_confine::Enforcement {
        legate_confine::Enforcement::None
    }
}
