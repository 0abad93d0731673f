//! Copy workspaces and their review pipeline, as engine operations: list project files,
//! prepare a copy, settle the patch when the turn ends, preview, read the patch, verify,
//! test, record a client's test, integrate, discard, and the retention sweep.
//!
//! This module owns the rules that bind those steps together: every operation names the
//! patch sha256 it expects (`PATCH_CHANGED` otherwise); a verification or test evidence is
//! current only while the patch and the files it rests on are unchanged; integration needs a
//! completed write task, a current passing verification, current passing tests when
//! configured, and, in approval mode `ask`, an explicit confirmation from the caller's
//! approver. Verify, test and integrate are refused with `PROCESS_CLEANUP_UNVERIFIED` while an
//! agent run in the copy left processes that could not be shown gone (reading the patch and
//! discarding are not). One operation at a time per copy (`COPY_BUSY`). Each step is kept in the task's
//! review record (the store's `reviews` table) and announced as a `workspace` event.
//!
//! The file work itself is `legate-workspace`'s; this module never touches a file directly,
//! and never decides anything a front could override.

use crate::Engine;
use async_trait::async_trait;
use legate_core::{
    Error, ErrorCode, EventKind, Result, Task, TaskId, TaskMode, TaskState, Timestamp,
};
use legate_workspace::{
    Baseline, CopyLimits, CopyReport, Criterion, FileChange, Integrated, Outcome, PatchChunk,
    PatchSummary, Preview, ProjectFiles, Review, SecretPolicy, TestCommand, Verification,
};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

legate_core::wire_enum! {
    /// Whether integration asks the caller first.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum ApprovalMode {
        /// Integrate once every check passes (the default). No check is relaxed.
        #[default]
        Auto => "auto",
        /// Also require the approver's explicit `accept` with `confirm: true`.
        Ask => "ask",
    }
}

/// The configuration of copies and their review.
#[derive(Debug, Clone)]
pub struct ReviewConfig {
    /// Copy and change limits.
    pub limits: CopyLimits,
    /// Secret exclusions and exceptions.
    pub secrets: SecretPolicy,
    /// Finished copies older than this are removed by the sweep.
    pub retention: Duration,
    /// `auto` or `ask`.
    pub approval: ApprovalMode,
    /// Whether integration also needs a current passing test run by Legate.
    pub require_tests: bool,
    /// Default timeout of `test`.
    pub test_timeout: Duration,
    /// Bound on each captured output stream of a test, in bytes.
    pub max_test_output: usize,
    /// Whether the copy of a task interrupted by the death of its process (marked
    /// `SERVER_RESTARTED` at recovery) is kept for inspection until the retention sweep,
    /// instead of being removed at recovery. Recorded with each task when it is submitted.
    pub keep_interrupted_copies: bool,
}

impl Default for ReviewConfig {
    fn default() -> Self {
        Self {
            limits: CopyLimits::default(),
            secrets: SecretPolicy::default(),
            retention: Duration::from_secs(168 * 3600),
            approval: ApprovalMode::Auto,
            require_tests: false,
            test_timeout: legate_workspace::DEFAULT_TIMEOUT,
            max_test_output: legate_workspace::DEFAULT_MAX_OUTPUT,
            keep_interrupted_copies: false,
        }
    }
}

legate_core::wire_enum! {
    /// Who produced a test record.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum TestSource {
        /// Legate ran the command itself and observed it.
        LegateExecutor => "legate-executor",
        /// The caller reports a run Legate did not observe.
        ClientReported => "client-reported",
    }
}

