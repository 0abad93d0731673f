//! Copies made from files a remote Legate sent (Legate's copy-workspace extension, the
//! server side): the copy and its baseline, made when the task is stored, and the patch that
//! goes back to the sender with its returned manifest (the post-state of every changed path).
//!
//! The files were checked by the front against their manifest; `legate-workspace` checks
//! their paths again and writes them beneath the new root without following links. This
//! module never integrates such a copy (the sender does), and never reads the original
//! project of anything: a received copy has none.

use super::Reviews;
use super::blocking;
use super::records::ReviewRecord;
use crate::core::Core;
use crate::core::request::ReceivedFiles;
use legate_core::remote::ReturnedManifest;
use legate_core::{Result, Task};
use legate_workspace::Preview;

impl Core {
    /// Makes the copy of a task whose workspace is [`crate::WorkspaceRequest::Received`] from
    /// the files sent, with them as its baseline, and stores its review record (the copy
    /// already made; its `copy.ready` event is announced when the turn starts).
    pub(crate) fn start_received(&self, task: &Task, files: &ReceivedFiles) -> Result<()> {
        let (copy_dir, baseline_dir) = (self.copy_dir(&task.id), self.baseline_dir(&task.id));
        let limits = self.review_config().limits;
        let (report, _) = legate_workspace::make_copy_from_files(
            &files.files,
            &copy_dir,
            &baseline_dir,
            &limits,
        )?;
        tracing::info!(task = %task.id, files = report.included_files, bytes = report.bytes, baseline = %files.baseline_id, "copy made from received files");
        let started = ReviewRecord::started(
            report.source.clone(),
            report.copy_directory.clone(),
            baseline_dir,
            self.review_config().keep_interrupted_copies,
        );
        let record = ReviewRecord {
            copy: Some(report),
            received: Some(files.baseline_id.clone()),
            ..started
        };
        self.put_record(&task.id, &record)
    }
}

impl Reviews {
    /// For a finished task whose copy was made from received files: its patch and the
    /// manifest that goes back with it (the baseline id of the files received, the patch's
    /// sha256 and length, each changed path's sha256 or deleted, read from the patch's own
    /// tree). `None` for any other task.
    pub async fn returned_patch(&self, id: &str) -> Result<Option<(Preview, ReturnedManifest)>> {
        let task = self.core.task(id)?;
        if task.workspace != legate_core::WorkspaceKind::Copy {
            return Ok(None);
        }
        let Some(baseline_id) = self.core.record(&task.id)?.received else {
            return Ok(None);
        };
        let o = self.core.open_copy(id).await?;
        let preview = self.core.current_preview(&o.baseline).await?;
        let (b, p) = (o.baseline.clone(), preview.clone());
        let post_state = blocking(move || legate_workspace::post_state(&b, &p)).await?;
        let manifest = ReturnedManifest {
            baseline_id,
            patch_sha256: preview.sha256.clone(),
            patch_length: preview.patch_length,
            post_state,
        };
        Ok(Some((preview, manifest)))
    }
}
