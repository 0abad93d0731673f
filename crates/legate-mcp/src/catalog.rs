//! The tool catalog: every tool Legate has, its schemas, annotations and the group that
//! decides which profiles offer it, in the order they are listed.
//!
//! This module only describes tools; it never runs one (dispatch is `server`'s) and never
//! reaches the engine.

use crate::groups;
use crate::profile::ToolGroup;
use crate::review::*;
use crate::schema::{self, *};
use rmcp::model::{Tool, ToolAnnotations};
use rmcp::schemars::JsonSchema;
use serde_json::Value;
use std::sync::Arc;

/// One tool: its description and the group that decides which profiles offer it.
#[derive(Debug, Clone)]
pub(crate) struct ToolDef {
    pub(crate) group: ToolGroup,
    pub(crate) tool: Tool,
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
pub(crate) fn catalog() -> Vec<ToolDef> {
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
        def::<RunArgs, MayBeTask<StartedOut, ResultOut>>(
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
        def::<WaitManyArgs, WaitManyOut>(
            "wait_many",
            "Wait for several tasks",
            "Waits up to timeoutSeconds (1-60, default 30) on 1 to 32 loose tasks, until the first (mode \"first\") or all (mode \"all\", the default) are ready (ended, or waiting for input); returns each one's state and error. A timeout never cancels a task. Read each result with result.",
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
            "Reads an ended task's answer (or, with part \"structuredOutput\", an agy task's structured output as JSON) in pieces of UTF-16 units (offset, limit 2-50000) that never split a surrogate pair. Join `text` until hasMore is false, always using nextOffset; pass contentSha256 as expectedContentSha256 to detect a change.",
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
        def::<ResumeArgs, MayBeTask<StartedOut, ResultOut>>(
            "resume",
            "Continue a conversation",
            "Sends a new prompt into an earlier context: same agent, same session and workspace. Returns the new task id at once.",
            false,
        ),
        def::<ContinueArgs, MayBeTask<ContinuedOut, ResultOut>>(
            "continue",
            "Continue a task cut by a restart",
            "Continues a task that ended SERVER_RESTARTED (the Legate process running it died mid-turn) as a new task of its context that resumes the agent's own session and tells the agent its turn was cut; nothing ever continues by itself. Only the context's latest task can be (TASK_NOT_CONTINUABLE otherwise); CONTINUE_UNSUPPORTED, with nothing started, when the agent announced no way to resume its session. Calling it again for the same task returns the same continuation. Returns the new task id at once.",
            false,
        )
        .group(ToolGroup::Implementation),
        def::<SendMessageArgs, MayBeTask<ReceiptOut, ResultOut>>(
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
        def::<legate_engine::HandoffRequest, MayBeTask<StartedOut, ResultOut>>(
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
        def::<
            legate_engine::CompareRequest,
            MayBeTask<legate_engine::Compared, legate_engine::Comparison>,
        >(
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
        def::<PreviewArgs, PreviewOut>(
            "preview",
            "Preview a copy's patch",
            "A copy task's patch now: files (A/M/D) with line counts, totals, the sha256 and length of the full patch, the latest verification and whether it is stale, and the test records; with includePatch, the patch itself when it is at most 50,000 bytes. Pass sha256 as expectedSha256 to read_patch, verify, test and integrate.",
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
        def::<NoArgs, crate::sandbox::TestCeilingOut>(
            "get_sandbox_policy",
            "Read the test sandbox policy",
            "The global ceiling of every test's sandbox selection (readRoots, writeRoots, network, childProcesses, maxOutputChars), normalized, and its sha256: what set_sandbox_policy must name, and what a selected test's evidence is bound to.",
            true,
        ),
        def::<crate::sandbox::SetTestCeilingArgs, crate::sandbox::TestCeilingOut>(
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
            "Validates and stores a group definition (nodes with id, role, agent, model, prompt, dependsOn, fileSources, acceptanceCriteria, and run's includePaths, skills, memory, timeoutSeconds, allowedTools, mcpServers, artifactPaths; peerRoutes; budget {maxTotalTokens}; workflow {finalNode, hooks}) and returns groupId and definitionSha256. Starts nothing. The same groupId with the same definition answers the stored group; another definition is GROUP_CONFLICT. A cycle, an unknown id, a limit or a workflow step without acceptanceCriteria is WORKFLOW_INVALID; a context over 64 KiB is WORKFLOW_CONTEXT_TOO_LARGE.",
            false,
        )
        .group(ToolGroup::Implementation),
        def::<
            groups::GroupStartArgs,
            MayBeTask<legate_engine::GroupStarted, legate_engine::GroupStatus>,
        >(
            "group_start",
            "Start or resume a group",
            "Starts a created group, or resumes a paused one, given the definitionSha256 group_create returned. Nodes are admitted as their dependencies finish; finished nodes are never re-run, and a checkpoint whose data changed is WORKFLOW_CHECKPOINT_CHANGED. A resume lists the peer messages it dropped (droppedPeerMessages).",
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
            "Waits up to timeoutSeconds (1-60, default 30) for a group to end or pause (ready is true then), or for a node's question or blocker after your cursors. Answers at most limit (1-4, default 4) such messages, one per task, with cursors to pass back whole and hasMoreMessages. Sends progress notifications (node counts only) when the call carries a progress token. Intermediate results stay out of the answer; a timeout never changes the group.",
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
            "Pages (after, limit 1-20) through the receipts of the messages a group's nodes sent each other over the definition's peerRoutes: messageId, origin agent-reported, from, to, state (queued, then sent once the recipient's next turn was accepted; queued again when the recipient, cut by a crash, runs again in a new conversation) and the text's sha256. Never the bodies. A page is a snapshot: read again to see changed states.",
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
        def::<NoArgs, legate_engine::ControlsOverview>(
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
pub(crate) fn with_role_names(mut def: ToolDef, names: &[String]) -> ToolDef {
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
