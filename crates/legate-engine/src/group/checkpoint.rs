//! A finished node's checkpoint: the hashes of its copy's tree and patch, of its result as
//! passed on, and of what was validated (its task's outcome, the hook's evidence and its
//! collected artifacts); what holds a node's output (its acceptance criteria's file checks,
//! a criterion without one needing a verification, and the hooks `requireReview`,
//! `requireTests`); and checking a
//! checkpoint again (`WORKFLOW_CHECKPOINT_CHANGED` when anything it hashed moved).
//!
//! The evidence a hook accepts is Legate's own: a current passing verification of the copy
//! (`verify`) for a review, a passing test Legate ran itself against the current patch for
//! tests (client-reported records never count). This module reads copies only through the
//! engine's review operations and never changes a copy.

use super::definition::Hook;
use super::status::Checkpoint;
use super::validate::sort_keys;
use crate::core::Core;
use crate::review::TestSource;
use legate_core::{Error, ErrorCode, Result, Task, Timestamp};

/// A node's result as passed on: the checked report of a planner or reviewer, else the last
/// JSON object its answer ended with, else `{"summary": answer}`.
pub(crate) fn node_result(task: &Task) -> serde_json::Value {
    let Some(result) = &task.result else {
        return serde_json::json!({"summary": ""});
    };
    if let Some(report) = &result.report
        && let Ok(v) = serde_json::to_value(report)
    {
        return v;
    }
    match crate::report::parse::last_object(&result.text) {
        Ok(v) if v.is_object() => v,
        _ => serde_json::json!({"summary": result.text}),
    }
}

fn hash_json(v: serde_json::Value) -> String {
    legate_core::remote::sha256_hex(sort_keys(v).to_string().as_bytes())
}

/// Why `hook` still holds `task`'s output, or `None` once its evidence is there. `patch`:
/// the copy's patch sha256 now.
pub(crate) fn holding(
    engine: &Core,
    task: &Task,
    hook: Hook,
    patch: &str,
) -> Result<Option<Error>> {
    let record = engine.record(&task.id)?;
    if hook.require_tests
        && !record
            .tests
            .iter()
            .any(|t| t.source == TestSource::LegateExecutor && t.passed && t.sha256_after == patch)
    {
        return Ok(Some(Error::new(
            ErrorCode::TestFailed,
            format!(
                "node task {} needs a passing test Legate runs itself on its current patch (test), then group_start to resume",
                task.id
            ),
        )));
    }
    // The criteria's file checks hold before the dependents are released.
    let checked: Vec<legate_review::Criterion> = record
        .criteria
        .iter()
        .filter(|c| c.check.is_some())
        .cloned()
        .collect();
    if !checked.is_empty() {
        let max = engine.review_config().limits.max_bytes;
        let outcome = legate_review::verify(&record.copy_directory, &checked, &[], patch, max)?;
        if let Some(failed) = outcome
            .criteria
            .iter()
            .find(|c| c.check_passed == Some(false))
        {
            return Ok(Some(Error::new(
                ErrorCode::VerificationRequired,
                format!(
                    "node task {}'s acceptance criterion {:?} does not hold ({}); its dependents are not released",
                    task.id,
                    failed.criterion_id,
                    failed
                        .problems
                        .first()
                        .map_or("its check failed", String::as_str)
                ),
            )));
        }
    }
    // A criterion no file check covers needs a verification with checked citations.
    let unchecked = record.criteria.iter().any(|c| c.check.is_none());
    if hook.require_review || unchecked {
        let current = record.verification.as_ref().is_some_and(|v| {
            let max = engine.review_config().limits.max_bytes;
            v.passed && legate_review::staleness(&record.copy_directory, v, patch, max).is_none()
        });
        if !current {
            return Ok(Some(Error::new(
                ErrorCode::VerificationRequired,
                format!(
                    "node task {} needs a current passing verification of its copy (verify), then group_start to resume",
                    task.id
                ),
            )));
        }
    }
    Ok(None)
}

/// What a checkpoint's validation hash covers: the task's outcome, the first evidence that
/// satisfied each hook, and its collected artifacts' hashes.
fn validation(engine: &Core, task: &Task, hook: Hook, patch: &str) -> Result<serde_json::Value> {
    let record = engine.record(&task.id)?;
    let test = hook
        .require_tests
        .then(|| {
            record
                .tests
                .iter()
                .find(|t| {
                    t.source == TestSource::LegateExecutor && t.passed && t.sha256_after == patch
                })
                .map(|t| t.id)
        })
        .flatten();
    let verified = hook
        .require_review
        .then(|| {
            record
                .verification
                .as_ref()
                .map(|v| (v.passed, v.sha256.clone()))
        })
        .flatten();
    let mut hashed = serde_json::json!({
        "taskId": task.id,
        "state": task.state.as_str(),
        "report": task.result.as_ref().and_then(|r| r.report.as_ref()).is_some(),
        "requireTests": hook.require_tests,
        "requireReview": hook.require_review,
        "test": test,
        "verification": verified,
    });
    // Only when there are some, so that a checkpoint taken before artifacts were hashed
    // (no node could name any then) checks the same.
    let collected = artifacts(engine, task)?;
    if !collected.is_empty() {
        hashed["artifacts"] = serde_json::Value::Array(collected);
    }
    Ok(hashed)
}

