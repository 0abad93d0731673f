//! The answers of the task tools (`health` … `send_message`): MCP's envelopes and subsets
//! of engine types. A field whose wire shape is an engine type's is that type (a state, a
//! mode, usage, a refusal), so its name and schema come from the engine's declaration.

use crate::schema::ErrorBody;
use legate_core::{Refusal, Report, RoleBase, TaskMode, TaskState, Usage, WorkspaceKind};
use legate_engine::Delivery;
use rmcp::schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};

/// A configured agent, as `health` sees it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct AgentHealth {
    /// Its name.
    pub name: String,
    /// `acp`, `revisor`, …
    pub kind: String,
    /// Whether it started when probed; null when not probed.
    pub starts: Option<bool>,
    /// What the probe found, for a person.
    pub detail: String,
    /// How much the kernel confines its process: `full`, `partial`, `none`, or an error code.
    pub confinement: String,
    /// Optional features the probe found the agent announcing (for agy, from its `--help`:
    /// `stream-json`, `sandbox`, `mode-plan`, `mode-accept-edits`, `models`, `model`,
    /// `conversation`, `json-schema`, `add-dir`, `new-project`, `effort`; for an ACP agent, the
    /// session lifecycle it announced: `session/load`, `session/resume`, `session/close`,
    /// `session/list`); empty when not probed or when it did not start.
    pub capabilities: Vec<String>,
    /// Set when the adapter version the probe found (ACP `agentInfo`) lies outside the
    /// versions its preset was verified against: what it announced and the verified range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_warning: Option<String>,
    /// Whether the agent is logged in, as its CLI shows without a task (agy: `agy models`
    /// lists models; a login phrase or no model is false): null when not probed, when its
    /// backend cannot tell, or when the check failed (then `loginDetail` says why).
    pub logged_in: Option<bool>,
    /// Why `loggedIn` is null after a probe, or what to do when it is false.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub login_detail: Option<String>,
    /// What its backend cannot do (each `available: false`): `interactiveReplies`,
    /// `preflightTokenCount`, `toolControls`, `localSupervision`, `supervisingAgent`.
    pub limitations: Vec<legate_engine::Limitation>,
}

/// The limits a caller runs into.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct Limits {
    /// Tasks that run at once.
    pub max_running: usize,
    /// Tasks that may wait; one more is QUEUE_FULL.
    pub max_queued: usize,
    /// Tasks of one context that may wait for their turn.
    pub max_pending_per_context: usize,
    /// A task's default timeout, in seconds.
    pub default_timeout_seconds: u64,
    /// The longest `wait`, in seconds.
    pub wait_max_seconds: u64,
    /// The most events one `wait` or `events` returns.
    pub max_events: usize,
    /// The largest `read_result` limit, in UTF-16 units.
    pub read_limit_max: usize,
    /// The longest `send_message` text, in characters.
    pub message_max_chars: usize,
}

/// Confinement as configured.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct Confinement {
    /// `best-effort` or `required`.
    pub requirement: String,
}

/// `health`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct HealthOut {
    /// Legate's version.
    pub version: String,
    /// The tool profile: full, query, review or implementation.
    pub tool_profile: String,
    /// Whether this profile makes every task read-only.
    pub read_only: bool,
    /// The agent used when `run` names none.
    pub default_agent: String,
    /// Each configured agent and whether it starts.
    pub agents: Vec<AgentHealth>,
    /// Kernel confinement as configured (each agent says how much is enforced).
    pub confinement: Confinement,
    /// Limits.
    pub limits: Limits,
    /// The approval mode: `auto` or `ask` (`[copies] approval`).
    pub approval_mode: String,
    /// How an integration is approved in that mode.
    pub integration_approval: crate::controls::IntegrationApproval,
}

/// A configured agent.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct AgentOut {
    /// The name `run` takes.
    pub name: String,
    /// `acp`, `revisor`, …
    pub kind: String,
    /// The preset it follows (claude, codex, gemini), if any.
    pub preset: Option<String>,
    /// The command Legate starts.
    pub command: String,
    /// A one-line description.
    pub description: Option<String>,
    /// Whether it is the default agent.
    pub default: bool,
    /// Whether shell commands may run in directories Legate does not own.
    pub allow_execute: bool,
    /// The model it uses when a task names none (`model` in its configuration); null leaves
    /// the choice to the agent.
    pub model: Option<String>,
    /// The models it offers (empty when it offers no choice), when the listing succeeded;
    /// null otherwise (not probed, or `modelsError`).
    pub models: Option<Vec<ModelOut>>,
    /// Why listing its models failed (e.g. `AGY_AUTH_REQUIRED`); null otherwise.
    pub models_error: Option<ErrorBody>,
}

