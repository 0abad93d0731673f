//! What a caller asks for when it submits or replies ([`SubmitRequest`], [`WorkspaceRequest`]),
//! and the checks made before anything is stored: the agent (configured, and runnable by this
//! build), the prompt's size and that it holds no credential (`INPUT_SECRET_DETECTED`), the
//! context id and the workspace the context keeps (never a forbidden directory), the model,
//! the JSON Schema and the timeout.
//!
//! This module owns the limits on a caller's input and the order in which they are checked
//! (that order decides which error a bad request gets). It never stores, queues or starts
//! anything: a request that passes becomes a [`Checked`] submit, which the launcher stores.

use crate::core::Core;
use legate_backend::Capabilities;
use legate_core::{AgentSpec, Error, Result, TaskMode, WorkspaceKind};
use std::path::PathBuf;
use std::time::Duration;

/// The longest timeout a turn may have, whichever front asks (and the most the configured
/// default may be): seven days.
pub const MAX_TASK_TIMEOUT: Duration = Duration::from_secs(7 * 24 * 3600);

/// Where the agent should work. A conversation keeps the workspace it started with: a later
/// task of a context may name the same workspace again or leave it to the context
/// ([`WorkspaceRequest::Context`]); naming another is `INVALID_WORKSPACE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceRequest {
    /// Wherever the context's earlier tasks worked; a new context gets its sandbox. What a
    /// caller means when it names no workspace.
    Context,
    /// The context's sandbox (made on first use, reused after).
    Sandbox,
    /// A directory the caller names, worked in place (shared: Legate does not own it). It
    /// must exist and be a directory. Only an explicit ask: a directory named without a kind
    /// is [`WorkspaceRequest::Directory`].
    Shared(PathBuf),
    /// A directory the caller names without saying how to work in it; the engine decides
    /// (`core::directory`): the root of a git work tree is worked on in a copy (as
    /// [`WorkspaceRequest::Copy`] with these include paths and criteria), so the project is
    /// never touched before `integrate`; a directory in no git work tree is shared, as
    /// [`WorkspaceRequest::Shared`] (and then takes no include paths or criteria); a directory
    /// inside a work tree but not its root is `INVALID_WORKSPACE`. A conversation that works in
    /// that directory already keeps its workspace.
    Directory {
        /// The directory (absolute).
        path: PathBuf,
        /// For a copy: relative files or directories to narrow it to; empty for all.
        include_paths: Vec<String>,
        /// For a copy: acceptance criteria, fixed for the task's life.
        criteria: Vec<legate_review::Criterion>,
    },
    /// A copy of the git project at `source` (its root), narrowed by `include_paths`, made
    /// under `$LEGATE_HOME/copies/<task>/` with a private baseline; `criteria` are the
    /// acceptance criteria `verify` checks. See `review`.
    Copy {
        /// The project's root directory (absolute).
        source: PathBuf,
        /// Relative files or directories to narrow the selection to; empty for all.
        include_paths: Vec<String>,
        /// Acceptance criteria, fixed for the task's life.
        criteria: Vec<legate_review::Criterion>,
    },
    /// A copy made from files a remote Legate sent with its message (Legate's copy-workspace
    /// extension, `legate_core::remote::COPY_WORKSPACE_EXTENSION`), with exactly those files
    /// as its baseline, under `$LEGATE_HOME/copies/<task>/`. The front has checked the files
    /// against their manifest; the copy is made when the task is stored. Its patch goes back
    /// to the sender, which reviews and integrates it; it is never integrated here.
    Received(std::sync::Arc<ReceivedFiles>),
}

/// The files of a [`WorkspaceRequest::Received`] copy, and the baseline id of their manifest
/// (`legate_core::remote::baseline_id`).
#[derive(Clone, PartialEq, Eq)]
pub struct ReceivedFiles {
    /// The files, each a safe relative path with its bytes and executable bit.
    pub files: Vec<legate_workspace::FileBytes>,
    /// The manifest's baseline id, returned with the patch.
    pub baseline_id: String,
}

impl std::fmt::Debug for ReceivedFiles {
    // The bytes are never printed.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReceivedFiles")
            .field("files", &self.files.len())
            .field("baseline_id", &self.baseline_id)
            .finish()
    }
}

