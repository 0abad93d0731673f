//! The copy's making and settling: listing a project's eligible files, the submit-time
//! checks of a copy request, the copy and its baseline when the task starts, and the patch
//! summary (or refusal) when its turn ends.
//!
//! It never touches a file itself (`legate-workspace` does) and never integrates.

use super::Reviews;
use super::records::*;
use super::{blocking, notice_event};
use crate::core::Core;
use crate::core::request::CopyRequest;
use legate_core::{Error, ErrorCode, EventKind, Result, Task, TaskId, TaskMode, Timestamp};
use legate_review::Criterion;
use legate_workspace::{Baseline, ProjectFiles};
use std::path::{Path, PathBuf};

impl Core {
    /// The files a copy of `source` would get, narrowed by `include_paths`, with those the
    /// preflight would leave out by name or path (content is checked when copying).
    pub(crate) async fn list_project_files(
        &self,
        source: &Path,
        include_paths: &[String],
    ) -> Result<ProjectFiles> {
        let (source, include) = (source.to_path_buf(), include_paths.to_vec());
        let cfg = self.review_config().clone();
        blocking(move || {
            legate_workspace::list_project_files(&source, &include, &cfg.secrets, &cfg.limits)
        })
        .await
    }

    /// The checks of a copy request that read no file: its criteria and include paths;
    /// returns the normalized include paths.
    pub(crate) fn check_copy_request_shape(
        &self,
        include_paths: &[String],
        criteria: &[Criterion],
    ) -> Result<Vec<String>> {
        legate_review::validate_criteria(criteria)?;
        legate_workspace::validate_include_paths(include_paths)
    }

    /// Submit-time checks of a copy request; returns the canonical source and the normalized
    /// include paths. Nothing is copied yet.
    pub(crate) fn check_copy_request(
        &self,
        source: &Path,
        include_paths: &[String],
        criteria: &[Criterion],
    ) -> Result<(PathBuf, Vec<String>)> {
        let include = self.check_copy_request_shape(include_paths, criteria)?;
        let cfg = self.review_config();
        let sel = legate_workspace::select(source, &include, &cfg.secrets, &cfg.limits)?;
        Ok((sel.root, include))
    }

    /// Stores the review record of a copy task just submitted: a new copy's, or, for a task
    /// continuing an open copy, one pointing at that copy and its baseline (what earlier turns
    /// recorded is taken over when the turn enters the copy, see `enter_copy`).
    pub(crate) fn start_review(&self, task: &Task, copy: CopyRequest) -> Result<()> {
        let CopyRequest {
            source,
            include_paths,
            criteria,
            continues,
            handoff,
            received,
            skills,
        } = copy;
        if let Some(files) = received {
            return self.start_received(task, &files);
        }
        let (copy_directory, baseline_directory, continues) = match continues {
            Some(c) => (c.copy_directory, c.baseline_directory, Some(c.copy_id)),
            None => (self.copy_dir(&task.id), self.baseline_dir(&task.id), None),
        };
        let record = ReviewRecord {
            include_paths,
            criteria,
            handoff: handoff.map(|h| *h),
            continues,
            skills,
            ..ReviewRecord::started(
                source,
                copy_directory,
                baseline_directory,
                self.review_config().keep_interrupted_copies,
            )
        };
        self.put_record(&task.id, &record)
    }

    /// Makes the copy and its baseline for a task that is starting, or enters the open copy
    /// a task continuing its context's copy works in (`enter_copy`); returns the boundary, the
    /// `copy.ready` (or `copy.continued`) event, and for a continuation the copy's lock, which
    /// the turn holds until it ends.
    pub(crate) async fn prepare_copy(
        &self,
        task: &Task,
    ) -> Result<(legate_core::Boundary, EventKind, Option<std::fs::File>)> {
        let record = self.record(&task.id)?;
        if record.continues.is_some() {
            let (boundary, event, lock) = self.enter_copy(task, record).await?;
            return Ok((boundary, event, Some(lock)));
        }
        if record.received.is_some() {
            // Made when the task was stored, from the files the sender sent.
            let report = record
                .copy
                .clone()
                .ok_or_else(|| Error::internal("a received copy's record has no copy"))?;
            let (boundary, event) = self.copy_made(task, record, report, None)?;
            return Ok((boundary, event, None));
        }
        if let Some(from) = record.handoff.clone() {
            if let Some(report) = from.prepared.clone() {
                // A comparison's target: its copy was made with the others before any started.
                let (boundary, event) =
                    self.copy_made(task, record, report, Some(&from.source_task_id))?;
                return Ok((boundary, event, None));
            }
            let (boundary, event) = self.prepare_handoff_copy(task, record, &from).await?;
            return Ok((boundary, event, None));
        }
        let cfg = self.review_config().clone();
        let (source, include) = (record.source.clone(), record.include_paths.clone());
        let (copy_dir, baseline_dir) = (
            record.copy_directory.clone(),
            record.baseline_directory.clone(),
        );
        let skills = record.skills.clone();
        let verdicts = self.config().paths.scan_verdicts();
        let bases = self.config().paths.bases();
        let report = blocking(move || {
            let places = legate_workspace::CopyPlaces {
                copy_dir: &copy_dir,
                baseline_dir: &baseline_dir,
                verdicts: &verdicts,
                bases: &bases,
            };
            let (report, _baseline) = legate_workspace::select_and_copy(
                &source,
                &include,
                &cfg.secrets,
                &cfg.limits,
                places,
            )?;
            stage_or_remove(&report, &skills, &cfg.limits, &baseline_dir)?;
            Ok(report)
        })
        .await?;
        let (boundary, event) = self.copy_made(task, record, report, None)?;
        Ok((boundary, event, None))
    }