/// A model an agent offers.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ModelOut {
    /// What `run`'s `model` takes.
    pub id: String,
    /// Its display name.
    pub name: String,
}

/// `agents`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct AgentsOut {
    /// The agent used when `run` names none.
    pub default_agent: String,
    /// Configured agents.
    pub agents: Vec<AgentOut>,
}

/// A task, without its bulky parts.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct TaskOut {
    /// The task id.
    pub task_id: String,
    /// Its context (conversation).
    pub context_id: String,
    /// The agent.
    pub agent: String,
    /// submitted, working, input-required, completed, failed, canceled, rejected, auth-required.
    pub state: TaskState,
    /// write or read-only.
    pub mode: TaskMode,
    /// The role it plays: "implementer", "planner", "reviewer" or a configured role.
    pub role: String,
    /// What its role is built on.
    pub role_base: RoleBase,
    /// sandbox, shared or copy.
    pub workspace: WorkspaceKind,
    /// The workspace root, once prepared.
    pub root: Option<String>,
    /// The model asked for, if any.
    pub model: Option<String>,
    /// Why it ended badly.
    pub error: Option<ErrorBody>,
    /// A short status message (refusals, …).
    pub status_message: Option<String>,
    /// Token usage as the agent reported it.
    pub usage: Option<Usage>,
    /// The agent session id, once known.
    pub session_id: Option<String>,
    /// The remote task it runs as, when its agent is a remote one (`url`, `taskId`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote: Option<RemoteOut>,
    /// The first words of the prompt.
    pub prompt_preview: String,
    /// The timeout, in seconds.
    pub timeout_seconds: u64,
    /// The private memory snapshots it was given (its own selection, or for a continuation
    /// or a handoff the ones it inherited): specialist, sha256 and size, never the text.
    /// Absent when it was given none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<legate_core::MemorySnapshot>,
    /// The tool kinds it may use (its allowedTools within the configured ceiling, or the ones
    /// a handoff carried on); absent when it is not narrowed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<legate_core::ToolKind>>,
    /// The MCP servers of the catalogue handed to its agent, with the tools selected; absent
    /// when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<legate_core::McpSelection>,
    /// When it was stored (milliseconds since the epoch).
    pub created_at: i64,
    /// When it last changed (milliseconds since the epoch).
    pub updated_at: i64,
}

/// The remote task a task runs as.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct RemoteOut {
    /// The remote server's endpoint the task was sent to.
    pub url: String,
    /// The remote server's id for the task.
    pub task_id: String,
}

/// `run` and `resume`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct StartedOut {
    /// The new task's id: pass it to `wait`, `status`, `result`, `cancel`.
    pub task_id: String,
    /// Its context: pass it to `resume`, `send_message`, or `run` to continue.
    pub context_id: String,
    /// The agent.
    pub agent: String,
    /// Its state (submitted).
    pub state: TaskState,
    /// write or read-only.
    pub mode: TaskMode,
    /// The role it plays: "implementer", "planner", "reviewer" or a configured role.
    pub role: String,
    /// What its role is built on.
    pub role_base: RoleBase,
    /// sandbox, shared or copy.
    pub workspace: WorkspaceKind,
    /// The skills staged in its copy: names, directories, sha256s and sizes, never texts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<legate_core::SkillRecord>,
    /// The private memory snapshots it was given (its own selection, or for a continuation
    /// or a handoff the ones it inherited): specialist, sha256 and size, never the text.
    /// Absent when it was given none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<legate_core::MemorySnapshot>,
}

/// `continue`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ContinuedOut {
    /// The continuation: a new task of the cut task's context, which resumes the agent's
    /// session. Follow it with `wait`, `status`, `result`.
    #[serde(flatten)]
    pub started: StartedOut,
    /// The task cut by the restart that this task continues.
    pub continued_from: String,
}

/// `roles`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct RolesOut {
    /// Every role a task may name: the built-ins first, then the configured ones by name.
    pub roles: Vec<legate_engine::RoleInfo>,
}

/// `status`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct StatusOut {
    /// The task.
    pub task: TaskOut,
    /// Whether it has ended.
    pub ready: bool,
    /// The number of its last event.
    pub last_seq: u64,
    /// Tasks of the same context waiting to run after it (messages, resumes).
    pub queued_task_ids: Vec<String>,
    /// Whether any such task waits.
    pub continuation_pending: bool,
    /// Permission requests of the task waiting for a supervisor, newest first (empty when
    /// none waits).
    pub awaiting_supervision: Vec<AwaitingOut>,
}