/// A request to delegate one task.
#[derive(Debug, Clone)]
pub struct SubmitRequest {
    /// The agent's name; `None` for the configured default.
    pub agent: Option<String>,
    /// What to ask.
    pub prompt: String,
    /// Where it works.
    pub workspace: WorkspaceRequest,
    /// The conversation to continue; `None` starts a new one.
    pub context_id: Option<String>,
    /// Write or read-only; `None` for the role's default (read-only for a planner or
    /// reviewer base, else the role's configured mode, else write).
    pub mode: Option<TaskMode>,
    /// Overrides the default timeout.
    pub timeout: Option<Duration>,
    /// The model to use: an id, `legate_core::AUTO_MODEL` for the agent's own choice, or
    /// `None` for the saved preference or the configured default.
    pub model: Option<String>,
    /// The caller's id for the message this task answers (an A2A `messageId`), passed to the
    /// agent with the prompt. Kept in memory only: it is not stored with the task.
    pub message_id: Option<String>,
    /// A JSON Schema (an object) the answer must follow: structured output, for agents whose
    /// backend offers it (`Capabilities::structured_output`; today agy's `--json-schema`);
    /// `INVALID_INPUT` for another. Kept in memory only, like `message_id`.
    pub json_schema: Option<serde_json::Value>,
    /// The role's name (built in or `[roles.NAME]`); `None` for the default `implementer`,
    /// or, for a conversation that has tasks, the role it keeps.
    pub role: Option<String>,
    /// Private memory entries the agent receives as data (`controls::memory`). `None`: none,
    /// or for a handoff the source's snapshots; `Some(vec![])`: none. Refused on a
    /// continuation, which keeps its context's.
    pub memory: Option<Vec<legate_core::MemorySelection>>,
    /// Skill packages staged in the copy under `.agents/skills/` (`controls::skills`).
    pub skills: Vec<legate_core::SkillPackage>,
    /// Events (the default) or public messages (`controls::delivery`).
    pub delivery_mode: Option<legate_core::DeliveryMode>,
    /// The tool kinds the agent may use, within the configured ceiling (`controls::tools`);
    /// `None` for every kind the role allows.
    pub allowed_tools: Option<Vec<legate_core::ToolKind>>,
    /// MCP servers of the configured catalogue handed to the agent (`controls::tools`).
    pub mcp_servers: Option<Vec<legate_core::McpSelection>>,
    /// Files of the workspace collected when the task ends (`controls::artifacts`).
    pub artifact_paths: Vec<String>,
    /// How much reasoning the agent should spend, for agents whose backend takes it
    /// (`Capabilities::effort`; today agy's `--effort`); `INVALID_INPUT` for another. Kept in
    /// memory only, like `json_schema`: a continuation does not inherit it.
    pub effort: Option<legate_core::Effort>,
    /// Whether to record the task's protocol frames (the wire tap, `core::tap`), even when
    /// its agent's configuration does not (`[agents.NAME] tap = true`). A reply to the task
    /// keeps its tap; a later task of the context asks again.
    pub tap: bool,
    /// Whether an inbound message sends it ([`Messages::deliver`](crate::Messages::deliver)
    /// sets it; see `TaskControls::inbound`). A new context takes it; a continuation must
    /// match its context's: an inbound message may not continue a context another front
    /// started, nor a task of another front (`legate run --context`, an MCP `run` naming a
    /// context) one an inbound caller started and reads. A next turn
    /// ([`Engine::resume`](crate::Engine::resume), a reply, the engine's own retries) keeps
    /// its context's.
    pub inbound: bool,
}

impl SubmitRequest {
    /// A task of the default role (a write task for the implementer) on the default agent,
    /// in a new context's sandbox.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            agent: None,
            prompt: prompt.into(),
            workspace: WorkspaceRequest::Context,
            context_id: None,
            mode: None,
            timeout: None,
            model: None,
            message_id: None,
            json_schema: None,
            role: None,
            memory: None,
            skills: Vec::new(),
            delivery_mode: None,
            allowed_tools: None,
            mcp_servers: None,
            artifact_paths: Vec::new(),
            effort: None,
            tap: false,
            inbound: false,
        }
    }
}

