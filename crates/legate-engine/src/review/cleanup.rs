//! Discarding a copy and the retention sweep: removing copies and baselines of finished
//! tasks, orphans the store no longer knows, and half-made or interrupted copies; and, with
//! them, the supervising-agent directories a stopped Legate left (`approvals::judge_dirs`)
//! and the scan verdict caches of projects not copied for 30 days.
//!
//! It never removes a directory whose name is not a task id, nor a copy in use.
//!
//! One sweep runs at a time in a process. The engine sweeps as soon as it starts, so a command
//! that starts one only to sweep (`legate cleanup`) would race that first sweep and could
//! report nothing of what it removed: what the sweep at start removed is kept until an
//! asked-for sweep ([`Reviews::cleanup`]) reports it with its own, once.

use super::Reviews;
use super::records::*;
use super::{blocking, notice_event, unavailable};
use crate::core::Core;
use legate_core::{ErrorCode, Result, TaskId, Timestamp};
use legate_workspace::Baseline;
use std::time::Duration;

/// What the engine's sweep lock (`Inner::sweeps`) guards besides the turn: what the sweep at
/// start removed, until an asked-for sweep reports it.
#[derive(Debug, Default)]
pub(crate) struct Sweeps {
    /// What the sweep at start removed (all of it, even when it stopped on an error), not
    /// reported yet.
    at_start: Option<CleanupReport>,
    /// Whether a sweep was asked for already: the sweep at start then ran after it, and what
    /// it removed is not kept for a later one, maybe much later, to report as its own.
    asked: bool,
}

/// How long a project's scan verdict cache is kept without a copy of the project.
const SCAN_VERDICTS_UNUSED: Duration = Duration::from_secs(30 * 24 * 3600);

/// How long a project's base is kept without a copy of the project: a copy's default
/// retention. A base shares its blocks with the project only where both are on one file
/// system that clones; elsewhere it holds the project's bytes.
const BASES_UNUSED: Duration = Duration::from_secs(7 * 24 * 3600);

/// Runs a prune of the sweep (`what` it prunes), which never fails the sweep: what it could
/// not do, the next one does. The runtime ending before it began (a `legate` command that
/// finished while its engine's start-up sweep was still going) is no news, and says nothing
/// above debug.
async fn prune(what: &'static str, f: impl FnOnce() -> usize + Send + 'static) -> usize {
    match tokio::task::spawn_blocking(f).await {
        Ok(n) => n,
        Err(e) if e.is_cancelled() => {
            tracing::debug!(what, "not pruned: Legate is stopping");
            0
        }
        Err(e) => {
            tracing::warn!(error = %e, what, "not pruned");
            0
        }
    }
}

impl Core {
    /// Removes the copy and baseline a record names (for a continuation, the directories of
    /// the task that made the copy), only ever beneath Legate's own directories. Returns
    /// whether this call removed either (`false`: both were gone already, another process's
    /// sweep having removed them first).
    async fn remove_record_dirs(
        &self,
        record: &ReviewRecord,
        lock: Option<std::fs::File>,
    ) -> Result<bool> {
        let paths = self.config().paths.clone();
        let (copy, base) = (
            record.copy_directory.clone(),
            record.baseline_directory.clone(),
        );
        // The copy's lock goes with the removal, so that it is held until the removal ends
        // even if no one waits for it any more (a caller gone).
        blocking(move || {
            let _lock = lock;
            let copy = legate_workspace::remove_owned_dir(paths.home(), &paths.copies(), &copy)?;
            let base = legate_workspace::remove_owned_dir(paths.home(), &paths.baselines(), &base)?;
            Ok(copy || base)
        })
        .await
    }