/// A permission request waiting for a supervisor (an approval), as `wait` and `status` show
/// it.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct AwaitingOut {
    /// The approval's id (what `legate approve` takes).
    pub id: String,
    /// The tool call's title, as the agent wrote it.
    pub title: String,
    /// The tool call's kind.
    pub kind: String,
    /// When it is refused if nobody answers, in milliseconds since the Unix epoch.
    pub deadline: i64,
    /// The policy rule that asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
}

impl AwaitingOut {
    /// The pending approvals of `task`.
    pub fn of(
        engine: &legate_engine::Engine,
        task: &legate_core::TaskId,
    ) -> legate_core::Result<Vec<Self>> {
        Ok(engine
            .approvals()
            .pending(task)?
            .into_iter()
            .map(|a| Self {
                id: a.id,
                title: a.tool.title,
                kind: a.tool.kind.as_str().to_string(),
                deadline: a.deadline.0,
                rule_id: a.rule_id,
            })
            .collect())
    }
}

/// One task of a `wait_many` answer.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct WaitedOut {
    /// The task id.
    pub task_id: String,
    /// Its state when the wait returned.
    pub state: TaskState,
    /// Whether it is ready for you: ended, or waiting for input (answer it with reply).
    pub ready: bool,
    /// Why it ended badly, when it did (`TASK_CANCELED` for a canceled task).
    pub task_error: Option<ErrorBody>,
    /// A short status message.
    pub status_message: Option<String>,
    /// Token usage so far.
    pub usage: Option<Usage>,
}

/// `wait_many`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct WaitManyOut {
    /// The mode waited in: "first" or "all".
    pub mode: String,
    /// Whether the wait's condition held when it returned: one task ready ("first"), or
    /// every one ("all").
    pub ready: bool,
    /// Whether it returned because the timeout passed (every task goes on).
    pub timed_out: bool,
    /// Each task named, in the order named. Read a ready one with result.
    pub tasks: Vec<WaitedOut>,
}

/// `wait`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct WaitOut {
    /// The task id.
    pub task_id: String,
    /// Whether the task has ended.
    pub ready: bool,
    /// Whether the wait ran out of time (the task goes on).
    pub timed_out: bool,
    /// The task's state now.
    pub state: TaskState,
    /// Why the task ended badly (`error`, at the top level, is reserved for a failed call).
    pub task_error: Option<ErrorBody>,
    /// Token usage so far.
    pub usage: Option<Usage>,
    /// A short status message.
    pub status_message: Option<String>,
    /// The new events, in order (absent for a task in `messages` delivery: see `messages`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<Vec<Map<String, Value>>>,
    /// Pass this as `after` next time.
    pub next_cursor: u64,
    /// Whether more events are stored after `nextCursor`.
    pub has_more: bool,
    /// Whether events between `after` and the first returned one were lost. Always false
    /// today: the store never drops part of a task's events (kept for clients of the bridge).
    pub truncated: bool,
    /// Whether tasks of the same context wait to run after this one.
    pub continuation_pending: bool,
    /// Their ids.
    pub queued_task_ids: Vec<String>,
    /// Permission requests of the task waiting for a supervisor, newest first (empty when
    /// none waits).
    pub awaiting_supervision: Vec<AwaitingOut>,
    /// For a task in `messages` delivery: its public messages after the cursor, in place of
    /// events (cursors are message numbers then). Each says its origin: `agent-reported` text
    /// is a claim, never evidence.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub messages: Option<Vec<legate_core::PublicMessage>>,
    /// In `messages` delivery: the number of the oldest message still kept (the newest 100
    /// are); `truncated` is true when messages after the cursor were dropped.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub oldest_available: Option<u64>,
    /// The mode this answer's cursor is for (present in `messages` delivery, and whenever the
    /// call named `cursorMode`). A wait in `messages` delivery ends early, saying the new
    /// mode, when `set_delivery_mode` changes it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delivery_mode: Option<legate_core::DeliveryMode>,
    /// Whether the cursor was reset to 0 because `cursorMode` was not the task's mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cursor_reset: Option<bool>,
}

/// `events`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct EventsOut {
    /// The task id.
    pub task_id: String,
    /// The events, in order.
    pub events: Vec<Map<String, Value>>,
    /// Pass this as `after` next time.
    pub next_cursor: u64,
    /// Whether more events follow.
    pub has_more: bool,
    /// Whether events between `after` and the first returned one were lost. Always false
    /// today: the store never drops part of a task's events (kept for clients of the bridge).
    pub truncated: bool,
    /// The number of the task's last event.
    pub last_seq: u64,
}

