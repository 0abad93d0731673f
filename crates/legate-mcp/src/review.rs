//! The review tools of copy workspaces (`list_project_files`, `preview`, `read_patch`,
//! `verify`, `test`, `record_test`, `integrate`, `discard`, `cleanup`) and `usage`: their
//! arguments and answers, each over one engine method, and the approver that asks the MCP
//! client (a form elicitation) before an integration in approval mode `ask`.
//!
//! Nothing here decides: which checks an integration needs, what an answer of the approver
//! means and whether a test passed are the engine's. This module translates arguments,
//! reshapes answers (an engine field named `error` becomes `testError`, since a top-level
//! `error` is the failure envelope), and puts the elicitation's answer into the engine's
//! [`ApprovalAnswer`] without interpreting it.

use crate::schema::ErrorBody;
use crate::tools::{absolute, in_range};
use async_trait::async_trait;
use legate_core::{Error, Result};
use legate_engine::{
    ApprovalAnswer, ApprovalRequest, Approver, Engine, IntegrationRecord, PatchRead, ReportedTest,
    TestCommand, TestEvidence, UsageFilter,
};
use rmcp::RoleServer;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::schemars::JsonSchema;
use rmcp::service::{ElicitationMode, Peer};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

/// How long the client's person has to answer an integration's confirmation.
pub const APPROVAL_TIMEOUT: Duration = Duration::from_secs(300);
/// The longest `test`, in seconds.
pub const TEST_TIMEOUT_MAX_SECS: u64 = 3600;
/// The most changed files the confirmation message names (the rest are counted).
const APPROVAL_FILES_SHOWN: usize = 50;

/// `value` re-read as another type with the same JSON shape (engine types ↔ tool shapes).
pub(crate) fn reshape<T: Serialize + ?Sized, U: DeserializeOwned>(value: &T) -> Result<U> {
    let json = serde_json::to_value(value)
        .map_err(|e| Error::internal(format!("could not encode a value: {e}")))?;
    serde_json::from_value(json)
        .map_err(|e| Error::internal(format!("could not reshape a value: {e}")))
}

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

/// A reviewer's verdict.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "kebab-case")]
pub enum VerdictArg {
    /// The criterion holds.
    Passed,
    /// It does not.
    Failed,
    /// The reviewer could not tell.
    Unverified,
}

/// One review: a verdict on a criterion with a citation of the copy's real files.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReviewArg {
    /// The criterion it is about.
    pub criterion_id: String,
    /// passed, failed or unverified.
    pub verdict: VerdictArg,
    /// The cited file (relative to the project).
    pub path: String,
    /// The cited line, 1-based.
    pub line: u64,
    /// Text that stands exactly at that line (it may continue on the following lines).
    pub quote: String,
    /// Why.
    pub explanation: String,
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
    /// One review per criterion (a criterion without one does not pass).
    pub reviews: Vec<ReviewArg>,
}

/// A command: an executable and its arguments, run without a shell.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandArg {
    /// A name looked up on PATH, or a path (relative paths are relative to the copy).
    pub executable: String,
    /// The arguments, passed as they are.
    #[serde(default)]
    pub args: Vec<String>,
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
    /// What to run in the copy.
    pub command: CommandArg,
    /// Seconds before the command's process group is killed, 1 to 3600 (default: the
    /// configured one, 600).
    pub timeout_seconds: Option<u64>,
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
    pub command: CommandArg,
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

/// One eligible file.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ProjectFileOut {
    /// Relative path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
}

/// A file a copy would leave out.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct BlockedFileOut {
    /// Relative path.
    pub path: String,
    /// SECRET_FILE, SECRET_CONTENT, SECRET_EXCLUSION, UNSAFE_PATH, …
    pub reason: String,
    /// The rule that matched.
    pub rule: Option<String>,
}

/// `list_project_files`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ProjectFilesOut {
    /// The project's root, canonical.
    pub root: String,
    /// Eligible files, sorted.
    pub files: Vec<ProjectFileOut>,
    /// Files left out by name or path (content is checked when copying).
    pub blocked_files: Vec<BlockedFileOut>,
    /// Total bytes of the eligible files.
    pub total_bytes: u64,
}

