//! The review pipeline's durable records: the review record kept per copy task (the store's
//! `reviews` table) with its patch, verification, test evidence, integration and recovery
//! entries, the review configuration, and the request and answer types of the operations.
//!
//! This module owns the records' shape (their JSON is stored; fields are only ever added,
//! with serde defaults, so older records still read) and their reading and writing. It never
//! decides anything: the operations beside it do.

use super::unavailable;
pub use crate::config::{ApprovalMode, ReviewConfig};
use crate::core::Core;
use async_trait::async_trait;
use legate_core::{Error, ErrorCode, Result, TaskId, Timestamp};
use legate_integration::{Integrated, Outcome};
use legate_review::{Criterion, Verification};
use legate_testrun::TestCommand;
use legate_workspace::{CopyReport, FileChange, PatchSummary, Preview};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

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
    /// records made before it was recorded); for a selection granting the network, `proxy`
    /// (its one way out was Legate's egress proxy, under `[network]`, rules only) or
    /// `allowed` (no network namespace of its own: the host's network).
    #[serde(default = "not_enforced")]
    pub network: String,
    /// Every connection the command asked Legate's proxy for (`network: proxy`): where to,
    /// allowed or refused and by which rule, bytes each way, how long.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<legate_core::ConnectionEvent>,
    /// Connections past the first 1,000 the runner keeps, counted and not kept.
    #[serde(default, skip_serializing_if = "legate_core::wire_skip::is_zero")]
    pub connections_not_kept: u64,
    /// What held of the command's isolation from Legate (`None` for client reports and for
    /// records made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<legate_confine::IsolationReport>,
    /// The sandbox it ran in: the selection enforced (if any), the policy's sha256 it was
    /// checked against, the Landlock ABI and what held (`None` for client reports and for
    /// records made before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<crate::SandboxEvidence>,
    /// Whether it ran in a fresh tree of the patch (its tracked files only) rather than in the
    /// copy as its agents left it, ignored files and all.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub fresh: bool,
    /// When it was recorded.
    pub recorded_at: Timestamp,
    /// `TEST_FAILED` or `TEST_CHANGED_PATCH` when it did not pass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Error>,
}

pub(super) fn not_enforced() -> String {
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
    /// For a task started by a handoff: the copy it was handed off from, the context hash
    /// checked, the caller's decisions and the context block its agent is given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<crate::handoff::HandoffSource>,
    /// The task that made the copy this task continues in (its directories are named after
    /// it); `None` for that task itself. See `chain`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<TaskId>,
    /// The turn's place among the turns that entered this copy, counted from 1 when the turn
    /// enters it (under the copy's lock, so in the order turns really ran); 0 until then.
    #[serde(default)]
    pub turn: u32,
    /// For a read-only turn continuing a copy that already had changes: the state, before the
    /// turn, of every path that differed from the baseline then, so that the turn is judged
    /// against the copy as it found it, not against the baseline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_turn: Option<Vec<PathState>>,
    /// For a copy made from files a remote Legate sent (the copy-workspace extension): the
    /// baseline id of their manifest. Such a copy's patch goes back to the sender; it is
    /// never integrated here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub received: Option<String>,
    /// The skills staged in the copy when it is made (`controls::skills`), texts included, so
    /// that a handoff stages the very packages and hashes this task had.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<legate_workspace::StagedSkill>,
    /// A `test` with retries called on this task: its attempts and fix turns (see
    /// `retries`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_retries: Option<super::TestRetries>,
    /// A group node's turn: the copy's tree and patch sha256 as its end read them, with the
    /// copy's stamp then (see `settled`); `None` for any other turn, or when they could not
    /// be read between two equal stamps.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) settled: Option<Settled>,
}

/// A copy's hashes as a turn's end read them, and what proves them current later: the
/// copy's stamp then and the review settings they were read under.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Settled {
    /// `legate_workspace::copy_stamp` before and after the hashes were read (the same).
    pub(crate) stamp: String,
    /// The sha256 of the copy limits and secret patterns they were read under.
    pub(crate) settings_sha256: String,
    /// The copy's `treeSha256`, as a handoff's context gives it.
    pub(crate) tree_sha256: String,
    /// The patch's sha256.
    pub(crate) patch_sha256: String,
}

