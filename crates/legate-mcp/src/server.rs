//! The MCP server handler: the tool catalog (filtered by profile), and `tools/call` dispatch
//! with every failure turned into `isError` with `{error: {code, message}}`.
//!
//! Transports live elsewhere (`stdio`, `http`); this module never touches a socket or a pipe,
//! and it logs tool names, task ids and error codes, never arguments.

use crate::confirmation::ElicitationConfirmer;
use crate::groups;
use crate::profile::{Profile, ToolGroup};
use crate::review::{self, *};
use crate::schema::{self, *};
use crate::tools;
use crate::wait::{self, Progress};
use legate_core::{Error, ErrorCode, Result, TaskId};
use legate_engine::Engine;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, Implementation, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::schemars::JsonSchema;
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The longest silence between two progress notifications of one `wait`: the issue asks for
/// at least every 15 s; 10 s leaves room for a slow link.
pub const DEFAULT_HEARTBEAT: Duration = Duration::from_secs(10);

const INSTRUCTIONS: &str = "Legate delegates coding tasks to other agents inside limits neither side can widen. \
Start work with `run` (it returns a taskId at once), follow it with `wait` (up to 60 s per call; \
pass the returned nextCursor as `after` and call again until ready is true), then collect it with \
`result` (includeResult: false for a small answer) and `read_result` for the answer in pieces. \
Waiting or disconnecting never cancels a task; only `cancel` does. Continue a conversation with \
`resume` or `send_message`, using the contextId that `run` returned. To change a git project only \
after review, `run` with workspace {kind: \"copy\", path, criteria}, then `preview` (its sha256 binds \
every later step), `read_patch`, `verify`, `test`, and `integrate`, as the profile offers them.";

/// How the server behaves.
#[derive(Debug, Clone)]
pub struct McpOptions {
    /// Which tools exist, and whether tasks may write.
    pub profile: Profile,
    /// The longest silence between two progress notifications of one `wait`.
    pub heartbeat: Duration,
}

impl Default for McpOptions {
    fn default() -> Self {
        Self {
            profile: Profile::Full,
            heartbeat: DEFAULT_HEARTBEAT,
        }
    }
}

/// One tool: its description and the group that decides which profiles offer it.
#[derive(Debug, Clone)]
struct ToolDef {
    group: ToolGroup,
    tool: Tool,
}

fn def<A: JsonSchema + 'static, O: JsonSchema + 'static>(
    name: &'static str,
    title: &str,
    description: &'static str,
    read_only: bool,
) -> ToolDef {
    let input = schema::input_schema::<A>();
    let annotations = ToolAnnotations::with_title(title)
        .read_only(read_only)
        .destructive(false)
        .open_world(false);
    let tool = Tool::new(name, description, input)
        .with_title(title)
        .with_raw_output_schema(schema::output_schema::<O>())
        .with_annotations(annotations);
    ToolDef {
        group: ToolGroup::Query,
        tool,
    }
}

impl ToolDef {
    /// The same tool in another group.
    fn group(mut self, group: ToolGroup) -> Self {
        self.group = group;
        self
    }

    /// Marks the tool as one that may remove or overwrite files outside a task's workspace.
    fn destructive(mut self) -> Self {
        if let Some(a) = self.tool.annotations.take() {
            self.tool.annotations = Some(a.destructive(true));
        }
        self
    }
}