/// Evidence of one test run, bound to the patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestEvidence {
    /// 1-based within the task.
    pub id: u32,
    /// Observed by Legate, or reported by the client.
    pub source: TestSource,
    /// The command.
    pub command: TestCommand,
    /// The exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    /// Whether it ran past its timeout.
    #[serde(default)]
    pub timed_out: bool,
    /// Exit 0, in time, and the patch unchanged.
    pub passed: bool,
    /// Bounded stdout.
    pub stdout: String,
    /// Bounded stderr.
    pub stderr: String,
    /// Whether output was cut.
    #[serde(default)]
    pub output_truncated: bool,
    /// The patch sha256 before the run.
    pub sha256_before: String,
    /// The patch sha256 after the run (equal to before for client reports).
    pub sha256_after: String,
    /// Wall time in milliseconds (`None` for client reports).
    pub duration_ms: Option<u64>,
    /// How much of the write confinement held: `full`, `partial`, `none`; `client` for
    /// client reports.
    pub confinement: String,
    /// Whether TCP was denied: `denied`, `not-enforced` (also for client reports and for
    /// records made before it was recorded).
    #[serde(default = "not_enforced")]
    pub network: String,
    /// What held of the command's isolation from Legate (`None` for client reports and for
    /// records made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<legate_confine::IsolationReport>,
    /// When it was recorded.
    pub recorded_at: Timestamp,
    /// `TEST_FAILED` or `TEST_CHANGED_PATCH` when it did not pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Error>,
}

fn not_enforced() -> String {
    legate_confine::Network::NotEnforced.as_str().to_string()
}

/// A run the client reports (`record_test`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReportedTest {
    /// The command the client ran.
    pub command: TestCommand,
    /// Its exit code.
    pub exit_code: i32,
    /// Its output (bounded when stored).
    #[serde(default)]
    pub output: String,
}

/// The patch as it was when an operation looked at it (no patch body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchRecord {
    /// sha256 of the full patch.
    pub sha256: String,
    /// Its length in bytes.
    pub patch_length: u64,
    /// Changed files.
    pub files: Vec<FileChange>,
    /// Totals.
    pub summary: PatchSummary,
    /// When it was computed.
    pub computed_at: Timestamp,
}

impl From<&Preview> for PatchRecord {
    fn from(p: &Preview) -> Self {
        Self {
            sha256: p.sha256.clone(),
            patch_length: p.patch_length,
            files: p.files.clone(),
            summary: p.summary.clone(),
            computed_at: Timestamp::now(),
        }
    }
}

/// A finished integration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IntegrationRecord {
    /// The patch integrated.
    pub sha256: String,
    /// What was written.
    #[serde(flatten)]
    pub result: Integrated,
    /// `auto` or `ask`.
    pub approval: ApprovalMode,
    /// When.
    pub integrated_at: Timestamp,
}

/// An integration that a crash interrupted, finished by a later `legate` command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct IntegrationRecovery {
    /// The interrupted integration's journal id.
    pub journal: String,
    /// `rolled-forward` (the project is exactly integrated) or `rolled-back` (it is as before).
    pub outcome: Outcome,
    /// The patch it was integrating.
    pub sha256: String,
    /// How many files the integration covered.
    pub files: usize,
    /// Files left as found: neither the original nor the result (edited after the crash).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conflicts: Vec<String>,
    /// When recovery finished it.
    pub recovered_at: Timestamp,
}

/// Everything Legate keeps about a copy task, stored as JSON in the `reviews` table.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReviewRecord {
    /// The project (canonical).
    pub source: PathBuf,
    /// The copy.
    pub copy_directory: PathBuf,
    /// The private baseline.
    pub baseline_directory: PathBuf,
    /// The include paths, normalized.
    pub include_paths: Vec<String>,
    /// Acceptance criteria, fixed at submit.
    pub criteria: Vec<Criterion>,
    /// The copy as made (`None` until the task starts).
    pub copy: Option<CopyReport>,
    /// The patch when the turn ended, or at the latest preview.
    pub patch: Option<PatchRecord>,
    /// Why the patch could not be computed when the turn ended.
    pub patch_error: Option<Error>,
    /// The latest verification.
    pub verification: Option<Verification>,
    /// Every test record, oldest first.
    pub tests: Vec<TestEvidence>,
    /// The integration, once done.
    pub integration: Option<IntegrationRecord>,
    /// Integrations a crash interrupted, and which way recovery finished each, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recoveries: Vec<IntegrationRecovery>,
    /// When the copy was discarded or swept.
    pub discarded_at: Option<Timestamp>,
    /// When anything here last changed (retention counts from it).
    pub touched_at: Timestamp,
    /// `keep_interrupted_copies` when the task was submitted: whether recovery keeps the copy
    /// if the task's process dies before the task ends (see `leftovers`).
    #[serde(default)]
    pub keep_if_interrupted: bool,
}