/// One changed file.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct FileChangeOut {
    /// Relative path.
    pub path: String,
    /// A (added), M (modified) or D (deleted).
    pub status: String,
    /// Lines added; null for a binary file.
    pub insertions: Option<u64>,
    /// Lines removed; null for a binary file.
    pub deletions: Option<u64>,
    /// Whether git sees the file as binary.
    pub binary: bool,
    /// The file's mode in the result (420 = 0o644, 493 = 0o755); null when deleted.
    pub mode: Option<u32>,
    /// The baseline blob id; null when added.
    pub old_blob: Option<String>,
    /// The result blob id; null when deleted.
    pub new_blob: Option<String>,
}

/// Totals over a patch.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct PatchSummaryOut {
    /// Files changed.
    pub files_changed: usize,
    /// Files added.
    pub added: usize,
    /// Files modified.
    pub modified: usize,
    /// Files deleted.
    pub deleted: usize,
    /// Lines added (text files).
    pub insertions: u64,
    /// Lines removed (text files).
    pub deletions: u64,
    /// Binary files changed.
    pub binary_files: usize,
}

/// How one criterion fared.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct CriterionResultOut {
    /// The criterion.
    pub criterion_id: String,
    /// The reviewer's verdict; null when no review was given.
    pub verdict: Option<String>,
    /// The check's outcome; null when the criterion has no check.
    pub check_passed: Option<bool>,
    /// Whether the quote was found exactly at the cited line.
    pub citation_checked: bool,
    /// Whether the criterion passes.
    pub passed: bool,
    /// What went wrong, for a person.
    #[serde(default)]
    pub problems: Vec<String>,
}

/// A verification, bound to a patch and to the files it rests on.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct VerificationOut {
    /// The patch sha256 it was made against.
    pub sha256: String,
    /// Whether every criterion passed.
    pub passed: bool,
    /// Per criterion, in the task's order.
    pub criteria: Vec<CriterionResultOut>,
    /// Files cited or checked, with their sha256 in the copy (null: absent).
    pub evidence: BTreeMap<String, Option<String>>,
    /// Always `client-reported`: a real citation does not prove the interpretation.
    pub source: String,
}

/// `verify`.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct VerifyOut {
    /// The task.
    pub task_id: String,
    /// The verification (also when not every criterion passed).
    #[serde(flatten)]
    pub verification: VerificationOut,
}

/// A command as recorded.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct CommandOut {
    /// The executable.
    pub executable: String,
    /// Its arguments.
    pub args: Vec<String>,
}

/// One test record, bound to the patch.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct TestRecordOut {
    /// 1-based within the task.
    pub id: u32,
    /// `legate-executor` (observed by Legate) or `client-reported` (never observed evidence).
    pub source: String,
    /// The command.
    pub command: CommandOut,
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
    /// Whether TCP was denied to the command: `denied` or `not-enforced`.
    pub network: String,
    /// When it was recorded (milliseconds since the epoch).
    pub recorded_at: i64,
    /// TEST_FAILED or TEST_CHANGED_PATCH when it did not pass.
    pub test_error: Option<ErrorBody>,
    /// In `preview`: true when the patch changed since (the record no longer counts).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<bool>,
}

impl TestRecordOut {
    fn new(e: &TestEvidence, stale: Option<bool>) -> Self {
        Self {
            id: e.id,
            source: match e.source {
                legate_engine::TestSource::LegateExecutor => "legate-executor",
                legate_engine::TestSource::ClientReported => "client-reported",
            }
            .to_string(),
            command: CommandOut {
                executable: e.command.executable.clone(),
                args: e.command.args.clone(),
            },
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
            recorded_at: e.recorded_at.0,
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
}

/// A finished integration.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct IntegrationOut {
    /// The patch integrated.
    pub sha256: String,
    /// Every path written, created or deleted.
    pub files: Vec<String>,
    /// Files whose BOM the patch dropped and integration put back.
    pub restored_byte_order_marks: Vec<String>,
    /// Set-aside deleted files that could not be removed.
    pub leftover_files: Vec<String>,
    /// `auto` or `ask`.
    pub approval: String,
    /// When (milliseconds since the epoch).
    pub integrated_at: i64,
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
    pub integration: IntegrationOut,
}

/// `preview`.
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
    pub files: Vec<FileChangeOut>,
    /// Totals.
    pub summary: PatchSummaryOut,
    /// For a read-only task: every path it created, changed or deleted.
    pub read_only_violations: Vec<String>,
    /// The latest verification.
    pub verification: Option<VerificationOut>,
    /// Why that verification no longer holds, if it does not.
    pub stale: Option<String>,
    /// Test records, oldest first, each with whether it is stale.
    pub tests: Vec<TestRecordOut>,
    /// The integration, once done.
    pub integration: Option<IntegrationOut>,
}