/// The default of `EngineConfig::max_prompt_chars`: the largest prompt the agent reads (the
/// caller's text with Legate's framing, a role's instructions, a handed-off context and the
/// memory selected), in characters; the seed's 50,000.
pub const DEFAULT_MAX_PROMPT_CHARS: usize = 50_000;
/// The longest context id accepted, in bytes.
const MAX_CONTEXT_ID_BYTES: usize = 256;

/// A copy workspace as asked for, checked: the project's root, the narrowed selection and the
/// acceptance criteria, for the task's review record.
pub(crate) struct CopyRequest {
    pub(crate) source: PathBuf,
    pub(crate) include_paths: Vec<String>,
    pub(crate) criteria: Vec<legate_review::Criterion>,
    /// The open copy this task continues in (a context's next turn), instead of a new copy.
    pub(crate) continues: Option<crate::review::ContinuedCopy>,
    /// For a handoff: the copy whose current files the new copy gets (see `handoff`).
    pub(crate) handoff: Option<Box<crate::handoff::HandoffSource>>,
    /// For a copy made from files a remote Legate sent: those files.
    pub(crate) received: Option<std::sync::Arc<ReceivedFiles>>,
    /// The skills staged in a new copy (`controls::skills`), texts included: kept in the
    /// review record, never in the task.
    pub(crate) skills: Vec<legate_workspace::StagedSkill>,
}

/// A submit that passed its checks: what its task is stored with.
pub(crate) struct Checked {
    /// The agent that runs it (runnable by this build).
    pub(crate) agent: AgentSpec,
    /// The context it belongs to (the caller's, or a new one).
    pub(crate) context_id: String,
    /// The workspace's kind.
    pub(crate) workspace: WorkspaceKind,
    /// The shared directory, for a shared workspace.
    pub(crate) root: Option<PathBuf>,
    /// The copy to make, for a copy workspace.
    pub(crate) copy: Option<CopyRequest>,
    /// The turn's timeout (at least a second).
    pub(crate) timeout: Duration,
    /// The prompt is empty: the task waits for input instead of running.
    pub(crate) empty: bool,
    /// What the task is given besides its prompt (`controls`). A group or comparison sets
    /// its `group` or `comparison_id` here, after the check.
    pub(crate) controls: legate_core::TaskControls,
    /// The task's id, when the caller chose it before submitting (a comparison makes each
    /// target's copy under its task's id before any target starts); `None` for a new one.
    pub(crate) id: Option<legate_core::TaskId>,
}

