//! The review tools of copy workspaces (`list_project_files`, `preview`, `read_patch`,
//! `verify`, `test`, `record_test`, `integrate`, `discard`, `cleanup`) and `usage`, each over
//! one engine method; their shapes are in [`shapes`], the confirmer that asks the MCP client
//! before an integration in approval mode `ask` in `crate::approval`.
//!
//! Nothing here decides: which checks an integration needs, what an answer of the confirmer
//! means and whether a test passed are the engine's. This module translates arguments
//! (an absolute path, the `test` timeout's range) and puts engine answers into MCP's
//! envelopes; it never re-reads a value through JSON.

pub mod shapes;

pub use shapes::*;

use crate::tools::{absolute, in_range};
use legate_core::Result;
use legate_engine::{Confirmer, Engine, PatchRead, ReportedTest, UsageFilter};
use std::time::Duration;

/// `list_project_files`.
pub async fn list_project_files(
    engine: &Engine,
    args: ListProjectFilesArgs,
) -> Result<ProjectFilesOut> {
    let source = absolute("path", &args.path)?;
    engine
        .reviews()
        .list_project_files(&source, &args.include_paths)
        .await
}

/// The longest patch `preview` answers whole with `includePatch`: one `read_patch` window.
const INLINE_PATCH_MAX: usize = 50_000;

/// `preview`; with `includePatch`, the patch it describes too, read bound to its sha256 (a
/// patch that changed in between is `PATCH_CHANGED`) when it fits one window.
pub async fn preview(engine: &Engine, args: PreviewArgs) -> Result<PreviewOut> {
    let p = engine.reviews().preview(&args.task_id).await?;
    let fits = usize::try_from(p.patch.patch_length).is_ok_and(|n| n <= INLINE_PATCH_MAX);
    let patch = if args.include_patch && fits {
        let page = engine
            .reviews()
            .read_patch(
                &args.task_id,
                PatchRead {
                    expected_sha256: p.patch.sha256.clone(),
                    path: None,
                    offset: 0,
                    limit: Some(INLINE_PATCH_MAX),
                },
            )
            .await?;
        (!page.has_more).then_some(page.text)
    } else {
        None
    };
    Ok(PreviewOut {
        task_id: p.task_id.to_string(),
        source: p.source.display().to_string(),
        copy_directory: p.copy_directory.display().to_string(),
        sha256: p.patch.sha256.clone(),
        patch_length: p.patch.patch_length,
        files: p.patch.files,
        summary: p.patch.summary,
        read_only_violations: p.read_only_violations,
        verification: p.verification,
        stale: p.stale,
        tests: p
            .tests
            .iter()
            .map(|t| TestRecordOut::new(&t.evidence, Some(t.stale)))
            .collect(),
        test_retries: p.test_retries,
        integration: p.integration,
        patch,
    })
}

/// `read_patch`.
pub async fn read_patch(engine: &Engine, args: ReadPatchArgs) -> Result<ReadPatchOut> {
    engine
        .reviews()
        .read_patch(
            &args.task_id,
            PatchRead {
                expected_sha256: args.expected_sha256,
                path: args.path,
                offset: args.offset.unwrap_or(0),
                limit: args.limit,
            },
        )
        .await
}

/// `verify`.
pub async fn verify(engine: &Engine, args: VerifyArgs) -> Result<VerifyOut> {
    let task = engine.task(&args.task_id)?;
    let v = engine
        .reviews()
        .verify(task.id.as_str(), &args.expected_sha256, args.reviews)
        .await?;
    Ok(VerifyOut {
        task_id: task.id.to_string(),
        verification: v,
    })
}

/// `test`.
pub async fn test(engine: &Engine, args: TestArgs) -> Result<TestOut> {
    let max = engine.config().fronts.test_timeout_max.as_secs();
    let timeout = args
        .timeout_seconds
        .map(|s| in_range("timeoutSeconds", s, 1, max).map(Duration::from_secs))
        .transpose()?;
    let task = engine.task(&args.task_id)?;
    let (e, retries) = engine
        .reviews()
        .test_retrying(
            task.id.as_str(),
            &args.expected_sha256,
            legate_engine::TestRun {
                command: args.command,
                timeout,
                selection: args.sandbox,
                fresh: args.fresh,
            },
            args.retries.unwrap_or(0),
        )
        .await?;
    Ok(TestOut {
        task_id: task.id.to_string(),
        record: TestRecordOut::new(&e, None),
        retries,
    })
}

/// `record_test`.
pub async fn record_test(engine: &Engine, args: RecordTestArgs) -> Result<TestOut> {
    let task = engine.task(&args.task_id)?;
    let e = engine
        .reviews()
        .record_test(
            task.id.as_str(),
            &args.expected_sha256,
            ReportedTest {
                command: args.command,
                exit_code: args.exit_code,
                output: args.output,
            },
        )
        .await?;
    Ok(TestOut {
        task_id: task.id.to_string(),
        record: TestRecordOut::new(&e, None),
        retries: None,
    })
}

/// `integrate`, with `confirmer` asked when the engine's approval mode is `ask`.
pub async fn integrate(
    engine: &Engine,
    args: IntegrateArgs,
    confirmer: &dyn Confirmer,
) -> Result<IntegrateOut> {
    let task = engine.task(&args.task_id)?;
    let r = engine
        .reviews()
        .integrate(
            task.id.as_str(),
            Some(&args.expected_sha256),
            Some(confirmer),
        )
        .await?;
    Ok(IntegrateOut {
        task_id: task.id.to_string(),
        integration: r,
    })
}

/// `discard`.
pub async fn discard(engine: &Engine, task_id: &str) -> Result<DiscardOut> {
    let task = engine.task(task_id)?;
    let r = engine.reviews().discard(task.id.as_str()).await?;
    Ok(DiscardOut {
        task_id: task.id.to_string(),
        copy_directory: r.copy_directory.display().to_string(),
        discarded_at: r.discarded_at.map_or(0, |t| t.0),
    })
}

/// `cleanup`.
pub async fn cleanup(engine: &Engine) -> Result<CleanupOut> {
    engine.reviews().cleanup().await
}

/// `usage`. A task id may be a unique prefix; it is resolved to the full id first.
pub fn usage(engine: &Engine, args: UsageArgs) -> Result<UsageOut> {
    // Taken apart whole and the filter built whole, so a field added to either does not
    // compile until it is mapped here.
    let UsageArgs {
        task_id,
        session_id,
        model,
        agent,
    } = args;
    let task_id = match task_id {
        Some(t) => Some(engine.task(&t)?.id.to_string()),
        None => None,
    };
    engine.records().usage(&UsageFilter {
        task_id,
        session_id,
        model,
        agent,
    })
}