/// `read_patch`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ReadPatchOut {
    /// The text of the window (UTF-8; a window never splits a character).
    pub text: String,
    /// Where it starts, in bytes.
    pub offset: u64,
    /// Where the next window starts: pass it as `offset`.
    pub next_offset: u64,
    /// Whether more follows.
    pub has_more: bool,
    /// The length of what is being read (the whole patch, or one file's part), in bytes.
    pub total_length: u64,
    /// sha256 of the whole patch this was read from.
    pub sha256: String,
    /// sha256 of what is being read (equal to `sha256` without a path).
    pub content_sha256: String,
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

/// `cleanup`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct CleanupOut {
    /// Tasks whose copy and baseline were removed.
    pub removed: Vec<String>,
    /// Directories of tasks the store no longer knows, removed.
    pub orphans_removed: Vec<String>,
    /// Finished copies kept (within retention).
    pub kept: usize,
}

/// Summed token counters; a counter is null when no task in the group reported it.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct UsageTotalsOut {
    /// Tasks in the group.
    pub tasks: u64,
    /// Tasks in the group whose agent reported no usage.
    pub unreported: u64,
    /// Prompt tokens.
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    pub output_tokens: Option<u64>,
    /// Everything counted, as the agents reported it.
    pub total_tokens: Option<u64>,
    /// Reasoning tokens.
    pub thinking_tokens: Option<u64>,
    /// Tokens read from a prompt cache.
    pub cache_read_tokens: Option<u64>,
}

/// One task's usage.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct TaskUsageOut {
    /// The task.
    pub task_id: String,
    /// Its agent.
    pub agent: String,
    /// Its agent session, once known.
    pub session_id: Option<String>,
    /// The model its tokens were counted for, when known.
    pub model: Option<String>,
    /// Its counters (`tasks` is 1).
    #[serde(flatten)]
    pub totals: UsageTotalsOut,
}

/// `usage`.
#[derive(Debug, Serialize, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct UsageOut {
    /// Every matching task, newest first.
    pub by_task: Vec<TaskUsageOut>,
    /// By agent session id; tasks with no session yet are under "".
    pub by_session: BTreeMap<String, UsageTotalsOut>,
    /// By model; tasks whose model is unknown are under "".
    pub by_model: BTreeMap<String, UsageTotalsOut>,
    /// Everything that matched.
    pub total: UsageTotalsOut,
}

// ---------------------------------------------------------------------------------------
// Tools.

fn command(c: CommandArg) -> TestCommand {
    TestCommand {
        executable: c.executable,
        args: c.args,
    }
}

fn integration_out(r: &IntegrationRecord) -> Result<IntegrationOut> {
    reshape(r)
}

/// `list_project_files`.
pub async fn list_project_files(
    engine: &Engine,
    args: ListProjectFilesArgs,
) -> Result<ProjectFilesOut> {
    let source = absolute("path", &args.path)?;
    let files = engine
        .list_project_files(&source, &args.include_paths)
        .await?;
    reshape(&files)
}

/// `preview`.
pub async fn preview(engine: &Engine, task_id: &str) -> Result<PreviewOut> {
    let p = engine.preview(task_id).await?;
    Ok(PreviewOut {
        task_id: p.task_id.to_string(),
        source: p.source.display().to_string(),
        copy_directory: p.copy_directory.display().to_string(),
        sha256: p.patch.sha256.clone(),
        patch_length: p.patch.patch_length,
        files: reshape(&p.patch.files)?,
        summary: reshape(&p.patch.summary)?,
        read_only_violations: p.read_only_violations.clone(),
        verification: p.verification.as_ref().map(reshape).transpose()?,
        stale: p.stale.clone(),
        tests: p
            .tests
            .iter()
            .map(|t| TestRecordOut::new(&t.evidence, Some(t.stale)))
            .collect(),
        integration: p.integration.as_ref().map(integration_out).transpose()?,
    })
}