impl Core {
    /// Checks `request` without changing anything. `allow_empty`: an empty prompt is accepted
    /// (the task will wait for input), except for a copy workspace.
    pub(crate) fn check_submit(
        &self,
        request: &SubmitRequest,
        allow_empty: bool,
    ) -> Result<Checked> {
        let agent_name = request
            .agent
            .clone()
            .unwrap_or_else(|| self.config().default_agent.clone());
        let (agent, capabilities) = self.task_agent(&agent_name)?;
        let empty = request.prompt.trim().is_empty();
        if empty && (!allow_empty || matches!(request.workspace, WorkspaceRequest::Copy { .. })) {
            return Err(Error::invalid_input("the prompt is empty"));
        }
        check_size("prompt", &request.prompt, self.config().max_prompt_chars)?;
        legate_credentials::refuse_credential("the prompt", &request.prompt)?;
        let mut continues = None;
        let (context_id, requested) = match &request.context_id {
            Some(c) => {
                let c = validate_context_id(c)?;
                continues = match self.latest_task(&c) {
                    Ok(last) => Some(last),
                    Err(e) if e.code == legate_core::ErrorCode::ContextNotFound => None,
                    Err(e) => return Err(e),
                };
                if let Some(existing) = self.store().context(&c)?
                    && existing.agent != agent.name
                {
                    return Err(Error::invalid_input(format!(
                        "context {c} belongs to agent {:?}, not {:?}",
                        existing.agent, agent.name
                    )));
                }
                let requested = self.kept_workspace(&c, &agent.name, request.workspace.clone())?;
                (c, requested)
            }
            None => (
                uuid::Uuid::new_v4().to_string(),
                crate::core::continuation::Kept::Request(request.workspace.clone()),
            ),
        };
        let mut copy = None;
        let requested = match requested {
            crate::core::continuation::Kept::Request(requested) => requested,
            crate::core::continuation::Kept::Continue(continued, record) => {
                // The copy exists: nothing is selected or copied again.
                let record = *record;
                copy = Some(CopyRequest {
                    source: record.source,
                    include_paths: record.include_paths,
                    criteria: record.criteria,
                    continues: Some(continued),
                    handoff: None,
                    received: None,
                    skills: Vec::new(),
                });
                WorkspaceRequest::Context
            }
        };
        if matches!(
            requested,
            WorkspaceRequest::Copy { .. } | WorkspaceRequest::Received(_)
        ) {
            // A new copy's selection, baseline and review all run git.
            legate_workspace::require_git_version()?;
        }
        let (workspace, root) = match requested {
            WorkspaceRequest::Context if copy.is_some() => (WorkspaceKind::Copy, None),
            WorkspaceRequest::Context | WorkspaceRequest::Sandbox => (WorkspaceKind::Sandbox, None),
            WorkspaceRequest::Copy {
                source,
                include_paths,
                criteria,
            } => {
                let (source, include_paths) =
                    self.check_copy_request(&source, &include_paths, &criteria)?;
                copy = Some(CopyRequest {
                    source,
                    include_paths,
                    criteria,
                    continues: None,
                    handoff: None,
                    received: None,
                    skills: Vec::new(),
                });
                (WorkspaceKind::Copy, None)
            }
            WorkspaceRequest::Received(files) => {
                copy = Some(CopyRequest {
                    source: PathBuf::new(),
                    include_paths: Vec::new(),
                    criteria: Vec::new(),
                    continues: None,
                    handoff: None,
                    received: Some(files),
                    skills: Vec::new(),
                });
                (WorkspaceKind::Copy, None)
            }
            WorkspaceRequest::Shared(dir) => {
                if agent.runtime.pod().is_some() {
                    return Err(Error::new(
                        legate_core::ErrorCode::PodWorkspaceUnsupported,
                        format!(
                            "agent {:?} runs in a Kubernetes pod, and a shared directory never leaves this machine; use a copy or a sandbox",
                            agent.name
                        ),
                    ));
                }
                let b = legate_workspace::shared(&dir, agent.allow_execute)?;
                (WorkspaceKind::Shared, Some(b.root))
            }
            WorkspaceRequest::Directory { .. } => {
                return Err(Error::internal(
                    "a named directory reached the checks before it was resolved",
                ));
            }
        };

        if let Some(c) = copy.as_ref().filter(|c| c.received.is_none()) {
            self.check_not_forbidden("the copy's source", &c.source)?;
        }
        if let Some(r) = &root {
            self.check_not_forbidden("the workspace", r)?;
        }
        if empty && copy.is_some() {
            // A copy turn cannot wait for input (see `turn`), so it needs a prompt.
            return Err(Error::invalid_input("the prompt is empty"));
        }
        if let Some(model) = &request.model {
            validate_model(model)?;
        }
        if let Some(schema) = &request.json_schema {
            validate_json_schema(schema, &agent, &capabilities)?;
        }
        if let Some(effort) = request.effort
            && !capabilities.effort
        {
            return Err(Error::invalid_input(format!(
                "agent `{}` (kind {}) does not take an effort (asked: {effort}); an effort needs an agent of kind agy",
                agent.name,
                agent.kind.as_str()
            )));
        }
        let timeout = request.timeout.unwrap_or(self.config().default_timeout);
        if timeout.is_zero() {
            return Err(Error::invalid_input(
                "the timeout must be at least one second",
            ));
        }
        if timeout > MAX_TASK_TIMEOUT {
            return Err(Error::invalid_input(format!(
                "the timeout must be at most {} seconds (seven days); got {} s",
                MAX_TASK_TIMEOUT.as_secs(),
                timeout.as_secs()
            )));
        }
        let mut controls = self.check_controls(request, continues.as_ref())?;
        // The wire tap: the agent's configuration, or the caller's ask.
        controls.tap = request.tap || agent.tap;
        if let Some(c) = copy.as_mut()
            && c.continues.is_none()
            && !controls.skills.is_empty()
        {
            c.skills = self.staged_as_checked(request, &controls.skills)?;
        }
        Ok(Checked {
            agent,
            context_id,
            workspace,
            root,
            copy,
            timeout,
            empty,
            controls,
            id: None,
        })
    }
}

