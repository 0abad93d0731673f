//! Gathering a finished copy task's [`ContextPack`] and hashing it.
//!
//! The pack is built from stored records only (the task, its review record, the results of
//! the tasks of its chain) plus the copy's `treeSha256`, read through `legate-workspace`
//! beneath the copy. Its `contextSha256` is the sha256 of the pack serialized as JSON with an
//! empty `contextSha256` (fields in declaration order, so the serialization is canonical).
//! It never changes a record or a file.

use super::{
    ContextDecision, ContextPack, ContextReport, ContextTest, DecisionOrigin, MAX_CHAIN,
    MAX_REPORTS,
};
use crate::Engine;
use crate::review::ReviewRecord;
use legate_core::{Error, ErrorCode, Result, Task, WorkspaceKind};
use legate_workspace::Baseline;

/// `COPY_CLOSED` for a copy that was discarded or integrated: no new turn, no handoff.
pub(crate) fn closed(task: &Task, record: &ReviewRecord) -> Option<Error> {
    let why = if record.discarded_at.is_some() {
        "was discarded"
    } else if record.integration.is_some() {
        "was integrated"
    } else {
        return None;
    };
    Some(Error::new(
        ErrorCode::CopyClosed,
        format!(
            "the copy of task {} {why}; start a new task from the project instead",
            task.id
        ),
    ))
}

fn unavailable(message: String) -> Error {
    Error::new(ErrorCode::CopyUnavailable, message)
}

impl Engine {
    /// The context of the finished copy task `id` (see the module docs of `handoff`).
    ///
    /// Errors: `TASK_NOT_FOUND`; `COPY_UNAVAILABLE` for a task that has no copy, or has not
    /// ended; `COPY_CLOSED` for a discarded copy; `COPY_BUSY` while another operation holds
    /// the copy.
    pub async fn context(&self, id: &str) -> Result<ContextPack> {
        let (task, record) = self.finished_copy(id)?;
        if record.discarded_at.is_some()
            && let Some(e) = closed(&task, &record)
        {
            return Err(e);
        }
        let baseline = Baseline::open(&record.baseline_directory, &record.copy_directory)?;
        let cfg = self.config().review.clone();
        let tree = crate::review::blocking(move || {
            let _lock = baseline.lock()?;
            let sel = legate_workspace::copy_selection(&baseline, &cfg.secrets, &cfg.limits)?;
            legate_workspace::tree_sha256(&sel, &cfg.limits)
        })
        .await?;
        self.pack(&task, &record, tree)
    }

    /// The task `id` with its review record, when it is a copy task that ended with its copy
    /// made.
    pub(crate) fn finished_copy(&self, id: &str) -> Result<(Task, ReviewRecord)> {
        let task = self.task(id)?;
        if task.workspace != WorkspaceKind::Copy {
            return Err(unavailable(format!(
                "task {} works in a {} workspace; only a copy task has a context to hand off",
                task.id,
                task.workspace.as_str()
            )));
        }
        if !task.is_terminal() {
            return Err(unavailable(format!(
                "task {} is still {}; its context can be read once it ends",
                task.id, task.state
            )));
        }
        let record = self.record(&task.id)?;
        if record.copy.is_none() {
            return Err(unavailable(format!(
                "task {} ended before its copy was made",
                task.id
            )));
        }
        Ok((task, record))
    }

    /// The pack of `task` with the copy's `tree` hash, and its `contextSha256`.
    pub(crate) fn pack(
        &self,
        task: &Task,
        record: &ReviewRecord,
        tree: String,
    ) -> Result<ContextPack> {
        let mut reports = Vec::new();
        let mut decisions = Vec::new();
        let (mut current, mut current_record) = (task.clone(), record.clone());
        for _ in 0..MAX_CHAIN {
            if reports.len() < MAX_REPORTS
                && let Some(report) = current.result.as_ref().and_then(|r| r.report.clone())
            {
                reports.push(ContextReport {
                    task_id: current.id.clone(),
                    agent: current.agent.clone(),
                    role: role_name(&current),
                    report,
                });
            }
            let Some(from) = current_record.handoff.clone() else {
                break;
            };
            decisions.extend(from.decisions.iter().map(|text| ContextDecision {
                text: text.clone(),
                origin: DecisionOrigin::ClientReported,
                handed_off_from: from.source_task_id.clone(),
            }));
            // A source that is gone from the store (retention) ends the chain.
            match self.task(from.source_task_id.as_str()) {
                Ok(t) => match self.record(&t.id) {
                    Ok(r) => (current, current_record) = (t, r),
                    Err(_) => break,
                },
                Err(_) => break,
            }
        }
        let tests = record
            .tests
            .iter()
            .map(|t| ContextTest {
                id: t.id,
                source: t.source,
                command: t.command.clone(),
                exit_code: t.exit_code,
                passed: t.passed,
                patch_sha256: t.sha256_after.clone(),
                recorded_at: t.recorded_at,
            })
            .collect();
        let mut pack = ContextPack {
            task_id: task.id.clone(),
            agent: task.agent.clone(),
            role: role_name(task),
            criteria: record.criteria.clone(),
            reports,
            tests,
            decisions,
            tree_sha256: tree,
            context_sha256: String::new(),
        };
        pack.context_sha256 = context_sha256(&pack)?;
        Ok(pack)
    }
}

/// The task's role name; `implementer` when it was submitted without one.
fn role_name(task: &Task) -> String {
    task.role
        .as_ref()
        .map_or_else(|| "implementer".to_string(), |r| r.name.clone())
}

/// The sha256 of `pack` serialized with an empty `contextSha256`.
pub(crate) fn context_sha256(pack: &ContextPack) -> Result<String> {
    let mut canonical = pack.clone();
    canonical.context_sha256 = String::new();
    let bytes = serde_json::to_vec(&canonical)
        .map_err(|e| Error::internal(format!("a context could not be encoded: {e}")))?;
    Ok(legate_workspace::sha256_hex(&bytes))
}