/// Every tool Legate has, in the order they are listed.
fn catalog() -> Vec<ToolDef> {
    vec![
        def::<HealthArgs, HealthOut>(
            "health",
            "Legate health",
            "Legate's version, tool profile, limits, confinement, and each configured agent with whether it starts.",
            true,
        ),
        def::<AgentsArgs, AgentsOut>(
            "agents",
            "Configured agents",
            "The agents Legate can delegate to, with their presets, configured model, and the models they offer where their protocol can list them (agy).",
            true,
        ),
        def::<NoArgs, RolesOut>(
            "roles",
            "Roles",
            "The roles a task may play (pass the name as run's role): the built-in implementer (the default), planner and reviewer, and the configured ones, each with its base, description, whether it is read-only, its instructions' length and its defaults.",
            true,
        ),
        def::<RunArgs, StartedOut>(
            "run",
            "Delegate a task",
            "Delegates a prompt to an agent and returns the task id at once; follow it with wait. Works in the context's sandbox unless workingDirectory names a shared directory. Continue a conversation with contextId.",
            false,
        ),
        def::<WaitArgs, WaitOut>(
            "wait",
            "Wait for a task",
            "Waits up to timeoutSeconds (1-60, default 30) for a task to end, returning its new events after `after` (for a task in messages delivery: its public messages instead, ending early on a question; pass cursorMode). Sends progress notifications on each event when the call carries a progress token. A timeout never cancels the task: call again with nextCursor.",
            true,
        ),
        def::<EventsArgs, EventsOut>(
            "events",
            "Task events",
            "A page of a task's events after a cursor, without waiting.",
            true,
        ),
        def::<TaskArgs, StatusOut>(
            "status",
            "Task status",
            "A task's state, error, usage, workspace and session, and whether more turns of its context are queued.",
            true,
        ),
        def::<ResultArgs, ResultOut>(
            "result",
            "Task result",
            "A task's result once it ended (ready: false before). includeResult: false omits the answer, prompt and refusals; read the answer with read_result.",
            true,
        ),
        def::<ReadResultArgs, ReadResultOut>(
            "read_result",
            "Read a result in pieces",
            "Reads an ended task's answer in pieces of UTF-16 units (offset, limit 2-50000) that never split a surrogate pair. Join `text` until hasMore is false, always using nextOffset; pass contentSha256 as expectedContentSha256 to detect a change.",
            true,
        ),
        def::<TaskArgs, CancelOut>(
            "cancel",
            "Cancel a task",
            "Asks a queued or running task to stop; it ends canceled.",
            false,
        ),
        def::<TasksArgs, TasksOut>(
            "tasks",
            "List tasks",
            "Stored tasks, newest first, filtered by state, context or agent.",
            true,
        ),
        def::<SessionsArgs, SessionsOut>(
            "sessions",
            "List conversations",
            "Known contexts (conversations): agent, agent session, sandbox, latest task.",
            true,
        ),
        def::<ResumeArgs, StartedOut>(
            "resume",
            "Continue a conversation",
            "Sends a new prompt into an earlier context: same agent, same session and workspace. Returns the new task id at once.",
            false,
        ),
        def::<SendMessageArgs, ReceiptOut>(
            "send_message",
            "Message a conversation",
            "Queues a message (at most 2000 characters) for a context; it becomes the context's next turn, after any running one. Idempotent by messageId: the same id and text return the same receipt, the same id with other text is refused.",
            false,
        ),
        def::<UsageArgs, UsageOut>(
            "usage",
            "Token usage",
            "Tokens the agents reported, by task, agent session and model, with totals; filter by taskId, sessionId, model or agent. A counter is null when no task in the group reported it.",
            true,
        ),
        def::<ListProjectFilesArgs, ProjectFilesOut>(
            "list_project_files",
            "Files a copy would get",
            "The files a copy workspace of a git project would get (tracked and unignored, narrowed by includePaths), with those the secret preflight leaves out by name or path. Use it to pick includePaths before run with workspace {kind: \"copy\"}.",
            true,
        ),
        def::<TaskArgs, legate_engine::ContextPack>(
            "context",
            "A finished copy task's context",
            "What a finished copy task leaves for the next role: its criteria, up to 8 planning or review reports of its handoff chain (newest first, each agent-reported with citationsChecked), its test records with their source, the caller's decisions (client-reported), treeSha256 over the copy's files, and contextSha256 over all of it. Pass contextSha256 to handoff. None of it authorizes integration.",
            true,
        )
        .group(ToolGroup::Review),
        def::<HandoffArgs, StartedOut>(
            "handoff",
            "Hand a copy to another role",
            "Starts a role (implementer, planner, reviewer or a configured one) as a new task in a new context, in a fresh copy of the source copy's current files that keeps the original project's baseline, so the patch accumulates against the original; the source copy is not changed. expectedContextSha256 is checked now and again when the copy is made: CONTEXT_CHANGED. The context reaches the agent as data to check, never as instructions; it must fit the prompt limit (CONTEXT_TOO_LARGE, never cut). COPY_CLOSED for a discarded or integrated source.",
            false,
        )
        .group(ToolGroup::Review),
        def::<crate::memory::MemoryListArgs, legate_engine::MemoryList>(
            "memory_list",
            "List private memory",
            "The private memory Legate keeps for a project (its git root) and specialist: each entry's specialist, sha256, size and times, with the store's totals and limits; never the text. Read an entry with memory_read, select it for run or handoff as memory: [{specialist, sha256}].",
            true,
        ),
        def::<crate::memory::MemoryReadArgs, legate_engine::MemoryPiece>(
            "memory_read",
            "Read private memory",
            "Reads a memory entry's text in pieces (offset, limit 4-65536 bytes) bound to expectedSha256: MEMORY_CHANGED when the entry is another version now, MEMORY_NOT_FOUND when there is none. Join text until hasMore is false, using nextOffset. An entry that holds a credential reads redacted.",
            true,
        ),
        def::<crate::memory::MemoryWriteArgs, legate_engine::MemoryWritten>(
            "memory_write",
            "Write private memory",
            "Writes a specialist's memory of a project, compare-and-swap: expectedSha256 null creates it, its current sha256 replaces it; anything else is MEMORY_CHANGED and changes nothing. Returns the new sha256. Limits (entries, total and per-entry bytes) are MEMORY_LIMIT_EXCEEDED; a text that looks like a credential is INPUT_SECRET_DETECTED. Nothing is read from the project.",
            false,
        )
        .group(ToolGroup::Implementation),
        def::<crate::memory::MemoryRemoveArgs, legate_engine::MemoryRemoved>(
            "memory_remove",
            "Remove private memory",
            "Removes a specialist's memory of a project, only at expectedSha256 (MEMORY_CHANGED for another version, MEMORY_NOT_FOUND for none). Tasks that received it keep their snapshots.",
            false,
        )
        .group(ToolGroup::Implementation)
        .destructive(),
        def::<crate::compare::CompareArgs, legate_engine::Compared>(
            "compare",
            "Compare agents on one version",
            "Asks 2 to 4 distinct targets (agent, optional model; across vendors) the same prompt about a finished copy task's current files: each runs a read-only review (role reviewer) in its own copy, all copies made from one reading of the source before any target starts. expectedContextSha256 (from context) is checked: CONTEXT_CHANGED. Returns comparisonId and the taskIds at once (follow each with wait; cancel or discard each on its own); startErrors lists targets that did not start. Never integrates, never votes.",
            false,
        ),
        def::<crate::compare::ComparisonArgs, legate_engine::Comparison>(
            "comparison",
            "A comparison's reviews and findings",
            "A comparison as it stands: each review (state, error, usage, report summary, contextMatches: its copy re-hashed against the compared tree), startErrors, and the findings of the completed reviews grouped by path and line: identical (all said literally the same), different (all said something there, not the same), not-reported-by-all. complete needs every review completed and every copy and the source unchanged; contextStale says otherwise. Grouping is literal, no semantic voting; no finding authorizes integration, and no finding is no proof of correctness.",
            true,
        ),
        def::<TaskArgs, PreviewOut>(
            "preview",
            "Preview a copy's patch",
            "A copy task's patch now: files (A/M/D) with line counts, totals, the sha256 and length of the full patch, the latest verification and whether it is stale, and the test records. Pass sha256 as expectedSha256 to read_patch, verify, test and integrate.",
            true,
        )
        .group(ToolGroup::Review),
        def::<ReadPatchArgs, ReadPatchOut>(
            "read_patch",
            "Read a copy's patch",
            "Reads a copy task's patch (whole, or one file's part with path) in byte windows (offset, limit 2-50000) bound to expectedSha256: a changed patch is PATCH_CHANGED. Join text until hasMore is false, using nextOffset.",
            true,
        )
        .group(ToolGroup::Review),
        def::<VerifyArgs, VerifyOut>(
            "verify",
            "Verify a copy against its criteria",
            "Checks one review per acceptance criterion (verdict, path, line, exact quote) against the copy's real files and runs the criteria's checks. The verification is recorded, bound to the patch and the files it cites; reviews stay client-reported.",
            false,
        )
        .group(ToolGroup::Review),
        def::<TestArgs, TestOut>(
            "test",
            "Run a test in a copy",
            "Runs an executable with its arguments (no shell) in a copy task's copy, with a timeout, and records the observed evidence (exit code, bounded output, patch sha256 before and after). A failing command is an answer with passed: false and testError, not a failed call. The command is kernel-confined like an agent: it writes only inside the copy, and the evidence says what the kernel enforced.",
            false,
        )
        .group(ToolGroup::Implementation),
        def::<RecordTestArgs, TestOut>(
            "record_test",
            "Record a client's test run",
            "Records a test run the client performed itself, marked client-reported and bound to the patch sha256. It never counts as observed evidence for integration.",
            false,
        )
        .group(ToolGroup::Implementation),
        def::<IntegrateArgs, IntegrateOut>(
            "integrate",
            "Integrate a copy's patch",
            "Writes a completed write task's verified patch into the original project, all files or none. Needs a current passing verification (and passing tests when configured); in approval mode ask, the client is asked to confirm with a form and only an accept with confirm: true proceeds. Never commits.",
            false,
        )
        .group(ToolGroup::Implementation)
        .destructive(),
        def::<TaskArgs, DiscardOut>(
            "discard",
            "Discard a copy",
            "Removes a finished copy task's copy and private baseline now; the original is untouched.",
            false,
        )
        .group(ToolGroup::Implementation)
        .destructive(),
        def::<NoArgs, CleanupOut>(
            "cleanup",
            "Sweep old copies",
            "Runs the retention sweep now: removes copies of finished tasks untouched for longer than the retention, and directories of tasks the store no longer has. Copies in use are kept.",
            false,
        )
        .group(ToolGroup::Implementation)
        .destructive(),
        def::<NoArgs, crate::sandbox::SandboxPolicyOut>(
            "get_sandbox_policy",
            "Read the test sandbox policy",
            "The global ceiling of every test's sandbox selection (readRoots, writeRoots, network, childProcesses, maxOutputChars), normalized, and its sha256: what set_sandbox_policy must name, and what a selected test's evidence is bound to.",
            true,
        ),
        def::<crate::sandbox::SetSandboxPolicyArgs, crate::sandbox::SandboxPolicyOut>(
            "set_sandbox_policy",
            "Replace the test sandbox policy",
            "Replaces the global test sandbox ceiling if its current sha256 is expectedSha256 (SANDBOX_POLICY_CHANGED otherwise). Roots must be absolute, canonical, existing directories, no links, clear of Legate's home, credentials and forbidden directories. In approval mode ask, the client is asked to confirm with a form and only an accept with confirm: true proceeds (SANDBOX_POLICY_DECLINED otherwise); in auto, validation alone.",
            false,
        )
        .group(ToolGroup::Implementation),
        // Groups and workflows (issue 16 §6): wfpeer's tools, in crate::groups.
        def::<groups::GroupCreateArgs, legate_engine::GroupCreated>(
            "group_create",
            "Create a group of tasks",
            "Validates and stores a group definition (nodes with id, role, agent, model, prompt, dependsOn, fileSources; peerRoutes; budget {maxTotalTokens}; workflow {finalNode, hooks}) and returns groupId and definitionSha256. Starts nothing. The same groupId with the same definition answers the stored group; another definition is GROUP_CONFLICT. A cycle, an unknown id or a limit is WORKFLOW_INVALID; a context over 64 KiB is WORKFLOW_CONTEXT_TOO_LARGE.",
            false,
        )
        .group(ToolGroup::Implementation),
        def::<groups::GroupStartArgs, legate_engine::GroupStatus>(
            "group_start",
            "Start or resume a group",
            "Starts a created group, or resumes a paused one, given the definitionSha256 group_create returned. Nodes are admitted as their dependencies finish; finished nodes are never re-run, and a checkpoint whose data changed is WORKFLOW_CHECKPOINT_CHANGED.",
            false,
        )
        .group(ToolGroup::Implementation),
        def::<groups::GroupArgs, legate_engine::GroupStatus>(
            "group_status",
            "A group's status",
            "A group's state (created, running, paused with pauseReason, completed, failed, canceled), each node's state, tasks and checkpoint hashes, and the budget's observed figures. Never prompts, answers or intermediate results.",
            true,
        ),
        def::<groups::GroupWaitArgs, groups::GroupWaitOut>(
            "group_wait",
            "Wait for a group",
            "Waits up to timeoutSeconds (1-60, default 30) for a group to end or pause; ready is true then. Sends progress notifications (node counts only) when the call carries a progress token. Intermediate results stay out of the answer; a timeout never changes the group.",
            true,
        ),
        def::<groups::GroupArgs, legate_engine::GroupStatus>(
            "group_cancel",
            "Cancel a group",
            "Admits no further node and cancels the group's running tasks. Finished nodes and their copies are kept.",
            false,
        )
        .group(ToolGroup::Implementation),
        def::<groups::GroupsArgs, groups::GroupsOut>(
            "groups",
            "Groups",
            "Every retained group, newest first: id, title, definitionSha256, state, pauseReason and node count.",
            true,
        ),
        def::<groups::GroupArgs, legate_engine::WorkflowResult>(
            "workflow_result",
            "A workflow's synthesis",
            "Checks every checkpoint of a completed workflow again, then returns only the final node's public synthesis (agent-reported) with resultSha256 and referenceSha256. WORKFLOW_RESULT_UNAVAILABLE when it has not completed or a later run failed; WORKFLOW_CHECKPOINT_CHANGED when data changed. It authorizes no integration.",
            true,
        ),
        def::<groups::PeerReceiptsArgs, legate_engine::PeerReceiptPage>(
            "peer_receipts",
            "Peer message receipts",
            "Pages (after, limit 1-20) through the receipts of the messages a group's nodes sent each other over the definition's peerRoutes: messageId, origin agent-reported, from, to, state (queued, then sent once the recipient's next turn was accepted) and the text's sha256. Never the bodies. A page is a snapshot: read again to see changed states.",
            true,
        ),
        def::<crate::delivery::SetDeliveryModeArgs, crate::delivery::DeliveryModeOut>(
            "set_delivery_mode",
            "Change how a task is delivered",
            "Switches a task between \"events\" (wait returns every event) and \"messages\" (wait returns public messages: questions, blockers, an excerpt of the result). Cursors of one mode mean nothing in the other: restart wait at after: 0 with cursorMode set to the new mode. A later continuation of the context inherits it. Changes no permission or role.",
            false,
        ),
        def::<crate::delivery::ReadArtifactArgs, crate::delivery::ReadArtifactOut>(
            "read_artifact",
            "Read an artifact in pieces",
            "Reads a file a task collected with artifactPaths (result lists them with sizes and sha256s), in pieces bound to expectedSha256: UTF-16 units for UTF-8 text, base64 of byte windows otherwise. The kept bytes are checked against the sha256 and the secret policy on every read (BLOCKED_ARTIFACT_PATH); ARTIFACT_NOT_FOUND for a name that was not collected.",
            true,
        ),
        // ctrl (issue 17, parts 4 and 6): tool controls and models.
        def::<NoArgs, legate_engine::AgentPolicy>(
            "get_agent_policy",
            "Tool and MCP policy",
            "The configured ceiling of tool kinds (run's allowedTools must stay within it; it applies when allowedTools is omitted), the catalogue of trusted MCP servers (ids, transport kinds, tools and whether each is read-only) that run's mcpServers selects from, and which agents enforce these controls. Never shows a server's command, environment or URL.",
            true,
        ),
        def::<crate::controls::AgentArg, crate::controls::ModelsOut>(
            "list_models",
            "An agent's models",
            "The models an agent offers (agy models, or an ACP session's model option), the current one, and how a task naming no model chooses.",
            true,
        ),
        def::<crate::controls::AgentArg, crate::controls::ModelOutcome>(
            "get_model",
            "An agent's default model",
            "The saved model preference, the configured model, and what a task naming no model runs with: the task's model, else the saved preference, else the configured model, else the agent's own default.",
            true,
        ),
        def::<crate::controls::SetModelArgs, crate::controls::ModelOutcome>(
            "set_model",
            "Save an agent's default model",
            "Saves the model a task naming none runs with (model: null saves the agent's own default, even over a configured model; reset: true removes the saved preference). Shared by every Legate on this home; the id is checked when a task runs (MODEL_NOT_AVAILABLE).",
            false,
        )
        .group(ToolGroup::Implementation),
    ]
}