/// A reply into a waiting task must say something, within a prompt's limit of `limit`
/// characters.
pub(crate) fn check_reply(prompt: &str, limit: usize) -> Result<()> {
    if prompt.trim().is_empty() {
        return Err(Error::invalid_input("the reply is empty"));
    }
    check_size("reply", prompt, limit)?;
    legate_credentials::refuse_credential("the reply", prompt)
}

/// The prompt as the agent will read it, framed with `role`'s instructions, is at most `limit`
/// characters: a role's instructions count toward the prompt's limit.
pub(crate) fn check_framed(
    prompt: &str,
    role: Option<&legate_core::TaskRole>,
    limit: usize,
) -> Result<()> {
    let chars = crate::core::framing::frame(prompt, role, None, None, &[])
        .chars()
        .count();
    if chars > limit {
        return Err(Error::invalid_input(format!(
            "the prompt with its role's instructions has {chars} characters; the limit is {limit} (max_prompt_chars)"
        )));
    }
    Ok(())
}

/// `what` (a prompt, a reply) is at most `limit` characters.
pub(crate) fn check_size(what: &str, text: &str, limit: usize) -> Result<()> {
    // Every character is at least one byte: a text of at most `limit` bytes needs no count.
    if text.len() <= limit {
        return Ok(());
    }
    let chars = text.chars().count();
    if chars > limit {
        return Err(Error::invalid_input(format!(
            "the {what} has {chars} characters; the limit is {limit} (max_prompt_chars)"
        )));
    }
    Ok(())
}

fn validate_context_id(c: &str) -> Result<String> {
    if c.is_empty() || c.len() > MAX_CONTEXT_ID_BYTES || c.chars().any(char::is_control) {
        return Err(Error::invalid_input(format!(
            "a context id must be 1 to {MAX_CONTEXT_ID_BYTES} bytes with no control characters"
        )));
    }
    Ok(c.to_string())
}

/// The largest JSON Schema accepted for structured output, serialized, in bytes.
const MAX_JSON_SCHEMA_BYTES: usize = 64 * 1024;

/// A schema for structured output must be a JSON object of at most
/// [`MAX_JSON_SCHEMA_BYTES`], for an agent whose backend offers structured output.
fn validate_json_schema(
    schema: &serde_json::Value,
    agent: &AgentSpec,
    capabilities: &Capabilities,
) -> Result<()> {
    if !schema.is_object() {
        return Err(Error::invalid_input(
            "a JSON Schema for structured output must be a JSON object",
        ));
    }
    let size = schema.to_string().len();
    if size > MAX_JSON_SCHEMA_BYTES {
        return Err(Error::invalid_input(format!(
            "the JSON Schema is {size} bytes; the limit is {MAX_JSON_SCHEMA_BYTES}"
        )));
    }
    if !capabilities.structured_output {
        return Err(Error::invalid_input(format!(
            "agent `{}` (kind {}) cannot answer with structured output; a JSON Schema needs an agent of kind agy",
            agent.name,
            agent.kind.as_str()
        )));
    }
    Ok(())
}

/// The longest model id accepted, in bytes.
const MAX_MODEL_BYTES: usize = 128;

