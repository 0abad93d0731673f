//! Making the copy: the selected files' bytes, written into a new private directory.
//!
//! This module owns the copy as a whole: its directory, whether it clones (`reflink`, probed
//! once per copy), the threads that copy (each taking runs of files of one directory; each
//! file as `copy_file` says: opened without following links, checked to be the file
//! measured, cloned or read, and scanned, so the bytes checked are the bytes in the copy), the
//! limits enforced again on what is actually read, and the report; the baseline (`staging`)
//! is told of each file as it lands.
//!
//! It must never adopt an existing directory as a copy, follow a symlink, write outside the
//! new directory, or leave a half-made copy behind on failure.

use crate::baseline::Baseline;
use crate::copy_file::{Copier, Outcome};
use crate::file_state::FileState;
use crate::reflink::Reflinks;
use crate::scan_cache::ScanCache;
use crate::secrets::BlockedFile;
use crate::select::{SelectedFile, Selection};
use crate::staging::{SourceIndex, Staging};
use crate::{CopyLimits, private_dir};
use legate_core::{Error, ErrorCode};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs;
use std::ops::Range;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;

/// What a finished copy holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CopyReport {
    /// The copy's directory (canonical).
    pub copy_directory: PathBuf,
    /// The project it was copied from (canonical).
    pub source: PathBuf,
    /// How many files were copied.
    pub included_files: usize,
    /// How many bytes were copied.
    pub bytes: u64,
    /// Files left out, by path and reason (never content).
    pub blocked_files: Vec<BlockedFile>,
    /// How many of the copied files are reflinks: they share the project's blocks on disk
    /// until either side writes them (0 where the file system cannot clone).
    #[serde(default)]
    pub reflinked_files: usize,
    /// How many files' content was read and scanned by the secret preflight (copied or left
    /// out).
    #[serde(default)]
    pub scanned_files: usize,
    /// How many files were copied (or left out) on a verdict recorded by an earlier copy of
    /// the same project, their content not read (the scan verdict cache).
    #[serde(default)]
    pub trusted_files: usize,
    /// Whether the copy is a snapshot of the project's base (btrfs): it was made whole, no
    /// file copied or read, and shares every block with the base until written (see `base`).
    #[serde(default)]
    pub snapshot: bool,
}

