//! How much disk Legate's own workspace directories take: a bounded walk of a directory
//! (copies, baselines) adding up the blocks each entry has allocated, and how many
//! workspaces lie directly under it; and for one copy, that figure beside what the copy was
//! made of (how many of its files are reflinks sharing the project's blocks).
//!
//! The walk never follows a symbolic link (an agent may plant one pointing anywhere), never
//! leaves the directory it was given, and stops after a fixed number of entries, saying so:
//! a number it gives is a lower bound when `complete` is false. It only reads metadata; it
//! never opens a file, and never decides what a size means.

use crate::CopyReport;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The most entries [`copy_disk`] looks at: a copy holds at most `max_files` (10,000 by
/// default) plus what the agent made.
pub const MAX_COPY_ENTRIES: u64 = 200_000;

/// One copy's disk use as `legate show` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CopyDisk {
    /// Files copied when the copy was made.
    pub included_files: usize,
    /// Bytes copied then.
    pub bytes: u64,
    /// How many of them were made as reflinks: their blocks are shared with the project's
    /// files until either side writes them, so they took no new disk when made.
    pub reflinked_files: usize,
    /// How many files' content the secret preflight read and scanned when the copy was made.
    #[serde(default)]
    pub scanned_files: usize,
    /// How many files it copied (or left out) on a verdict an earlier copy of the project
    /// recorded, without reading them (the scan verdict cache).
    #[serde(default)]
    pub trusted_files: usize,
    /// Whether the copy was made as a snapshot of the project's base (btrfs): it took no new
    /// disk when made, whatever its size.
    #[serde(default)]
    pub snapshot: bool,
    /// Bytes the copy's directory has allocated now (blocks × 512), links not followed. This
    /// counts shared blocks in full: for a reflinked copy it is what the copy would take if
    /// nothing were shared, not the new disk it took.
    pub allocated_bytes: u64,
    /// Whether every entry was counted (false: `allocated_bytes` is a lower bound).
    pub complete: bool,
}

/// What the copy `report` describes takes on disk now (its directory walked as [`usage`]
/// does, at most [`MAX_COPY_ENTRIES`] entries).
pub fn copy_disk(report: &CopyReport) -> CopyDisk {
    let now = usage(&report.copy_directory, MAX_COPY_ENTRIES);
    CopyDisk {
        included_files: report.included_files,
        bytes: report.bytes,
        reflinked_files: report.reflinked_files,
        scanned_files: report.scanned_files,
        trusted_files: report.trusted_files,
        snapshot: report.snapshot,
        allocated_bytes: now.bytes,
        complete: now.complete,
    }
}

/// What [`usage`] found under one directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// The directories directly under it (one per workspace).
    pub workspaces: u64,
    /// Bytes allocated on disk by everything under it (blocks × 512), links not followed.
    pub bytes: u64,
    /// Entries looked at.
    pub entries: u64,
    /// Whether every entry was looked at (false: `max_entries` was reached first, and
    /// `bytes` is a lower bound).
    pub complete: bool,
}

/// Walks `root` (missing: all zero, complete), looking at `max_entries` entries at most.
pub fn usage(root: &Path, max_entries: u64) -> DiskUsage {
    let mut found = DiskUsage {
        complete: true,
        ..DiskUsage::default()
    };
    let mut pending: Vec<(PathBuf, bool)> = vec![(root.to_path_buf(), true)];
    while let Some((dir, top)) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            if found.entries >= max_entries {
                found.complete = false;
                return found;
            }
            found.entries += 1;
            // `DirEntry::metadata` does not follow a symbolic link.
            let Ok(meta) = entry.metadata() else {
                continue;
            };
            found.bytes = found
                .bytes
                .saturating_add(meta.blocks().saturating_mul(512));
            if meta.is_dir() {
                if top {
                    found.workspaces += 1;
                }
                pending.push((entry.path(), false));
            }
        }
    }
    found
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn counts_workspaces_and_their_blocks_without_following_links_and_stops_at_the_bound() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("copies");
        assert_eq!(
            usage(&root, 10),
            DiskUsage {
                complete: true,
                ..DiskUsage::default()
            }
        );
        std::fs::create_dir_all(root.join("t1/src")).unwrap();
        std::fs::create_dir_all(root.join("t2")).unwrap();
        std::fs::write(root.join("t1/src/big"), vec![7u8; 64 * 1024]).unwrap();
        // A link to something large outside is not followed, nor counted as a workspace.
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("huge"), vec![1u8; 1024 * 1024]).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("t3")).unwrap();
        let u = usage(&root, 1000);
        assert_eq!(u.workspaces, 2, "{u:?}");
        assert!(u.complete);
        assert_eq!(u.entries, 5, "{u:?}");
        assert!(u.bytes >= 64 * 1024, "{u:?}");
        assert!(u.bytes < 1024 * 1024, "the link was followed: {u:?}");
        let cut = usage(&root, 2);
        assert!(!cut.complete);
        assert_eq!(cut.entries, 2);
    }
}