    /// Records a copy just made for `task` (`handed_off_from`: the task whose copy it was
    /// made from, for a handoff) and returns the boundary and the `copy.ready` event.
    pub(crate) fn copy_made(
        &self,
        task: &Task,
        mut record: ReviewRecord,
        report: legate_workspace::CopyReport,
        handed_off_from: Option<&TaskId>,
    ) -> Result<(legate_core::Boundary, EventKind)> {
        let blocked: Vec<serde_json::Value> = report
            .blocked_files
            .iter()
            .map(|b| serde_json::json!({"path": b.path, "reason": b.reason.as_str(), "rule": b.rule}))
            .collect();
        let mut detail = serde_json::json!({
            "source": report.source,
            "copyDirectory": report.copy_directory,
            "includedFiles": report.included_files,
            "bytes": report.bytes,
            "reflinkedFiles": report.reflinked_files,
            "scannedFiles": report.scanned_files,
            "trustedFiles": report.trusted_files,
            "snapshot": report.snapshot,
            "blockedFiles": blocked,
        });
        if let (Some(from), Some(map)) = (handed_off_from, detail.as_object_mut()) {
            map.insert("handedOffFrom".into(), from.as_str().into());
        }
        if let (false, Some(map)) = (task.controls.skills.is_empty(), detail.as_object_mut()) {
            // Names, paths and hashes: never a skill's text.
            map.insert(
                "skills".into(),
                serde_json::to_value(&task.controls.skills).unwrap_or_default(),
            );
        }
        let event = notice_event(
            "copy.ready",
            format!(
                "copy ready: {} files ({} bytes) from {}; {} left out",
                report.included_files,
                report.bytes,
                report.source.display(),
                report.blocked_files.len()
            ),
            detail,
        );
        let boundary = legate_core::Boundary {
            root: report.copy_directory.clone(),
            owned: true,
            allow_execute: false,
        };
        tracing::info!(task = %task.id, files = report.included_files, bytes = report.bytes, reflinked = report.reflinked_files, scanned = report.scanned_files, trusted = report.trusted_files, blocked = report.blocked_files.len(), "copy ready");
        record.copy = Some(report);
        record.turn = 1;
        record.touched_at = Timestamp::now();
        self.put_record(&task.id, &record)?;
        Ok((boundary, event))
    }

