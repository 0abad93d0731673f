//! Starting a handoff: the caller's [`HandoffRequest`] checked against the source's context
//! at accept, a new copy task submitted on the original project's review record, and, when
//! that task starts, its copy made from the source copy's current files and the context
//! checked again on the bytes copied.
//!
//! It never changes the source copy (its lock is held while it is read), never cuts the
//! context (`CONTEXT_TOO_LARGE`), and never lets a decision carry a credential pattern.

use super::Handoffs;
use super::context::closed;
use super::{HandoffSource, context_block};
use crate::core::Core;
use crate::core::request::{SubmitRequest, WorkspaceRequest};
use crate::review::{ReviewRecord, blocking};
use legate_core::{Error, ErrorCode, EventKind, Result, Task};
use legate_workspace::Baseline;
use serde::{Deserialize, Serialize};

/// At most this many decisions travel with one handoff.
pub const MAX_DECISIONS: usize = 20;
/// The longest decision, in bytes.
pub const MAX_DECISION_BYTES: usize = 2000;

/// A request to hand a finished copy task's copy to another role. Every front takes this
/// type as it is: the MCP `handoff` tool's arguments are this struct (its field documentation
/// is that tool's published schema, pinned by `legate-mcp`'s `tool_schemas` suite), and
/// `legate handoff` builds it from its flags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct HandoffRequest {
    /// The finished copy task whose copy's current files the new task gets.
    pub source_task_id: String,
    /// The contextSha256 `context` returned; CONTEXT_CHANGED when the context is another now
    /// or when the new copy is made.
    pub expected_context_sha256: String,
    /// The role the new task plays: implementer, planner, reviewer or a configured one.
    pub role: String,
    /// What to ask the new role.
    pub prompt: String,
    /// The agent; omitted for the role's default or the configured default.
    pub agent: Option<String>,
    /// The model; omitted for the role's default or the agent's.
    pub model: Option<String>,
    /// Decisions for the next role (at most 20, each at most 2000 bytes): marked
    /// client-reported, never instructions; do not put secrets in them.
    #[serde(default)]
    pub decisions: Vec<String>,
    // Asking a read-only role for write is `MODE_NOT_ALLOWED`.
    /// write or read-only; omitted for the role's own (read-only for planner and reviewer).
    pub mode: Option<legate_core::TaskMode>,
    /// Private memory for the new task: omitted, the source task's snapshots; a selection
    /// `[{specialist, sha256}]` of the project's entries instead; `[]` for none.
    pub memory: Option<Vec<legate_core::MemorySelection>>,
    /// Tool kinds for the new task, within the configured ceiling; omitted, the source
    /// task's (narrowed to today's ceiling), else the role's default.
    #[serde(default)]
    pub allowed_tools: Option<Vec<legate_core::ToolKind>>,
    /// MCP servers of the configured catalogue for the new task (`[{serverId, tools}]`, `[]`
    /// for none); omitted, the source task's still catalogued, only the tools marked
    /// read-only for a read-only task, else the role's default.
    #[serde(default)]
    pub mcp_servers: Option<Vec<legate_core::McpSelection>>,
}

/// `INVALID_INPUT` unless `decisions` is a short list of short, non-blank texts with no
/// control characters (line breaks and tabs aside); `INPUT_SECRET_DETECTED` for one holding a
/// credential pattern.
pub(crate) fn check_decisions(decisions: &[String]) -> Result<()> {
    if decisions.len() > MAX_DECISIONS {
        return Err(Error::invalid_input(format!(
            "{} decisions; at most {MAX_DECISIONS} travel with a handoff",
            decisions.len()
        )));
    }
    for (i, d) in decisions.iter().enumerate() {
        let n = i + 1;
        if d.trim().is_empty() || d.len() > MAX_DECISION_BYTES {
            return Err(Error::invalid_input(format!(
                "decision {n} must be 1 to {MAX_DECISION_BYTES} bytes of text"
            )));
        }
        if d.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
            return Err(Error::invalid_input(format!(
                "decision {n} holds a control character"
            )));
        }
        legate_credentials::refuse_credential(&format!("decision {n}"), d)?;
    }
    Ok(())
}

pub(crate) fn changed(now: &str, expected: &str) -> Error {
    Error::new(
        ErrorCode::ContextChanged,
        format!("the context is now {now}, not the {expected} you named; read the context again"),
    )
}

/// The length, in characters, of the text the agent is prompted with on its first turn: the caller's prompt
/// framed with the role, its report contract (unless the backend gets the report's schema as
/// structured output) and the context `block`, as `turn` frames it.
pub(crate) fn framed_len(
    request: &SubmitRequest,
    role: Option<&legate_core::TaskRole>,
    block: &str,
    skills: &[legate_core::SkillRecord],
) -> usize {
    let contract = match &request.json_schema {
        Some(_) => None,
        None => role.and_then(|r| crate::report::contract(r.base)),
    };
    crate::core::framing::frame(
        &request.prompt,
        role,
        contract.as_deref(),
        Some(block),
        skills,
    )
    .chars()
    .count()
}

