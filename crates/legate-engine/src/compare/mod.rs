//! Comparisons: one question put to 2 to 4 distinct targets (an agent, optionally with a
//! model, across vendors), each a read-only review in its own copy of the same version of a
//! finished copy task's files, and what they said gathered side by side.
//!
//! [`Comparisons::compare`] checks everything before anything is made: the targets (2 to
//! [`MAX_TARGETS`], distinct once each agent's default model is filled in), the source (a
//! finished, open copy task whose latest turn did not break its read-only promise), its
//! `contextSha256` against the one the caller read (`CONTEXT_CHANGED`), each target's submit
//! (agent, model, prompt with the context block, `CONTEXT_TOO_LARGE`), and room in the queue
//! for every target (`QUEUE_FULL`). Then it makes every copy, from one reading of the source
//! copy under its lock, each checked to hold exactly the compared tree; if one cannot be made
//! the call fails and every copy made is removed, so no target ever starts on a comparison
//! that is not of one version. Only then is the comparison stored and each target submitted,
//! a reviewer with the handoff's context block; a target whose submit fails there (the queue
//! filled meanwhile, a store error) is kept in `startErrors` and its copy removed.
//!
//! [`Comparisons::comparison`] re-reads it (see `view`): every review with its state, usage,
//! report summary and whether its copy still holds the compared tree (re-hashed), whether the
//! source's context is still the compared one, and the findings grouped by file and line
//! (see `grouping`). `complete` needs every target started, every review `completed` with a
//! review report, the source unchanged and every copy matching.
//!
//! This module never votes, never ranks targets, never integrates (each review is read-only,
//! so its copy never can be), never cancels or discards a review (the task tools do, one at a
//! time), and never changes the source copy.

mod grouping;
mod view;

pub use grouping::{Agreement, FindingVariant, GroupedFinding};
pub use view::{ComparedReview, Comparison};

use crate::core::Core;
use crate::core::request::{SubmitRequest, WorkspaceRequest};
use crate::handoff::{HandoffSource, changed, closed, context_block, framed_len, remove_made};
use crate::review::blocking;
use legate_core::{Error, ErrorCode, Result, TaskId, TaskMode, Timestamp};
use legate_workspace::{Baseline, CopyReport};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The fewest targets a comparison has.
pub const MIN_TARGETS: usize = 2;
/// The most targets a comparison has.
pub const MAX_TARGETS: usize = 4;
/// The role every target plays.
const REVIEWER: &str = "reviewer";

/// One target of `compare`.
// An agent, optionally with a model. Published by the MCP front under the name `TargetArg`
// (its `compare` tool's schema, pinned by `legate-mcp`'s `tool_schemas` suite).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "TargetArg"))]
pub struct CompareTarget {
    /// A configured agent (see `agents`).
    pub agent: String,
    /// The model; omitted for the agent's configured one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// A request to compare targets on a finished copy task's current files. Every front takes
/// this type as it is: the MCP `compare` tool's arguments are this struct (its field
/// documentation is that tool's published schema), and `legate compare` builds it from its
/// flags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CompareRequest {
    /// The finished copy task whose copy's current files every target reviews.
    pub source_task_id: String,
    /// The contextSha256 `context` returned; CONTEXT_CHANGED when the context is another now.
    pub expected_context_sha256: String,
    /// What every target is asked, the same words for all.
    pub prompt: String,
    /// 2 to 4 distinct targets (agent and model; an omitted model is the agent's own).
    pub targets: Vec<CompareTarget>,
}

/// A target that did not start, and why.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StartError {
    /// The target's agent.
    pub agent: String,
    /// The target's model, as asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The task id it would have had (no task has it).
    pub task_id: TaskId,
    /// Why it did not start.
    #[cfg_attr(feature = "schema", schemars(with = "ErrorShape"))]
    pub error: Error,
}

/// How an error reads on the wire (`legate_core::Error` without its cause), for the schema.
#[cfg(feature = "schema")]
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
pub(crate) struct ErrorShape {
    /// A stable code, e.g. `COPY_CLOSED`.
    code: String,
    /// One sentence for a person.
    message: String,
}

