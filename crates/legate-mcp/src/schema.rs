//! The shapes of every tool's arguments and answers, from which the input and output JSON
//! Schemas are generated.
//!
//! Field names are camelCase on the wire. Arguments reject unknown fields. Every output schema
//! also admits the error shape `{error: {code, message}}` (see [`with_error`]), so a client that
//! validates structured content accepts both answers of one tool.

use rmcp::model::JsonObject;
use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::sync::Arc;

/// The error half of every answer.
#[derive(Debug, Clone, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct ErrorBody {
    /// A stable code, e.g. `TASK_NOT_FOUND`.
    pub code: String,
    /// One sentence for a person.
    pub message: String,
}

impl From<&legate_core::Error> for ErrorBody {
    fn from(e: &legate_core::Error) -> Self {
        Self {
            code: e.code.as_str().to_string(),
            message: e.message.clone(),
        }
    }
}

/// `output` with an `error` property added and its required fields made an alternative to
/// `error`: `anyOf: [{required: [...]}, {required: ["error"]}]`.
pub fn with_error(output: &Arc<JsonObject>) -> Arc<JsonObject> {
    let mut schema = output.as_ref().clone();
    let required = schema.remove("required");
    let properties = schema
        .entry("properties")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(p) = properties {
        debug_assert!(
            !p.contains_key("error"),
            "an answer has a top-level `error` field"
        );
        p.insert(
            "error".into(),
            json!({
                "type": "object",
                "description": "Present instead of the other fields when the call failed.",
                "properties": {
                    "code": {"type": "string", "description": "A stable code, e.g. TASK_NOT_FOUND."},
                    "message": {"type": "string", "description": "One sentence for a person."}
                },
                "required": ["code", "message"]
            }),
        );
    }
    if let Some(required) = required {
        schema.insert(
            "anyOf".into(),
            json!([{ "required": required }, { "required": ["error"] }]),
        );
    }
    Arc::new(schema)
}

// ---------------------------------------------------------------------------------------
// Arguments.

/// A mode a caller may ask for.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "kebab-case")]
pub enum ModeArg {
    /// The agent may change files in its workspace (subject to the supervisor).
    Write,
    /// Every edit, delete, move and command is refused.
    ReadOnly,
}

impl From<ModeArg> for legate_core::TaskMode {
    fn from(m: ModeArg) -> Self {
        match m {
            ModeArg::Write => Self::Write,
            ModeArg::ReadOnly => Self::ReadOnly,
        }
    }
}

/// No arguments.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// `health`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HealthArgs {
    /// Start each agent for real to tell whether it starts (default true; takes up to a few
    /// seconds per agent, all at once).
    pub probe: Option<bool>,
}

/// `agents`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentsArgs {
    /// Ask each agent for the models it offers (agy: `agy models`; an ACP agent: the model
    /// option of a throwaway session), default true; takes up to a few seconds, all agents at
    /// once. false answers from the configuration alone and starts nothing.
    pub probe: Option<bool>,
}

/// `run`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunArgs {
    /// What to ask the agent.
    pub prompt: String,
    /// A configured agent (see `agents`); default: the configured default agent.
    pub agent: Option<String>,
    /// An absolute path to an existing directory to work in, shared (Legate does not own it).
    /// Omit it to work in the context's own workspace (a new context's sandbox).
    pub working_directory: Option<String>,
    /// A context (conversation) to continue: same agent session, same workspace (naming
    /// another is INVALID_WORKSPACE). Omit it to start a new one.
    pub context_id: Option<String>,
    /// A model id the agent offers, or "auto" for the agent's own choice.
    pub model: Option<String>,
    /// Seconds before the task is stopped with TASK_TIMEOUT (default: the configured one).
    pub timeout_seconds: Option<u64>,
    /// "write" or "read-only". Read-only profiles refuse "write" and default to read-only.
    pub mode: Option<ModeArg>,
    /// A workspace other than the sandbox: `{kind: "copy", path, includePaths, criteria}` works
    /// on a copy of a git project, reviewed with preview, read_patch, verify and test before
    /// integrate changes the original. Not together with workingDirectory.
    pub workspace: Option<WorkspaceArg>,
    /// A JSON Schema (an object) the answer must follow: structured output, for agents of
    /// kind agy only. The answer's JSON comes back as the result's attachment
    /// `structured_output.json`.
    pub json_schema: Option<serde_json::Value>,
}

