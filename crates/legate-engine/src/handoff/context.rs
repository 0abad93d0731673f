//! Gathering a finished copy task's [`ContextPack`] and hashing it.
//!
//! The pack is built from stored records only (the task, its review record, the results of
//! the tasks of its chain) plus the copy's `treeSha256`, read through `legate-workspace`
//! beneath the copy. Its `contextSha256` is the sha256 of the pack serialized as JSON with an
//! empty `contextSha256` (fields in declaration order, so the serialization is canonical).
//! It never changes a record or a file.

use super::Handoffs;
use super::{
    ContextDecision, ContextPack, ContextReport, ContextTest, DecisionOrigin, MAX_CHAIN,
    MAX_REPORTS,
};
use crate::core::Core;
use crate::review::{CopyHandle, CopyStatus, ReviewRecord};
use legate_core::{Error, ErrorCode, Result, Task, WorkspaceKind};
use legate_workspace::Baseline;

/// `COPY_CLOSED` for a copy that was discarded or integrated (by any of its turns): no new
/// turn, no handoff.
pub(crate) fn closed(handle: &CopyHandle) -> Option<Error> {
    let why = match handle.status {
        CopyStatus::Open => return None,
        CopyStatus::Discarded => "was discarded",
        CopyStatus::Integrated => "was integrated",
    };
    Some(Error::new(
        ErrorCode::CopyClosed,
        format!(
            "the copy of task {} {why}; start a new task from the project instead",
            handle.copy_id
        ),
    ))
}

fn unavailable(message: String) -> Error {
    Error::new(ErrorCode::CopyUnavailable, message)
}

impl Core {
    /// The context of the finished copy task `id` (see the module docs of `handoff`).
    ///
    /// Errors: `TASK_NOT_FOUND`; `COPY_UNAVAILABLE` for a task that has no copy, or has not
    /// ended; `COPY_CLOSED` for a discarded copy; `COPY_BUSY` while another operation holds
    /// the copy.
    pub(crate) async fn context(&self, id: &str) -> Result<ContextPack> {
        let (handle, task, record) = self.finished_copy(id)?;
        if handle.status == CopyStatus::Discarded
            && let Some(e) = closed(&handle)
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

    /// The copy of task `id` and its current task (the latest turn that entered it) with that
    /// task's review record, when every turn of the copy has ended and the copy was made.
    pub(crate) fn finished_copy(&self, id: &str) -> Result<(CopyHandle, Task, ReviewRecord)> {
        let named = self.task(id)?;
        if named.workspace != WorkspaceKind::Copy {
            return Err(unavailable(format!(
                "task {} works in a {} workspace; only a copy task has a context to hand off",
                named.id,
                named.workspace.as_str()
            )));
        }
        let handle = self.current_copy(id)?;
        if let Some(busy) = &handle.busy {
            return Err(Error::new(
                ErrorCode::CopyBusy,
                format!(
                    "task {busy} of this copy has not ended; its context can be read once every turn ends"
                ),
            ));
        }
        let task = self.task(handle.task_id.as_str())?;
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
        Ok((handle, task, record))
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
            // A later turn in the same copy links back through the task that made the copy.
            let from = current_record.handoff.clone().or_else(|| {
                let maker = current_record.continues.as_ref()?;
                self.record(maker).ok()?.handoff
            });
            let Some(from) = from else {
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

impl Handoffs {
    /// The context of the finished copy task `id` (see the module docs of `handoff`).
    ///
    /// Errors: `TASK_NOT_FOUND`; `COPY_UNAVAILABLE` for a task that has no copy, or has not
    /// ended; `COPY_CLOSED` for a discarded copy; `COPY_BUSY` while another operation holds
    /// the copy.
    pub async fn context(&self, id: &str) -> Result<ContextPack> {
        self.core.context(id).await
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
        .map_err(|e| Error::caused_by(ErrorCode::Internal, "a context could not be encoded", e))?;
    Ok(legate_workspace::sha256_hex(&bytes))
}