/// Creates `copy_dir` with mode 0700 (its parent too, when missing); it must not exist yet.
/// `INVALID_WORKSPACE` when it cannot be made.
pub(crate) fn create_copy_dir(copy_dir: &Path) -> Result<(), Error> {
    if let Some(parent) = copy_dir.parent() {
        private_dir(parent)?;
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(copy_dir)
        .map_err(|e| {
            let message = format!("the copy {} could not be created", copy_dir.display());
            Error::caused_by(ErrorCode::InvalidWorkspace, message, e)
        })
}

/// The canonical path of `copy_dir`; `INVALID_WORKSPACE` when it cannot be resolved.
pub(crate) fn resolve_copy_dir(copy_dir: &Path) -> Result<PathBuf, Error> {
    fs::canonicalize(copy_dir).map_err(|e| {
        let message = format!("the copy {} cannot be resolved", copy_dir.display());
        Error::caused_by(ErrorCode::InvalidWorkspace, message, e)
    })
}

/// Copies `selection` into `copy_dir`, which must not exist yet; its parent is created with
/// mode 0700 when missing.
///
/// Errors: `SOURCE_CHANGED` when a file is not the one measured or is written to while being
/// read, `COPY_LIMIT_EXCEEDED` when the bytes read pass the limit, `INVALID_WORKSPACE` when
/// the directory cannot be made. On any error the new directory is removed.
pub fn make_copy(
    selection: &Selection,
    copy_dir: &Path,
    limits: &CopyLimits,
) -> Result<CopyReport, Error> {
    make_copy_cached(selection, copy_dir, limits, None)
}

/// [`make_copy`], trusting and recording verdicts in `cache` when given (see
/// `scan_cache`); the cache file is rewritten once the copy is made.
pub fn make_copy_cached(
    selection: &Selection,
    copy_dir: &Path,
    limits: &CopyLimits,
    cache: Option<&ScanCache>,
) -> Result<CopyReport, Error> {
    create_copy_dir(copy_dir)?;
    let result = fill(selection, copy_dir, limits, cache, false, &mut |_| Ok(())).map(|r| r.0);
    if result.is_err() {
        let _ = fs::remove_dir_all(copy_dir);
    }
    result
}

/// [`make_copy`] and [`Baseline::create_from`] in one pass: the baseline (in `baseline_dir`,
/// which must not exist yet, borrowing the source's objects) gets an index written from the
/// copy's files as they land: the source's id for a file its index shows clean, `git
/// hash-object` of the copy for every other file, overlapping the copy (see `staging`). On
/// any error neither directory is left.
pub fn make_copy_with_baseline(
    selection: &Selection,
    copy_dir: &Path,
    baseline_dir: &Path,
    limits: &CopyLimits,
) -> Result<(CopyReport, Baseline), Error> {
    make_copy_with_baseline_cached(selection, copy_dir, baseline_dir, limits, None)
}

/// [`make_copy_with_baseline`], trusting and recording verdicts in `cache` when given (see
/// `scan_cache`); the cache file is rewritten once the copy is made.
pub fn make_copy_with_baseline_cached(
    selection: &Selection,
    copy_dir: &Path,
    baseline_dir: &Path,
    limits: &CopyLimits,
    cache: Option<&ScanCache>,
) -> Result<(CopyReport, Baseline), Error> {
    create_copy_dir(copy_dir)?;
    let result = (|| {
        let copy = resolve_copy_dir(copy_dir)?;
        let made = fill_with_baseline(selection, &copy, baseline_dir, limits, cache, None)?;
        Ok((made.report, made.baseline))
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(copy_dir);
    }
    result
}

/// What [`fill_with_baseline`] made.
pub(crate) struct Filled {
    /// The copy's report.
    pub(crate) report: CopyReport,
    /// The copy's baseline.
    pub(crate) baseline: Baseline,
    /// When asked for, each file whose verdict the cache now holds, with the state it was
    /// copied in (or left out in): its bytes in the copy are that state's.
    pub(crate) settled: Option<Settled>,
}

/// Each file (by path) whose verdict the cache holds after a copy, with the state it was
/// copied in.
pub(crate) type Settled = Vec<(String, FileState)>;

/// Fills the existing, empty directory `copy` (canonical) with `selection` and makes its
/// baseline in `baseline_dir`: created, unless `baseline_in` says it exists (empty) already.
/// On error the baseline directory's contents are removed (the directory itself too when
/// this made it); the copy's are the caller's to remove.
pub(crate) fn fill_with_baseline(
    selection: &Selection,
    copy: &Path,
    baseline_dir: &Path,
    limits: &CopyLimits,
    cache: Option<&ScanCache>,
    baseline_in: Option<BaselineIn>,
) -> Result<Filled, Error> {
    let source = crate::baseline::source_repo(&selection.root);
    let borrow = source.as_ref().map(|s| s.objects.clone());
    let baseline = match baseline_in {
        None => Baseline::init(baseline_dir, copy, borrow)?,
        Some(BaselineIn::Existing) => Baseline::init_in(baseline_dir, copy, borrow)?,
    };
    let staged = (|| {
        // Only a source whose objects are borrowed can vouch for its clean files.
        let index = source.and_then(|s| match SourceIndex::read(&s.index) {
            Ok(index) => Some(index),
            Err(e) => {
                tracing::debug!(error = %e, "the source's index is not used; every file is hashed");
                None
            }
        });
        let vouching = index.as_ref().map_or(0, SourceIndex::len);
        let mut staging = Staging::new(
            &baseline,
            index.map(|i| (i, selection.root.as_path())),
            &selection.files,
        );
        let keys = matches!(baseline_in, Some(BaselineIn::Existing));
        let (report, settled) = fill(selection, copy, limits, cache, keys, &mut |w| {
            staging.add(&w)
        })?;
        let (tree, borrowed) = staging.finish(&baseline)?;
        tracing::debug!(
            files = report.included_files,
            borrowed,
            vouching,
            "baseline index written"
        );
        baseline.commit_tree(&tree)?;
        Ok((report, settled))
    })();
    match staged {
        Ok((report, settled)) => Ok(Filled {
            report,
            baseline,
            settled,
        }),
        Err(e) => {
            match baseline_in {
                None => {
                    let _ = fs::remove_dir_all(baseline.dir());
                }
                Some(BaselineIn::Existing) => crate::base_upkeep::empty_dir(baseline.dir()),
            }
            Err(e)
        }
    }
}

/// Where [`fill_with_baseline`] makes the baseline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BaselineIn {
    /// In a directory that exists and is empty (a subvolume made for it).
    Existing,
}

/// A file just written into the copy, as [`fill`] tells it.
#[derive(Debug)]
pub(crate) struct Written<'a> {
    /// Its relative path.
    pub(crate) path: &'a str,
    /// The source file as it was read: measured on the open file before reading, and found
    /// unchanged (times, size, inode) after.
    pub(crate) source: &'a fs::Metadata,
    /// The copy once written (its mtime set to the source's).
    pub(crate) copy: &'a fs::Metadata,
}