/// The artifacts collected from `task`'s copy, as hashed into its checkpoint: each one's
/// name, state and sha256 (its bytes are the store's; a changed one moves the hash).
fn artifacts(engine: &Core, task: &Task) -> Result<Vec<serde_json::Value>> {
    Ok(engine
        .store()
        .artifacts(&task.id)?
        .into_iter()
        .map(|a| serde_json::json!({"name": a.name, "state": a.state, "sha256": a.sha256}))
        .collect())
}

/// A copy's hashes, read once after its task ended so that settling the node reads the copy
/// once: a copy whose task ended changes no more until another turn of it starts.
#[derive(Debug, Clone, Default)]
pub(crate) struct Known {
    /// The tree's sha256, if read.
    pub(crate) tree: Option<String>,
    /// The patch's sha256, if read.
    pub(crate) patch: Option<String>,
}

impl Core {
    /// The copy's tree and patch sha256 now.
    async fn copy_hashes(&self, task: &Task) -> Result<(String, String)> {
        let tree = self.context(task.id.as_str()).await?.tree_sha256;
        let patch = self.preview(task.id.as_str()).await?.patch.sha256;
        Ok((tree, patch))
    }

    /// Both hashes of the ended `task`'s copy: as its turn's end read them while the copy's
    /// stamp proves them current (`review::settled`), else read again now, or nothing when
    /// they cannot be read (the settling then reads again and meets the error itself).
    pub(crate) async fn read_hashes(&self, task: &Task) -> Known {
        if let Some((tree, patch)) = self.settled_hashes(task).await {
            return Known {
                tree: Some(tree),
                patch: Some(patch),
            };
        }
        match self.copy_hashes(task).await {
            Ok((tree, patch)) => Known {
                tree: Some(tree),
                patch: Some(patch),
            },
            Err(_) => Known::default(),
        }
    }

    /// The patch sha256 of `task`'s copy now, unless `known` has it.
    pub(crate) async fn node_patch(&self, task: &Task, known: &Known) -> Result<String> {
        match &known.patch {
            Some(patch) => Ok(patch.clone()),
            None => Ok(self.preview(task.id.as_str()).await?.patch.sha256),
        }
    }

    /// Takes `task`'s checkpoint (the node's latest turn, completed, its hook satisfied),
    /// reading what `known` lacks.
    pub(crate) async fn take_checkpoint(
        &self,
        task: &Task,
        hook: Hook,
        known: Known,
    ) -> Result<Checkpoint> {
        let patch = self.node_patch(task, &known).await?;
        let tree = match known.tree {
            Some(tree) => tree,
            None => self.context(task.id.as_str()).await?.tree_sha256,
        };
        Ok(Checkpoint {
            task_id: task.id.clone(),
            tree_sha256: tree,
            result_sha256: hash_json(node_result(task)),
            validation_sha256: hash_json(validation(self, task, hook, &patch)?),
            patch_sha256: patch,
            taken_at: Timestamp::now(),
        })
    }

    /// Checks `checkpoint` of `node` again: `WORKFLOW_CHECKPOINT_CHANGED` naming what moved
    /// (or that the copy is gone).
    pub(crate) async fn recheck(
        &self,
        node: &str,
        checkpoint: &Checkpoint,
        hook: Hook,
    ) -> Result<()> {
        let changed = |what: &str| {
            Error::new(
                ErrorCode::WorkflowCheckpointChanged,
                format!(
                    "node {node}'s {what} changed since its checkpoint; nothing is re-run: inspect its task {} and create a new group",
                    checkpoint.task_id
                ),
            )
        };
        let task = self
            .task(checkpoint.task_id.as_str())
            .map_err(|_| changed("task"))?;
        let (tree, patch) = match self.copy_hashes(&task).await {
            Ok(h) => h,
            Err(e) => {
                return Err(Error::caused_by(
                    ErrorCode::WorkflowCheckpointChanged,
                    format!(
                        "node {node}'s copy can no longer be read ({}); nothing is re-run",
                        e.code
                    ),
                    e,
                ));
            }
        };
        if tree != checkpoint.tree_sha256 {
            return Err(changed("files"));
        }
        if patch != checkpoint.patch_sha256 {
            return Err(changed("patch"));
        }
        if hash_json(node_result(&task)) != checkpoint.result_sha256 {
            return Err(changed("result"));
        }
        if hash_json(validation(self, &task, hook, &patch)?) != checkpoint.validation_sha256 {
            return Err(changed("validation"));
        }
        Ok(())
    }
}