/// The kind of workspace `run` asks for.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceKindArg {
    /// A copy of a git project under Legate's home, with a private baseline.
    Copy,
}

/// `run`'s `workspace`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkspaceArg {
    /// "copy".
    pub kind: WorkspaceKindArg,
    /// The absolute path of the project: the root of a git work tree.
    pub path: String,
    /// Relative files or directories to narrow the copy to (default: every eligible file).
    #[serde(default)]
    pub include_paths: Vec<String>,
    /// Acceptance criteria, fixed for the task's life; `verify` checks reviews against them.
    #[serde(default)]
    pub criteria: Vec<CriterionArg>,
}

/// What a check looks at.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "kebab-case")]
pub enum CheckKindArg {
    /// The file exists.
    FileExists,
    /// The file does not exist.
    FileAbsent,
    /// The file contains `text`.
    FileContains,
    /// The file does not contain `text`.
    FileNotContains,
}

/// A deterministic check of a criterion, run on the copy's real files.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CheckArg {
    /// file-exists, file-absent, file-contains, file-not-contains.
    pub kind: CheckKindArg,
    /// The relative path.
    pub path: String,
    /// The text, for file-contains and file-not-contains.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// An acceptance criterion.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CriterionArg {
    /// Unique within the task (1 to 100 characters).
    pub id: String,
    /// What must hold.
    pub description: String,
    /// An optional deterministic check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<CheckArg>,
}

/// One task, by id or unique prefix.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TaskArgs {
    /// The task id (or a unique prefix of at least 4 characters).
    pub task_id: String,
}

/// `wait`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaitArgs {
    /// The task id (or a unique prefix).
    pub task_id: String,
    /// Only events numbered after this (default 0). Pass the `nextCursor` of the last answer.
    pub after: Option<u64>,
    /// How long to wait, 1 to 60 seconds (default 30). A timeout never cancels the task.
    pub timeout_seconds: Option<u64>,
    /// Return early once this many new events arrived, 1 to 1000 (default 1000).
    pub max_events: Option<usize>,
}

/// `events`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EventsArgs {
    /// The task id (or a unique prefix).
    pub task_id: String,
    /// Only events numbered after this (default 0); at most the last event's number.
    pub after: Option<u64>,
    /// At most this many, 1 to 1000 (default 200).
    pub limit: Option<usize>,
}

/// `result`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResultArgs {
    /// The task id (or a unique prefix).
    pub task_id: String,
    /// Include the answer text, the prompt and the refusals (default true). Pass false for a
    /// small answer and read the text with `read_result`.
    pub include_result: Option<bool>,
}

/// `read_result`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadResultArgs {
    /// The task id (or a unique prefix).
    pub task_id: String,
    /// Where to start, in UTF-16 code units (default 0). Use the `nextOffset` returned.
    pub offset: Option<usize>,
    /// How many UTF-16 code units at most, 2 to 50000 (default 10000).
    pub limit: Option<usize>,
    /// The `contentSha256` of an earlier piece: a different content is CONTENT_CHANGED.
    pub expected_content_sha256: Option<String>,
}

/// `tasks`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TasksArgs {
    /// Only tasks in this state (submitted, working, input-required, completed, failed,
    /// canceled, rejected, auth-required).
    pub state: Option<String>,
    /// Only tasks of this context.
    pub context_id: Option<String>,
    /// Only tasks of this agent.
    pub agent: Option<String>,
    /// At most this many, 1 to 200 (default 20).
    pub limit: Option<usize>,
    /// Only tasks created before this instant (milliseconds since the epoch); pass the
    /// `nextBefore` of the last answer to page back.
    pub before: Option<i64>,
}

/// `sessions`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionsArgs {
    /// At most this many, 1 to 200 (default 20).
    pub limit: Option<usize>,
}

