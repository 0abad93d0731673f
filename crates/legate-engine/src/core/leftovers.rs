//! Copies of interrupted tasks: what recovery does with them.
//!
//! When recovery ends a copy task whose process died (`failed` with `SERVER_RESTARTED`, or
//! `canceled` when its cancel had been accepted), nobody can integrate its copy: integration
//! needs a completed task. So its copy and baseline are removed there and then, unless the
//! task was submitted with `keep_interrupted_copies` (they are then kept for inspection until
//! the retention sweep). A half-made copy (its copy report never stored because the process
//! died while copying, or its baseline gone) is removed whatever the setting: there is nothing
//! to inspect. A later turn of a context's copy (a task that continued the copy an earlier
//! turn made) is different: the copy holds the earlier turns' work, so it is kept whatever
//! the setting, with whatever the interrupted turn wrote, and the context's next turn
//! continues in it (a `copy.kept` event says so).
//!
//! This module only ever sees the ids recovery has just ended, so it never touches the copy
//! of a task that is live or that completed. It never removes anything but the task's own
//! directories directly inside `$LEGATE_HOME/copies/` and `$LEGATE_HOME/baselines/`
//! (`legate_workspace::remove_owned_dir`), and never a copy whose lock another operation
//! holds. It never fails recovery: what it could not remove is logged and left to the sweep.

use crate::config::Paths;
use crate::review::ReviewRecord;
use legate_core::{Error, ErrorCode, EventKind, Result, TaskId, Timestamp};
use legate_store::Store;
use legate_workspace::Baseline;

/// What happened to an interrupted task's copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    /// Not a copy task, or its copy was already gone.
    NoCopy,
    /// Removed.
    Removed,
    /// Removed: it was half made.
    RemovedHalfMade,
    /// Kept for inspection (`keep_interrupted_copies`).
    Kept,
    /// Another operation holds its lock, or removing failed; the sweep sees it again.
    Left,
}

/// Deals with the copies of `ids`, which recovery has just ended. Returns how many copies
/// were removed.
pub(crate) fn settle_interrupted(store: &Store, paths: &Paths, ids: &[TaskId]) -> usize {
    let mut removed = 0;
    for id in ids {
        match settle_one(store, paths, id) {
            Ok(Fate::Removed | Fate::RemovedHalfMade) => removed += 1,
            Ok(Fate::Left) => {
                tracing::warn!(task = %id, "the copy of an interrupted task is in use; left to the retention sweep");
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(task = %id, error = %e, "could not remove the copy of an interrupted task");
            }
        }
    }
    removed
}

fn settle_one(store: &Store, paths: &Paths, id: &TaskId) -> Result<Fate> {
    let Some(value) = store.review(id)? else {
        return Ok(Fate::NoCopy);
    };
    let mut record: ReviewRecord = serde_json::from_value(value).map_err(|e| {
        Error::caused_by(
            ErrorCode::Internal,
            format!("the review record of {id} is unreadable"),
            e,
        )
    })?;
    if record.discarded_at.is_some() {
        return Ok(Fate::NoCopy);
    }
    if record.continues.is_some() {
        // A later turn of a copy that earlier turns made: the copy holds their work, so it is
        // kept whatever the setting, with what the interrupted turn had written. The task
        // ended `failed` (`SERVER_RESTARTED`) and cannot be integrated; the context's next
        // turn continues in the copy, and its patch shows every change, the interrupted
        // turn's included.
        if record.copy.is_none() {
            return Ok(Fate::NoCopy);
        }
        store.append_events(
            id,
            &[EventKind::Notice {
                message: "copy kept: the interrupted turn continued a copy earlier turns made; the next turn continues in it".into(),
                detail: serde_json::json!({
                    "event": "copy.kept",
                    "reason": "interrupted-continuation",
                    "copyDirectory": record.copy_directory,
                }),
            }],
        )?;
        tracing::info!(task = %id, copy = %record.copy_directory.display(), "kept the shared copy of an interrupted turn");
        return Ok(Fate::Kept);
    }
    let (copy, base) = (
        paths.copies().join(id.as_str()),
        paths.baselines().join(id.as_str()),
    );
    let baseline = Baseline::open(&base, &copy).ok();
    let half_made = record.copy.is_none() || baseline.is_none();
    if !half_made && record.keep_if_interrupted {
        tracing::info!(task = %id, copy = %copy.display(), "kept the copy of an interrupted task for inspection");
        return Ok(Fate::Kept);
    }
    let lock = match &baseline {
        Some(b) => match b.lock() {
            Ok(l) => Some(l),
            Err(_) => return Ok(Fate::Left),
        },
        None => None,
    };
    let removed_copy = legate_workspace::remove_owned_dir(paths.home(), &paths.copies(), &copy)?;
    let removed_base = legate_workspace::remove_owned_dir(paths.home(), &paths.baselines(), &base)?;
    drop(lock);
    record.discarded_at = Some(Timestamp::now());
    record.touched_at = Timestamp::now();
    let value = serde_json::to_value(&record).map_err(|e| {
        Error::caused_by(
            ErrorCode::Internal,
            "a review record could not be encoded",
            e,
        )
    })?;
    if !removed_copy && !removed_base {
        store.put_review(id, &value)?;
        return Ok(Fate::NoCopy);
    }
    let why = if half_made {
        "the copy was half made when its process stopped"
    } else {
        "the task was interrupted when its process stopped"
    };
    // The record and its event in one transaction: a crash never leaves one without the other.
    store.put_review_with_events(
        id,
        &value,
        &[EventKind::Notice {
            message: format!("copy and baseline removed: {why}"),
            detail: serde_json::json!({
                "event": "copy.discarded",
                "reason": if half_made { "half-made" } else { "interrupted" },
                "copyDirectory": copy,
            }),
        }],
    )?;
    tracing::info!(task = %id, half_made, "removed the copy of an interrupted task");
    Ok(if half_made {
        Fate::RemovedHalfMade
    } else {
        Fate::Removed
    })
}