/// What `compare` answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Compared {
    /// Pass it to `comparison`.
    pub comparison_id: String,
    /// The review tasks that started, in the order of the targets; follow each with `wait`.
    pub task_ids: Vec<TaskId>,
    /// The targets that did not start.
    pub start_errors: Vec<StartError>,
}

/// A target as stored: what was asked, and the task that runs it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StoredTarget {
    pub(crate) agent: String,
    #[serde(default)]
    pub(crate) model: Option<String>,
    pub(crate) task_id: TaskId,
}

/// The comparison's durable document (the store's `comparisons` table).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ComparisonRecord {
    pub(crate) id: String,
    pub(crate) source_task_id: TaskId,
    pub(crate) context_sha256: String,
    pub(crate) tree_sha256: String,
    pub(crate) prompt: String,
    pub(crate) targets: Vec<StoredTarget>,
    #[serde(default)]
    pub(crate) start_errors: Vec<StartError>,
    pub(crate) created_at: Timestamp,
}

/// `INVALID_INPUT` unless there are 2 to 4 targets, each naming an agent and at most a
/// non-blank model, none named twice as written.
pub(crate) fn check_targets(targets: &[CompareTarget]) -> Result<()> {
    if !(MIN_TARGETS..=MAX_TARGETS).contains(&targets.len()) {
        return Err(Error::invalid_input(format!(
            "a comparison has {MIN_TARGETS} to {MAX_TARGETS} targets; got {}",
            targets.len()
        )));
    }
    for (i, t) in targets.iter().enumerate() {
        if t.agent.trim().is_empty() {
            return Err(Error::invalid_input(format!(
                "target {} names no agent",
                i + 1
            )));
        }
        if t.model.as_deref().is_some_and(|m| m.trim().is_empty()) {
            return Err(Error::invalid_input(format!(
                "target {} names a blank model; leave it out for the agent's own",
                i + 1
            )));
        }
    }
    Ok(())
}

fn same_target(n: usize, agent: &str, model: Option<&str>) -> Error {
    Error::invalid_input(format!(
        "target {n} is agent {agent:?} with model {} again; a comparison needs distinct targets",
        model.map_or_else(|| "(its default)".to_string(), |m| format!("{m:?}"))
    ))
}

/// A target checked and ready to submit once every copy is made.
struct Planned {
    target: CompareTarget,
    submit: SubmitRequest,
    checked: crate::core::request::Checked,
    role: Option<legate_core::TaskRole>,
    id: TaskId,
}

/// Comparisons: one prompt run on several agents in copies, and their reviews side by side.
/// Handed out by [`Engine::comparisons`](crate::Engine::comparisons).
#[derive(Debug, Clone)]
pub struct Comparisons {
    pub(crate) core: Core,
}

impl Core {
    fn put_comparison(&self, record: &ComparisonRecord) -> Result<()> {
        let value = serde_json::to_value(record).map_err(|e| {
            Error::caused_by(ErrorCode::Internal, "a comparison could not be encoded", e)
        })?;
        self.store()
            .put_comparison(&record.id, record.source_task_id.as_str(), &value)
    }

