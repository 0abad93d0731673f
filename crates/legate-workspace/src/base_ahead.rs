//! A copy of a project made from its path: the selection, then the copy, where the project's
//! base is snapshotted while the selection runs.
//!
//! This module owns that one overlap. On btrfs, a later copy of an unchanged project is the
//! selection (to know the project is unchanged) and two snapshots of its base (`base`); the
//! snapshots wait for a transaction commit of the file system, the selection for git and
//! for 10,000 `lstat`s, and neither needs the other's result to start. So when the project
//! has a base with a manifest, its lock is taken, the snapshots are made beside the
//! selection, and only then is the base's manifest compared with the selection, as
//! `make_copy_with_base` compares it. When it holds, the snapshots are the copy; when it does
//! not (the project changed, other rules, another include path), they are removed before
//! anything else is done and the copy is made as `make_copy_with_base` makes it.
//!
//! It must never hand out a snapshot before the manifest was compared with this very
//! selection under the base's lock, nor leave a snapshot it made when it does not hand it
//! out. A `kill -9` between the snapshots and the comparison leaves a copy directory nobody
//! was told about, as one in the middle of any copy does.

use crate::base::{Refused, exists, holds, lock, usable};
use crate::base_snapshots::Snapshots;
use crate::copy::CopyReport;
use crate::git::Git;
use crate::include::validate_include_paths;
use crate::select::{Selection, project_root, select_in};
use crate::{Baseline, CopyLimits, ScanCache, SecretPatterns, base_dir, make_copy_with_base};
use legate_core::Error;
use std::path::Path;

/// Where a copy and what it is made with live: the copy's and its baseline's directories
/// (neither may exist; their parents are made), the projects' scan verdicts and their bases.
#[derive(Debug, Clone, Copy)]
pub struct CopyPlaces<'a> {
    /// The copy's directory.
    pub copy_dir: &'a Path,
    /// Its private baseline's directory.
    pub baseline_dir: &'a Path,
    /// Legate's directory of scan verdict caches (`ScanCache::open`'s `state`).
    pub verdicts: &'a Path,
    /// Legate's directory of projects' bases (`make_copy_with_base`'s `bases`).
    pub bases: &'a Path,
}

/// [`select`](crate::select)s the project at `source` and makes its copy as
/// [`make_copy_with_base`] makes it, with the project's scan verdict cache; the project's
/// base, when it has one, snapshotted while the selection runs (see the module docs).
///
/// Errors: those of [`select`](crate::select) and of [`make_copy_with_base`]. On error neither
/// directory is left.
pub fn select_and_copy(
    source: &Path,
    include_paths: &[String],
    secrets: &SecretPatterns,
    limits: &CopyLimits,
    places: CopyPlaces<'_>,
) -> Result<(CopyReport, Baseline), Error> {
    let includes = validate_include_paths(include_paths)?;
    let root = project_root(source)?;
    let git = Git::source(&root);
    let select = || select_in(&git, root.clone(), &includes, secrets, limits);
    let selection = match ahead(&root, secrets, limits, places, &select)? {
        Ahead::Made(made) => return Ok(made),
        Ahead::Selected(selection) => selection,
        Ahead::NoBase => select()?,
    };
    let cache = ScanCache::open(places.verdicts, &selection.root, secrets);
    make_copy_with_base(
        &selection,
        places.copy_dir,
        places.baseline_dir,
        limits,
        &cache,
        places.bases,
    )
}

/// What [`ahead`] came to.
enum Ahead {
    /// The copy, snapshots of a base that holds the selection.
    Made((CopyReport, Baseline)),
    /// The selection, the base's snapshots removed: the copy is made as without them.
    Selected(Selection),
    /// No base to snapshot ahead: nothing done.
    NoBase,
}

/// Snapshots the base of the project at `root` while `select` runs, when it has a base with
/// a manifest, and keeps the snapshots only when the base holds the selection.
fn ahead(
    root: &Path,
    secrets: &SecretPatterns,
    limits: &CopyLimits,
    places: CopyPlaces<'_>,
    select: &(dyn Fn() -> Result<Selection, Error> + Sync),
) -> Result<Ahead, Error> {
    let CopyPlaces {
        copy_dir,
        baseline_dir,
        verdicts,
        bases,
    } = places;
    let (Some(copies), Some(baselines)) = (copy_dir.parent(), baseline_dir.parent()) else {
        return Ok(Ahead::NoBase);
    };
    let dir = base_dir(bases, root);
    // A hint only: whether it holds is decided under the lock, below.
    let has_manifest = dir.join(crate::base::MANIFEST).is_file();
    if !has_manifest || exists(copy_dir) || exists(baseline_dir) {
        return Ok(Ahead::NoBase);
    }
    if !usable(copies, baselines, bases) {
        return Ok(Ahead::NoBase);
    }
    // A base that cannot be locked is `make_copy_with_base`'s to judge (it makes the copy in
    // full then), after the selection as always.
    let Ok(lock) = lock(&dir) else {
        return Ok(Ahead::NoBase);
    };
    let (snapshots, selection) = std::thread::scope(|s| {
        let snapshots = std::thread::Builder::new()
            .spawn_scoped(s, || Snapshots::take(&dir, copy_dir, baseline_dir));
        // A selection that panics must not leave the snapshots: caught, they are removed
        // below, then the panic goes on.
        let selection = std::panic::catch_unwind(std::panic::AssertUnwindSafe(select));
        let snapshots = match snapshots {
            Ok(taken) => taken.join().unwrap_or_else(|_| Snapshots::none()),
            // No thread to be had: the snapshots after the selection, if it holds one.
            Err(_) if matches!(selection, Ok(Ok(_))) => {
                Snapshots::take(&dir, copy_dir, baseline_dir)
            }
            Err(_) => Snapshots::none(),
        };
        (snapshots, selection)
    });
    let selection = match selection {
        Ok(Ok(selection)) => selection,
        Ok(Err(e)) => {
            snapshots.discard(copy_dir, baseline_dir);
            return Err(e);
        }
        Err(panic) => {
            snapshots.discard(copy_dir, baseline_dir);
            drop(lock);
            std::panic::resume_unwind(panic);
        }
    };
    let cache = ScanCache::open(verdicts, &selection.root, secrets);
    match holds(&dir, &selection, limits, &cache) {
        Some(report) => match snapshots.hand_out(report, copy_dir, baseline_dir) {
            Ok(made) => return Ok(Ahead::Made(made)),
            // Removed by `hand_out`; `make_copy_with_base` then meets the same base: made
            // again when it cannot be snapshotted, the copy made in full when it cannot be
            // used otherwise, as without this module.
            Err(Refused::Base(e) | Refused::Other(e)) => {
                tracing::debug!(error = %e, base = %dir.display(), "the snapshots taken beside the selection were not used");
            }
        },
        None => snapshots.discard(copy_dir, baseline_dir),
    }
    // `make_copy_with_base` takes the lock again.
    drop(lock);
    Ok(Ahead::Selected(selection))
}

#[cfg(test)]
#[path = "base_ahead_tests.rs"]
mod tests;