    /// When a copy task's turn has ended: computes and stores the patch summary and announces
    /// it (`copy.patch`). Returns an error that must fail a task which otherwise completed:
    /// `READ_ONLY_VIOLATION`, `CHANGE_LIMIT_EXCEEDED`, `BLOCKED_FILE_DETECTED`, `UNSAFE_PATH`.
    pub(crate) async fn settle_copy(&self, task: &Task) -> Option<Error> {
        let mut record = self.record(&task.id).ok()?;
        record.copy.as_ref()?;
        let baseline = Baseline::open(&record.baseline_directory, &record.copy_directory).ok()?;
        let cfg = self.review_config().clone();
        let mode = task.mode;
        let before = record.before_turn.clone();
        // A group node's checkpoint will need the copy's tree hash too: read it now, with the
        // patch, between two stamps (never for a copy whose agent's processes linger).
        let grouped = task.controls.group.is_some()
            && legate_backend::cleanup::check_path(
                &self.config().paths.blocked(),
                &record.copy_directory,
            )
            .is_ok();
        let outcome = blocking(move || {
            let violations = match (mode, before) {
                (TaskMode::ReadOnly, None) => {
                    legate_review::read_only_changes(&baseline, &cfg.limits)?
                }
                // A turn continuing a copy that earlier turns changed is judged against the
                // copy as it found it, not against the baseline.
                (TaskMode::ReadOnly, Some(before)) => super::enter::changed_since(
                    &baseline,
                    &before,
                    legate_review::read_only_changes(&baseline, &cfg.limits)?,
                )?,
                (TaskMode::Write, _) => Vec::new(),
            };
            let stamp = grouped
                .then(|| super::settled::stamp(&baseline, &cfg, true))
                .flatten();
            // The tree is read beside the patch, on a thread of its own: both only read the
            // copy and the baseline (the patch stages into a scratch index), and both lie
            // between the two stamps.
            let (preview, tree) = std::thread::scope(|s| {
                let tree = stamp
                    .is_some()
                    .then(|| s.spawn(|| super::settled::tree(&baseline, &cfg)));
                let preview = legate_review::preview(&baseline, &cfg.secrets, &cfg.limits);
                // A reader that panicked left no tree: the checkpoint reads it again.
                let tree = tree.and_then(|t| t.join().ok()).flatten();
                (preview, tree)
            });
            let settled = match (stamp, tree, &preview) {
                (Some(stamp), Some(tree), Ok(p)) => {
                    super::settled::confirm(&baseline, &cfg, stamp, tree, &p.sha256)
                }
                _ => None,
            };
            Ok((violations, preview, settled))
        })
        .await;
        record.settled = None;
        let failure = match outcome {
            Err(e) => Some(e),
            Ok((violations, preview, settled)) => {
                record.settled = settled;
                let read_only = (!violations.is_empty()).then(|| {
                    Error::new(
                        ErrorCode::ReadOnlyViolation,
                        format!(
                            "the read-only task changed its copy ({}); it can never be integrated",
                            violations.join(", ")
                        ),
                    )
                });
                match preview {
                    Ok(p) => {
                        let rec = PatchRecord::from(&p);
                        self.announce(
                            &task.id,
                            notice_event(
                                "copy.patch",
                                format!(
                                    "patch: {} files (+{} -{}), sha256 {}",
                                    rec.summary.files_changed,
                                    rec.summary.insertions,
                                    rec.summary.deletions,
                                    rec.sha256
                                ),
                                serde_json::json!({
                                    "sha256": rec.sha256,
                                    "patchLength": rec.patch_length,
                                    "summary": rec.summary,
                                    "files": rec.files,
                                }),
                            ),
                        );
                        record.patch = Some(rec);
                        read_only
                    }
                    Err(e) => read_only.or(Some(e)),
                }
            }
        };
        if let Some(e) = &failure {
            record.patch_error = Some(e.clone());
            self.announce(
                &task.id,
                notice_event(
                    "copy.patch",
                    format!("patch refused: {e}"),
                    serde_json::json!({"error": e}),
                ),
            );
        }
        record.touched_at = Timestamp::now();
        if let Err(e) = self.put_record(&task.id, &record) {
            tracing::warn!(task = %task.id, error = %e, "could not store the patch summary");
        }
        failure
    }
}

impl Reviews {
    /// The files a copy of `source` would get, narrowed by `include_paths`, with those the
    /// preflight would leave out by name or path (content is checked when copying).
    pub async fn list_project_files(
        &self,
        source: &Path,
        include_paths: &[String],
    ) -> Result<ProjectFiles> {
        self.core.list_project_files(source, include_paths).await
    }
}

/// Stages `skills` in the copy `report` describes (they count toward `limits` with what was
/// copied); on failure removes the copy and its baseline, which no agent has seen yet.
pub(crate) fn stage_or_remove(
    report: &legate_workspace::CopyReport,
    skills: &[legate_workspace::StagedSkill],
    limits: &legate_workspace::CopyLimits,
    baseline_dir: &Path,
) -> Result<()> {
    let staged = legate_workspace::stage_skills(
        &report.copy_directory,
        skills,
        limits,
        report.included_files,
        report.bytes,
    );
    if let Err(e) = &staged {
        tracing::warn!(copy = %report.copy_directory.display(), code = e.code.as_str(), error = %e, "skills could not be staged; the copy is removed");
        for dir in [report.copy_directory.as_path(), baseline_dir] {
            if let Err(e) = std::fs::remove_dir_all(dir)
                && e.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(dir = %dir.display(), error = %e, "could not remove a copy whose skills failed");
            }
        }
    }
    staged
}
