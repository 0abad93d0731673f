//! The two snapshots a copy of a project's base is (`base`): `tree` to the copy, `baseline`
//! to its baseline, taken at once, then handed out as a copy or removed.
//!
//! This module owns taking them and what a failure leaves: only what a snapshot made here is
//! ever removed (a directory that was there already is not ours). It must never compare a
//! base with a selection (that is `base`) nor take a snapshot outside the base's lock (its
//! callers hold it).

use crate::base::{BASELINE, Refused, TREE, set_work_tree};
use crate::base_upkeep::remove;
use crate::baseline::Baseline;
use crate::copy::{CopyReport, resolve_copy_dir};
use crate::subvolume;
use legate_core::{Error, ErrorCode};
use std::fs;
use std::path::Path;

/// The two snapshots of a base, as made: `tree` to the copy, `baseline` to its baseline.
pub(crate) struct Snapshots {
    tree: std::io::Result<()>,
    baseline: std::io::Result<()>,
}

impl Snapshots {
    /// Snapshots the base in `dir` to `copy_dir` and `baseline_dir`, both at once: btrfs makes
    /// snapshots at its next transaction commit, which the two then share (about 2 ms of the
    /// 7 a copy took one after the other). The caller holds the base's lock.
    pub(crate) fn take(dir: &Path, copy_dir: &Path, baseline_dir: &Path) -> Self {
        let snapshot_baseline = || subvolume::snapshot(&dir.join(BASELINE), baseline_dir);
        let (tree, baseline) = std::thread::scope(|s| {
            let beside = std::thread::Builder::new().spawn_scoped(s, snapshot_baseline);
            let tree = subvolume::snapshot(&dir.join(TREE), copy_dir);
            let baseline = match beside {
                Ok(beside) => beside.join().unwrap_or_else(|_| {
                    Err(std::io::Error::other("the baseline's snapshot stopped"))
                }),
                // No thread to be had: one after the other.
                Err(_) => snapshot_baseline(),
            };
            (tree, baseline)
        });
        Self { tree, baseline }
    }

    /// Snapshots that were never taken (a thread that stopped).
    pub(crate) fn none() -> Self {
        let stopped = || Err(std::io::Error::other("the snapshots stopped"));
        Self {
            tree: stopped(),
            baseline: stopped(),
        }
    }

    /// Removes what these snapshots made, and only that: a directory that was there already
    /// is not ours.
    pub(crate) fn discard(&self, copy_dir: &Path, baseline_dir: &Path) {
        remove_made(
            (self.tree.is_ok(), self.baseline.is_ok()),
            copy_dir,
            baseline_dir,
        );
    }

    /// The copy and its baseline these snapshots made, as the base's copy `report`
    /// describes it; on any failure both discarded.
    pub(crate) fn hand_out(
        self,
        report: CopyReport,
        copy_dir: &Path,
        baseline_dir: &Path,
    ) -> Result<(CopyReport, Baseline), Refused> {
        let failed = |what: &Path, e: std::io::Error| {
            let message = format!("{} could not be made as a snapshot", what.display());
            Error::caused_by(ErrorCode::InvalidWorkspace, message, e)
        };
        let made_here = (self.tree.is_ok(), self.baseline.is_ok());
        let Snapshots { tree, baseline } = self;
        let made = (|| {
            tree.map_err(|e| Refused::Base(failed(copy_dir, e)))?;
            baseline.map_err(|e| Refused::Base(failed(baseline_dir, e)))?;
            let other = |e: Error| Refused::Other(e);
            let copy = resolve_copy_dir(copy_dir).map_err(other)?;
            let baseline_dir = fs::canonicalize(baseline_dir)
                .map_err(|e| Refused::Other(failed(baseline_dir, e)))?;
            let baseline = Baseline::open(&baseline_dir, &copy).map_err(other)?;
            set_work_tree(&baseline.git_dir().join("config"), &copy)
                .map_err(|e| Refused::Other(failed(&baseline_dir, e)))?;
            let report = CopyReport {
                copy_directory: copy,
                snapshot: true,
                ..report
            };
            Ok((report, baseline))
        })();
        if made.is_err() {
            remove_made(made_here, copy_dir, baseline_dir);
        }
        made
    }
}

/// Removes the copy and the baseline a snapshot made (`made`: the copy's, the baseline's).
fn remove_made((tree, baseline): (bool, bool), copy_dir: &Path, baseline_dir: &Path) {
    if tree {
        let _ = remove(copy_dir);
    }
    if baseline {
        let _ = remove(baseline_dir);
    }
}