/// `resume`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResumeArgs {
    /// The context (conversation) to continue; see `sessions` and `tasks`.
    pub context_id: String,
    /// What to ask next.
    pub prompt: String,
    /// "write" or "read-only" (default: the context's latest task's mode; read-only
    /// profiles force read-only).
    pub mode: Option<ModeArg>,
    /// Seconds before the task is stopped (default: the context's latest task's timeout).
    pub timeout_seconds: Option<u64>,
}

/// `send_message`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SendMessageArgs {
    /// An id the client chooses (a UUID is a good choice). Sending the same id and text
    /// again returns the same receipt; the same id with other text is MESSAGE_ID_CONFLICT.
    pub message_id: String,
    /// The message, at most 2000 characters.
    pub text: String,
    /// The context to send it to. Give this or `taskId`.
    pub context_id: Option<String>,
    /// A task whose context to send it to. Give this or `contextId`.
    pub task_id: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Answers.

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
    /// `conversation`, `json-schema`, `add-dir`, `new-project`, `effort`); empty when not
    /// probed, when it did not start, or when its protocol has no such notion (ACP).
    pub capabilities: Vec<String>,
    /// Set when the adapter version the probe found (ACP `agentInfo`) lies outside the
    /// versions its preset was verified against: what it announced and the verified range.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version_warning: Option<String>,
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
    pub state: String,
    /// write or read-only.
    pub mode: String,
    /// sandbox, shared or copy.
    pub workspace: String,
    /// The workspace root, once prepared.
    pub root: Option<String>,
    /// The model asked for, if any.
    pub model: Option<String>,
    /// Why it ended badly.
    pub error: Option<ErrorBody>,
    /// A short status message (refusals, …).
    pub status_message: Option<String>,
    /// Token usage as the agent reported it.
    pub usage: Option<Map<String, Value>>,
    /// The agent session id, once known.
    pub session_id: Option<String>,
    /// The first words of the prompt.
    pub prompt_preview: String,
    /// The timeout, in seconds.
    pub timeout_seconds: u64,
    /// When it was stored (milliseconds since the epoch).
    pub created_at: i64,
    /// When it last changed (milliseconds since the epoch).
    pub updated_at: i64,
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
    pub state: String,
    /// write or read-only.
    pub mode: String,
    /// sandbox, shared or copy.
    pub workspace: String,
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
    pub state: String,
    /// Why the task ended badly (`error`, at the top level, is reserved for a failed call).
    pub task_error: Option<ErrorBody>,
    /// Token usage so far.
    pub usage: Option<Map<String, Value>>,
    /// A short status message.
    pub status_message: Option<String>,
    /// The new events, in order.
    pub events: Vec<Map<String, Value>>,
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

/// A refusal by the supervisor.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct RefusalOut {
    /// The tool call's title.
    pub title: String,
    /// Why it was refused.
    pub reason: String,
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
    pub state: String,
    /// Why the task ended badly (`error`, at the top level, is reserved for a failed call).
    pub task_error: Option<ErrorBody>,
    /// A short status message.
    pub status_message: Option<String>,
    /// Token usage.
    pub usage: Option<Map<String, Value>>,
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
    pub refusals: Option<Vec<RefusalOut>>,
    /// The prompt (omitted with includeResult: false).
    pub prompt: Option<String>,
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
    pub state: String,
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
    pub last_state: Option<String>,
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
    pub state: String,
    /// The task that carries the message as the context's next turn: follow it with `wait`
    /// from cursor 0.
    pub continuation_task_id: String,
    /// That task's state.
    pub task_state: String,
    /// True when this id had been received before; nothing new was queued.
    pub duplicate: bool,
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use rmcp::handler::server::common::schema_for_output;

    #[test]
    fn output_schemas_admit_the_error_shape() {
        let schema = with_error(&schema_for_output::<CancelOut>());
        assert_eq!(schema["type"], "object");
        assert_eq!(
            schema["properties"]["error"]["required"],
            json!(["code", "message"])
        );
        let any_of = schema["anyOf"].as_array().unwrap();
        assert_eq!(any_of[1], json!({"required": ["error"]}));
        let required = any_of[0]["required"].as_array().unwrap();
        assert!(required.contains(&json!("taskId")));
        assert!(schema.get("required").is_none());
    }
}