/// `run` as this server offers it: its `role` argument lists the roles this engine knows.
fn with_role_names(mut def: ToolDef, names: &[String]) -> ToolDef {
    if def.tool.name != "run" {
        return def;
    }
    let mut input = def.tool.input_schema.as_ref().clone();
    if let Some(Value::Object(role)) = input.get_mut("properties").and_then(|p| p.get_mut("role")) {
        let mut names: Vec<Value> = names.iter().cloned().map(Value::String).collect();
        // The argument is optional: null stays allowed.
        names.push(Value::Null);
        role.insert("enum".to_string(), Value::Array(names));
    }
    def.tool.input_schema = Arc::new(input);
    def
}

/// Legate's MCP server. Cheap to clone; clones share the engine and the list of tasks they
/// started.
#[derive(Debug, Clone)]
pub struct LegateMcp {
    engine: Engine,
    options: Arc<McpOptions>,
    tools: Arc<Vec<ToolDef>>,
    started: Arc<Mutex<HashSet<TaskId>>>,
}

impl LegateMcp {
    /// A server over `engine`.
    pub fn new(engine: Engine, options: McpOptions) -> Self {
        let profile = options.profile;
        let names = engine.roles().names();
        let tools = catalog()
            .into_iter()
            .filter(|t| profile.offers(t.group))
            .map(|t| with_role_names(t, &names))
            .collect();
        Self {
            engine,
            options: Arc::new(options),
            tools: Arc::new(tools),
            started: Arc::default(),
        }
    }

