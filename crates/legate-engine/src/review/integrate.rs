//! Integration: applying a verified patch to the original project, atomically or not at
//! all, once every precondition holds (completed write task, current passing verification,
//! required tests, and the confirmer's confirmation in mode `ask`).
//!
//! It never applies a patch whose sha256 or source changed since it was checked.

use super::Reviews;
use super::records::*;
use super::{Opened, blocking, notice_event, unavailable};
use crate::core::Core;
use legate_core::{Error, ErrorCode, Result, TaskMode, TaskState, Timestamp};
use legate_workspace::Preview;

impl Core {
    /// Applies the verified patch to the original project, atomically or not at all.
    ///
    /// Needs a completed write task (`READ_ONLY_VIOLATION` for a read-only one), a current
    /// passing verification (`VERIFICATION_REQUIRED`), current passing observed tests when
    /// `require_tests` is set, and in approval mode `ask` an `Accept { confirm: true }` from
    /// `confirmer` (`INTEGRATION_DECLINED` otherwise, also when there is no confirmer). The
    /// patch and the original are checked again after the answer (`PATCH_CHANGED`,
    /// `SOURCE_CHANGED`). Write failures are `INTEGRATION_FAILED` with the original restored.
    pub(crate) async fn integrate(
        &self,
        id: &str,
        expected_sha256: Option<&str>,
        confirmer: Option<&dyn Confirmer>,
    ) -> Result<IntegrationRecord> {
        // An earlier integration a crash interrupted is finished first, so that this one
        // sees the project and the record as they are.
        let (store, run) = (self.store().clone(), self.config().paths.run());
        blocking(move || {
            Ok(crate::core::integration_recovery::recover_integrations(
                &store, &run,
            ))
        })
        .await?;
        let mut o = self.open_copy(id).await?;
        if o.record.received.is_some() {
            return Err(Error::new(
                ErrorCode::InvalidWorkspace,
                format!(
                    "task {} works on files a remote Legate sent; its patch goes back to that Legate, which reviews and integrates it",
                    o.task.id
                ),
            ));
        }
        self.check_cleanup(&o)?;
        // A read-only turn that continued a copy earlier write turns changed (and passed its
        // own check, or it would not be completed) integrates their patch; a copy only
        // read-only turns worked in never integrates.
        if o.task.mode == TaskMode::ReadOnly
            && (o.record.continues.is_none() || !self.chain_of(&o.task)?.has_write_turn())
        {
            return Err(Error::new(
                ErrorCode::ReadOnlyViolation,
                format!(
                    "task {} is read-only; it can never be integrated",
                    o.task.id
                ),
            ));
        }
        if o.task.state != TaskState::Completed {
            return Err(unavailable(format!(
                "task {} ended {}; only a completed write task can be integrated",
                o.task.id, o.task.state
            )));
        }
        if let Some(done) = &o.record.integration {
            return Err(unavailable(format!(
                "task {} was already integrated (sha256 {})",
                o.task.id, done.sha256
            )));
        }
        let preview = self.current_preview(&o.baseline).await?;
        if let Some(sha) = expected_sha256 {
            Core::expect_sha(&preview, sha)?;
        }
        if preview.files.is_empty() {
            return Err(Error::invalid_input(
                "the patch is empty; there is nothing to integrate",
            ));
        }
        self.check_ready(&o, &preview)?;
        // The include paths the copy was made with (a later turn's record carries them on).
        let include = o.record.include_paths.clone();
        // Before anyone is asked to approve: a patch integration would refuse is refused now.
        {
            let (root, files, include) = (
                o.record.source.clone(),
                preview.files.clone(),
                include.clone(),
            );
            let checked =
                blocking(move || legate_integration::check_additions(&root, &files, &include))
                    .await;
            if let Err(e) = checked {
                return Err(self.integration_refused(&o.task.id, &preview.sha256, e));
            }
        }
        let cfg = self.review_config().clone();
        if cfg.approval == ApprovalMode::Ask {
            let request = ConfirmationRequest {
                task_id: o.task.id.clone(),
                source: o.record.source.clone(),
                sha256: preview.sha256.clone(),
                files: preview.files.clone(),
                summary: preview.summary.clone(),
            };
            let answer = match confirmer {
                Some(a) => a.confirm(&request).await,
                None => Confirmation::Cancel,
            };
            if answer != (Confirmation::Accept { confirm: true }) {
                return Err(Error::new(
                    ErrorCode::IntegrationDeclined,
                    format!(
                        "approval mode is ask and the integration was not confirmed ({answer:?}); the original is untouched"
                    ),
                ));
            }
            // The answer took time: look again.
            let again = self.current_preview(&o.baseline).await?;
            Core::expect_sha(&again, &preview.sha256)?;
            self.check_ready(&o, &again)?;
        }
        let (b, root, p) = (o.baseline.clone(), o.record.source.clone(), preview.clone());
        let journal = self
            .config()
            .paths
            .run()
            .join("integrations")
            .join(o.task.id.as_str());
        let meta = serde_json::json!({"sha256": preview.sha256, "approval": cfg.approval});
        // The write keeps the copy's lock until it ends, even if no one waits for it any more.
        let held = o.held();
        let result = blocking(move || {
            let _held = held;
            // Again, as the files are written: the original's ignore rules may have changed
            // while the approval was asked for.
            legate_integration::check_additions(&root, &p.files, &include)?;
            let changes = legate_integration::plan(&b, &p)?;
            legate_integration::integrate(&root, &changes, &journal, meta)
        })
        .await;
        let result = match result {
            Ok(r) => r,
            Err(e) => return Err(self.integration_refused(&o.task.id, &preview.sha256, e)),
        };
        let record = IntegrationRecord {
            sha256: preview.sha256.clone(),
            result: result.integrated.clone(),
            approval: cfg.approval,
            integrated_at: Timestamp::now(),
        };
        o.record.integration = Some(record.clone());
        o.record.touched_at = Timestamp::now();
        // Recorded before the journal goes: a crash in between is rolled forward and found
        // recorded (`integration_recovery`).
        self.put_record(&o.task.id, &o.record)?;
        result.finish();
        self.announce(
            &o.task.id,
            notice_event(
                "copy.integrated",
                format!(
                    "integrated {} files into {} (sha256 {})",
                    record.result.files.len(),
                    o.record.source.display(),
                    record.sha256
                ),
                serde_json::to_value(&record).unwrap_or_default(),
            ),
        );
        tracing::info!(task = %o.task.id, files = record.result.files.len(), sha256 = %record.sha256, "integrated");
        Ok(record)
    }