/// `read_patch`.
pub async fn read_patch(engine: &Engine, args: ReadPatchArgs) -> Result<ReadPatchOut> {
    let chunk = engine
        .read_patch(
            &args.task_id,
            PatchRead {
                expected_sha256: args.expected_sha256,
                path: args.path,
                offset: args.offset.unwrap_or(0),
                limit: args.limit,
            },
        )
        .await?;
    reshape(&chunk)
}

/// `verify`.
pub async fn verify(engine: &Engine, args: VerifyArgs) -> Result<VerifyOut> {
    let task = engine.task(&args.task_id)?;
    let reviews = reshape(&args.reviews)?;
    let v = engine
        .verify(task.id.as_str(), &args.expected_sha256, reviews)
        .await?;
    Ok(VerifyOut {
        task_id: task.id.to_string(),
        verification: reshape(&v)?,
    })
}

/// `test`.
pub async fn test(engine: &Engine, args: TestArgs) -> Result<TestOut> {
    let timeout = args
        .timeout_seconds
        .map(|s| in_range("timeoutSeconds", s, 1, TEST_TIMEOUT_MAX_SECS).map(Duration::from_secs))
        .transpose()?;
    let task = engine.task(&args.task_id)?;
    let e = engine
        .test(
            task.id.as_str(),
            &args.expected_sha256,
            command(args.command),
            timeout,
        )
        .await?;
    Ok(TestOut {
        task_id: task.id.to_string(),
        record: TestRecordOut::new(&e, None),
    })
}

/// `record_test`.
pub async fn record_test(engine: &Engine, args: RecordTestArgs) -> Result<TestOut> {
    let task = engine.task(&args.task_id)?;
    let e = engine
        .record_test(
            task.id.as_str(),
            &args.expected_sha256,
            ReportedTest {
                command: command(args.command),
                exit_code: args.exit_code,
                output: args.output,
            },
        )
        .await?;
    Ok(TestOut {
        task_id: task.id.to_string(),
        record: TestRecordOut::new(&e, None),
    })
}

/// `integrate`, with `approver` asked when the engine's approval mode is `ask`.
pub async fn integrate(
    engine: &Engine,
    args: IntegrateArgs,
    approver: &dyn Approver,
) -> Result<IntegrateOut> {
    let task = engine.task(&args.task_id)?;
    let r = engine
        .integrate(
            task.id.as_str(),
            Some(&args.expected_sha256),
            Some(approver),
        )
        .await?;
    Ok(IntegrateOut {
        task_id: task.id.to_string(),
        integration: integration_out(&r)?,
    })
}

/// `discard`.
pub async fn discard(engine: &Engine, task_id: &str) -> Result<DiscardOut> {
    let task = engine.task(task_id)?;
    let r = engine.discard(task.id.as_str()).await?;
    Ok(DiscardOut {
        task_id: task.id.to_string(),
        copy_directory: r.copy_directory.display().to_string(),
        discarded_at: r.discarded_at.map_or(0, |t| t.0),
    })
}

/// `cleanup`.
pub async fn cleanup(engine: &Engine) -> Result<CleanupOut> {
    reshape(&engine.cleanup().await?)
}

/// `usage`. A task id may be a unique prefix; it is resolved to the full id first.
pub fn usage(engine: &Engine, args: UsageArgs) -> Result<UsageOut> {
    let task_id = match args.task_id {
        Some(t) => Some(engine.task(&t)?.id.to_string()),
        None => None,
    };
    let report = engine.usage(&UsageFilter {
        task_id,
        session_id: args.session_id,
        model: args.model,
        agent: args.agent,
    })?;
    reshape(&report)
}

// ---------------------------------------------------------------------------------------
// The approver.

/// Asks the MCP client's person, with a form elicitation, whether to integrate. A client
/// that declared no form elicitation, a failed request, a timeout and a malformed answer are
/// all `Cancel`; what any answer means is the engine's to decide.
#[derive(Debug)]
pub struct ElicitationApprover {
    peer: Peer<RoleServer>,
    timeout: Duration,
}

