//! What staging a copy writes, bounded while it is staged.
//!
//! Staging (`changes::stage_tree`, `git add --all` into a scratch index) writes every byte
//! of every file it adds into the baseline's objects, uncompressed, and a preview then reads
//! the changed files whole. The agent chooses those files: a sparse file of a terabyte costs
//! it no disk and would cost Legate's disk and memory that much, and an agent's process that
//! still runs (a pooled agent's, between turns) can grow a file at any moment. So
//! [`stage_tree_within`] has git write the new objects into a directory of their own, and
//! measures them while git writes and once more when it ends: past the copy's bytes, or past
//! more new blobs than the change limit could pass, git is stopped, the directory removed,
//! and the copy refused. Only a staging within the bounds joins the baseline's objects.
//!
//! It owns that staging only, and must never read a file's content, nor let a staging past
//! the bounds leave its objects behind.

use crate::baseline::Baseline;
use crate::limits::CopyLimits;
use legate_core::{Error, ErrorCode};
use std::path::Path;

/// How far past `max_bytes` a staging's new objects may grow before git is stopped: their
/// headers, and the trees.
const SLACK: u64 = 16 * 1024 * 1024;

fn too_large(sentence: String) -> Error {
    Error::new(ErrorCode::ChangeLimitExceeded, sentence)
}

/// Stages the copy as `changes::stage_tree` does, within `limits`: the new objects are
/// written into a directory of their own beside the baseline and measured every few
/// milliseconds while git writes them, and once more when it ends (before the trees). Past `max_bytes` (and
/// 16 MiB of slack: headers) or past `max_changed_files` new objects (git writes one blob per
/// new content, so more than that many changed files: the preview would refuse them anyway),
/// git is stopped, the directory removed, and the copy refused (`CHANGE_LIMIT_EXCEEDED`).
/// Staged within them, the new objects join the baseline's.
pub fn stage_tree_within(baseline: &Baseline, limits: &CopyLimits) -> Result<String, Error> {
    sweep(baseline.dir());
    let apart = tempfile::Builder::new()
        .prefix("objects-")
        .tempdir_in(baseline.dir())
        .map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                "a staging directory could not be made",
                e,
            )
        })?;
    let bound = limits.max_bytes.saturating_add(SLACK);
    let watch = || {
        let (objects, bytes) = tally(apart.path());
        if bytes > bound {
            return Some(too_large(format!(
                "the copy's files to stage grew past {} bytes, the copy limit, as git staged them; what was staged was removed (remove the large files, or raise [copies] max_bytes)",
                limits.max_bytes
            )));
        }
        (objects > limits.max_changed_files).then(|| {
            too_large(format!(
                "the copy has more than {} new or changed files to stage, the limit of changed files; what was staged was removed",
                limits.max_changed_files
            ))
        })
    };
    let tree = crate::changes::stage_tree_with(
        baseline,
        Some(apart.path()),
        Some(&watch),
        Some(limits.max_changed_files),
    )?;
    join(apart.path(), &baseline.git_dir().join("objects"))?;
    Ok(tree)
}

/// Removes the staging directories a staging killed mid-way left in `dir` (`objects-*`),
/// once older than any staging may run (git's time limit, and a minute): a staging under
/// way is never among them.
fn sweep(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let older_than = crate::git_run::git_bounds().time_limit + std::time::Duration::from_secs(60);
    for entry in entries.flatten() {
        let stale = entry.file_name().to_string_lossy().starts_with("objects-")
            && entry.file_type().is_ok_and(|t| t.is_dir())
            && entry
                .metadata()
                .and_then(|m| m.modified())
                .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > older_than));
        if stale {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// How many objects git wrote into `apart` (`xx/<rest>` loose, `pack/*`: a pack counts as
/// one), and their bytes.
fn tally(apart: &Path) -> (usize, u64) {
    let Ok(dirs) = std::fs::read_dir(apart) else {
        return (0, 0);
    };
    let (mut objects, mut bytes) = (0usize, 0u64);
    for dir in dirs.flatten() {
        let Ok(files) = std::fs::read_dir(dir.path()) else {
            continue;
        };
        for file in files.flatten() {
            objects += 1;
            bytes = bytes.saturating_add(file.metadata().map_or(0, |m| m.len()));
        }
    }
    (objects, bytes)
}

/// Moves the objects staged into `apart` into the baseline's `objects` (the same file
/// system: renames; an object already there is the same bytes, and is replaced).
fn join(apart: &Path, objects: &Path) -> Result<(), Error> {
    let failed = |e: std::io::Error| {
        Error::caused_by(
            ErrorCode::Internal,
            "staged objects could not join the baseline's",
            e,
        )
    };
    for dir in std::fs::read_dir(apart).map_err(failed)? {
        let dir = dir.map_err(failed)?;
        if !dir.file_type().map_err(failed)?.is_dir() || dir.file_name() == "info" {
            continue;
        }
        let into = objects.join(dir.file_name());
        std::fs::create_dir_all(&into).map_err(failed)?;
        for file in std::fs::read_dir(dir.path()).map_err(failed)? {
            let file = file.map_err(failed)?;
            std::fs::rename(file.path(), into.join(file.file_name())).map_err(failed)?;
        }
    }
    Ok(())
}
