//! Making git re-read, as it stages a copy, every file whose stat data differ from its index
//! entry's in any field, nanoseconds included.
//!
//! Git (built without `USE_NSEC`, as most are) compares an entry's mtime and ctime to the
//! second only, and trusts the entry when they, the inode, owner and size match: a file
//! rewritten with other bytes of the same size in the second its entry was recorded, its mtime
//! then set back (`touch -d`, `utimensat`), is clean to git, and `git add` keeps the old blob.
//! The entries of a baseline's index carry the copy's stat data to the nanosecond
//! (`staging`), so such a rewrite still shows there: this module measures each regular file's
//! entry in the copy (`measure`: `lstat` beneath the root, no link followed) and smudges every
//! entry whose state differs from it in ctime or mtime (seconds and nanoseconds), device,
//! inode or size, each truncated to 32 bits as git records it, the way git smudges a racily
//! clean entry:
//! its recorded size is set to one the file does not have (0, git's own mark, which git reads
//! as changed for any blob but the empty one; 1 where the file's size, truncated as git
//! truncates it, is 0), so git hashes the file again. The scratch index is then rewritten
//! (`git_index::write_v2`). Where it cannot be read or written whole (not parsed, or entries
//! `write_v2` cannot hold), the whole index is made racy instead: its mtime one second after
//! the epoch (0 is git's "no timestamp", for which nothing is racy), so git re-reads every file
//! whose mtime is not older (every file but one set to the epoch's very second).
//!
//! It works on a scratch index only and decides nothing about content: it never changes a
//! blob id, a mode or a path, never drops or adds an entry, never reads a file or follows a
//! link, and never smudges the baseline's own index. A file that is gone or not a regular file
//! is left for git to judge, as is an entry that is not a regular file; a tracked file that
//! cannot be measured (a directory on the way unreadable) is `UNSAFE_PATH`: git would skip it
//! with a warning and keep its old blob.

use crate::file_state::FileState;
use crate::git_index::{self, Entry, Stat};
use crate::measure::{self, Measured};
use legate_core::{Error, ErrorCode};
use std::path::Path;
use std::time::{Duration, SystemTime};

/// What smudging a scratch index did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Smudged {
    /// These many entries were smudged and the index rewritten (0: left as it was).
    Entries(usize),
    /// The index could not be read or rewritten: every entry must be made racy instead.
    All,
}

/// The mtime that makes git treat every entry of an index as racily clean (the index's
/// second is not after the entry's): the earliest git reads as a timestamp at all.
pub(crate) fn all_racy() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(1)
}

impl Smudged {
    /// The mtime the scratch index must carry for git: `written` (the baseline index's own)
    /// unless every entry must be re-read.
    pub(crate) fn index_mtime(self, written: SystemTime) -> SystemTime {
        match self {
            Smudged::Entries(_) => written,
            Smudged::All => all_racy(),
        }
    }
}

/// Smudges the entries of the scratch index at `index` whose files under `root` (the copy)
/// no longer have exactly their stat data. An error when a tracked file cannot be measured
/// (`UNSAFE_PATH`), or when the rewrite could not be written (the scratch index may then be
/// half-written).
pub(crate) fn smudge(index: &Path, root: &Path) -> Result<Smudged, Error> {
    let mut entries = match std::fs::read(index)
        .map_err(|e| Error::caused_by(ErrorCode::Internal, "the scratch index cannot be read", e))
        .and_then(|bytes| git_index::parse(&bytes))
    {
        Ok(entries) => entries,
        Err(e) => {
            tracing::warn!(
                error = &e as &dyn std::error::Error,
                "the scratch index cannot be read; git re-reads every file of the copy"
            );
            return Ok(Smudged::All);
        }
    };
    let stale = stale_entries(&entries, root)?;
    if stale.is_empty() {
        return Ok(Smudged::Entries(0));
    }
    if !writable(&entries) {
        tracing::warn!(
            "the scratch index holds entries Legate does not write; git re-reads every file of the copy"
        );
        return Ok(Smudged::All);
    }
    for &(at, size) in &stale {
        entries[at].stat.size = size;
    }
    std::fs::write(index, git_index::write_v2(&entries)).map_err(|e| {
        Error::caused_by(
            ErrorCode::Internal,
            "the scratch index could not be written",
            e,
        )
    })?;
    tracing::debug!(
        smudged = stale.len(),
        entries = entries.len(),
        "entries whose files changed smudged"
    );
    Ok(Smudged::Entries(stale.len()))
}

