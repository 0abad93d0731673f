//! Discarding a copy and the retention sweep: removing copies and baselines of finished
//! tasks, orphans the store no longer knows, and half-made or interrupted copies.
//!
//! It never removes a directory whose name is not a task id, nor a copy in use.

use super::records::*;
use super::{blocking, notice_event, unavailable};
use crate::Engine;
use legate_core::{ErrorCode, Result, TaskId, Timestamp};
use legate_workspace::Baseline;
use std::time::Duration;

impl Engine {
    /// Removes a finished task's copy and baseline now.
    pub async fn discard(&self, id: &str) -> Result<ReviewRecord> {
        let task = self.task(id)?;
        if task.workspace != legate_core::WorkspaceKind::Copy {
            return Err(unavailable(format!("task {} has no copy", task.id)));
        }
        if !task.is_terminal() {
            return Err(unavailable(format!(
                "task {} is still {}; cancel it first",
                task.id, task.state
            )));
        }
        let mut record = self.record(&task.id)?;
        if record.discarded_at.is_some() {
            return Err(unavailable(format!(
                "the copy of task {} was already discarded",
                task.id
            )));
        }
        // Wait for no one: a copy in use is not discarded.
        let lock = Baseline::open(&record.baseline_directory, &record.copy_directory)
            .ok()
            .map(|b| b.lock())
            .transpose()?;
        self.remove_dirs(&task.id).await?;
        drop(lock);
        record.discarded_at = Some(Timestamp::now());
        record.touched_at = Timestamp::now();
        self.put_record(&task.id, &record)?;
        self.announce(
            &task.id,
            notice_event(
                "copy.discarded",
                "copy and baseline removed".to_string(),
                serde_json::json!({"copyDirectory": record.copy_directory}),
            ),
        );
        Ok(record)
    }

    async fn remove_dirs(&self, id: &TaskId) -> Result<()> {
        let paths = self.config().paths.clone();
        let (copy, base) = (self.copy_dir(id), self.baseline_dir(id));
        blocking(move || {
            legate_workspace::remove_owned_dir(paths.home(), &paths.copies(), &copy)?;
            legate_workspace::remove_owned_dir(paths.home(), &paths.baselines(), &base)?;
            Ok(())
        })
        .await
    }

    /// The retention sweep: removes copies of finished tasks untouched for longer than the
    /// retention, and directories of tasks the store no longer has. Half-made copies of
    /// finished tasks, and copies of interrupted tasks not kept for inspection
    /// (`keep_interrupted_copies`), go at once. Copies in use are kept.
    pub async fn cleanup(&self) -> Result<CleanupReport> {
        let mut report = CleanupReport::default();
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
            let touched = record.touched_at.0.max(task.updated_at.0);
            let age_ms = now.0.saturating_sub(touched);
            // Half made (the process died while copying, or the baseline is gone), or
            // interrupted and not kept (recovery could not remove it then): no need to wait.
            let half_made = record.copy.is_none()
                || Baseline::open(&record.baseline_directory, &record.copy_directory).is_err();
            let interrupted = !record.keep_if_interrupted
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
            self.remove_dirs(&id).await?;
            drop(lock);
            record.discarded_at = Some(Timestamp::now());
            self.put_record(&id, &record)?;
            report.removed.push(id.to_string());
        }
        // Directories whose task is gone (pruned from the store).
        let paths = self.config().paths.clone();
        for parent in [paths.copies(), paths.baselines()] {
            for (name, path, _) in legate_workspace::entries(&parent) {
                if !is_task_id(&name) {
                    continue;
                }
                if self.store().task(&TaskId(name.clone()))?.is_none() {
                    let (home, parent, path) = (paths.home.clone(), parent.clone(), path.clone());
                    blocking(move || legate_workspace::remove_owned_dir(&home, &parent, &path))
                        .await?;
                    report.orphans_removed.push(name);
                }
            }
        }
        report.orphans_removed.sort();
        report.orphans_removed.dedup();
        if !report.removed.is_empty() || !report.orphans_removed.is_empty() {
            tracing::info!(
                removed = report.removed.len(),
                orphans = report.orphans_removed.len(),
                "copy retention sweep"
            );
        }
        Ok(report)
    }

    /// Runs the retention sweep now and then every minute until shutdown.
    pub(crate) fn spawn_copy_sweeper(&self) {
        let engine = self.downgrade();
        let mut shutdown = self.shutdown_signal();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(60));
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.changed() => return,
                }
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                if let Err(e) = engine.cleanup().await {
                    tracing::warn!(error = %e, "the copy retention sweep failed");
                }
            }
        });
    }
}

/// Whether `name` looks like a task id (a UUID), so the sweep never touches anything else.
fn is_task_id(name: &str) -> bool {
    name.len() == 36 && name.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}