impl ElicitationApprover {
    /// An approver that asks `peer`.
    pub fn new(peer: Peer<RoleServer>) -> Self {
        Self {
            peer,
            timeout: APPROVAL_TIMEOUT,
        }
    }
}

/// The message a person reads before confirming.
pub fn approval_message(r: &ApprovalRequest) -> String {
    let mut lines = vec![
        format!(
            "Integrate the patch of Legate task {} into {}?",
            r.task_id,
            r.source.display()
        ),
        format!(
            "sha256 {}; {} file(s): {} added, {} modified, {} deleted; +{} -{} lines.",
            r.sha256,
            r.summary.files_changed,
            r.summary.added,
            r.summary.modified,
            r.summary.deleted,
            r.summary.insertions,
            r.summary.deletions
        ),
    ];
    for f in r.files.iter().take(APPROVAL_FILES_SHOWN) {
        let status = serde_json::to_value(f.status)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        let counts = match (f.insertions, f.deletions) {
            (Some(i), Some(d)) => format!("+{i} -{d}"),
            _ => "binary".to_string(),
        };
        lines.push(format!("  {status} {} ({counts})", f.path));
    }
    if r.files.len() > APPROVAL_FILES_SHOWN {
        lines.push(format!(
            "  … and {} more",
            r.files.len() - APPROVAL_FILES_SHOWN
        ));
    }
    lines.push("Only an accept with confirm checked writes the original.".to_string());
    lines.join("\n")
}

fn approval_schema() -> ElicitationSchema {
    ElicitationSchema::builder()
        .required_bool_property("confirm", |b| {
            b.title("Integrate")
                .description("Check to write this patch into the original project.")
        })
        .build_unchecked()
}

/// The engine's reading of an elicitation's answer: accept carries the form's `confirm`
/// (anything but the JSON value `true` is false); decline is decline; anything else cancel.
pub fn answer_of(action: &ElicitationAction, content: Option<&Value>) -> ApprovalAnswer {
    match action {
        ElicitationAction::Accept => ApprovalAnswer::Accept {
            confirm: content.and_then(|c| c.get("confirm")) == Some(&Value::Bool(true)),
        },
        ElicitationAction::Decline => ApprovalAnswer::Decline,
        _ => ApprovalAnswer::Cancel,
    }
}

#[async_trait]
impl Approver for ElicitationApprover {
    async fn confirm(&self, request: &ApprovalRequest) -> ApprovalAnswer {
        if !self
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            tracing::info!(task = %request.task_id, "the client cannot answer a form elicitation");
            return ApprovalAnswer::Cancel;
        }
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: approval_message(request),
            requested_schema: approval_schema(),
        };
        match self
            .peer
            .create_elicitation_with_timeout(params, Some(self.timeout))
            .await
        {
            Ok(result) => {
                let answer = answer_of(&result.action, result.content.as_ref());
                tracing::info!(task = %request.task_id, answer = ?answer, "integration approval answered");
                answer
            }
            Err(e) => {
                tracing::info!(task = %request.task_id, error = %e, "integration approval failed");
                ApprovalAnswer::Cancel
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_an_accept_with_confirm_true_is_a_confirmation() {
        let accept = ElicitationAction::Accept;
        assert_eq!(
            answer_of(&accept, Some(&json!({"confirm": true}))),
            ApprovalAnswer::Accept { confirm: true }
        );
        for content in [
            Some(json!({"confirm": false})),
            Some(json!({"confirm": "true"})),
            Some(json!({})),
            None,
        ] {
            assert_eq!(
                answer_of(&accept, content.as_ref()),
                ApprovalAnswer::Accept { confirm: false }
            );
        }
        assert_eq!(
            answer_of(&ElicitationAction::Decline, Some(&json!({"confirm": true}))),
            ApprovalAnswer::Decline
        );
        assert_eq!(
            answer_of(&ElicitationAction::Cancel, None),
            ApprovalAnswer::Cancel
        );
    }

    #[test]
    fn the_schema_asks_for_one_required_boolean() {
        let s = serde_json::to_value(approval_schema()).unwrap();
        assert_eq!(s["required"], json!(["confirm"]));
        assert_eq!(s["properties"]["confirm"]["type"], "boolean");
    }
}
