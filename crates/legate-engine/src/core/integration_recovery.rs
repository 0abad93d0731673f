//! Recording integrations that a crash interrupted, once `legate-workspace` finished them.
//!
//! This module owns the hook that runs whenever a `legate` command opens the store (with
//! restart recovery, [`crate::core::runner::recover`]) and before every integration: it asks
//! `legate_integration::recover_integrations` to roll each stopped integration under
//! `$LEGATE_HOME/run/integrations/` forward or back (each journal locked, so two processes
//! never recover the same one and none touches a live one), then records what happened in
//! the task's review record and a `copy.integration_recovered` event, in one transaction,
//! and only then removes the journal. Rolled forward, the record gains the integration (the
//! next `integrate` says already integrated); rolled back, it does not (it can integrate
//! again). The store is asked first, before a project is touched: a journal whose
//! integration is already recorded (the crash came after the record was stored) only loses
//! its leftovers and is removed without a second record, and a journal whose task is gone or
//! whose root is not that task's project is never recovered.
//!
//! It must never decide which way a recovery goes (that is the journal's), nor remove a
//! journal before its outcome is stored.

use crate::ApprovalMode;
use crate::review::{IntegrationRecord, IntegrationRecovery, ReviewRecord, notice_event};
use legate_core::{Error, ErrorCode, Result, TaskId, Timestamp};
use legate_integration::{Integrated, Outcome, Recovered, Standing};
use legate_store::Store;
use std::path::Path;

/// Finishes and records every stopped integration under `run_dir/integrations`. Returns how
/// many were recorded; failures are logged (the journal stays for the next command).
pub(crate) fn recover_integrations(store: &Store, run_dir: &Path) -> usize {
    let mut recorded = 0;
    let standing = |task: &str, journal: &str, root: &Path| standing(store, task, journal, root);
    for r in legate_integration::recover_integrations(&run_dir.join("integrations"), &standing) {
        match r.and_then(|r| record(store, r)) {
            Ok(true) => recorded += 1,
            Ok(false) => {}
            Err(e) => tracing::warn!(error = %e, "a stopped integration could not be recovered"),
        }
    }
    recorded
}

/// What the store knows of a stopped integration, before its project is touched: a journal
/// whose task is gone, or whose root is not that task's project, is `Foreign` (never
/// recovered: a journal cannot aim recovery at a directory of its choosing); one already
/// recorded is `Recorded` (only its leftovers go); any other is `Unrecorded`. A record that
/// cannot be read counts as `Foreign`: nothing is touched, and the next command asks again.
fn standing(store: &Store, task: &str, journal: &str, root: &Path) -> Standing {
    let record = store
        .review(&TaskId(task.to_string()))
        .ok()
        .flatten()
        .and_then(|v| serde_json::from_value::<ReviewRecord>(v).ok());
    let Some(record) = record else {
        return Standing::Foreign;
    };
    if record.source != root {
        return Standing::Foreign;
    }
    if is_recorded(&record, journal) {
        Standing::Recorded
    } else {
        Standing::Unrecorded
    }
}

fn is_recorded(record: &ReviewRecord, journal: &str) -> bool {
    record.recoveries.iter().any(|x| x.journal == journal)
        || record
            .integration
            .as_ref()
            .is_some_and(|i| i.result.journal == journal)
}

/// Records `r` unless it is recorded already, then removes its journal. Whether it recorded.
fn record(store: &Store, r: Recovered) -> Result<bool> {
    let id = TaskId(r.task.clone());
    let Some(value) = store.review(&id)? else {
        tracing::warn!(task = %id, "a recovered integration's task is gone; nothing to record");
        r.finish();
        return Ok(false);
    };
    let mut record: ReviewRecord = serde_json::from_value(value).map_err(|e| {
        Error::caused_by(ErrorCode::Internal, "a review record could not be read", e)
    })?;
    if is_recorded(&record, &r.journal_id) {
        r.finish();
        return Ok(false);
    }
    let sha256 = r.meta["sha256"].as_str().unwrap_or_default().to_string();
    let now = Timestamp::now();
    let recovery = IntegrationRecovery {
        journal: r.journal_id.clone(),
        outcome: r.outcome,
        sha256: sha256.clone(),
        files: r.files.len(),
        conflicts: r.conflicts.clone(),
        recovered_at: now,
    };
    if r.outcome == Outcome::RolledForward {
        record.integration = Some(IntegrationRecord {
            sha256: sha256.clone(),
            result: Integrated {
                files: r.files.clone(),
                restored_byte_order_marks: Vec::new(),
                leftover_files: r.conflicts.clone(),
                journal: r.journal_id.clone(),
            },
            approval: serde_json::from_value(r.meta["approval"].clone())
                .unwrap_or(ApprovalMode::Auto),
            integrated_at: now,
        });
    }
    record.recoveries.push(recovery.clone());
    record.touched_at = now;
    let message = format!(
        "an interrupted integration of {} files into {} was {} (sha256 {sha256}){}",
        r.files.len(),
        r.root.display(),
        match r.outcome {
            Outcome::RolledForward => "rolled forward: the project is exactly integrated",
            Outcome::RolledBack => "rolled back: the project is as it was",
        },
        if r.conflicts.is_empty() {
            String::new()
        } else {
            format!("; left as found: {}", r.conflicts.join(", "))
        }
    );
    let event = notice_event(
        "copy.integration_recovered",
        message,
        serde_json::to_value(&recovery).unwrap_or_default(),
    );
    let value = serde_json::to_value(&record).map_err(|e| {
        Error::caused_by(
            ErrorCode::Internal,
            "a review record could not be encoded",
            e,
        )
    })?;
    store.put_review_with_events(&id, &value, &[event])?;
    tracing::warn!(task = %id, outcome = r.outcome.as_str(), files = r.files.len(), "recorded a recovered integration");
    r.finish();
    Ok(true)
}