impl ReviewRecord {
    /// A copy's record as it starts: no patch, verification, test or integration yet, touched
    /// now, its first turn ahead; the caller fills in what its start knows.
    pub(crate) fn started(
        source: PathBuf,
        copy_directory: PathBuf,
        baseline_directory: PathBuf,
        keep_if_interrupted: bool,
    ) -> Self {
        Self {
            source,
            copy_directory,
            baseline_directory,
            include_paths: Vec::new(),
            criteria: Vec::new(),
            copy: None,
            patch: None,
            patch_error: None,
            verification: None,
            tests: Vec::new(),
            integration: None,
            recoveries: Vec::new(),
            discarded_at: None,
            touched_at: Timestamp::now(),
            keep_if_interrupted,
            handoff: None,
            continues: None,
            turn: 0,
            before_turn: None,
            received: None,
            skills: Vec::new(),
            test_retries: None,
            settled: None,
        }
    }
}

/// One path's state in a copy: its relative path and a digest of what it is (`None` when it
/// does not exist). The digest names the kind (`file:`, `link:`, `dir`, `other`) and, for a
/// file or a link, the sha256 of its bytes or target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PathState {
    /// The path, relative to the copy.
    pub path: String,
    /// What it is, or `None` when absent.
    pub digest: Option<String>,
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
    /// The latest `test` with retries on this copy, as it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_retries: Option<super::TestRetries>,
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

/// What the confirmer is asked in approval mode `ask`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfirmationRequest {
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

/// The confirmer's answer. Only `Accept { confirm: true }` lets integration proceed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Confirmation {
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
pub trait Confirmer: Send + Sync {
    /// Shows `request` and returns the answer.
    async fn confirm(&self, request: &ConfirmationRequest) -> Confirmation;
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
    /// Directories of supervising-agent questions a stopped Legate left, removed.
    #[serde(default)]
    pub judge_dirs_removed: usize,
    /// Projects' scan verdict caches unused for 30 days, removed.
    #[serde(default)]
    pub scan_verdicts_removed: usize,
    /// Projects' bases unused for 7 days, removed.
    #[serde(default)]
    pub bases_removed: usize,
}

impl CleanupReport {
    /// Whether the sweep removed nothing.
    pub fn is_empty(&self) -> bool {
        self.removed.is_empty()
            && self.orphans_removed.is_empty()
            && self.judge_dirs_removed == 0
            && self.scan_verdicts_removed == 0
            && self.bases_removed == 0
    }

    /// Adds what an `earlier` sweep removed to this report; `kept` stays this sweep's (what
    /// is kept now).
    pub(crate) fn absorb(&mut self, earlier: CleanupReport) {
        let mut removed = earlier.removed;
        removed.extend(std::mem::take(&mut self.removed));
        self.removed = removed;
        self.orphans_removed.extend(earlier.orphans_removed);
        self.orphans_removed.sort();
        self.orphans_removed.dedup();
        self.judge_dirs_removed = self
            .judge_dirs_removed
            .saturating_add(earlier.judge_dirs_removed);
        self.scan_verdicts_removed = self
            .scan_verdicts_removed
            .saturating_add(earlier.scan_verdicts_removed);
        self.bases_removed = self.bases_removed.saturating_add(earlier.bases_removed);
    }
}

impl Core {
    pub(crate) fn record(&self, id: &TaskId) -> Result<ReviewRecord> {
        let value = self
            .store()
            .review(id)?
            .ok_or_else(|| unavailable(format!("task {id} is not a copy task")))?;
        serde_json::from_value(value).map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                format!("the review record of {id} is unreadable"),
                e,
            )
        })
    }

    pub(super) fn put_record(&self, id: &TaskId, record: &ReviewRecord) -> Result<()> {
        let value = serde_json::to_value(record).map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                "a review record could not be encoded",
                e,
            )
        })?;
        self.store().put_review(id, &value)
    }
}