    /// The tools this server lists and answers.
    pub fn tools(&self) -> Vec<Tool> {
        self.tools.iter().map(|t| t.tool.clone()).collect()
    }

    /// The tasks this server started that have not ended yet.
    pub fn unfinished(&self) -> Vec<TaskId> {
        let ids: Vec<TaskId> = lock(&self.started).iter().cloned().collect();
        ids.into_iter()
            .filter(|id| {
                self.engine
                    .task(id.as_str())
                    .map(|t| !t.is_terminal())
                    .unwrap_or(false)
            })
            .collect()
    }

    /// The engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    fn remember(&self, task_id: &str) {
        lock(&self.started).insert(TaskId(task_id.to_string()));
    }

    /// Runs one tool. Arguments that do not fit the tool's schema are `INVALID_INPUT`.
    async fn dispatch(
        &self,
        name: &str,
        args: Value,
        context: &RequestContext<RoleServer>,
    ) -> Result<Value> {
        let engine = &self.engine;
        let profile = self.options.profile;
        match name {
            "health" => to_value(tools::health(engine, profile, parse(args)?).await?),
            "agents" => to_value(tools::agents(engine, parse(args)?).await),
            "roles" => {
                let _: NoArgs = parse(args)?;
                to_value(tools::roles(engine))
            }
            "run" => {
                let out = tools::run(engine, profile, parse(args)?)?;
                self.remember(&out.task_id);
                tracing::info!(task = %out.task_id, agent = %out.agent, mode = %out.mode, "mcp run");
                to_value(out)
            }
            "wait" => {
                let progress = context.meta.get_progress_token().map(|token| Progress {
                    peer: context.peer.clone(),
                    token,
                    heartbeat: self.options.heartbeat,
                });
                to_value(wait::wait(engine, parse(args)?, progress, context.ct.clone()).await?)
            }
            "events" => to_value(tools::events(engine, parse(args)?)?),
            "status" => to_value(tools::status(engine, parse(args)?)?),
            "result" => to_value(tools::result(engine, parse(args)?)?),
            "read_result" => to_value(tools::read_result(engine, parse(args)?)?),
            "cancel" => to_value(tools::cancel(engine, parse(args)?)?),
            "tasks" => to_value(tools::tasks(engine, parse(args)?)?),
            "sessions" => to_value(tools::sessions(engine, parse(args)?)?),
            "resume" => {
                let out = tools::resume(engine, profile, parse(args)?)?;
                self.remember(&out.task_id);
                to_value(out)
            }
            "send_message" => {
                let out = tools::send_message(engine, profile, parse(args)?)?;
                if !out.duplicate {
                    self.remember(&out.continuation_task_id);
                }
                to_value(out)
            }
            "usage" => to_value(review::usage(engine, parse(args)?)?),
            "list_project_files" => {
                to_value(review::list_project_files(engine, parse(args)?).await?)
            }
            "context" => {
                let a: TaskArgs = parse(args)?;
                to_value(engine.handoffs().context(&a.task_id).await?)
            }
            "handoff" => {
                let out = tools::handoff(engine, profile, parse(args)?).await?;
                self.remember(&out.task_id);
                tracing::info!(task = %out.task_id, agent = %out.agent, mode = %out.mode, "mcp handoff");
                to_value(out)
            }
            "compare" => {
                let out = crate::compare::compare(engine, parse(args)?).await?;
                for id in &out.task_ids {
                    self.remember(id.as_str());
                }
                tracing::info!(comparison = %out.comparison_id, started = out.task_ids.len(), failed = out.start_errors.len(), "mcp compare");
                to_value(out)
            }
            "comparison" => to_value(crate::compare::comparison(engine, parse(args)?).await?),
            "preview" => {
                let a: TaskArgs = parse(args)?;
                to_value(review::preview(engine, &a.task_id).await?)
            }
            "read_patch" => to_value(review::read_patch(engine, parse(args)?).await?),
            "verify" => to_value(review::verify(engine, parse(args)?).await?),
            "test" => to_value(review::test(engine, parse(args)?).await?),
            "record_test" => to_value(review::record_test(engine, parse(args)?).await?),
            "integrate" => {
                let confirmer = ElicitationConfirmer::new(
                    context.peer.clone(),
                    engine.config().fronts.approval_timeout,
                );
                let out = review::integrate(engine, parse(args)?, &confirmer).await?;
                tracing::info!(task = %out.task_id, files = out.integration.result.files.len(), "mcp integrate");
                to_value(out)
            }
            "discard" => {
                let a: TaskArgs = parse(args)?;
                to_value(review::discard(engine, &a.task_id).await?)
            }
            "cleanup" => {
                let _: NoArgs = parse(args)?;
                to_value(review::cleanup(engine).await?)
            }
            "get_sandbox_policy" => {
                let _: NoArgs = parse(args)?;
                to_value(crate::sandbox::get_sandbox_policy(engine)?)
            }
            "set_sandbox_policy" => {
                let confirmer = crate::sandbox::PolicyElicitor::new(
                    context.peer.clone(),
                    engine.config().fronts.approval_timeout,
                );
                to_value(
                    crate::sandbox::set_sandbox_policy(engine, parse(args)?, &confirmer).await?,
                )
            }
            "memory_list" => to_value(crate::memory::list(engine, parse(args)?)?),
            "memory_read" => to_value(crate::memory::read(engine, parse(args)?)?),
            "memory_write" => to_value(crate::memory::write(engine, parse(args)?)?),
            "memory_remove" => to_value(crate::memory::remove(engine, parse(args)?)?),
            "group_create" => to_value(groups::create(engine, parse(args)?)?),
            "group_start" => to_value(groups::start(engine, parse(args)?).await?),
            "group_status" => to_value(groups::status(engine, parse(args)?)?),
            "group_wait" => {
                let progress = context.meta.get_progress_token().map(|token| Progress {
                    peer: context.peer.clone(),
                    token,
                    heartbeat: self.options.heartbeat,
                });
                to_value(groups::wait(engine, parse(args)?, progress, context.ct.clone()).await?)
            }
            "group_cancel" => to_value(groups::cancel(engine, parse(args)?)?),
            "groups" => to_value(groups::list(engine, parse(args)?)?),
            "workflow_result" => to_value(groups::workflow_result(engine, parse(args)?).await?),
            "peer_receipts" => to_value(groups::peer_receipts(engine, parse(args)?)?),
            "set_delivery_mode" => {
                let out = crate::delivery::set_delivery_mode(engine, parse(args)?)?;
                tracing::info!(task = %out.task_id, mode = out.delivery_mode.as_str(), "mcp set_delivery_mode");
                to_value(out)
            }
            "read_artifact" => {
                to_value(crate::delivery::read_artifact(engine, parse(args)?).await?)
            }
            // ctrl (issue 17, parts 4 and 6).
            "get_agent_policy" => to_value(crate::controls::agent_policy(engine)),
            "list_models" => to_value(crate::controls::list_models(engine, parse(args)?).await?),
            "get_model" => to_value(crate::controls::get_model(engine, parse(args)?)?),
            "set_model" => to_value(crate::controls::set_model(engine, parse(args)?)?),
            other => Err(not_available(other, profile)),
        }
    }
}