/// A preview as the engine reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreviewReport {
    /// The task.
    pub task_id: TaskId,
    /// The project.
    pub source: PathBuf,
    /// The copy.
    pub copy_directory: PathBuf,
    /// The patch now.
    #[serde(flatten)]
    pub patch: PatchRecord,
    /// For a read-only task: every path it created, changed or deleted (ignored ones too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub read_only_violations: Vec<String>,
    /// The latest verification.
    pub verification: Option<Verification>,
    /// Why the verification no longer holds, if it does not.
    pub stale: Option<String>,
    /// Test records, each with whether it still matches the patch.
    pub tests: Vec<TestStatus>,
    /// The integration, once done.
    pub integration: Option<IntegrationRecord>,
    /// Integrations a crash interrupted, and which way recovery finished each, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recoveries: Vec<IntegrationRecovery>,
}

/// A test record and whether it is current.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TestStatus {
    /// The record.
    #[serde(flatten)]
    pub evidence: TestEvidence,
    /// True when the patch changed since.
    pub stale: bool,
}

/// What `read_patch` should read.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PatchRead {
    /// The sha256 the caller previewed; `PATCH_CHANGED` when the patch is another now.
    pub expected_sha256: String,
    /// One changed file's part, or the whole patch.
    pub path: Option<String>,
    /// Byte offset (default 0).
    #[serde(default)]
    pub offset: u64,
    /// Window size in bytes (default 10,000; 2 to 50,000).
    pub limit: Option<usize>,
}

/// What the approver is asked in approval mode `ask`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequest {
    /// The task.
    pub task_id: TaskId,
    /// The project that would change.
    pub source: PathBuf,
    /// The patch.
    pub sha256: String,
    /// The files, with line counts.
    pub files: Vec<FileChange>,
    /// Totals.
    pub summary: PatchSummary,
}

/// The approver's answer. Only `Accept { confirm: true }` lets integration proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalAnswer {
    /// Accepted, with the confirmation box's value.
    Accept {
        /// Must be true.
        confirm: bool,
    },
    /// Declined.
    Decline,
    /// Canceled, timed out, or the client cannot ask.
    Cancel,
}

/// Asks a person (through the front: an MCP form elicitation, a terminal prompt) whether to
/// integrate. A front supplies it; the engine decides what the answer means.
#[async_trait]
pub trait Approver: Send + Sync {
    /// Shows `request` and returns the answer.
    async fn confirm(&self, request: &ApprovalRequest) -> ApprovalAnswer;
}

/// What the retention sweep (or `cleanup`) removed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CleanupReport {
    /// Tasks whose copy and baseline were removed.
    pub removed: Vec<String>,
    /// Directories of tasks the store no longer knows, removed.
    pub orphans_removed: Vec<String>,
    /// Finished copies kept (within retention).
    pub kept: usize,
}

/// A copy opened for an operation, with its lock held.
struct Opened {
    task: Task,
    record: ReviewRecord,
    baseline: Baseline,
    _lock: std::fs::File,
}

fn unavailable(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::CopyUnavailable, message)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("a copy operation panicked: {e}")))?
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

impl Engine {
    fn review_config(&self) -> &ReviewConfig {
        &self.config().review
    }

    fn copy_dir(&self, id: &TaskId) -> PathBuf {
        self.config().paths.copies().join(id.as_str())
    }

    fn baseline_dir(&self, id: &TaskId) -> PathBuf {
        self.config().paths.baselines().join(id.as_str())
    }

