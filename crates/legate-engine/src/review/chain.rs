//! One copy across the turns of its context: which task a copy's review acts through, whether
//! the copy is open, integrated or discarded, and what a context's next turn continues.
//!
//! A context works in one copy. The task that made it names it (its directories are named
//! after that task, the copy's id); every later task of the context continues in it
//! (`ReviewRecord::continues`), against the same baseline, so the patch accumulates over
//! turns. A task *enters* the copy when its turn starts there, under the copy's lock, and
//! gets the next turn number then (`ReviewRecord::turn`), so turns are numbered in the order
//! they really ran. The copy's *current* task is the entered task with the highest turn;
//! review operations act through it only, and not at all while any task of the copy has not
//! ended (`COPY_BUSY`). A copy is closed once any of its tasks was integrated or its
//! directories were discarded (by `discard`, the sweep or recovery): it takes no new turn
//! (`COPY_CLOSED`).
//!
//! This module only reads: it never changes a file or a record.

use super::Reviews;
use super::records::ReviewRecord;
use super::unavailable;
use crate::core::Core;
use legate_core::{Error, ErrorCode, Result, Task, TaskId, TaskMode, TaskState, WorkspaceKind};
use legate_store::TaskFilter;
use std::path::PathBuf;

/// The most tasks of one context a chain is read from.
const MAX_CHAIN: usize = 10_000;

legate_core::wire_enum! {
    /// Whether a copy still takes turns.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum CopyStatus {
        /// New turns continue in it; it can be reviewed and integrated.
        Open => "open",
        /// Its patch was integrated into the project.
        Integrated => "integrated",
        /// Its directories were removed (discarded, swept, or after an interruption).
        Discarded => "discarded",
    }
}

/// Where a task's copy is now and what state it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyHandle {
    /// The task review operations act through (the latest turn that entered the copy), or
    /// the task named when no turn entered it yet.
    pub task_id: TaskId,
    /// The task that made the copy (its directories carry this id).
    pub copy_id: TaskId,
    /// The copy's root (the agent's workspace).
    pub root: PathBuf,
    /// The private baseline: the original project's files as copied, which every turn's
    /// patch is computed against.
    pub baseline: PathBuf,
    /// The original project (canonical).
    pub source: PathBuf,
    /// Open, integrated or discarded.
    pub status: CopyStatus,
    /// A task of the copy that has not ended (running or waiting for its turn), if any.
    pub busy: Option<TaskId>,
    /// How many turns entered the copy.
    pub turns: u32,
}

/// The tasks of one copy, each with its record.
pub(crate) struct Chain {
    entries: Vec<(Task, ReviewRecord)>,
}

/// A next turn continuing an open copy, as decided at submit.
#[derive(Debug, Clone)]
pub(crate) struct ContinuedCopy {
    /// The task that made the copy.
    pub(crate) copy_id: TaskId,
    /// The copy's root.
    pub(crate) copy_directory: PathBuf,
    /// Its baseline.
    pub(crate) baseline_directory: PathBuf,
}

/// What a context's next task in a copy context gets.
pub(crate) enum NextCopy {
    /// The copy is open: continue in it.
    Continue(ContinuedCopy, ReviewRecord),
    /// No task of the context ever made its copy (the first failed before copying): a new
    /// copy of the same project, with the same include paths and criteria.
    Fresh(ReviewRecord),
}

fn turn_of(record: &ReviewRecord) -> u32 {
    match (record.turn, record.copy.is_some()) {
        // A record made before turns were counted: its one turn entered the copy.
        (0, true) => 1,
        (n, _) => n,
    }
}

impl Chain {
    /// The latest `test` with retries called on a task of this copy, as the caller should
    /// read it (see `retries`).
    pub(crate) fn test_retries(&self) -> Option<super::TestRetries> {
        self.entries
            .iter()
            .rev()
            .find_map(|(task, record)| record.test_retries.clone().map(|r| r.seen_from(&task.id)))
    }

    /// The copy's status.
    pub(crate) fn status(&self) -> CopyStatus {
        if self.entries.iter().any(|(_, r)| r.integration.is_some()) {
            CopyStatus::Integrated
        } else if self.entries.iter().any(|(_, r)| r.discarded_at.is_some()) {
            CopyStatus::Discarded
        } else {
            CopyStatus::Open
        }
    }

    /// A task of the copy that has not ended.
    pub(crate) fn busy(&self) -> Option<&Task> {
        self.entries
            .iter()
            .map(|(t, _)| t)
            .find(|t| !t.is_terminal())
    }

    /// A task of the copy that has not ended, other than `except`.
    pub(crate) fn busy_except(&self, except: &TaskId) -> Option<&Task> {
        self.entries
            .iter()
            .map(|(t, _)| t)
            .find(|t| !t.is_terminal() && &t.id != except)
    }

    /// The entered task with the highest turn, other than `except`, with its record.
    pub(crate) fn latest_entered_except(
        &self,
        except: Option<&TaskId>,
    ) -> Option<&(Task, ReviewRecord)> {
        self.entries
            .iter()
            .filter(|(t, r)| r.copy.is_some() && Some(&t.id) != except)
            .max_by_key(|(t, r)| (turn_of(r), t.created_at.0))
    }

    /// A task other than `except` that entered the copy and has not ended (its turn is over
    /// but its patch and end may still be being stored).
    pub(crate) fn settling_except(&self, except: &TaskId) -> Option<&Task> {
        self.entries
            .iter()
            .find(|(t, r)| &t.id != except && r.copy.is_some() && !t.is_terminal())
            .map(|(t, _)| t)
    }

