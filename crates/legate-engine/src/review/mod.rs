//! Copy workspaces and their review pipeline, as engine operations: list project files,
//! prepare a copy, settle the patch when the turn ends, preview, read the patch, verify,
//! test, record a client's test, integrate, discard, and the retention sweep.
//!
//! This module owns the rules that bind those steps together: every operation names the
//! patch sha256 it expects (`PATCH_CHANGED` otherwise); a verification or test evidence is
//! current only while the patch and the files it rests on are unchanged; integration needs a
//! completed write task, a current passing verification, current passing tests when
//! configured, and, in approval mode `ask`, an explicit confirmation from the caller's
//! confirmer. Verify, test and integrate are refused with `PROCESS_CLEANUP_UNVERIFIED` while an
//! agent run in the copy left processes that could not be shown gone (reading the patch and
//! discarding are not). One operation at a time per copy (`COPY_BUSY`). Each step is kept in the task's
//! review record (the store's `reviews` table) and announced as a `workspace` event.
//!
//! The file work itself is `legate-workspace`'s; this module never touches a file directly,
//! and never decides anything a front could override.
//!
//! The parts: `records` (the durable types and their reading and writing), `copy` (listing
//! project files, making the copy, settling its patch), `chain` (one copy across a context's
//! turns: which task its review acts through, open or closed), `enter` (a later turn entering
//! the copy, and the read-only check against the copy it found), `preview` (preview and patch
//! reading), `checks` (verify, test, record_test), `integrate`, `cleanup` (discard and
//! the retention sweep), `settled` (a group node's hashes read once at its turn's end, used
//! again only while the copy's stamp proves them current), and `received` (a copy made from files a remote Legate sent, and the
//! manifest its patch goes back with). This file holds what they share: opening a copy with its lock, the
//! sha check, and the `notice` events.

mod chain;
mod checks;
mod cleanup;
mod copy;
mod enter;
mod integrate;
mod preview;
mod received;
mod records;
mod retries;
mod settled;
mod test_gate;

pub(crate) use chain::{ContinuedCopy, NextCopy};
pub use chain::{CopyHandle, CopyStatus};
pub(crate) use cleanup::Sweeps;
pub(crate) use copy::stage_or_remove;
pub use records::{
    ApprovalMode, CleanupReport, Confirmation, ConfirmationRequest, Confirmer, IntegrationRecord,
    IntegrationRecovery, PatchRead, PatchRecord, PreviewReport, ReportedTest, ReviewConfig,
    ReviewRecord, TestEvidence, TestSource, TestStatus,
};
pub use retries::{MAX_TEST_RETRIES, RetriesState, RetryAttempt, TestRetries, TestRun};

use crate::core::Core;
use legate_core::{Error, ErrorCode, EventKind, Result, Task, TaskId};
use legate_workspace::{Baseline, Preview};
use std::path::PathBuf;
use std::sync::Arc;

/// A copy opened for an operation, with its lock held.
struct Opened {
    task: Task,
    record: ReviewRecord,
    baseline: Baseline,
    /// Shared with the blocking work that writes (`Opened::held`): a caller that stops waiting
    /// (a client gone, a request dropped) drops this one, and the lock stays held until that
    /// work ends.
    lock: Arc<std::fs::File>,
}

impl Opened {
    /// The copy's lock, for blocking work that writes to keep until it ends.
    fn held(&self) -> Arc<std::fs::File> {
        Arc::clone(&self.lock)
    }
}

fn unavailable(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::CopyUnavailable, message)
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f).await.map_err(|e| {
        // Cancelled: the runtime is ending (a `legate` command that finished) before the
        // operation began; nothing of it ran.
        let what = if e.is_cancelled() {
            "a copy operation was stopped because Legate is stopping"
        } else {
            "a copy operation panicked"
        };
        Error::caused_by(ErrorCode::Internal, what, e)
    })?
}

pub(crate) fn notice_event(
    name: &str,
    message: String,
    mut detail: serde_json::Value,
) -> EventKind {
    if let Some(map) = detail.as_object_mut() {
        map.insert("event".into(), name.into());
    }
    EventKind::Notice { message, detail }
}