    /// The files a copy of `source` would get, narrowed by `include_paths`, with those the
    /// preflight would leave out by name or path (content is checked when copying).
    pub async fn list_project_files(
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

    /// Submit-time checks of a copy request; returns the canonical source and the normalized
    /// include paths. Nothing is copied yet.
    pub(crate) fn check_copy_request(
        &self,
        source: &Path,
        include_paths: &[String],
        criteria: &[Criterion],
    ) -> Result<(PathBuf, Vec<String>)> {
        legate_workspace::validate_criteria(criteria)?;
        let include = legate_workspace::validate_include_paths(include_paths)?;
        let cfg = self.review_config();
        let sel = legate_workspace::select(source, &include, &cfg.secrets, &cfg.limits)?;
        Ok((sel.root, include))
    }

    /// Stores the review record of a copy task just submitted.
    pub(crate) fn start_review(
        &self,
        task: &Task,
        source: PathBuf,
        include_paths: Vec<String>,
        criteria: Vec<Criterion>,
    ) -> Result<()> {
        let record = ReviewRecord {
            source,
            copy_directory: self.copy_dir(&task.id),
            baseline_directory: self.baseline_dir(&task.id),
            include_paths,
            criteria,
            copy: None,
            patch: None,
            patch_error: None,
            verification: None,
            tests: Vec::new(),
            integration: None,
            recoveries: Vec::new(),
            discarded_at: None,
            touched_at: Timestamp::now(),
            keep_if_interrupted: self.review_config().keep_interrupted_copies,
        };
        self.put_record(&task.id, &record)
    }

    /// The project (canonical) a copy task's copy was made from.
    pub(crate) fn copy_source(&self, id: &TaskId) -> Result<PathBuf> {
        self.record(id).map(|r| r.source)
    }

    fn record(&self, id: &TaskId) -> Result<ReviewRecord> {
        let value = self
            .store()
            .review(id)?
            .ok_or_else(|| unavailable(format!("task {id} is not a copy task")))?;
        serde_json::from_value(value)
            .map_err(|e| Error::internal(format!("the review record of {id} is unreadable: {e}")))
    }

    fn put_record(&self, id: &TaskId, record: &ReviewRecord) -> Result<()> {
        let value = serde_json::to_value(record)
            .map_err(|e| Error::internal(format!("a review record could not be encoded: {e}")))?;
        self.store().put_review(id, &value)
    }

    fn announce(&self, id: &TaskId, event: EventKind) {
        match self.store().append_events(id, &[event]) {
            Ok(stored) => self.publish(&stored),
            Err(e) => tracing::warn!(task = %id, error = %e, "could not store a workspace event"),
        }
    }

    /// Makes the copy and its baseline for a task that is starting; returns the boundary and
    /// the `copy.ready` event.
    pub(crate) async fn prepare_copy(
        &self,
        task: &Task,
    ) -> Result<(legate_core::Boundary, EventKind)> {
        let mut record = self.record(&task.id)?;
        let cfg = self.review_config().clone();
        let (source, include) = (record.source.clone(), record.include_paths.clone());
        let (copy_dir, baseline_dir) = (
            record.copy_directory.clone(),
            record.baseline_directory.clone(),
        );
        let report = blocking(move || {
            let sel = legate_workspace::select(&source, &include, &cfg.secrets, &cfg.limits)?;
            let (report, _baseline) = legate_workspace::make_copy_with_baseline(
                &sel,
                &copy_dir,
                &baseline_dir,
                &cfg.limits,
            )?;
            Ok(report)
        })
        .await?;
        let blocked: Vec<serde_json::Value> = report
            .blocked_files
            .iter()
            .map(|b| serde_json::json!({"path": b.path, "reason": b.reason.as_str(), "rule": b.rule}))
            .collect();
        let event = notice_event(
            "copy.ready",
            format!(
                "copy ready: {} files ({} bytes) from {}; {} left out",
                report.included_files,
                report.bytes,
                report.source.display(),
                report.blocked_files.len()
            ),
            serde_json::json!({
                "source": report.source,
                "copyDirectory": report.copy_directory,
                "includedFiles": report.included_files,
                "bytes": report.bytes,
                "blockedFiles": blocked,
            }),
        );
        let boundary = legate_core::Boundary {
            root: report.copy_directory.clone(),
            owned: true,
            allow_execute: false,
        };
        tracing::info!(task = %task.id, files = report.included_files, bytes = report.bytes, blocked = report.blocked_files.len(), "copy ready");
        record.copy = Some(report);
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
        let outcome = blocking(move || {
            let violations = if mode == TaskMode::ReadOnly {
                legate_workspace::read_only_changes(&baseline)?
            } else {
                Vec::new()
            };
            let preview = legate_workspace::preview(&baseline, &cfg.secrets, &cfg.limits);
            Ok((violations, preview))
        })
        .await;
        let failure = match outcome {
            Err(e) => Some(e),
            Ok((violations, preview)) => {
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
        if !task.is_terminal() {
            return Err(unavailable(format!(
                "task {} is still {}; its copy can be reviewed once it ends",
                task.id, task.state
            )));
        }
        let record = self.record(&task.id)?;
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
        Ok(Opened {
            task,
            record,
            baseline,
            _lock: lock,
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
        blocking(move || legate_workspace::preview(&b, &cfg.secrets, &cfg.limits)).await
    }

    fn expect_sha(preview: &Preview, expected: &str) -> Result<()> {
        expect_patch_sha(&preview.sha256, expected)
    }

    /// The copy's patch now: files (A/M/D) with line counts, totals, sha256 and length (not
    /// the body), the latest verification and whether it is stale, and the test records.
    pub async fn preview(&self, id: &str) -> Result<PreviewReport> {
        let mut o = self.open_copy(id).await?;
        let preview = self.current_preview(&o.baseline).await?;
        let violations = if o.task.mode == TaskMode::ReadOnly {
            let b = o.baseline.clone();
            blocking(move || legate_workspace::read_only_changes(&b)).await?
        } else {
            Vec::new()
        };
        let stale = o.record.verification.as_ref().and_then(|v| {
            legate_workspace::staleness(&o.record.copy_directory, v, &preview.sha256)
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
            integration: o.record.integration.clone(),
            recoveries: o.record.recoveries.clone(),
        })
    }

    /// [`Engine::preview`], bound to the sha256 the caller expects when it names one
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
        let o = self.open_copy(id).await?;
        let preview = self.current_preview(&o.baseline).await?;
        if let Some(sha) = expected_sha256 {
            Self::expect_sha(&preview, sha)?;
        }
        Ok(preview)
    }

    /// Reads the patch (or one file's part of it, selected by git) in windows bound to the
    /// sha256 the caller previewed.
    pub async fn read_patch(&self, id: &str, read: PatchRead) -> Result<PatchChunk> {
        let o = self.open_copy(id).await?;
        let preview = self.current_preview(&o.baseline).await?;
        Self::expect_sha(&preview, &read.expected_sha256)?;
        let bytes = match &read.path {
            None => preview.patch.clone(),
            Some(path) => {
                if !preview.files.iter().any(|f| &f.path == path) {
                    return Err(Error::invalid_input(format!(
                        "{path} is not one of the patch's files"
                    )));
                }
                let (b, tree, p) = (o.baseline.clone(), preview.tree.clone(), path.clone());
                blocking(move || legate_workspace::full_patch(&b, &tree, Some(&p))).await?
            }
        };
        legate_workspace::chunk(&bytes, read.offset, read.limit, &preview.sha256)
    }

    /// Verifies the caller's reviews against the task's criteria on the copy's real files,
    /// for the patch `expected_sha256`. The result is stored and announced (`copy.verified`);
    /// a verification whose criteria did not all pass is returned, not an error.
    pub async fn verify(
        &self,
        id: &str,
        expected_sha256: &str,
        reviews: Vec<Review>,
    ) -> Result<Verification> {
        let mut o = self.open_copy(id).await?;
        self.check_cleanup(&o)?;
        let preview = self.current_preview(&o.baseline).await?;
        Self::expect_sha(&preview, expected_sha256)?;
        let (copy, criteria, sha) = (
            o.record.copy_directory.clone(),
            o.record.criteria.clone(),
            preview.sha256.clone(),
        );
        let v =
            blocking(move || legate_workspace::verify(&copy, &criteria, &reviews, &sha)).await?;
        o.record.verification = Some(v.clone());
        o.record.touched_at = Timestamp::now();
        self.put_record(&o.task.id, &o.record)?;
        let passed = v.criteria.iter().filter(|c| c.passed).count();
        self.announce(
            &o.task.id,
            notice_event(
                "copy.verified",
                format!(
                    "verification {}: {passed} of {} criteria passed (sha256 {})",
                    if v.passed { "passed" } else { "did not pass" },
                    v.criteria.len(),
                    v.sha256
                ),
                serde_json::json!({"sha256": v.sha256, "passed": v.passed, "criteria": v.criteria}),
            ),
        );
        Ok(v)
    }

    /// Runs `command` (no shell) in the copy with a timeout, and records the evidence. The
    /// evidence is returned whether the command passed or not; its `error` says
    /// `TEST_FAILED` or `TEST_CHANGED_PATCH`.
    pub async fn test(
        &self,
        id: &str,
        expected_sha256: &str,
        command: TestCommand,
        timeout: Option<Duration>,
    ) -> Result<TestEvidence> {
        legate_workspace::validate_test_command(&command)?;
        let mut o = self.open_copy(id).await?;
        self.check_cleanup(&o)?;
        let before = self.current_preview(&o.baseline).await?;
        Self::expect_sha(&before, expected_sha256)?;
        let cfg = self.review_config().clone();
        let timeout = timeout.unwrap_or(cfg.test_timeout);
        let (b, cmd) = (o.baseline.clone(), command.clone());
        let copy = o.record.copy_directory.clone();
        let requirement = self.config().confinement;
        let hidden = self.config().hidden_paths();
        let run = blocking(move || {
            let scratch = b.scratch()?;
            legate_workspace::run_test(
                &copy,
                &scratch,
                &cmd,
                timeout,
                cfg.max_test_output,
                requirement,
                &hidden,
            )
        })
        .await?;
        let after = self.current_preview(&o.baseline).await;
        let sha_after = match &after {
            Ok(p) => p.sha256.clone(),
            Err(e) => format!("unavailable: {}", e.code),
        };
        let error = if sha_after != before.sha256 {
            Some(Error::new(
                ErrorCode::TestChangedPatch,
                format!(
                    "the command changed the copy's patch ({} -> {}); this evidence cannot stand",
                    before.sha256, sha_after
                ),
            ))
        } else if run.timed_out {
            Some(Error::new(
                ErrorCode::TestFailed,
                format!(
                    "the command ran past its timeout of {} s and was killed",
                    timeout.as_secs()
                ),
            ))
        } else if !run.passed() {
            Some(Error::new(
                ErrorCode::TestFailed,
                match run.exit_code {
                    Some(c) => format!("the command exited with {c}"),
                    None => format!(
                        "the command was killed by signal {}",
                        run.signal.unwrap_or(0)
                    ),
                },
            ))
        } else {
            None
        };
        let evidence = TestEvidence {
            id: o.record.tests.len() as u32 + 1,
            source: TestSource::LegateExecutor,
            command,
            exit_code: run.exit_code,
            signal: run.signal,
            timed_out: run.timed_out,
            passed: error.is_none(),
            stdout: run.stdout,
            stderr: run.stderr,
            output_truncated: run.output_truncated,
            sha256_before: before.sha256.clone(),
            sha256_after: sha_after,
            duration_ms: Some(run.duration_ms),
            confinement: run.confinement,
            network: run.network,
            isolation: Some(run.isolation),
            recorded_at: Timestamp::now(),
            error,
        };
        self.store_test(&mut o, evidence).await
    }

    /// Stores a test run the client reports, marked `client-reported`; it never counts as
    /// observed evidence for integration.
    pub async fn record_test(
        &self,
        id: &str,
        expected_sha256: &str,
        reported: ReportedTest,
    ) -> Result<TestEvidence> {
        legate_workspace::validate_test_command(&reported.command)?;
        let mut o = self.open_copy(id).await?;
        self.check_cleanup(&o)?;
        let preview = self.current_preview(&o.baseline).await?;
        Self::expect_sha(&preview, expected_sha256)?;
        let max = self.review_config().max_test_output;
        let mut output = reported.output;
        let truncated = output.len() > max;
        if truncated {
            let mut end = max;
            while !output.is_char_boundary(end) {
                end -= 1;
            }
            output.truncate(end);
        }
        let error = (reported.exit_code != 0).then(|| {
            Error::new(
                ErrorCode::TestFailed,
                format!("the client reports exit code {}", reported.exit_code),
            )
        });
        let evidence = TestEvidence {
            id: o.record.tests.len() as u32 + 1,
            source: TestSource::ClientReported,
            command: reported.command,
            exit_code: Some(reported.exit_code),
            signal: None,
            timed_out: false,
            passed: error.is_none(),
            stdout: output,
            stderr: String::new(),
            output_truncated: truncated,
            sha256_before: preview.sha256.clone(),
            sha256_after: preview.sha256.clone(),
            duration_ms: None,
            confinement: "client".to_string(),
            network: not_enforced(),
            isolation: None,
            recorded_at: Timestamp::now(),
            error,
        };
        self.store_test(&mut o, evidence).await
    }

    async fn store_test(&self, o: &mut Opened, evidence: TestEvidence) -> Result<TestEvidence> {
        o.record.tests.push(evidence.clone());
        o.record.touched_at = Timestamp::now();
        self.put_record(&o.task.id, &o.record)?;
        self.announce(
            &o.task.id,
            notice_event(
                "copy.tested",
                format!(
                    "test #{} ({}) {}: {} {}",
                    evidence.id,
                    match evidence.source {
                        TestSource::LegateExecutor => "legate-executor",
                        TestSource::ClientReported => "client-reported",
                    },
                    if evidence.passed { "passed" } else { "failed" },
                    evidence.command.executable,
                    evidence.command.args.join(" ")
                ),
                serde_json::to_value(&evidence).unwrap_or_default(),
            ),
        );
        Ok(evidence)
    }

    /// Applies the verified patch to the original project, atomically or not at all.
    ///
    /// Needs a completed write task (`READ_ONLY_VIOLATION` for a read-only one), a current
    /// passing verification (`VERIFICATION_REQUIRED`), current passing observed tests when
    /// `require_tests` is set, and in approval mode `ask` an `Accept { confirm: true }` from
    /// `approver` (`INTEGRATION_DECLINED` otherwise, also when there is no approver). The
    /// patch and the original are checked again after the answer (`PATCH_CHANGED`,
    /// `SOURCE_CHANGED`). Write failures are `INTEGRATION_FAILED` with the original restored.
    pub async fn integrate(
        &self,
        id: &str,
        expected_sha256: Option<&str>,
        approver: Option<&dyn Approver>,
    ) -> Result<IntegrationRecord> {
        // An earlier integration a crash interrupted is finished first, so that this one
        // sees the project and the record as they are.
        let (store, run) = (self.store().clone(), self.config().paths.run());
        blocking(move || {
            Ok(crate::integration_recovery::recover_integrations(
                &store, &run,
            ))
        })
        .await?;
        let mut o = self.open_copy(id).await?;
        self.check_cleanup(&o)?;
        if o.task.mode == TaskMode::ReadOnly {
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
            Self::expect_sha(&preview, sha)?;
        }
        if preview.files.is_empty() {
            return Err(Error::invalid_input(
                "the patch is empty; there is nothing to integrate",
            ));
        }
        self.check_ready(&o, &preview)?;
        let cfg = self.review_config().clone();
        if cfg.approval == ApprovalMode::Ask {
            let request = ApprovalRequest {
                task_id: o.task.id.clone(),
                source: o.record.source.clone(),
                sha256: preview.sha256.clone(),
                files: preview.files.clone(),
                summary: preview.summary.clone(),
            };
            let answer = match approver {
                Some(a) => a.confirm(&request).await,
                None => ApprovalAnswer::Cancel,
            };
            if answer != (ApprovalAnswer::Accept { confirm: true }) {
                return Err(Error::new(
                    ErrorCode::IntegrationDeclined,
                    format!(
                        "approval mode is ask and the integration was not confirmed ({answer:?}); the original is untouched"
                    ),
                ));
            }
            // The answer took time: look again.
            let again = self.current_preview(&o.baseline).await?;
            Self::expect_sha(&again, &preview.sha256)?;
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
        let result = blocking(move || {
            let changes = legate_workspace::plan(&b, &p)?;
            legate_workspace::integrate(&root, &changes, &journal, meta)
        })
        .await;
        let result = match result {
            Ok(r) => r,
            Err(e) => {
                self.announce(
                    &o.task.id,
                    notice_event(
                        "copy.integration_failed",
                        format!("integration refused: {e}"),
                        serde_json::json!({"sha256": preview.sha256, "error": e}),
                    ),
                );
                return Err(e);
            }
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
        if let Some(why) = legate_workspace::staleness(&o.record.copy_directory, v, &preview.sha256)
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
        // The latest observed run of each command on this patch decides for that command.
        let mut latest: Vec<&TestEvidence> = Vec::new();
        for t in &current {
            match latest.iter_mut().find(|l| l.command == t.command) {
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
        if self.review_config().require_tests && current.is_empty() {
            return Err(Error::new(
                ErrorCode::VerificationRequired,
                "require_tests is set and no test observed by Legate passed on this patch",
            ));
        }
        Ok(())
    }

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
