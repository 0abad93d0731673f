//! What staging a copy writes, bounded before it is staged and while it is.
//!
//! Staging (`changes::stage_tree`, `git add --all` into a scratch index) writes every byte
//! of every file it adds into the baseline's objects, uncompressed, and a preview then reads
//! the changed files whole. The agent chooses those files: a sparse file of a terabyte costs
//! it no disk and would cost Legate's disk and memory that much. This module refuses such a
//! copy first ([`check_stageable`]: the files git would stage, by their sizes and their
//! number); stages it with what git writes watched ([`stage_tree_within`]: an agent's process
//! still running, a pooled agent's between turns among them, can grow a file after it was
//! measured, so the new objects go to a directory of their own, and past the bound git is
//! stopped and they are removed); and refuses a staged tree past the bound before any blob
//! is read ([`check_staged_tree`]).
//!
//! It owns these checks and that staging only, and must never read a file's content, nor let
//! a staging past the bound leave its objects behind. Measuring a path may pass through a
//! directory the agent made a link (sizes only: git stages nothing beyond a link, so such a
//! size can only make a copy look larger).

use crate::baseline::Baseline;
use crate::git::split_z;
use crate::limits::CopyLimits;
use legate_core::{Error, ErrorCode};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// How far past `max_bytes` a staging's new objects may grow before git is stopped: their
/// headers, and the trees.
const SLACK: u64 = 16 * 1024 * 1024;

fn too_large(sentence: String) -> Error {
    Error::new(ErrorCode::ChangeLimitExceeded, sentence)
}

/// Refuses (`CHANGE_LIMIT_EXCEEDED`) a copy whose files, as `git add --all` would stage
/// them (tracked, and untracked that git does not ignore), hold more than
/// `limits.max_bytes` in all, by each file's own size (`lstat`: a sparse file's apparent
/// size, a link's own), or are so many that more than `limits.max_changed_files` of them
/// must be new (more than `max_files` + `max_changed_files`: the copy was made within
/// `max_files`, so the preview would refuse them anyway, after staging them all).
pub fn check_stageable(baseline: &Baseline, limits: &CopyLimits) -> Result<(), Error> {
    let listed = baseline.git().run(&[
        "ls-files",
        "-z",
        "--cached",
        "--others",
        "--exclude-standard",
    ])?;
    let most = limits.max_files.saturating_add(limits.max_changed_files);
    let mut count = 0usize;
    let mut bytes = 0u64;
    for raw in split_z(&listed) {
        count += 1;
        if count > most {
            return Err(too_large(format!(
                "the copy holds more than {most} files to stage, so more than {} are new (the limit of changed files); nothing was staged",
                limits.max_changed_files
            )));
        }
        // A path under a directory that became a link is measured through it: git will not
        // stage it ("beyond a symbolic link"), so it can only make the sum larger.
        let Ok(meta) = std::fs::symlink_metadata(baseline.copy().join(OsStr::from_bytes(raw)))
        else {
            continue;
        };
        bytes = bytes.saturating_add(meta.len());
        if bytes > limits.max_bytes {
            return Err(too_large(format!(
                "the copy's files to stage hold more than {} bytes, the copy limit; nothing was staged (remove the large files, or raise [copies] max_bytes)",
                limits.max_bytes
            )));
        }
    }
    Ok(())
}

/// Refuses (`CHANGE_LIMIT_EXCEEDED`) a staged `tree` whose blobs hold more than
/// `limits.max_bytes` in all (`git ls-tree -r -l`, which reads no blob): a file that grew
/// after [`check_stageable`] measured it was staged whole, and nothing reads it.
pub fn check_staged_tree(
    baseline: &Baseline,
    tree: &str,
    limits: &CopyLimits,
) -> Result<(), Error> {
    let listed = baseline.git().run(&["ls-tree", "-r", "-l", "-z", tree])?;
    let mut bytes = 0u64;
    for entry in split_z(&listed) {
        // `<mode> SP <type> SP <object> SP+ <size> TAB <path>`; a submodule's size is `-`.
        let meta = entry.split(|b| *b == b'\t').next().unwrap_or_default();
        let size = meta
            .rsplit(|b| *b == b' ')
            .next()
            .and_then(|s| std::str::from_utf8(s).ok())
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0);
        bytes = bytes.saturating_add(size);
        if bytes > limits.max_bytes {
            return Err(too_large(format!(
                "the copy's staged files hold more than {} bytes, the copy limit (they grew while they were staged); none was read",
                limits.max_bytes
            )));
        }
    }
    Ok(())
}

/// Stages the copy as `changes::stage_tree` does, within `limits.max_bytes`: the new objects
/// are written into a directory of their own beside the baseline and measured every few
/// milliseconds while git writes them; past the bound (and 16 MiB of slack) git is stopped, the
/// directory removed, and the copy refused (`CHANGE_LIMIT_EXCEEDED`). Staged within it, the
/// new objects join the baseline's, and the tree is checked ([`check_staged_tree`]).
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
        (bytes_in(apart.path()) > bound).then(|| {
            too_large(format!(
                "the copy's files grew past {} bytes, the copy limit, while they were staged; what was staged was removed",
                limits.max_bytes
            ))
        })
    };
    let tree = crate::changes::stage_tree_with(baseline, Some(apart.path()), Some(&watch))?;
    // Git may end between two looks: what it wrote last is measured before anything joins.
    if let Some(error) = watch() {
        return Err(error);
    }
    join(apart.path(), &baseline.git_dir().join("objects"))?;
    check_staged_tree(baseline, &tree, limits)?;
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

/// The bytes of the objects git wrote into `apart` (`xx/<rest>` loose, `pack/*`).
fn bytes_in(apart: &Path) -> u64 {
    let Ok(dirs) = std::fs::read_dir(apart) else {
        return 0;
    };
    let mut bytes = 0u64;
    for dir in dirs.flatten() {
        let Ok(files) = std::fs::read_dir(dir.path()) else {
            continue;
        };
        for file in files.flatten() {
            bytes = bytes.saturating_add(file.metadata().map_or(0, |m| m.len()));
        }
    }
    bytes
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
