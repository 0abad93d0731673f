//! The arguments of the task tools (`health` … `send_message`): MCP's shapes of what a
//! client asks, each turned into one engine request by `crate::tools`, taken apart whole.
//! Where an argument is an engine type (a mode, a criterion), it is that type; where a tool's
//! arguments have the engine request's shape (`handoff`: `HandoffRequest`), the tool takes the
//! request itself and no struct here repeats it.

use rmcp::schemars::JsonSchema;
use serde::Deserialize;

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
    /// An absolute path to an existing directory to work on. The root of a git project is
    /// worked on in a copy (as `workspace: {kind: "copy"}`: the project is untouched until
    /// integrate; the answer's workspace is "copy"); a directory in no git project is shared
    /// (worked in place); a directory inside a git project but not its root is
    /// INVALID_WORKSPACE. To work in place in a git project, add `workspace: {kind: "shared"}`
    /// (or `isolateWorktree: false`). Omit it to work in the context's own workspace (a new
    /// context's sandbox).
    pub working_directory: Option<String>,
    /// A context (conversation) to continue: same agent session, same workspace (naming
    /// another is INVALID_WORKSPACE). Omit it to start a new one.
    pub context_id: Option<String>,
    /// A model id the agent offers, or "auto" for the agent's own choice.
    pub model: Option<String>,
    /// Seconds before the task is stopped with TASK_TIMEOUT (default: the configured one).
    pub timeout_seconds: Option<u64>,
    /// "write" or "read-only". Read-only profiles refuse "write" and default to read-only.
    pub mode: Option<legate_core::TaskMode>,
    /// A workspace other than the sandbox, said explicitly: `{kind: "copy", path, includePaths,
    /// criteria}` works on a copy of a git project, reviewed with preview, read_patch, verify
    /// and test before integrate changes the original; `{kind: "shared", path}` works in the
    /// directory itself, in place (Legate does not own it). `path` may be left out when
    /// workingDirectory names the directory; naming it in both is INVALID_INPUT.
    pub workspace: Option<WorkspaceArg>,
    /// A JSON Schema (an object) the answer must follow: structured output, for agents of
    /// kind agy only. The answer's JSON comes back as the result's attachment
    /// `structured_output.json`.
    pub json_schema: Option<serde_json::Value>,
    /// The role the agent plays (see `roles`): "implementer" (the default), "planner",
    /// "reviewer" or a configured role. Planner and reviewer roles are read-only (mode
    /// "write" is MODE_NOT_ALLOWED) and return a report. A conversation keeps its role.
    pub role: Option<String>,
    /// Private memory the agent reads as data: at most 8 `{specialist, sha256}` of the
    /// project's entries (see memory_list), for a copy workspace or a working directory that
    /// is a git root. MEMORY_CHANGED when an entry is at another sha256 now. Refused on a
    /// continuation, which keeps its context's.
    pub memory: Option<Vec<legate_core::MemorySelection>>,
    /// "events" (the default: wait returns every event) or "messages" (wait returns public
    /// messages: questions, blockers and an excerpt of the result pointing at read_result).
    /// A continuation of the context inherits it; change it with set_delivery_mode.
    pub delivery_mode: Option<legate_core::DeliveryMode>,
    /// Files (safe relative paths in the workspace, at most 16) collected when each turn ends,
    /// with sizes and sha256s: listed by result, read with read_artifact. A path that leaves
    /// the workspace or that the secret policy refuses is BLOCKED_ARTIFACT_PATH.
    pub artifact_paths: Option<Vec<String>>,
    /// Skills staged in a copy workspace under `.agents/skills/<lowercase name>/` for the
    /// agent to read: `[{name, content, resources?: [{path, content}]}]`, at most 8 (Legate's
    /// bundled packs included), 100 resources each, 1 MiB of text in all. Never executed,
    /// never part of the patch. The same name twice with the same files is staged once;
    /// with other files SKILL_CONFLICT. Copy workspaces only; fixed when a context starts.
    #[serde(default)]
    pub skills: Vec<legate_core::SkillPackage>,
    /// The ACP tool kinds the agent may use (read, edit, delete, move, search, execute, think,
    /// fetch, switch_mode, other), within the configured ceiling (see get_agent_policy): a
    /// kind outside it is TOOL_NOT_ALLOWED; [] leaves only thinking. Fixed for the context.
    /// An agy agent holds it (and mcpServers) in a copy workspace only, by a hook staged
    /// there: read allows view_file, edit write_to_file, replace_file_content and
    /// multi_replace_file_content, finish always; its other tools are refused.
    pub allowed_tools: Option<Vec<legate_core::ToolKind>>,
    /// Catalogued MCP servers handed to the agent, with the tools of each it may call
    /// (see get_agent_policy): an unknown server is MCP_SERVER_NOT_FOUND, an unknown tool, or
    /// one not read-only on a read-only task, TOOL_NOT_ALLOWED. Fixed for the context.
    pub mcp_servers: Option<Vec<legate_core::McpSelection>>,
    /// With workingDirectory: relative files or directories to narrow its copy to (default:
    /// every eligible file); no `..`, absolute path or link. The same as workspace's
    /// includePaths: giving both, or giving it for a directory worked in place, is
    /// INVALID_INPUT or INVALID_WORKSPACE and nothing runs.
    pub include_paths: Option<Vec<String>>,
    /// With workingDirectory: the copy's acceptance criteria `[{id, description, check?: {kind,
    /// path, text?}}]`, fixed for the task's life; `verify` checks reviews against them. The
    /// same as workspace's criteria: giving both, or giving them for a directory worked in
    /// place, is refused and nothing runs.
    pub acceptance_criteria: Option<Vec<legate_engine::Criterion>>,
    /// The same as jsonSchema (structured output, agents of kind agy only); giving both is
    /// INVALID_INPUT.
    pub output_schema: Option<serde_json::Value>,
    /// How much reasoning the agent spends: "low", "medium", "high", "xhigh" or "max",
    /// passed as agy's `--effort`. Agents that take none (ACP agents) refuse it with
    /// INVALID_INPUT; an agy without `--effort` fails the task with AGY_INCOMPATIBLE. Not kept
    /// by a continuation.
    pub effort: Option<legate_core::Effort>,
    /// `true` records the task's raw protocol frames (the wire tap: ACP, agy stream-json or
    /// A2A, both ways, redacted and bounded by `[tap]`), read with `legate tap TASK`. A task
    /// of an agent configured with `tap = true` is tapped anyway.
    pub tap: Option<bool>,
    /// Compatibility with the seed: with workingDirectory, `true` is a copy (as `workspace:
    /// {kind: "copy"}`, a git root required), `false` works in place (as `{kind: "shared"}`).
    /// Contradicting workspace's kind is INVALID_INPUT.
    pub isolate_worktree: Option<bool>,
}