impl Core {
    /// [`Handoffs::handoff`], with `adjust` applied to the checked submit before it is stored
    /// (a group node sets its controls there).
    pub(crate) async fn handoff_with(
        &self,
        request: HandoffRequest,
        prepare: impl FnOnce(&mut SubmitRequest) + Send,
        adjust: impl FnOnce(&mut crate::core::request::Checked) + Send,
    ) -> Result<Task> {
        check_decisions(&request.decisions)?;
        let (handle, source, record) = self.finished_copy(&request.source_task_id)?;
        if let Some(e) = closed(&handle) {
            return Err(e);
        }
        self.check_hands_on(&source, &handle)?;
        let pack = self.context(source.id.as_str()).await?;
        if pack.context_sha256 != request.expected_context_sha256 {
            return Err(changed(
                &pack.context_sha256,
                &request.expected_context_sha256,
            ));
        }
        let block = context_block(&pack, &request.decisions)?;
        let role_name = request.role.clone();
        let mut submit = SubmitRequest::new(request.prompt);
        submit.agent = request.agent;
        submit.model = request.model;
        submit.role = Some(request.role);
        // `None`: the role's own mode, read-only for a planner or reviewer, write otherwise.
        submit.mode = request.mode;
        submit.memory = request.memory.clone();
        submit.workspace = WorkspaceRequest::Copy {
            source: record.source.clone(),
            include_paths: record.include_paths.clone(),
            criteria: record.criteria.clone(),
        };
        submit.allowed_tools = request.allowed_tools;
        submit.mcp_servers = request.mcp_servers;
        prepare(&mut submit);
        // Tool controls left out are the source's, carried on and narrowed (before the
        // role's defaults, which fill only what is still left out).
        let catalogue = &self.config().controls;
        if submit.allowed_tools.is_none() {
            submit.allowed_tools = super::controls::kinds(catalogue, &source.controls);
        }
        let inherits_servers = submit.mcp_servers.is_none();
        if inherits_servers {
            submit.mcp_servers = super::controls::servers(catalogue, &source.controls, false);
        }
        let role = self.apply_role(&mut submit)?;
        let read_only = submit.mode.map_or_else(
            || role.as_ref().is_some_and(|r| r.base.is_read_only()),
            |m| m == legate_core::TaskMode::ReadOnly,
        );
        if inherits_servers && read_only {
            submit.mcp_servers = super::controls::servers(catalogue, &source.controls, true);
        }
        let mut checked = self.check_submit(&submit, false)?;
        if request.memory.is_none() {
            // A handoff inherits the source's snapshots unless it names its own (or `[]`).
            checked.controls.memory = source.controls.memory.clone();
        }
        let size = framed_len(&submit, role.as_ref(), &block, &source.controls.skills)
            + self.memory_block_len(
                &source.id,
                &record.source,
                &checked.controls.memory,
                request.memory.is_some(),
            )?;
        let limit = self.config().max_prompt_chars;
        if size > limit {
            return Err(Error::new(
                ErrorCode::ContextTooLarge,
                format!(
                    "the prompt with its handed-off context and memory has {size} characters; the limit is {limit} (max_prompt_chars; nothing is cut: hand off from a task with fewer or shorter reports, select less memory, or shorten the prompt and decisions)"
                ),
            ));
        }
        // A handoff keeps the source's skills: the same packages and hashes, whatever the
        // packs configured now are.
        checked.controls.skills = source.controls.skills.clone();
        if let Some(copy) = checked.copy.as_mut() {
            copy.skills = record.skills.clone();
            copy.handoff = Some(Box::new(HandoffSource {
                source_task_id: source.id.clone(),
                context_sha256: pack.context_sha256.clone(),
                decisions: request.decisions,
                block,
                prepared: None,
            }));
        }
        adjust(&mut checked);
        let task = self.submit_checked(submit, checked, role)?;
        tracing::info!(task = %task.id, from = %source.id, role = %role_name, "handoff submitted");
        Ok(task)
    }

    /// `READ_ONLY_VIOLATION` when the latest turn of `source`'s copy was a read-only task
    /// that changed it: like a next turn, a handoff would carry that change into a patch that
    /// can be integrated.
    pub(crate) fn check_hands_on(
        &self,
        source: &Task,
        handle: &crate::review::CopyHandle,
    ) -> Result<()> {
        self.chain_of(source)?.check_takes_turns(&handle.copy_id)
    }

    /// The context block a handoff task's agent is given, if `task` was started by one.
    pub(crate) fn handoff_block(&self, task: &Task) -> Option<String> {
        if task.workspace != legate_core::WorkspaceKind::Copy {
            return None;
        }
        self.record(&task.id).ok()?.handoff.map(|h| h.block)
    }