    pub(crate) fn comparison_record(&self, id: &str) -> Result<ComparisonRecord> {
        let value = self.store().comparison(id)?;
        serde_json::from_value(value).map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                format!("the comparison {id} is unreadable"),
                e,
            )
        })
    }

    /// Makes one copy per `(copy, baseline)` directory pair from one reading of the source
    /// copy (its lock held throughout), each on the original baseline and checked to hold
    /// exactly `tree`; on any failure every copy made is removed.
    async fn make_compared_copies(
        &self,
        source: &crate::review::ReviewRecord,
        dirs: Vec<(PathBuf, PathBuf)>,
        tree: String,
    ) -> Result<Vec<CopyReport>> {
        let from = Baseline::open(&source.baseline_directory, &source.copy_directory)?;
        let cfg = self.config().review.clone();
        blocking(move || {
            let _lock = from.lock()?;
            let sel = legate_workspace::copy_selection(&from, &cfg.secrets, &cfg.limits)?;
            let mut made = Vec::new();
            for (i, (copy, baseline)) in dirs.iter().enumerate() {
                let one = legate_workspace::make_handoff_copy(
                    &from,
                    &sel,
                    copy,
                    baseline,
                    &cfg.limits,
                )
                .and_then(|(report, b)| {
                    let now = legate_workspace::copy_selection(&b, &cfg.secrets, &cfg.limits)
                        .and_then(|s| legate_workspace::tree_sha256(&s, &cfg.limits))?;
                    if now == tree {
                        Ok(report)
                    } else {
                        Err(Error::new(
                            ErrorCode::ContextChanged,
                            format!(
                                "the source copy's files changed while the comparison's copies were made (tree {now}, compared {tree}); read the context again"
                            ),
                        ))
                    }
                });
                match one {
                    Ok(report) => made.push(report),
                    Err(e) => {
                        for (c, b) in &dirs[..=i] {
                            remove_made(c, b);
                        }
                        tracing::warn!(error = %e, "a compared copy could not be made; none was kept");
                        return Err(e);
                    }
                }
            }
            Ok(made)
        })
        .await
    }
}