    /// The retention sweep: removes copies of finished tasks untouched for longer than the
    /// retention, and directories of tasks the store no longer has. Half-made copies of
    /// finished tasks, and copies of interrupted tasks not kept for inspection
    /// (`keep_interrupted_copies`), go at once. Copies in use are kept.
    ///
    /// What it removed is in `report` as it goes, so that a sweep cut by an error still says
    /// what it did. The caller holds `sweeps` (one sweep at a time).
    async fn sweep(&self, report: &mut CleanupReport) -> Result<()> {
        let retention = self.review_config().retention;
        let now = Timestamp::now();
        for id in self.store().review_ids(100_000)? {
            let Ok(mut record) = self.record(&id) else {
                continue;
            };
            if record.discarded_at.is_some() {
                continue;
            }
            let Some(task) = self.store().task(&id)? else {
                continue;
            };
            if !task.is_terminal() {
                continue;
            }
            // A copy several turns share is judged through its current task alone: an
            // earlier turn's age or interruption says nothing about a copy a later turn
            // still uses.
            match self.chain_of(&task) {
                Ok(chain) => {
                    if chain.busy().is_some()
                        || chain
                            .latest_entered_except(None)
                            .is_some_and(|(latest, _)| latest.id != task.id)
                    {
                        continue;
                    }
                    if record.continues.is_some() && record.copy.is_none() {
                        // Never entered the copy (ended while queued): nothing of its own.
                        continue;
                    }
                }
                Err(_) => continue,
            }
            // A copy a git process may still hold is never removed (`GIT_CLEANUP_UNVERIFIED`).
            if blocked(&record.baseline_directory) {
                report.kept += 1;
                continue;
            }
            let touched = record.touched_at.0.max(task.updated_at.0);
            let age_ms = now.0.saturating_sub(touched);
            // Half made (the process died while copying, or the baseline is gone), or
            // interrupted and not kept (recovery could not remove it then): no need to wait.
            let half_made = record.copy.is_none()
                || Baseline::open(&record.baseline_directory, &record.copy_directory).is_err();
            // A later turn interrupted in a shared copy keeps it (see `leftovers`).
            let interrupted = !record.keep_if_interrupted
                && record.continues.is_none()
                && task
                    .error
                    .as_ref()
                    .is_some_and(|e| e.code == ErrorCode::ServerRestarted);
            let present = [&record.copy_directory, &record.baseline_directory]
                .iter()
                .any(|d| std::fs::symlink_metadata(d).is_ok());
            if half_made && !present {
                continue;
            }
            let now_due = (half_made || interrupted) && present;
            if !now_due && u128::try_from(age_ms).unwrap_or(0) < retention.as_millis() {
                report.kept += 1;
                continue;
            }
            let lock = match Baseline::open(&record.baseline_directory, &record.copy_directory) {
                Ok(b) => match b.lock() {
                    Ok(l) => Some(l),
                    Err(_) => {
                        report.kept += 1;
                        continue;
                    }
                },
                Err(_) => None,
            };
            let removed = self.remove_record_dirs(&record, lock).await?;
            record.discarded_at = Some(Timestamp::now());
            self.put_record(&id, &record)?;
            // Gone already: another process's sweep removed it and says so.
            if removed {
                report.removed.push(id.to_string());
            }
        }
        // Directories whose task is gone (pruned from the store), unless a later task of the
        // same copy still works in them.
        let paths = self.config().paths.clone();
        let in_use = self.copies_in_use()?;
        for parent in [paths.copies(), paths.baselines()] {
            for (name, path, _) in legate_workspace::entries(&parent) {
                if !is_task_id(&name) || in_use.contains(&name) {
                    continue;
                }
                if blocked(&paths.baselines().join(&name)) {
                    continue;
                }
                if self.store().task(&TaskId(name.clone()))?.is_none() {
                    let (home, parent, path) = (paths.home.clone(), parent.clone(), path.clone());
                    // Gone already (another process's sweep): not this sweep's to report.
                    if blocking(move || legate_workspace::remove_owned_dir(&home, &parent, &path))
                        .await?
                    {
                        report.orphans_removed.push(name);
                    }
                }
            }
        }
        report.orphans_removed.sort();
        report.orphans_removed.dedup();
        // What a stopped engine's supervising agent left (`approvals::judge_dirs`).
        let own = self.runner_id().to_owned();
        let verdicts = paths.scan_verdicts();
        report.judge_dirs_removed =
            blocking(move || Ok(crate::approvals::judge_dirs::sweep(&paths, Some(&own)))).await?;
        // The scan verdicts of projects no longer copied (`legate_workspace::ScanCache`).
        report.scan_verdicts_removed = prune("scan verdicts", move || {
            legate_workspace::prune_scan_verdicts(&verdicts, SCAN_VERDICTS_UNUSED)
        })
        .await;
        // The bases of projects no longer copied (`legate_workspace::make_copy_with_base`).
        let bases = self.config().paths.bases();
        report.bases_removed = prune("bases", move || {
            legate_workspace::prune_bases(&bases, BASES_UNUSED)
        })
        .await;
        if !report.removed.is_empty()
            || !report.orphans_removed.is_empty()
            || report.scan_verdicts_removed > 0
            || report.bases_removed > 0
        {
            tracing::info!(
                removed = report.removed.len(),
                orphans = report.orphans_removed.len(),
                scan_verdicts = report.scan_verdicts_removed,
                bases = report.bases_removed,
                "copy retention sweep"
            );
        }
        Ok(())
    }