    fn check_ready(&self, o: &Opened, preview: &Preview) -> Result<()> {
        let Some(v) = &o.record.verification else {
            return Err(Error::new(
                ErrorCode::VerificationRequired,
                "the patch has not been verified; call verify with a review per criterion",
            ));
        };
        let max = self.review_config().limits.max_bytes;
        if let Some(why) =
            legate_review::staleness(&o.record.copy_directory, v, &preview.sha256, max)
        {
            return Err(Error::new(
                ErrorCode::VerificationRequired,
                format!("the verification is stale: {why}; verify again"),
            ));
        }
        if !v.passed {
            let failing: Vec<&str> = v
                .criteria
                .iter()
                .filter(|c| !c.passed)
                .map(|c| c.criterion_id.as_str())
                .collect();
            return Err(Error::new(
                ErrorCode::VerificationRequired,
                format!("criteria not passed: {}", failing.join(", ")),
            ));
        }
        let current: Vec<&TestEvidence> = o
            .record
            .tests
            .iter()
            .filter(|t| t.source == TestSource::LegateExecutor && t.sha256_after == preview.sha256)
            .collect();
        // The latest observed run of each command on this patch decides for that command, a
        // run in a fresh tree apart from one in the copy (a later pass in the copy does not
        // clear a fresh failure).
        let mut latest: Vec<&TestEvidence> = Vec::new();
        for t in &current {
            match latest
                .iter_mut()
                .find(|l| l.command == t.command && l.fresh == t.fresh)
            {
                Some(l) => *l = t,
                None => latest.push(t),
            }
        }
        if let Some(failed) = latest.iter().find(|t| !t.passed) {
            return Err(Error::new(
                ErrorCode::VerificationRequired,
                format!(
                    "test #{} ({}) failed on this patch; fix it or run it again",
                    failed.id, failed.command.executable
                ),
            ));
        }
        // Every latest run passed by now: one of them fresh, when that is asked.
        if self.review_config().require_fresh_tests && !latest.iter().any(|t| t.fresh) {
            return Err(Error::new(
                ErrorCode::VerificationRequired,
                "require_fresh_tests is set and no test run in a fresh tree of the patch passed on it; run one with `legate test --fresh` (MCP test with fresh: true)",
            ));
        }
        if self.review_config().require_tests && current.is_empty() {
            return Err(Error::new(
                ErrorCode::VerificationRequired,
                "require_tests is set and no test observed by Legate passed on this patch",
            ));
        }
        Ok(())
    }
}

impl Core {
    /// Announces an integration of `task` refused or failed (`copy.integration_failed`, with
    /// the patch's `sha256`), and gives its error back.
    fn integration_refused(&self, task: &legate_core::TaskId, sha256: &str, e: Error) -> Error {
        self.announce(
            task,
            notice_event(
                "copy.integration_failed",
                format!("integration refused: {e}"),
                serde_json::json!({"sha256": sha256, "error": e}),
            ),
        );
        e
    }
}

impl Reviews {
    /// Applies the verified patch to the original project, atomically or not at all.
    ///
    /// Needs a completed write task (`READ_ONLY_VIOLATION` for a read-only one), a current
    /// passing verification (`VERIFICATION_REQUIRED`), current passing observed tests when
    /// `require_tests` is set, and in approval mode `ask` an `Accept { confirm: true }` from
    /// `confirmer` (`INTEGRATION_DECLINED` otherwise, also when there is no confirmer). The
    /// patch and the original are checked again after the answer (`PATCH_CHANGED`,
    /// `SOURCE_CHANGED`). Write failures are `INTEGRATION_FAILED` with the original restored.
    #[tracing::instrument(name = "legate.integrate", skip_all, fields(legate.task.id = %id))]
    pub async fn integrate(
        &self,
        id: &str,
        expected_sha256: Option<&str>,
        confirmer: Option<&dyn Confirmer>,
    ) -> Result<IntegrationRecord> {
        self.core.integrate(id, expected_sha256, confirmer).await
    }
}
