//! The arguments and answers of the review tools and `usage`.
//!
//! Answers are the engine's own types where the wire carries them as they are (a patch
//! window, project files, a verification, an integration, a cleanup, a usage report), inside
//! a small MCP envelope that adds the task id. Two answers differ from the engine on
//! purpose and so keep their own struct, with engine-typed fields: a test record (the
//! engine's `error` is `testError` here, since a top-level `error` is the failure envelope,
//! and the confinement's isolation report is not published) and a preview (a subset).

use crate::schema::ErrorBody;
use legate_core::Timestamp;
use legate_engine::{
    CleanupReport, FileChange, IntegrationRecord, PatchChunk, PatchSummary, ProjectFiles, Review,
    TestCommand, TestEvidence, TestSource, UsageReport, Verification,
};
use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------
// Arguments.

/// `list_project_files`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ListProjectFilesArgs {
    /// The absolute path of the project: the root of a git work tree.
    pub path: String,
    /// Relative files or directories to narrow the selection to (default: all).
    #[serde(default)]
    pub include_paths: Vec<String>,
}

/// `preview`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PreviewArgs {
    /// The task id (or a unique prefix of at least 4 characters).
    pub task_id: String,
    /// Also answer the whole patch as `patch` when it fits one read_patch window (50,000
    /// bytes); a longer patch is left out (read it with read_patch). Default false.
    #[serde(default)]
    pub include_patch: bool,
}

/// `read_patch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadPatchArgs {
    /// The copy task's id (or a unique prefix).
    pub task_id: String,
    /// The `sha256` `preview` returned; a different patch now is PATCH_CHANGED.
    pub expected_sha256: String,
    /// One changed file's part of the patch; omit it for the whole patch.
    pub path: Option<String>,
    /// Byte offset (default 0). Use the `nextOffset` returned.
    pub offset: Option<u64>,
    /// Window size in bytes, 2 to 50000 (default 10000).
    pub limit: Option<usize>,
}

/// `verify`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VerifyArgs {
    /// The copy task's id (or a unique prefix).
    pub task_id: String,
    /// The `sha256` `preview` returned.
    pub expected_sha256: String,
    /// One review per criterion (a criterion without one does not pass): a verdict (passed,
    /// failed or unverified) with a citation of the copy's real files.
    pub reviews: Vec<Review>,
}

/// `test`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestArgs {
    /// The copy task's id (or a unique prefix).
    pub task_id: String,
    /// The `sha256` `preview` returned.
    pub expected_sha256: String,
    /// What to run in the copy: an executable and its arguments, without a shell.
    pub command: TestCommand,
    /// Seconds before the command's process group is killed, 1 to 3600 (default: the
    /// configured one, 600).
    pub timeout_seconds: Option<u64>,
    /// A sandbox selection within `get_sandbox_policy`'s ceiling: reads then restricted to
    /// the system directories, the copy and `readPaths`; writes to the copy and
    /// `writePaths`; network and child processes as chosen; output kept to
    /// `maxOutputChars` characters. Omitted: the test runs as before (reads open, no
    /// network, children allowed). SANDBOX_SELECTION_DENIED outside the ceiling.
    #[serde(default)]
    pub sandbox: Option<legate_engine::SandboxSelection>,
    /// Fix turns allowed when the command fails, 0 to 3 (default 0). With 1 or more and a
    /// failing command, Legate starts a turn of this task's agent in the same copy, shown the
    /// command and the end of its output, then runs the command again, up to this many times,
    /// in the background: this call answers at once with `retries` (the first fix turn's id
    /// to `wait` on); `preview` of the copy's latest task shows `testRetries` until it is no
    /// longer `running`. Refused (INVALID_INPUT) on a read-only task.
    #[serde(default)]
    pub retries: Option<u8>,
    /// Run in a fresh tree of the patch (the previewed patch's tracked files only, nothing
    /// the copy ignores: no build output, dependency or cache an agent left there) instead
    /// of the copy as its agents left it. The record says `fresh`.
    #[serde(default)]
    pub fresh: bool,
}

/// `record_test`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordTestArgs {
    /// The copy task's id (or a unique prefix).
    pub task_id: String,
    /// The `sha256` `preview` returned.
    pub expected_sha256: String,
    /// The command the client ran.
    pub command: TestCommand,
    /// Its exit code.
    pub exit_code: i32,
    /// Its output (stored bounded).
    #[serde(default)]
    pub output: String,
}

/// `integrate`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IntegrateArgs {
    /// The copy task's id (or a unique prefix).
    pub task_id: String,
    /// The `sha256` of the patch that was previewed and verified.
    pub expected_sha256: String,
}

/// `usage`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UsageArgs {
    /// Only this task (id or unique prefix).
    pub task_id: Option<String>,
    /// Only tasks of this agent session.
    pub session_id: Option<String>,
    /// Only usage counted for this model.
    pub model: Option<String>,
    /// Only tasks of this agent.
    pub agent: Option<String>,
}

// ---------------------------------------------------------------------------------------
// Answers.

/// `list_project_files`: the engine's report as it is.
pub type ProjectFilesOut = ProjectFiles;
/// `read_patch`: the engine's window as it is.
pub type ReadPatchOut = PatchChunk;
/// `cleanup`: the engine's report as it is.
pub type CleanupOut = CleanupReport;
/// `usage`: the engine's report as it is.
pub type UsageOut = UsageReport;

/// `verify`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct VerifyOut {
    /// The task.
    pub task_id: String,
    /// The verification (also when not every criterion passed).
    #[serde(flatten)]
    pub verification: Verification,
}