    /// The highest turn number so far.
    pub(crate) fn turns(&self) -> u32 {
        self.entries
            .iter()
            .map(|(_, r)| turn_of(r))
            .max()
            .unwrap_or(0)
    }

    /// Whether a write task entered the copy.
    pub(crate) fn has_write_turn(&self) -> bool {
        self.entries
            .iter()
            .any(|(t, r)| r.copy.is_some() && t.mode == TaskMode::Write)
    }

    /// `COPY_CLOSED` unless the copy is open, and `READ_ONLY_VIOLATION` when its latest turn
    /// was a read-only task that changed it (that change would otherwise become part of a
    /// patch a later write turn integrates). `copy_id` names the copy in the message.
    pub(crate) fn check_takes_turns(&self, copy_id: &TaskId) -> Result<()> {
        match self.status() {
            CopyStatus::Open => {}
            status => {
                return Err(Error::new(
                    ErrorCode::CopyClosed,
                    format!(
                        "the copy of task {copy_id} was {}; it takes no new turns: start a new context for more work on the project",
                        status.as_str()
                    ),
                ));
            }
        }
        if let Some((t, _)) = self.latest_entered_except(None)
            && t.state == TaskState::Failed
            && t.error
                .as_ref()
                .is_some_and(|e| e.code == ErrorCode::ReadOnlyViolation)
        {
            return Err(Error::new(
                ErrorCode::ReadOnlyViolation,
                format!(
                    "read-only task {} changed the copy of task {copy_id}; it cannot be continued (discard it and start a new context)",
                    t.id
                ),
            ));
        }
        Ok(())
    }
}

impl Core {
    /// Where `task_id`'s copy is now: the task review acts through, the copy's root and
    /// baseline, the original project, and whether the copy is open, integrated or
    /// discarded. `COPY_UNAVAILABLE` for a task without a copy.
    pub(crate) fn current_copy(&self, task_id: &str) -> Result<CopyHandle> {
        let task = self.task(task_id)?;
        let chain = self.chain_of(&task)?;
        let record = self.record(&task.id)?;
        let copy_id = record.continues.clone().unwrap_or_else(|| task.id.clone());
        let current = chain
            .latest_entered_except(None)
            .map_or_else(|| task.id.clone(), |(t, _)| t.id.clone());
        Ok(CopyHandle {
            task_id: current,
            copy_id,
            root: record.copy_directory.clone(),
            baseline: record.baseline_directory.clone(),
            source: record.source.clone(),
            status: chain.status(),
            busy: chain.busy().map(|t| t.id.clone()),
            turns: chain.turns(),
        })
    }

    /// The tasks of `task`'s context that work in its copy (the same copy directory), each
    /// with its record.
    pub(crate) fn chain_of(&self, task: &Task) -> Result<Chain> {
        let dir = self.record(&task.id)?.copy_directory;
        let tasks = self.tasks(&TaskFilter {
            context_id: Some(task.context_id.clone()),
            limit: MAX_CHAIN,
            ..TaskFilter::default()
        })?;
        let mut entries = Vec::new();
        for t in tasks {
            if t.workspace != WorkspaceKind::Copy {
                continue;
            }
            // A task whose record is gone or unreadable is not part of any copy's state.
            let Ok(r) = self.record(&t.id) else { continue };
            if r.copy_directory == dir {
                entries.push((t, r));
            }
        }
        Ok(Chain { entries })
    }

    /// What the next task of a context whose latest task `last` is a copy task gets:
    /// the same copy while it is open (`COPY_CLOSED` once integrated or discarded), or a
    /// fresh copy when no task ever made it. Changes nothing.
    pub(crate) fn next_copy(&self, last: &Task) -> Result<NextCopy> {
        let chain = self.chain_of(last)?;
        let record = self.record(&last.id)?;
        let copy_id = record.continues.clone().unwrap_or_else(|| last.id.clone());
        let pending = chain.busy().is_some();
        if chain.latest_entered_except(None).is_none() && !pending {
            return Ok(NextCopy::Fresh(record));
        }
        chain.check_takes_turns(&copy_id)?;
        Ok(NextCopy::Continue(
            ContinuedCopy {
                copy_id,
                copy_directory: record.copy_directory.clone(),
                baseline_directory: record.baseline_directory.clone(),
            },
            record,
        ))
    }

    /// Refuses a review operation on `task` unless it is its copy's current task and no
    /// task of the copy is still to end: `COPY_BUSY` while a turn runs in the copy or waits
    /// for its turn, `COPY_UNAVAILABLE` naming the current task when a later turn continued
    /// the copy (this task's patch is no longer the copy's).
    pub(crate) fn check_current(&self, task: &Task) -> Result<()> {
        let chain = self.chain_of(task)?;
        if let Some(busy) = chain.busy_except(&task.id) {
            return Err(Error::new(
                ErrorCode::CopyBusy,
                format!(
                    "task {} (the context's {} turn) works in this copy now; review it once that turn ends",
                    busy.id, busy.state
                ),
            ));
        }
        if let Some((latest, _)) = chain.latest_entered_except(None)
            && latest.id != task.id
        {
            return Err(unavailable(format!(
                "the copy of task {} continued in task {}: its patch now holds every turn's changes, so preview, verify, test, integrate or discard it through task {}",
                task.id, latest.id, latest.id
            )));
        }
        Ok(())
    }
}

impl Reviews {
    /// Where `task_id`'s copy is now: the task review acts through, the copy's root and
    /// baseline, the original project, and whether the copy is open, integrated or
    /// discarded. `COPY_UNAVAILABLE` for a task without a copy.
    pub fn current_copy(&self, task_id: &str) -> Result<CopyHandle> {
        self.core.current_copy(task_id)
    }
}
