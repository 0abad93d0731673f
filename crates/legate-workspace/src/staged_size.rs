//! What staging a copy would write, bounded before anything is staged.
//!
//! Staging (`changes::stage_tree`, `git add --all` into a scratch index) writes every byte
//! of every file it adds into the baseline's objects, uncompressed, and a preview then reads
//! the changed files whole. The agent chooses those files: a sparse file of a terabyte costs
//! it no disk and would cost Legate's disk and memory that much. This module refuses such a
//! copy first ([`check_stageable`]: the files git would stage, by their sizes and their
//! number) and refuses a staged tree that grew past the same bound while it was staged
//! ([`check_staged_tree`]: an agent's process still writing), before any blob is read.
//!
//! It owns these two checks only, and must never stage, follow a link in the copy, or read
//! a file's content.

use crate::baseline::Baseline;
use crate::git::split_z;
use crate::limits::CopyLimits;
use legate_core::{Error, ErrorCode};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;

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