/// `INVALID_INPUT` unless `model` is 1 to [`MAX_MODEL_BYTES`] letters, digits, `.`, `_`, `-`,
/// `/` or `:`, not starting with `-` (an agent's command line would read such an id as a flag,
/// `--dangerously-skip-permissions` among them).
pub(crate) fn validate_model(model: &str) -> Result<()> {
    if model.starts_with('-') {
        return Err(Error::invalid_input(
            "a model must not start with '-', which an agent's command line would read as a flag",
        ));
    }
    let ok = !model.is_empty()
        && model.len() <= MAX_MODEL_BYTES
        && model
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':'));
    if !ok {
        return Err(Error::invalid_input(format!(
            "a model must be 1 to {MAX_MODEL_BYTES} letters, digits, '.', '_', '-', '/' or ':'"
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_core::{AgentKind, ErrorCode};
    use proptest::prelude::*;

    fn agent(kind: AgentKind) -> (AgentSpec, Capabilities) {
        let registry = legate_backend::Registry::builtin(legate_confine::Requirement::BestEffort);
        let spec = AgentSpec::command("a", kind, "a");
        let (_, capabilities) = registry.backend_for(&spec).unwrap();
        (spec, capabilities)
    }

    proptest! {
        #[test]
        fn a_context_id_is_accepted_exactly_when_short_and_free_of_controls(c in "\\PC{0,80}|[\\x00-\\x1f\\x7f\\u{85}a-z]{0,8}|a{250,260}") {
            let ok = !c.is_empty() && c.len() <= MAX_CONTEXT_ID_BYTES && !c.chars().any(char::is_control);
            match validate_context_id(&c) {
                Ok(kept) => { prop_assert!(ok); prop_assert_eq!(kept, c); }
                Err(e) => { prop_assert!(!ok); prop_assert_eq!(e.code, ErrorCode::InvalidInput); }
            }
        }

        #[test]
        fn a_model_is_accepted_exactly_when_short_and_of_safe_characters(m in "\\PC{0,40}|[a-zA-Z0-9._/:-]{0,140}|[a-z]{1,4}[ ;$`\\n\\x00][a-z]{0,4}") {
            let ok = !m.is_empty() && m.len() <= 128 && !m.starts_with('-') && m.chars().all(|c| c.is_ascii_alphanumeric() || "._-/:".contains(c));
            prop_assert_eq!(validate_model(&m).is_ok(), ok, "{:?}", m);
        }

        #[test]
        fn a_reply_is_refused_when_blank_or_over_the_limit(s in "[ \\t\\n]{0,8}|\\PC{1,20}") {
            let ok = !s.trim().is_empty();
            prop_assert_eq!(check_reply(&s, DEFAULT_MAX_PROMPT_CHARS).is_ok(), ok);
        }
    }

    /// A model id that starts with `-` would be read as a flag on an agent's command line.
    #[test]
    fn a_model_that_could_be_read_as_a_flag_is_refused() {
        for m in ["-x", "--dangerously-skip-permissions", "-"] {
            let err = validate_model(m).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidInput, "{m}");
            assert!(
                err.message.contains("must not start with '-'"),
                "{m}: {}",
                err.message
            );
        }
        for m in ["x-", "gemini-2.5-pro", "a/b:c", "auto"] {
            assert!(validate_model(m).is_ok(), "{m}");
        }
    }

    #[test]
    fn sizes_are_bounded_at_the_limit_exactly() {
        let limit = DEFAULT_MAX_PROMPT_CHARS;
        assert!(check_size("prompt", &"x".repeat(limit), limit).is_ok());
        let err = check_size("prompt", &"x".repeat(limit + 1), limit).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput);
        assert!(err.message.starts_with("the prompt has"), "{}", err.message);
        // Characters, not bytes: multi-byte characters up to the limit pass, one more fails.
        for c in ["é", "€", "😀"] {
            assert!(check_size("prompt", &c.repeat(limit), limit).is_ok(), "{c}");
            assert!(check_reply(&c.repeat(limit + 1), limit).is_err(), "{c}");
        }
    }

    #[test]
    fn a_json_schema_must_be_a_bounded_object_for_an_agy_agent() {
        let (agy, can) = agent(AgentKind::AGY);
        let schema = serde_json::json!({"type": "object"});
        assert!(validate_json_schema(&schema, &agy, &can).is_ok());
        for not_object in [
            serde_json::json!([]),
            serde_json::json!("s"),
            serde_json::json!(null),
        ] {
            assert_eq!(
                validate_json_schema(&not_object, &agy, &can)
                    .unwrap_err()
                    .code,
                ErrorCode::InvalidInput
            );
        }
        let huge = serde_json::json!({"description": "x".repeat(MAX_JSON_SCHEMA_BYTES)});
        assert!(validate_json_schema(&huge, &agy, &can).is_err());
        let (acp, cannot) = agent(AgentKind::ACP);
        let err = validate_json_schema(&schema, &acp, &cannot).unwrap_err();
        assert!(err.message.contains("kind agy"), "{}", err.message);
    }
}