    /// The ids of the copies that a record not yet discarded continues in.
    fn copies_in_use(&self) -> Result<std::collections::HashSet<String>> {
        let mut ids = std::collections::HashSet::new();
        for id in self.store().review_ids(100_000)? {
            if let Ok(record) = self.record(&id)
                && record.discarded_at.is_none()
                && let Some(copy) = record.continues
            {
                ids.insert(copy.to_string());
            }
        }
        Ok(ids)
    }

    /// Runs the retention sweep now and then every minute until shutdown. What the first
    /// one removed waits in `sweeps` for the next asked-for sweep to report it.
    pub(crate) fn spawn_copy_sweeper(&self) {
        let engine = self.downgrade();
        let mut shutdown = self.shutdown_signal();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            let mut at_start = true;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.changed() => return,
                }
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                let mut held = engine.inner.sweeps.lock().await;
                // The lock may have been waited for behind a long sweep: not one more now.
                if *shutdown.borrow() {
                    return;
                }
                let mut report = CleanupReport::default();
                let swept = engine.sweep(&mut report).await;
                if at_start && !held.asked && !report.is_empty() {
                    held.at_start = Some(report);
                }
                if let Err(e) = swept
                    && !*shutdown.borrow()
                {
                    tracing::warn!(error = %e, "the copy retention sweep failed");
                }
                at_start = false;
            }
        });
    }
}

impl Reviews {
    /// Removes a finished task's copy and baseline now.
    pub async fn discard(&self, id: &str) -> Result<ReviewRecord> {
        let task = self.core.task(id)?;
        if task.workspace != legate_core::WorkspaceKind::Copy {
            return Err(unavailable(format!("task {} has no copy", task.id)));
        }
        let mut record = self.core.record(&task.id)?;
        if !task.is_terminal() {
            // A later turn running in a copy earlier turns made: busy, not gone.
            let code = if record.continues.is_some() {
                ErrorCode::CopyBusy
            } else {
                ErrorCode::CopyUnavailable
            };
            return Err(legate_core::Error::new(
                code,
                format!("task {} is still {}; cancel it first", task.id, task.state),
            ));
        }
        if record.discarded_at.is_some() {
            return Err(unavailable(format!(
                "the copy of task {} was already discarded",
                task.id
            )));
        }
        // A copy is discarded through its current task only, never under a later turn.
        self.core.check_current(&task)?;
        // Wait for no one: a copy in use is not discarded, nor one a git process may still
        // hold (`GIT_CLEANUP_UNVERIFIED`).
        let lock = match Baseline::open(&record.baseline_directory, &record.copy_directory) {
            Err(e) if e.code == ErrorCode::GitCleanupUnverified => return Err(e),
            opened => opened.ok().map(|b| b.lock()).transpose()?,
        };
        self.core.check_current(&task)?;
        self.core.remove_record_dirs(&record, lock).await?;
        record.discarded_at = Some(Timestamp::now());
        record.touched_at = Timestamp::now();
        self.core.put_record(&task.id, &record)?;
        self.core.announce(
            &task.id,
            notice_event(
                "copy.discarded",
                "copy and baseline removed".to_string(),
                serde_json::json!({"copyDirectory": record.copy_directory}),
            ),
        );
        Ok(record)
    }

    /// The retention sweep: removes copies of finished tasks untouched for longer than the
    /// retention, and directories of tasks the store no longer has. Half-made copies of
    /// finished tasks, and copies of interrupted tasks not kept for inspection
    /// (`keep_interrupted_copies`), go at once. Copies in use are kept.
    ///
    /// The report also holds what the engine's sweep at start removed, the first time one is
    /// asked for after it (see the module docs).
    pub async fn cleanup(&self) -> Result<CleanupReport> {
        let mut held = self.core.inner.sweeps.lock().await;
        held.asked = true;
        let mut report = CleanupReport::default();
        self.core.sweep(&mut report).await?;
        if let Some(at_start) = held.at_start.take() {
            report.absorb(at_start);
        }
        Ok(report)
    }
}

/// Whether the baseline directory `dir` carries the marker of a git process that could not be
/// shown gone.
fn blocked(dir: &std::path::Path) -> bool {
    std::fs::symlink_metadata(dir.join(legate_workspace::CLEANUP_MARKER)).is_ok()
}

/// Whether `name` looks like a task id (a UUID), so the sweep never touches anything else.
fn is_task_id(name: &str) -> bool {
    name.len() == 36 && name.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}
