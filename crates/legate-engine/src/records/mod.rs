//! What the store holds, read without running anything: the read-only door for fronts.
//!
//! A front that only shows (the CLI's `tasks`, `show`, `events`, `tap`, `usage`) opens [`Records`]
//! instead of an [`Engine`](crate::Engine): the store is opened and the tasks of processes that
//! died are marked first (restart recovery), so that what is shown is true: tasks, events,
//! usage, approvals and the audit. A running engine hands out the same reads ([`Engine::records`](crate::Engine::records)).
//! Fronts never name the store itself.
//!
//! This module owns no rule about a task's fate: it reads, and recovery is
//! [`runner::recover`](crate::core::runner::recover)'s.

use crate::approvals::{
    Approval, ApprovalAnswer, ApprovalFilter, AuditEntry, AuditFilter, check_answer,
};
use crate::config::Paths;
use crate::core::fanout::Subscription;
use legate_core::{Error, ErrorCode, Event, Result, TapFrame, Task, TaskId};
use legate_store::Store;
pub use legate_store::{ContextRecord, TaskFilter};

/// The store of one `$LEGATE_HOME`, opened for reading.
#[derive(Debug, Clone)]
pub struct Records {
    store: Store,
    paths: Paths,
}

impl Records {
    /// Opens the store and recovers the tasks of dead runners. A home with no store yet is
    /// `TASK_NOT_FOUND` (nothing was ever run there).
    pub fn open(paths: &Paths) -> Result<Self> {
        if !paths.db().exists() {
            return Err(Error::new(
                ErrorCode::TaskNotFound,
                format!("no tasks yet ({} does not exist)", paths.db().display()),
            ));
        }
        let store = Store::open(&paths.db())?;
        crate::core::runner::recover(&store, paths, crate::core::runner::SPARE_EVERY_REMOTE)?;
        Ok(Self {
            store,
            paths: paths.clone(),
        })
    }

    /// [`Records::open`], except that a home with no store yet reads as empty.
    pub fn open_or_empty(paths: &Paths) -> Result<Self> {
        if paths.db().exists() {
            return Self::open(paths);
        }
        Ok(Self {
            store: Store::open_in_memory()?,
            paths: paths.clone(),
        })
    }

    /// The records of a running engine's store.
    pub(crate) fn of(store: Store, paths: Paths) -> Self {
        Self { store, paths }
    }

    /// The most recently used contexts, newest first.
    pub fn contexts(&self, limit: usize) -> Result<Vec<ContextRecord>> {
        self.store.list_contexts(limit)
    }

    /// A task by exact id, or `None`: for fronts whose ids are exact (A2A).
    pub fn stored_task(&self, id: &TaskId) -> Result<Option<Task>> {
        self.store.task(id)
    }

    /// The store (for the supervision module's reads and answers).
    pub(crate) fn store(&self) -> &Store {
        &self.store
    }

    /// A task by id or unique prefix.
    pub fn find_task(&self, id: &str) -> Result<Task> {
        self.store.find_task(id)
    }

    /// Tasks, newest first.
    pub fn tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        self.store.list_tasks(filter)
    }

    /// A page of a task's events after `after`.
    pub fn events(&self, task_id: &TaskId, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.store.events(task_id, after, limit)
    }

    /// A page of `task`'s wire tap: up to `limit` frames after `after`, in order (see
    /// `core::tap`). `TAP_OFF` for a task that was not tapped: neither its agent's `tap =
    /// true` nor its submit asked for it, so it has no frames and never will.
    pub fn tap_frames(&self, task: &Task, after: u64, limit: usize) -> Result<Vec<TapFrame>> {
        if !task.controls.tap {
            return Err(Error::new(
                ErrorCode::TapOff,
                format!(
                    "task {} was not tapped: its agent `{}` has no `tap = true` and it was not submitted with a tap (`legate run --tap`), so no frame of its wire was recorded",
                    task.id, task.agent
                ),
            ));
        }
        self.store.tap_frames(&task.id, after, limit)
    }

    /// The number of the task's last event (0 before any).
    pub fn last_seq(&self, task_id: &TaskId) -> Result<u64> {
        self.store.last_seq(task_id)
    }

    /// Follows a task's events from the store alone, polling (for tasks run by another
    /// process): a task whose runner died is recovered, and the subscription ends with that
    /// status.
    pub fn follow(&self, task_id: TaskId, after: u64) -> Subscription {
        crate::follow(self.store.clone(), &self.paths, task_id, after)
    }

    /// The review record of a copy task (`None` for other tasks, or a record this version
    /// cannot read).
    pub fn review(&self, task_id: &TaskId) -> Result<Option<crate::ReviewRecord>> {
        Ok(self
            .store
            .review(task_id)?
            .and_then(|v| serde_json::from_value(v).ok()))
    }

    /// Token usage of stored tasks.
    pub fn usage(&self, filter: &crate::UsageFilter) -> Result<crate::UsageReport> {
        self.store.usage(filter)
    }

    /// Approvals, newest first.
    pub fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>> {
        self.store().approvals(filter)
    }

    /// Answers a pending approval from a process with no engine running: the process whose
    /// agent waits reads the answer from the store within a poll interval. Errors as
    /// [`Approvals::answer`](crate::Approvals::answer).
    pub fn answer_approval(&self, id: &str, answer: ApprovalAnswer) -> Result<Approval> {
        check_answer(&answer)?;
        self.store().answer_approval(id, &answer)
    }

    /// As [`Approvals::find`](crate::Approvals::find).
    pub fn find_approval(&self, given: &str) -> Result<String> {
        self.store().find_approval(given)
    }

    /// Permission decisions, newest first.
    pub fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>> {
        self.store().audit(filter)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_home_has_no_records_but_reads_as_empty() {
        let dir = tempfile::tempdir().unwrap();
        let paths = Paths::new(dir.path().to_path_buf());
        let e = Records::open(&paths).err().unwrap();
        assert_eq!(e.code, ErrorCode::TaskNotFound);
        let empty = Records::open_or_empty(&paths).unwrap();
        assert!(empty.tasks(&TaskFilter::default()).unwrap().is_empty());
        assert!(!paths.db().exists(), "reading created a store");
    }
}
