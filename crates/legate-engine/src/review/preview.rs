//! Reading a finished copy's patch: the preview (files, totals, sha256, staleness of the
//! verification), the patch bound to a sha256 the caller names, and chunked reads of its body.
//!
//! Reading never changes the copy and is allowed while cleanup is unverified.

use super::Reviews;
use super::records::*;
use super::{blocking, expect_patch_sha};
use crate::core::Core;
use legate_core::{Error, Result, TaskMode, Timestamp};
use legate_review::PatchChunk;
use legate_workspace::Preview;

impl Core {
    /// The copy's patch now: files (A/M/D) with line counts, totals, sha256 and length (not
    /// the body), the latest verification and whether it is stale, and the test records.
    pub(crate) async fn preview(&self, id: &str) -> Result<PreviewReport> {
        let mut o = self.open_copy(id).await?;
        let preview = self.current_preview(&o.baseline).await?;
        let violations = if o.task.mode == TaskMode::ReadOnly {
            let (b, before) = (o.baseline.clone(), o.record.before_turn.clone());
            let limits = self.review_config().limits;
            blocking(move || {
                let changed = legate_review::read_only_changes(&b, &limits)?;
                match before {
                    // A read-only turn continuing a changed copy answers only for its own
                    // changes.
                    Some(before) => super::enter::changed_since(&b, &before, changed),
                    None => Ok(changed),
                }
            })
            .await?
        } else {
            Vec::new()
        };
        let stale = o.record.verification.as_ref().and_then(|v| {
            let max = self.review_config().limits.max_bytes;
            legate_review::staleness(&o.record.copy_directory, v, &preview.sha256, max)
        });
        let tests = o
            .record
            .tests
            .iter()
            .map(|t| TestStatus {
                stale: t.sha256_after != preview.sha256,
                evidence: t.clone(),
            })
            .collect();
        let test_retries = self.chain_of(&o.task)?.test_retries();
        let patch = PatchRecord::from(&preview);
        o.record.patch = Some(patch.clone());
        o.record.touched_at = Timestamp::now();
        self.put_record(&o.task.id, &o.record)?;
        Ok(PreviewReport {
            task_id: o.task.id.clone(),
            source: o.record.source.clone(),
            copy_directory: o.record.copy_directory.clone(),
            patch,
            read_only_violations: violations,
            verification: o.record.verification.clone(),
            stale,
            tests,
            test_retries,
            integration: o.record.integration.clone(),
            recoveries: o.record.recoveries.clone(),
        })
    }
}

impl Reviews {
    /// The copy's patch now: files (A/M/D) with line counts, totals, sha256 and length (not
    /// the body), the latest verification and whether it is stale, and the test records.
    pub async fn preview(&self, id: &str) -> Result<PreviewReport> {
        self.core.preview(id).await
    }

    /// [`Reviews::preview`], bound to the sha256 the caller expects when it names one
    /// (`PATCH_CHANGED` otherwise), with the same check and wording as every other bound call.
    pub async fn preview_bound(
        &self,
        id: &str,
        expected_sha256: Option<&str>,
    ) -> Result<PreviewReport> {
        let report = self.preview(id).await?;
        if let Some(expected) = expected_sha256 {
            expect_patch_sha(&report.patch.sha256, expected)?;
        }
        Ok(report)
    }

    /// The full patch bytes now, with its preview (for `legate diff`). When `expected_sha256`
    /// is given it must match (`PATCH_CHANGED`).
    pub async fn patch(&self, id: &str, expected_sha256: Option<&str>) -> Result<Preview> {
        let o = self.core.open_copy(id).await?;
        let preview = self.core.current_preview(&o.baseline).await?;
        if let Some(sha) = expected_sha256 {
            Core::expect_sha(&preview, sha)?;
        }
        Ok(preview)
    }

    /// Reads the patch (or one file's part of it, selected by git) in windows bound to the
    /// sha256 the caller previewed.
    pub async fn read_patch(&self, id: &str, read: PatchRead) -> Result<PatchChunk> {
        let o = self.core.open_copy(id).await?;
        let preview = self.core.current_preview(&o.baseline).await?;
        Core::expect_sha(&preview, &read.expected_sha256)?;
        let bytes = match &read.path {
            None => preview.patch.clone(),
            Some(path) => {
                if !preview.files.iter().any(|f| &f.path == path) {
                    return Err(Error::invalid_input(format!(
                        "{path} is not one of the patch's files"
                    )));
                }
                let (b, tree, p) = (o.baseline.clone(), preview.tree.clone(), path.clone());
                blocking(move || legate_review::full_patch(&b, &tree, Some(&p))).await?
            }
        };
        legate_review::chunk(&bytes, read.offset, read.limit, &preview.sha256)
    }
}