/// The regular-file entries whose files under `root` differ from their stat data, each with
/// the size that smudges it. `UNSAFE_PATH` for a tracked file that cannot be measured (a
/// directory on the way the agent made unreadable): git would skip it with a warning and
/// keep its old blob, so the patch would hide whatever the file holds now.
fn stale_entries(entries: &[Entry], root: &Path) -> Result<Vec<(usize, u32)>, Error> {
    // Only paths a copy can hold are measured (safe, UTF-8); git judges any other.
    let files: Vec<(usize, &str)> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e.mode, 0o100644 | 0o100755))
        .filter_map(|(i, e)| Some((i, std::str::from_utf8(&e.path).ok()?)))
        .filter(|(_, p)| crate::include::path_problem(p).is_none())
        .collect();
    let paths: Vec<&str> = files.iter().map(|(_, p)| *p).collect();
    files
        .iter()
        .zip(measure::measure(root, &paths))
        .filter_map(|(&(i, path), measured)| match measured {
            Measured::Found(now) if now.is_file() => {
                let stat = &entries[i].stat;
                (!is_exactly(stat, now)).then(|| Ok((i, smudged_size(now))))
            }
            Measured::Failed(e) => Some(Err(Error::caused_by(
                ErrorCode::UnsafePath,
                format!("{path} cannot be looked at, so the copy cannot be staged whole"),
                e,
            ))),
            // Gone, a link or another type, a directory on the way a link: git sees it too.
            _ => None,
        })
        .collect()
}

/// Whether `now` has the ctime, mtime, device, inode and size `stat` records, each truncated
/// to 32 bits as git records it, the times to the nanosecond. Truncation is git's own: a
/// file on a file system of 64-bit inode numbers (XFS, bcachefs, NFS) would otherwise be
/// hashed again at every staging, and two states that agree on every truncated field and on
/// the ctime to the nanosecond are the same file unwritten (a write moves the ctime, and no
/// call a user can make sets it).
fn is_exactly(stat: &Stat, now: FileState) -> bool {
    let ((dev, ino, size, _mode), mtime, ctime) = now.parts();
    (ctime.0 as u32, ctime.1 as u32) == stat.ctime
        && (mtime.0 as u32, mtime.1 as u32) == stat.mtime
        && dev as u32 == stat.dev
        && ino as u32 == stat.ino
        && size as u32 == stat.size
}

/// A recorded size git reads as changed for a file in state `now`: 0 (git's mark of a racily
/// clean entry, changed whatever the size unless the blob is empty), or 1 where the file's
/// size as git truncates it is 0 (an empty blob's entry would otherwise still match).
fn smudged_size(now: FileState) -> u32 {
    let ((_, _, size, _), _, _) = now.parts();
    if size as u32 == 0 { 1 } else { 0 }
}

/// Whether `write_v2` can hold `entries` as they are: sorted by path and unique, all at stage
/// 0, no flag set.
fn writable(entries: &[Entry]) -> bool {
    entries.windows(2).all(|w| w[0].path < w[1].path)
        && entries
            .iter()
            .all(|e| e.stage == 0 && !e.assume_valid && !e.skip_worktree && !e.intent_to_add)
}

#[cfg(test)]
#[path = "smudge_tests.rs"]
mod tests;