    /// Makes a handoff task's copy when it starts: the source copy's current files (its lock
    /// held), on the original baseline, then the context checked again with the tree of the
    /// files actually copied. On `CONTEXT_CHANGED` (or any error) nothing is left.
    pub(crate) async fn prepare_handoff_copy(
        &self,
        task: &Task,
        record: ReviewRecord,
        from: &HandoffSource,
    ) -> Result<(legate_core::Boundary, EventKind)> {
        let (handle, source, source_record) = self.finished_copy(from.source_task_id.as_str())?;
        if let Some(e) = closed(&handle) {
            return Err(e);
        }
        self.check_hands_on(&source, &handle)?;
        let source_baseline = Baseline::open(
            &source_record.baseline_directory,
            &source_record.copy_directory,
        )?;
        let cfg = self.config().review.clone();
        let (copy_dir, baseline_dir) = (
            record.copy_directory.clone(),
            record.baseline_directory.clone(),
        );
        let skills = record.skills.clone();
        let (report, tree) = blocking(move || {
            let _lock = source_baseline.lock()?;
            let sel =
                legate_workspace::copy_selection(&source_baseline, &cfg.secrets, &cfg.limits)?;
            let (report, made) = legate_workspace::make_handoff_copy(
                &source_baseline,
                &sel,
                &copy_dir,
                &baseline_dir,
                &cfg.limits,
            )?;
            // The staging directory is never selected, so the tree is the files handed on.
            let tree = legate_workspace::copy_selection(&made, &cfg.secrets, &cfg.limits)
                .and_then(|s| legate_workspace::tree_sha256(&s, &cfg.limits));
            let tree = tree.and_then(|tree| {
                crate::review::stage_or_remove(&report, &skills, &cfg.limits, &baseline_dir)
                    .map(|()| tree)
            });
            match tree {
                Ok(tree) => Ok((report, tree)),
                Err(e) => {
                    remove_made(&copy_dir, &baseline_dir);
                    Err(e)
                }
            }
        })
        .await?;
        let pack = self.pack(&source, &source_record, tree);
        let refused = match &pack {
            Ok(p) if p.context_sha256 == from.context_sha256 => None,
            Ok(p) => Some(changed(&p.context_sha256, &from.context_sha256)),
            Err(e) => Some(e.clone()),
        };
        if let Some(e) = refused {
            remove_made(&record.copy_directory, &record.baseline_directory);
            tracing::warn!(task = %task.id, from = %source.id, error = %e, "the handed-off context changed before the copy was made");
            return Err(e);
        }
        tracing::info!(task = %task.id, from = %source.id, files = report.included_files, "handoff copy ready");
        self.copy_made(task, record, report, Some(&source.id))
    }
}

impl Handoffs {
    /// Starts `request.role` as a new task in a new context, in a fresh copy of the source
    /// copy's current files on the original project's baseline (see the module docs).
    ///
    /// Errors: `CONTEXT_CHANGED` when the source's context is not the one named;
    /// `CONTEXT_TOO_LARGE` when the framed prompt passes the prompt limit; `COPY_CLOSED` for a
    /// discarded or integrated source copy; `READ_ONLY_VIOLATION` for a source copy a
    /// read-only turn changed; `COPY_UNAVAILABLE` for a source that is not a
    /// finished copy task; `INVALID_INPUT` for bad decisions; any submit error.
    pub async fn handoff(&self, request: HandoffRequest) -> Result<Task> {
        self.core.handoff_with(request, |_| {}, |_| {}).await
    }
}

/// Removes a copy and baseline just made (Legate's own directories; no agent ran in them).
pub(crate) fn remove_made(copy: &std::path::Path, baseline: &std::path::Path) {
    for dir in [copy, baseline] {
        if let Err(e) = std::fs::remove_dir_all(dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %dir.display(), error = %e, "could not remove a refused handoff copy");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn a_decision_list_is_accepted_exactly_when_bounded_and_plain(
            list in proptest::collection::vec("\\PC{0,30}|[ \\n]{0,3}|[a-z\\x00-\\x1f]{1,5}|x{1995,2005}", 0..24)
        ) {
            let ok = list.len() <= MAX_DECISIONS && list.iter().all(|d| {
                !d.trim().is_empty() && d.len() <= MAX_DECISION_BYTES
                    && !d.chars().any(|c| c.is_control() && c != '\n' && c != '\t')
                    && legate_credentials::scan_content(d.as_bytes()).is_none()
            });
            let got = check_decisions(&list);
            prop_assert_eq!(got.is_ok(), ok);
            if let Err(e) = got { prop_assert!(matches!(e.code, ErrorCode::InvalidInput | ErrorCode::InputSecretDetected)); }
        }
    }

    #[test]
    fn a_decision_holding_a_credential_is_refused() {
        let leak = format!("use key {}{}", "AKIA", "Q3ZL7RTX2WNVD6KM");
        let err = check_decisions(&["fine".into(), leak]).unwrap_err();
        assert_eq!(err.code, ErrorCode::InputSecretDetected);
        assert!(err.message.starts_with("decision 2"), "{}", err.message);
        assert!(!err.message.contains("Q3ZL7"), "the secret is never echoed");
    }
}