fn not_available(name: &str, profile: Profile) -> Error {
    Error::new(
        ErrorCode::ToolNotAvailable,
        format!(
            "no tool named {name:?} in Legate's {} profile",
            profile.as_str()
        ),
    )
}

fn parse<T: DeserializeOwned>(args: Value) -> Result<T> {
    serde_json::from_value(args)
        .map_err(|e| Error::invalid_input(format!("invalid arguments: {e}")))
}

fn to_value<T: Serialize>(out: T) -> Result<Value> {
    serde_json::to_value(out)
        .map_err(|e| Error::internal(format!("could not encode an answer: {e}")))
}

/// The tool result for a failure: `isError` with `{error: {code, message}}`.
pub fn error_result(e: &Error) -> CallToolResult {
    CallToolResult::structured_error(json!({ "error": ErrorBody::from(e) }))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl ServerHandler for LegateMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(
                Implementation::new("legate", env!("CARGO_PKG_VERSION")).with_title("Legate"),
            )
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> std::result::Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.tools
            .iter()
            .find(|t| t.tool.name == name)
            .map(|t| t.tool.clone())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> std::result::Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        let started = std::time::Instant::now();
        if self.get_tool(&name).is_none() {
            // A tool the client was never offered is a protocol error (MCP: `-32602`), not a
            // tool result; the stable code travels in the error's data.
            let e = not_available(&name, self.options.profile);
            tracing::info!(tool = %name, code = %e.code, "call to a tool not offered");
            return Err(ErrorData::invalid_params(
                e.detail(),
                Some(json!({ "code": e.code.as_str() })),
            ));
        }
        let outcome = self.dispatch(&name, args, &context).await;
        let elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(match outcome {
            Ok(value) => {
                tracing::debug!(tool = %name, elapsed_ms, "tool call answered");
                CallToolResult::structured(value).into()
            }
            Err(e) => {
                tracing::info!(tool = %name, code = %e.code, elapsed_ms, "tool call failed");
                error_result(&e).into()
            }
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    /// How many tools the catalog has, and how many the read-only profiles offer.
    const ALL_TOOLS: usize = 48;
    const QUERY_TOOLS: usize = 30;
    const REVIEW_TOOLS: usize = 35;

    #[test]
    fn every_tool_has_object_schemas_and_a_unique_name() {
        let tools = catalog();
        let names: HashSet<_> = tools.iter().map(|t| t.tool.name.to_string()).collect();
        assert_eq!(names.len(), tools.len());
        assert_eq!(tools.len(), ALL_TOOLS);
        for t in &tools {
            assert_eq!(t.tool.input_schema["type"], "object", "{}", t.tool.name);
            let out = t.tool.output_schema.as_ref().unwrap();
            assert_eq!(out["type"], "object", "{}", t.tool.name);
            // `error` at the top level is the failure envelope; no answer may use the name.
            assert_eq!(
                out["properties"]["error"]["required"],
                json!(["code", "message"]),
                "{}",
                t.tool.name
            );
            assert!(
                out["properties"]["error"]["description"]
                    .as_str()
                    .unwrap()
                    .starts_with("Present instead"),
                "{} has its own top-level `error` field",
                t.tool.name
            );
        }
    }

    /// JSON Schema 2020-12's format vocabulary only: schemars writes `uint64`, `int32`,
    /// `double`, … for numbers, and validators warn on (or reject) them.
    #[test]
    fn every_schema_uses_only_standard_formats() {
        let tools = catalog();
        let mut checked = 0;
        for t in &tools {
            let input = Value::Object(t.tool.input_schema.as_ref().clone());
            let output = Value::Object(t.tool.output_schema.as_ref().unwrap().as_ref().clone());
            for (which, schema) in [("input", &input), ("output", &output)] {
                for f in schema::formats(schema) {
                    assert!(
                        schema::STANDARD_FORMATS.contains(&f.as_str()),
                        "{} {which} schema has format {f:?}",
                        t.tool.name
                    );
                    checked += 1;
                }
            }
        }
        // The walk reaches nested definitions: read_patch's `offset` is an unsigned integer
        // whose `uint64` format must have been seen and removed, not missed.
        let read_patch = tools.iter().find(|t| t.tool.name == "read_patch").unwrap();
        let offset = &read_patch.tool.input_schema["properties"]["offset"];
        assert!(offset.get("format").is_none(), "{offset}");
        assert_eq!(checked, 0);
    }

    #[test]
    fn a_profile_lists_only_the_groups_it_offers() {
        let mut tools = catalog();
        tools[0].group = ToolGroup::Implementation;
        let visible = |p: Profile| {
            tools
                .iter()
                .filter(|t| p.offers(t.group))
                .map(|t| t.tool.name.to_string())
                .collect::<Vec<_>>()
        };
        assert!(visible(Profile::Full).contains(&"health".to_string()));
        assert!(!visible(Profile::Query).contains(&"health".to_string()));
        assert!(!visible(Profile::Review).contains(&"health".to_string()));
        assert_eq!(visible(Profile::Query).len(), QUERY_TOOLS);
        assert_eq!(visible(Profile::Review).len(), REVIEW_TOOLS);
        assert_eq!(visible(Profile::Implementation).len(), tools.len());
        // The supervisor's server is another handler: no caller tool, `run` least of all.
        assert!(visible(Profile::Supervisor).is_empty());
        for name in ["preview", "read_patch", "verify", "context", "handoff"] {
            assert!(visible(Profile::Review).contains(&name.to_string()));
            assert!(!visible(Profile::Query).contains(&name.to_string()));
        }
        for name in ["memory_list", "memory_read"] {
            assert!(visible(Profile::Query).contains(&name.to_string()));
            assert!(visible(Profile::Review).contains(&name.to_string()));
        }
        for name in ["memory_write", "memory_remove"] {
            assert!(!visible(Profile::Query).contains(&name.to_string()));
            assert!(!visible(Profile::Review).contains(&name.to_string()));
            assert!(visible(Profile::Full).contains(&name.to_string()));
        }
        for name in ["compare", "comparison"] {
            assert!(visible(Profile::Query).contains(&name.to_string()));
        }
        for name in ["test", "record_test", "integrate", "discard", "cleanup"] {
            assert!(!visible(Profile::Review).contains(&name.to_string()));
            assert!(visible(Profile::Implementation).contains(&name.to_string()));
        }
    }

    #[test]
    fn descriptions_do_not_deny_the_confinement_tests_have() {
        let tools = catalog();
        let test = tools.iter().find(|t| t.tool.name == "test").unwrap();
        let text = test.tool.description.as_deref().unwrap_or_default();
        assert!(text.contains("kernel-confined like an agent"), "{text}");
        for t in &tools {
            let text = t.tool.description.as_deref().unwrap_or_default();
            assert!(
                !text.contains("Not kernel-confined"),
                "{}: {text}",
                t.tool.name
            );
        }
    }

    #[test]
    fn errors_are_structured() {
        let r = error_result(&Error::new(
            ErrorCode::TaskNotFound,
            "no task has the id x.",
        ));
        assert_eq!(r.is_error, Some(true));
        assert_eq!(
            r.structured_content.unwrap(),
            json!({"error": {"code": "TASK_NOT_FOUND", "message": "no task has the id x."}})
        );
    }
}