impl Comparisons {
    /// Starts a comparison (see the module docs).
    ///
    /// Errors, each before anything is made or stored: `INVALID_INPUT` for too few, too many
    /// or repeated targets; `CONTEXT_CHANGED`; `COPY_CLOSED`, `COPY_UNAVAILABLE`, `COPY_BUSY`,
    /// `READ_ONLY_VIOLATION` for a source that cannot be handed on; `CONTEXT_TOO_LARGE`;
    /// `QUEUE_FULL` when the queue has no room for every target; any submit error of a
    /// target; any error making a copy (every copy made is then removed).
    pub async fn compare(&self, request: CompareRequest) -> Result<Compared> {
        check_targets(&request.targets)?;
        // Before anything is made: no target is the supervising agent (`AGENT_RESERVED`).
        for target in &request.targets {
            self.core.refuse_reserved(&target.agent)?;
        }
        let (handle, source, record) = self.core.finished_copy(&request.source_task_id)?;
        if let Some(e) = closed(&handle) {
            return Err(e);
        }
        self.core.check_hands_on(&source, &handle)?;
        let pack = self.core.context(source.id.as_str()).await?;
        if pack.context_sha256 != request.expected_context_sha256 {
            return Err(changed(
                &pack.context_sha256,
                &request.expected_context_sha256,
            ));
        }
        let block = context_block(&pack, &[])?;
        let comparison_id = uuid::Uuid::new_v4().to_string();
        let mut planned: Vec<Planned> = Vec::new();
        let mut seen: Vec<(String, Option<String>)> = Vec::new();
        for (i, target) in request.targets.iter().enumerate() {
            let mut submit = SubmitRequest::new(request.prompt.clone());
            submit.agent = Some(target.agent.clone());
            submit.model = target.model.clone();
            submit.role = Some(REVIEWER.into());
            submit.mode = Some(TaskMode::ReadOnly);
            submit.workspace = WorkspaceRequest::Copy {
                source: record.source.clone(),
                include_paths: record.include_paths.clone(),
                criteria: record.criteria.clone(),
            };
            let role = self.core.apply_role(&mut submit)?;
            let mut checked = self.core.check_submit(&submit, false)?;
            // Distinct as run: a target without a model runs the agent's configured one.
            let key = (
                checked.agent.name.clone(),
                submit.model.clone().or_else(|| checked.agent.model.clone()),
            );
            if seen.contains(&key) {
                return Err(same_target(i + 1, &key.0, key.1.as_deref()));
            }
            seen.push(key);
            let size = framed_len(&submit, role.as_ref(), &block, &checked.controls.skills);
            let limit = self.core.config().max_prompt_chars;
            if size > limit {
                return Err(Error::new(
                    ErrorCode::ContextTooLarge,
                    format!(
                        "the prompt with the compared context has {size} characters; the limit is {limit} (max_prompt_chars; nothing is cut: shorten the prompt, or compare a task with fewer or shorter reports)"
                    ),
                ));
            }
            let id = TaskId(uuid::Uuid::new_v4().to_string());
            checked.id = Some(id.clone());
            checked.controls.comparison_id = Some(comparison_id.clone());
            planned.push(Planned {
                target: target.clone(),
                submit,
                checked,
                role,
                id,
            });
        }
        let free = self.core.slots().free();
        if free < planned.len() {
            return Err(Error::new(
                ErrorCode::QueueFull,
                format!(
                    "the queue has room for {free} more tasks and the comparison needs {}; nothing was started",
                    planned.len()
                ),
            ));
        }
        let dirs: Vec<(PathBuf, PathBuf)> = planned
            .iter()
            .map(|p| (self.core.copy_dir(&p.id), self.core.baseline_dir(&p.id)))
            .collect();
        let made = self
            .core
            .make_compared_copies(&record, dirs.clone(), pack.tree_sha256.clone())
            .await?;
        let mut stored = ComparisonRecord {
            id: comparison_id.clone(),
            source_task_id: source.id.clone(),
            context_sha256: pack.context_sha256.clone(),
            tree_sha256: pack.tree_sha256.clone(),
            prompt: request.prompt.clone(),
            targets: planned
                .iter()
                .map(|p| StoredTarget {
                    agent: p.checked.agent.name.clone(),
                    model: p.target.model.clone(),
                    task_id: p.id.clone(),
                })
                .collect(),
            start_errors: Vec::new(),
            created_at: Timestamp::now(),
        };
        if let Err(e) = self.core.put_comparison(&stored) {
            for (copy, baseline) in &dirs {
                remove_made(copy, baseline);
            }
            return Err(e);
        }
        let mut task_ids = Vec::new();
        for ((p, report), (copy, baseline)) in planned.into_iter().zip(made).zip(&dirs) {
            let Planned {
                target,
                submit,
                mut checked,
                role,
                id,
            } = p;
            if let Some(c) = checked.copy.as_mut() {
                c.handoff = Some(Box::new(HandoffSource {
                    source_task_id: source.id.clone(),
                    context_sha256: pack.context_sha256.clone(),
                    decisions: Vec::new(),
                    block: block.clone(),
                    prepared: Some(report),
                }));
            }
            match self.core.submit_checked(submit, checked, role) {
                Ok(task) => task_ids.push(task.id),
                Err(error) => {
                    tracing::warn!(comparison = %comparison_id, task = %id, code = %error.code, "a compared target did not start");
                    remove_made(copy, baseline);
                    stored.start_errors.push(StartError {
                        agent: target.agent,
                        model: target.model,
                        task_id: id,
                        error,
                    });
                }
            }
        }
        if !stored.start_errors.is_empty()
            && let Err(e) = self.core.put_comparison(&stored)
        {
            tracing::error!(comparison = %comparison_id, error = %e, "could not store the start errors of a comparison");
        }
        tracing::info!(comparison = %comparison_id, from = %source.id, started = task_ids.len(), failed = stored.start_errors.len(), "comparison started");
        Ok(Compared {
            comparison_id,
            task_ids,
            start_errors: stored.start_errors,
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn t(agent: &str, model: Option<&str>) -> CompareTarget {
        CompareTarget {
            agent: agent.into(),
            model: model.map(Into::into),
        }
    }

    #[test]
    fn two_to_four_named_targets_pass_the_first_check() {
        for n in [0, 1, 5, 9] {
            let targets: Vec<_> = (0..n).map(|i| t(&format!("a{i}"), None)).collect();
            let e = check_targets(&targets).unwrap_err();
            assert_eq!(e.code, ErrorCode::InvalidInput, "{n}");
        }
        for n in 2..=4 {
            let targets: Vec<_> = (0..n).map(|i| t(&format!("a{i}"), None)).collect();
            check_targets(&targets).unwrap();
        }
        let e = check_targets(&[t("a", None), t(" ", None)]).unwrap_err();
        assert!(e.message.contains("target 2"), "{}", e.message);
        let e = check_targets(&[t("a", Some("")), t("b", None)]).unwrap_err();
        assert!(e.message.contains("blank model"), "{}", e.message);
    }
}
