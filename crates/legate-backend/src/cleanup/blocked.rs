//! The marks of workspaces whose last run's processes could not be shown gone: one file per
//! root and run in `$LEGATE_HOME/blocked/` (shared by every agent, not writable by any), the
//! check every backend and the engine make before using a root, and the report of a run's
//! cleanup that writes a mark when it is unverified.
//!
//! It must never lift a mark while that run's processes are alive to [`Processes`] (a held
//! zombie included), and never block a root for another root's run.

use super::{Cleanup, Processes, RUN_ENV};
use legate_core::{Error, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

#[derive(Debug, Serialize, Deserialize)]
struct Mark {
    root: PathBuf,
    pgid: i32,
    #[serde(default)]
    marker: Option<String>,
}

/// FNV-1a, 64 bits: a stable file name for a root (the mark holds the root itself).
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The start of the names of `root`'s marks: the root's hash.
pub(super) fn root_prefix(root: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    format!("{:016x}", hash(root.as_os_str().as_bytes()))
}

/// The mark of `processes` on `root`: one file per root and run (marker, else group).
pub(super) fn mark_path(blocked_dir: &Path, root: &Path, processes: &Processes) -> PathBuf {
    let run = match &processes.marker {
        Some(m) => format!("marker:{m}"),
        None => format!("pgid:{}", processes.pgid),
    };
    blocked_dir.join(format!(
        "{}-{:016x}.json",
        root_prefix(root),
        hash(run.as_bytes())
    ))
}

/// Every mark file of `root` in `blocked_dir` (including the one-per-root `<hash>.json` an
/// older Legate wrote).
pub(super) fn marks_of(blocked_dir: &Path, root: &Path) -> Vec<PathBuf> {
    let prefix = root_prefix(root);
    let Ok(entries) = std::fs::read_dir(blocked_dir) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = entries
        .flatten()
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix(&prefix).is_some_and(|rest| {
                rest == ".json" || (rest.starts_with('-') && rest.ends_with(".json"))
            })
        })
        .map(|e| e.path())
        .collect();
    paths.sort();
    paths
}

/// Marks `root` (resolved) as blocked by `processes`, in `blocked_dir`
/// (`$LEGATE_HOME/blocked`). Other runs' marks on `root` stay.
pub fn block(blocked_dir: &Path, root: &Path, processes: &Processes) -> std::io::Result<()> {
    let body = serde_json::to_vec(&Mark {
        root: root.to_path_buf(),
        pgid: processes.pgid,
        marker: processes.marker.clone(),
    })?;
    crate::agy::usage::write_private(&mark_path(blocked_dir, root, processes), &body)
}

/// `PROCESS_CLEANUP_UNVERIFIED` when `root` (resolved) is marked in `blocked_dir` by a run
/// whose processes are still there; each mark whose run's processes are gone now is removed.
pub fn check(blocked_dir: &Path, root: &Path) -> Result<()> {
    let mut blocked = None;
    for path in marks_of(blocked_dir, root) {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        match serde_json::from_str::<Mark>(&text).ok() {
            Some(m) if m.root != root => {}
            Some(m) => {
                let found = Processes::new(m.pgid, m.marker.clone()).look();
                if found.any() {
                    blocked.get_or_insert((m, found.held));
                } else {
                    let _ = std::fs::remove_file(&path);
                    tracing::info!(root = %root.display(), "an earlier unverified cleanup is now verified; its mark is lifted");
                }
            }
            _ => {
                let _ = std::fs::remove_file(&path);
                tracing::info!(root = %root.display(), "an earlier unverified cleanup is now verified; its mark is lifted");
            }
        }
    }
    match blocked {
        None => Ok(()),
        Some((m, held)) => Err(Error::new(
            ErrorCode::ProcessCleanupUnverified,
            match held {
                Some((member, tracer)) => format!(
                    "the workspace {} is blocked: process {member} of process group {} of an earlier agent run has exited but is held by process {tracer}, which traces it; stop that process (kill -KILL {tracer}) and try again",
                    root.display(),
                    m.pgid,
                ),
                None => format!(
                    "the workspace {} is blocked: process group {} of an earlier agent run (or a process carrying {RUN_ENV}={}) could not be shown to be gone; stop it (kill -KILL -{}) and try again",
                    root.display(),
                    m.pgid,
                    m.marker.as_deref().unwrap_or("?"),
                    m.pgid
                ),
            },
        )),
    }
}

/// [`check`] for a root that may not be resolved yet (it is resolved first; a root that
/// does not exist has nothing to check).
pub fn check_path(blocked_dir: &Path, root: &Path) -> Result<()> {
    match std::fs::canonicalize(root) {
        Ok(resolved) => check(blocked_dir, &resolved),
        Err(_) => Ok(()),
    }
}

/// Reports `cleanup` through `emit` and, when it is unverified, blocks `root` in
/// `blocked_dir` (when there is one) for `processes`.
pub fn record(
    what: &str,
    cleanup: &Cleanup,
    processes: &Processes,
    emit: impl FnOnce(legate_core::EventKind),
    blocked_dir: Option<&Path>,
    root: &Path,
) {
    tracing::info!(pgid = cleanup.pgid, verified = cleanup.verified, signals = ?cleanup.signals, outside_group = cleanup.outside_group, "{what} process cleanup");
    emit(cleanup.event(what));
    if cleanup.verified {
        return;
    }
    tracing::warn!(pgid = cleanup.pgid, root = %root.display(), "{what} process cleanup not verified; the workspace is blocked");
    if let Some(dir) = blocked_dir
        && let Err(e) = block(dir, root, processes)
    {
        tracing::warn!(error = %e, "could not record the unverified cleanup");
    }
}