/// The most threads that copy at once (the secret scan and the file system's work on each
/// file run in parallel; more than this only adds contention).
const MAX_COPIERS: usize = 4;

/// The threads that clone at once: a clone costs little CPU, and reading it back to be
/// scanned mostly waits for the disk (the clone's pages are not in memory yet, even when the
/// source's are), so more threads than cores keep more reads in flight.
const MAX_CLONERS: usize = 8;

/// A run of files handed to one thread: files of one directory, at most this many.
const RUN_FILES: usize = 256;

/// Copies the selection; `written` is told of each file once it is complete (in no
/// particular order: files are copied by several threads, see [`copiers`]).
fn fill(
    selection: &Selection,
    copy_dir: &Path,
    limits: &CopyLimits,
    cache: Option<&ScanCache>,
    keys: bool,
    written: &mut dyn FnMut(Written<'_>) -> Result<(), Error>,
) -> Result<(CopyReport, Option<Settled>), Error> {
    let copy_dir = resolve_copy_dir(copy_dir)?;
    let runs = runs(&selection.files);
    let copier = Copier {
        selection,
        copy_dir: &copy_dir,
        limits,
        bytes: AtomicU64::new(0),
        reflinks: match selection.files.first() {
            Some(first) => Reflinks::probe(&copy_dir, &selection.root.join(&first.path)),
            None => Reflinks::new(),
        },
        cache,
        scanned: AtomicUsize::new(0),
        trusted: AtomicUsize::new(0),
    };
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut blocked = selection.blocked.clone();
    let mut copied = 0usize;
    let mut reflinked = 0usize;
    let mut failure: Option<Error> = None;
    let mut fresh = Vec::new();
    // Outcomes go to this thread a run at a time: one wake-up per run, not per file.
    let (tx, rx) = mpsc::channel::<Vec<Result<Outcome, Error>>>();
    std::thread::scope(|scope| {
        for _ in 0..copiers(selection.files.len(), copier.reflinks.working()) {
            let tx = tx.clone();
            let (copier, runs, next, stop) = (&copier, &runs, &next, &stop);
            scope.spawn(move || {
                let mut buf = Vec::new();
                let mut made = HashSet::new();
                while !stop.load(Ordering::Relaxed) {
                    let Some(run) = runs.get(next.fetch_add(1, Ordering::Relaxed)) else {
                        return;
                    };
                    let mut done = Vec::with_capacity(run.len());
                    for i in run.clone() {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let outcome = copier.one(i, &mut buf, &mut made);
                        let failed = outcome.is_err();
                        done.push(outcome);
                        if failed {
                            break;
                        }
                    }
                    let failed = done.last().is_some_and(|o| o.is_err());
                    if tx.send(done).is_err() || failed {
                        return;
                    }
                }
            });
        }
        drop(tx);
        for outcome in rx.into_iter().flatten() {
            match outcome {
                Ok(Outcome::Copied {
                    index,
                    source,
                    copy,
                    cloned,
                    remember,
                }) if failure.is_none() => {
                    let told = written(Written {
                        path: &selection.files[index].path,
                        source: &source,
                        copy: &copy,
                    });
                    match told {
                        Ok(()) => {
                            copied += 1;
                            reflinked += usize::from(cloned);
                            fresh.extend(remember);
                        }
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            failure = Some(e);
                        }
                    }
                }
                Ok(Outcome::Copied { .. }) => {}
                Ok(Outcome::Blocked(b, remember)) => {
                    blocked.push(b);
                    fresh.extend(remember);
                }
                Err(e) => {
                    stop.store(true, Ordering::Relaxed);
                    failure.get_or_insert(e);
                }
            }
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    blocked.sort_by(|a, b| a.path.cmp(&b.path));
    let settled = keys.then(|| {
        fresh
            .iter()
            .map(|e| (e.path().to_string(), e.key()))
            .collect()
    });
    if let Some(cache) = cache {
        cache.save(&selection.files, fresh);
    }
    let bytes = copier.bytes.into_inner();
    let (scanned_files, trusted_files) = (copier.scanned.into_inner(), copier.trusted.into_inner());
    let report = CopyReport {
        copy_directory: copy_dir,
        source: selection.root.clone(),
        included_files: copied,
        bytes,
        blocked_files: blocked,
        reflinked_files: reflinked,
        scanned_files,
        trusted_files,
        snapshot: false,
    };
    Ok((report, settled))
}

/// How many threads copy `files` files: one per core, at most [`MAX_COPIERS`], and one for
/// a small selection; when `cloning`, [`MAX_CLONERS`] whatever the cores.
fn copiers(files: usize, cloning: bool) -> usize {
    if files < 2 * RUN_FILES {
        return 1;
    }
    if cloning {
        return MAX_CLONERS;
    }
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, MAX_COPIERS)
}

/// Splits the (sorted) files into runs of one directory and at most [`RUN_FILES`] files,
/// so that threads seldom create files in the same directory at once.
fn runs(files: &[SelectedFile]) -> Vec<Range<usize>> {
    fn parent(p: &str) -> &str {
        p.rfind('/').map_or("", |i| &p[..i])
    }
    let mut runs = Vec::new();
    let mut start = 0;
    for i in 1..=files.len() {
        let ends = i == files.len()
            || i - start == RUN_FILES
            || parent(&files[i].path) != parent(&files[start].path);
        if ends {
            runs.push(start..i);
            start = i;
        }
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> SelectedFile {
        SelectedFile {
            path: path.to_string(),
            size: 0,
            dev: 0,
            ino: 0,
            mtime: (0, 0),
            ctime: (0, 0),
            mode: 0o644,
            pending_rule: None,
        }
    }

    #[test]
    fn runs_keep_to_one_directory_and_a_bounded_length() {
        let files: Vec<SelectedFile> = ["a", "b", "d-e", "d/x", "d/y", "e/f/g"]
            .into_iter()
            .map(file)
            .collect();
        assert_eq!(runs(&files), [0..3, 3..5, 5..6]);
        let many: Vec<SelectedFile> = (0..600).map(|i| file(&format!("d/{i:04}"))).collect();
        assert_eq!(runs(&many), [0..256, 256..512, 512..600]);
        assert!(runs(&[]).is_empty());
    }
}