/// The kind of workspace `run` asks for.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "kebab-case")]
pub enum WorkspaceKindArg {
    /// A copy of a git project under Legate's home, with a private baseline.
    Copy,
    /// The directory itself, worked in place (Legate does not own it).
    Shared,
}

/// `run`'s `workspace`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WorkspaceArg {
    /// "copy" or "shared".
    pub kind: WorkspaceKindArg,
    /// The absolute path of the directory (for a copy, the root of a git work tree); may be
    /// left out when workingDirectory names it.
    pub path: Option<String>,
    /// Relative files or directories to narrow a copy to (default: every eligible file).
    #[serde(default)]
    pub include_paths: Vec<String>,
    /// A copy's acceptance criteria, fixed for the task's life; `verify` checks reviews against
    /// them.
    #[serde(default)]
    pub criteria: Vec<legate_engine::Criterion>,
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
    /// Return early once this many new events arrived, 1 to 1000 (default 1000); in
    /// `messages` delivery, messages, 1 to 100 (more counts as 100).
    pub max_events: Option<usize>,
    /// The delivery mode `after` was counted in ("events" or "messages"). When it is not the
    /// task's mode now, the wait starts again at 0 and answers `cursorReset: true`.
    pub cursor_mode: Option<legate_core::DeliveryMode>,
}

/// `wait_many`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WaitManyArgs {
    /// The loose tasks to wait on: 1 to 32 ids (or unique prefixes), each task once.
    pub task_ids: Vec<String>,
    /// "first": return once any one of them is ready; "all" (default): once every one is.
    /// A task is ready when it ended or waits for input.
    pub mode: Option<String>,
    /// How long to wait, 1 to 60 seconds (default 30). A timeout never cancels a task.
    pub timeout_seconds: Option<u64>,
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
    /// What to read: "answer" (default), the agent's answer text; or "structuredOutput",
    /// the structured output (JSON) an agy task run with a JSON Schema answered with
    /// (INVALID_INPUT when the task has none).
    pub part: Option<String>,
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
    pub mode: Option<legate_core::TaskMode>,
    /// Seconds before the task is stopped (default: the context's latest task's timeout).
    pub timeout_seconds: Option<u64>,
}

/// `continue`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContinueArgs {
    /// The task to continue (or a unique prefix of at least 4 characters): one that ended
    /// failed with SERVER_RESTARTED and is still its context's latest task.
    pub task_id: String,
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