/// One test record, bound to the patch: the engine's [`TestEvidence`] with its `error` as
/// `testError` and without the isolation report.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct TestRecordOut {
    /// 1-based within the task.
    pub id: u32,
    /// `legate-executor` (observed by Legate) or `client-reported` (never observed evidence).
    pub source: TestSource,
    /// The command.
    pub command: TestCommand,
    /// The exit code, when it exited.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// Whether it ran past its timeout.
    pub timed_out: bool,
    /// Exit 0, in time, and the patch unchanged.
    pub passed: bool,
    /// Bounded stdout.
    pub stdout: String,
    /// Bounded stderr.
    pub stderr: String,
    /// Whether output was cut.
    pub output_truncated: bool,
    /// The patch sha256 before the run.
    pub sha256_before: String,
    /// The patch sha256 after the run.
    pub sha256_after: String,
    /// Wall time in milliseconds (null for client reports).
    pub duration_ms: Option<u64>,
    /// Which confinement held: `full`, `partial` or `none`; `client` for client reports.
    pub confinement: String,
    /// Whether TCP was denied to the command: `denied` or `not-enforced`; when a selection
    /// granted it, `proxy` (through Legate's egress proxy only, under the network policy)
    /// or `allowed` (no network namespace of its own: the host's network).
    pub network: String,
    /// Every connection the command asked Legate's proxy for (`network: proxy`): where to,
    /// allowed or refused and by which rule, bytes each way, how long. Absent when none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub connections: Vec<legate_core::ConnectionEvent>,
    /// Connections past the first 1,000, counted and not listed. Absent when none.
    #[serde(skip_serializing_if = "legate_core::wire_skip::is_zero")]
    pub connections_not_kept: u64,
    /// What sandbox held: the selection enforced (or null), the policy sha256 it was
    /// checked against, the Landlock ABI, reads, network rules, child processes (null for
    /// client reports).
    pub sandbox: Option<legate_engine::SandboxEvidence>,
    /// Whether it ran in a fresh tree of the patch (its tracked files only) rather than in
    /// the copy as its agents left it (ignored files and all).
    pub fresh: bool,
    /// When it was recorded (milliseconds since the epoch).
    pub recorded_at: Timestamp,
    /// TEST_FAILED or TEST_CHANGED_PATCH when it did not pass.
    pub test_error: Option<ErrorBody>,
    /// In `preview`: true when the patch changed since (the record no longer counts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<bool>,
}

impl TestRecordOut {
    /// `e` as MCP shows it; `stale` only in a preview.
    pub fn new(e: &TestEvidence, stale: Option<bool>) -> Self {
        Self {
            id: e.id,
            source: e.source,
            command: e.command.clone(),
            exit_code: e.exit_code,
            signal: e.signal,
            timed_out: e.timed_out,
            passed: e.passed,
            stdout: e.stdout.clone(),
            stderr: e.stderr.clone(),
            output_truncated: e.output_truncated,
            sha256_before: e.sha256_before.clone(),
            sha256_after: e.sha256_after.clone(),
            duration_ms: e.duration_ms,
            confinement: e.confinement.clone(),
            network: e.network.clone(),
            connections: e.connections.clone(),
            connections_not_kept: e.connections_not_kept,
            sandbox: e.sandbox.clone(),
            fresh: e.fresh,
            recorded_at: e.recorded_at,
            test_error: e.error.as_ref().map(ErrorBody::from),
            stale,
        }
    }
}

/// `test` and `record_test`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct TestOut {
    /// The task.
    pub task_id: String,
    /// The record (returned whether the command passed or not).
    #[serde(flatten)]
    pub record: TestRecordOut,
    /// With `retries` above 0: the attempts so far (this first one), the fix turns started
    /// (`continuationTaskIds`: wait on the last, then preview its task), the state and the
    /// patch sha256 the latest record binds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retries: Option<legate_engine::TestRetries>,
}

/// `integrate`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct IntegrateOut {
    /// The task.
    pub task_id: String,
    /// What was written.
    #[serde(flatten)]
    pub integration: IntegrationRecord,
}

/// `preview`: the engine's preview without its bookkeeping (when the patch was computed,
/// recoveries), with test records as MCP shows them.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct PreviewOut {
    /// The task.
    pub task_id: String,
    /// The project that integration would change.
    pub source: String,
    /// The copy.
    pub copy_directory: String,
    /// sha256 of the full binary-safe patch: pass it as expectedSha256 to the other tools.
    pub sha256: String,
    /// The patch's length in bytes (read it with read_patch).
    pub patch_length: u64,
    /// Changed files, sorted by path.
    pub files: Vec<FileChange>,
    /// Totals.
    pub summary: PatchSummary,
    /// For a read-only task: every path it created, changed or deleted.
    pub read_only_violations: Vec<String>,
    /// The latest verification.
    pub verification: Option<Verification>,
    /// Why that verification no longer holds, if it does not.
    pub stale: Option<String>,
    /// Test records, oldest first, each with whether it is stale.
    pub tests: Vec<TestRecordOut>,
    /// The latest `test` with retries on this copy: `running` while a fix turn or its test
    /// runs, then `passed`, `failed` or `ended` (with its error, e.g. SERVER_RESTARTED).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub test_retries: Option<legate_engine::TestRetries>,
    /// The integration, once done.
    pub integration: Option<IntegrationRecord>,
    /// The whole patch, when includePatch was true and it is at most 50,000 bytes (its
    /// sha256 is `sha256`); absent otherwise: read it with read_patch.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub patch: Option<String>,
}

/// `discard`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct DiscardOut {
    /// The task.
    pub task_id: String,
    /// The copy that was removed (with its baseline).
    pub copy_directory: String,
    /// When (milliseconds since the epoch).
    pub discarded_at: i64,
}