/// `result`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ResultOut {
    /// The task id.
    pub task_id: String,
    /// Whether the task has ended; when false, only `state` is meaningful.
    pub ready: bool,
    /// The state.
    pub state: TaskState,
    /// Why the task ended badly (`error`, at the top level, is reserved for a failed call).
    pub task_error: Option<ErrorBody>,
    /// A short status message.
    pub status_message: Option<String>,
    /// Token usage.
    pub usage: Option<Usage>,
    /// The agent's stop reason (end_turn, cancelled, …).
    pub stop_reason: Option<String>,
    /// Tool calls the agent started.
    pub tool_calls: Option<u32>,
    /// Of which failed.
    pub failed_tool_calls: Option<u32>,
    /// The answer's length in UTF-16 units (what `read_result` counts).
    pub answer_length: Option<usize>,
    /// The sha256 of the answer, as `read_result` reports it.
    pub answer_sha256: Option<String>,
    /// The answer (omitted with includeResult: false).
    pub answer: Option<String>,
    /// Every refusal (omitted with includeResult: false).
    pub refusals: Option<Vec<Refusal>>,
    /// The prompt (omitted with includeResult: false).
    pub prompt: Option<String>,
    /// A planner's or reviewer's report as Legate accepted it: `kind` (plan or review),
    /// `origin` (agent-reported: what the agent said, never evidence that a step was done),
    /// `citationsChecked` (true when every finding's file, line and quote were found in the
    /// copy). Absent for an implementer and for a task whose report was refused.
    pub report: Option<Report>,
    /// The artifacts collected when its last turn ended (absent when it named none): read
    /// one with `read_artifact` and its sha256.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub artifacts: Option<Vec<legate_core::Artifact>>,
    /// The private memory snapshots it was given (its own selection, or for a continuation
    /// or a handoff the ones it inherited): specialist, sha256 and size, never the text.
    /// Absent when it was given none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<legate_core::MemorySnapshot>,
}

/// `read_result`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ReadResultOut {
    /// The task id.
    pub task_id: String,
    /// This piece of the answer.
    pub text: String,
    /// Where it starts, in UTF-16 units.
    pub offset: usize,
    /// Where the next piece starts: pass it as `offset`.
    pub next_offset: usize,
    /// Whether more follows.
    pub has_more: bool,
    /// The whole answer's length, in UTF-16 units.
    pub total_length: usize,
    /// The sha256 of the whole answer (UTF-8): pass it as `expectedContentSha256`.
    pub content_sha256: String,
}

/// `cancel`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct CancelOut {
    /// The task id.
    pub task_id: String,
    /// Its state when the cancel was asked for (it ends `canceled` shortly).
    pub state: TaskState,
    /// Always true: the cancel was recorded.
    pub cancel_requested: bool,
}

/// `tasks`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct TasksOut {
    /// Tasks, newest first.
    pub tasks: Vec<TaskOut>,
    /// Pass as `before` for the next page; null when this page was the last.
    pub next_before: Option<i64>,
}

/// A conversation.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct SessionOut {
    /// The context id: pass it to `resume` or `send_message`.
    pub context_id: String,
    /// The agent.
    pub agent: String,
    /// The agent's session id, once known.
    pub session_id: Option<String>,
    /// The context's sandbox, when it has one.
    pub sandbox_root: Option<String>,
    /// When it last changed (milliseconds since the epoch).
    pub updated_at: i64,
    /// Its latest task.
    pub last_task_id: Option<String>,
    /// That task's state.
    pub last_state: Option<TaskState>,
}

/// `sessions`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct SessionsOut {
    /// Conversations, most recently used first.
    pub sessions: Vec<SessionOut>,
}

/// `send_message`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ReceiptOut {
    /// The client's id.
    pub message_id: String,
    /// The context.
    pub context_id: String,
    /// queued (waits for the running turn), sent (its turn started), failed, canceled.
    pub state: Delivery,
    /// The task that carries the message as the context's next turn: follow it with `wait`
    /// from cursor 0.
    pub continuation_task_id: String,
    /// That task's state.
    pub task_state: TaskState,
    /// True when this id had been received before; nothing new was queued.
    pub duplicate: bool,
}

/// The answer of a tool that may be answered as an MCP task: its direct answer, and, in the
/// task's result once the work ended, the outcome the matching read tool gives (`result`,
/// `comparison` or `group_status`). Only the schema uses this type; the front adds the
/// field to the direct answer itself.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct MayBeTask<A, O> {
    /// The direct answer.
    #[serde(flatten)]
    pub answer: A,
    /// Present only when the call was answered as an MCP task, once the work ended: what
    /// `result` (for `compare`: `comparison`; for `group_start`: `group_status`) answers for
    /// it then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<O>,
}