/// The review of copy workspaces: a copy task's preview and patch, its verification and
/// tests, its integration into the project, and the cleanup of copies.
/// Handed out by [`Engine::reviews`](crate::Engine::reviews).
#[derive(Debug, Clone)]
pub struct Reviews {
    pub(crate) core: Core,
}

impl Core {
    pub(crate) fn review_config(&self) -> &ReviewConfig {
        &self.config().review
    }

    pub(crate) fn copy_dir(&self, id: &TaskId) -> PathBuf {
        self.config().paths.copies().join(id.as_str())
    }

    pub(crate) fn baseline_dir(&self, id: &TaskId) -> PathBuf {
        self.config().paths.baselines().join(id.as_str())
    }

    fn announce(&self, id: &TaskId, event: EventKind) {
        match self.store().append_events(id, &[event]) {
            Ok(stored) => self.publish(&stored),
            Err(e) => tracing::warn!(task = %id, error = %e, "could not store a workspace event"),
        }
    }

    /// Opens a finished copy task's copy with its lock held.
    async fn open_copy(&self, id: &str) -> Result<Opened> {
        let task = self.task(id)?;
        if task.workspace != legate_core::WorkspaceKind::Copy {
            return Err(unavailable(format!(
                "task {} works in a {} workspace, not a copy",
                task.id,
                task.workspace.as_str()
            )));
        }
        let record = self.record(&task.id)?;
        if !task.is_terminal() {
            // A later turn runs in a copy that earlier turns made reviewable: busy, not gone.
            let code = if record.continues.is_some() {
                ErrorCode::CopyBusy
            } else {
                ErrorCode::CopyUnavailable
            };
            return Err(Error::new(
                code,
                format!(
                    "task {} is still {}; its copy can be reviewed once it ends",
                    task.id, task.state
                ),
            ));
        }
        if record.discarded_at.is_some() {
            return Err(unavailable(format!(
                "the copy of task {} was discarded",
                task.id
            )));
        }
        if record.copy.is_none() {
            return Err(unavailable(format!(
                "task {} ended before its copy was made",
                task.id
            )));
        }
        let baseline = Baseline::open(&record.baseline_directory, &record.copy_directory)?;
        let b = baseline.clone();
        let lock = blocking(move || b.lock()).await?;
        // Under the lock: a later turn enters the copy only under it, so a task found current
        // here stays current until the lock is let go.
        self.check_current(&task)?;
        // Read again under the lock: an operation that held it (a test the engine ran, say)
        // may have stored evidence since, which writing the record back must keep.
        let record = self.record(&task.id)?;
        Ok(Opened {
            task,
            record,
            baseline,
            lock: Arc::new(lock),
        })
    }

    /// `PROCESS_CLEANUP_UNVERIFIED` while an agent run in this copy left processes that could
    /// not be shown gone (the mark every backend checks too, see `legate_backend::cleanup`):
    /// they could still change the copy under a verification, a test or an integration.
    /// Reading the patch and discarding the copy stay allowed.
    fn check_cleanup(&self, o: &Opened) -> Result<()> {
        legate_backend::cleanup::check_path(
            &self.config().paths.blocked(),
            &o.record.copy_directory,
        )
    }

    async fn current_preview(&self, baseline: &Baseline) -> Result<Preview> {
        let (b, cfg) = (baseline.clone(), self.review_config().clone());
        blocking(move || legate_review::preview(&b, &cfg.secrets, &cfg.limits)).await
    }

    fn expect_sha(preview: &Preview, expected: &str) -> Result<()> {
        expect_patch_sha(&preview.sha256, expected)
    }
}

/// `PATCH_CHANGED` unless the patch's sha256 `now` is the `expected` one the caller named.
fn expect_patch_sha(now: &str, expected: &str) -> Result<()> {
    if now != expected {
        return Err(Error::new(
            ErrorCode::PatchChanged,
            format!("the patch is now {now}, not the {expected} you named; preview again"),
        ));
    }
    Ok(())
}
