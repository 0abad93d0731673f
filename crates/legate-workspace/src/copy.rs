//! Making the copy: the selected files' bytes, written into a new private directory.
//!
//! This module owns the copy itself. Each file is opened without following links and checked
//! to be the very file that was measured (device, inode, size, mtime). Where the file system
//! can share blocks (`reflink`), the open file is cloned into the new one, measured again
//! (a write that landed meanwhile is `SOURCE_CHANGED`), and the clone itself, which only this
//! module can write, is read and scanned for credential patterns, then removed if refused.
//! Elsewhere the file is read once, measured again on the open file, scanned, and only then
//! written. Either way the bytes checked are the bytes in the copy, and the copy keeps the
//! source's mtime. The limits are enforced again on what is actually read. A few threads copy
//! at once, each taking runs of files of one directory; the baseline (`staging`) is told of
//! each file as it lands.
//!
//! It must never adopt an existing directory as a copy, follow a symlink, write outside the
//! new directory, or leave a half-made copy behind on failure.

use crate::baseline::Baseline;
use crate::reflink::{Cloned, Reflinks};
use crate::secrets::{BlockedFile, scan_selected};
use crate::select::{SelectedFile, Selection};
use crate::staging::{SourceIndex, Staging};
use crate::{CopyLimits, private_dir};
use legate_core::{Error, ErrorCode};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::ops::Range;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
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
    create_copy_dir(copy_dir)?;
    let result = fill(selection, copy_dir, limits, &mut |_| Ok(()));
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
    create_copy_dir(copy_dir)?;
    let result = (|| {
        let copy = resolve_copy_dir(copy_dir)?;
        let source = crate::baseline::source_repo(&selection.root);
        let baseline = Baseline::init(
            baseline_dir,
            &copy,
            source.as_ref().map(|s| s.objects.clone()),
        )?;
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
            let report = fill(selection, &copy, limits, &mut |w| staging.add(&w))?;
            let (tree, borrowed) = staging.finish(&baseline)?;
            tracing::debug!(
                files = report.included_files,
                borrowed,
                vouching,
                "baseline index written"
            );
            baseline.commit_tree(&tree)?;
            Ok(report)
        })();
        match staged {
            Ok(report) => Ok((report, baseline)),
            Err(e) => {
                let _ = fs::remove_dir_all(baseline.dir());
                Err(e)
            }
        }
    })();
    if result.is_err() {
        let _ = fs::remove_dir_all(copy_dir);
    }
    result
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

/// A run of files handed to one thread: files of one directory, at most this many.
const RUN_FILES: usize = 256;

/// Copies the selection; `written` is told of each file once it is complete (in no
/// particular order: files are copied by several threads, see [`copiers`]).
fn fill(
    selection: &Selection,
    copy_dir: &Path,
    limits: &CopyLimits,
    written: &mut dyn FnMut(Written<'_>) -> Result<(), Error>,
) -> Result<CopyReport, Error> {
    let copy_dir = resolve_copy_dir(copy_dir)?;
    let runs = runs(&selection.files);
    let copier = Copier {
        selection,
        copy_dir: &copy_dir,
        limits,
        bytes: AtomicU64::new(0),
        reflinks: Reflinks::new(),
    };
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let mut blocked = selection.blocked.clone();
    let mut copied = 0usize;
    let mut reflinked = 0usize;
    let mut failure: Option<Error> = None;
    // Outcomes go to this thread a run at a time: one wake-up per run, not per file.
    let (tx, rx) = mpsc::channel::<Vec<Result<Outcome, Error>>>();
    std::thread::scope(|scope| {
        for _ in 0..copiers(selection.files.len()) {
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
                        }
                        Err(e) => {
                            stop.store(true, Ordering::Relaxed);
                            failure = Some(e);
                        }
                    }
                }
                Ok(Outcome::Copied { .. }) => {}
                Ok(Outcome::Blocked(b)) => blocked.push(b),
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
    let bytes = copier.bytes.into_inner();
    Ok(CopyReport {
        copy_directory: copy_dir,
        source: selection.root.clone(),
        included_files: copied,
        bytes,
        blocked_files: blocked,
        reflinked_files: reflinked,
    })
}

/// How many threads copy `files` files: one per core, at most [`MAX_COPIERS`], and one for
/// a small selection.
fn copiers(files: usize) -> usize {
    if files < 2 * RUN_FILES {
        return 1;
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

/// What copying one file came to.
#[derive(Debug)]
// Sent once per file and consumed at once: boxing the larger variant would only add an
// allocation per file.
#[allow(clippy::large_enum_variant)]
enum Outcome {
    /// Written into the copy.
    Copied {
        index: usize,
        source: fs::Metadata,
        copy: fs::Metadata,
        /// Made by sharing the source's blocks.
        cloned: bool,
    },
    /// Left out: its content matched a secret rule.
    Blocked(BlockedFile),
}

/// What every copying thread shares.
#[derive(Debug)]
struct Copier<'a> {
    selection: &'a Selection,
    copy_dir: &'a Path,
    limits: &'a CopyLimits,
    /// Bytes read so far, by every thread.
    bytes: AtomicU64,
    /// Whether files are cloned.
    reflinks: Reflinks,
}

impl Copier<'_> {
    /// Copies file `index` of the selection; `buf` and `made` (directories made) are the
    /// thread's own.
    fn one(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
        made: &mut HashSet<PathBuf>,
    ) -> Result<Outcome, Error> {
        let f = &self.selection.files[index];
        let why = |why: &str| format!("{} changed while it was being copied: {why}", f.path);
        let changed = |w: &str| Error::new(ErrorCode::SourceChanged, why(w));
        let failed =
            |w: &str, e: std::io::Error| Error::caused_by(ErrorCode::SourceChanged, why(w), e);
        let src = self.selection.root.join(&f.path);
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&src)
            .map_err(|e| failed("it could not be opened", e))?;
        let meta = file
            .metadata()
            .map_err(|e| failed("it could not be measured", e))?;
        if !meta.is_file()
            || meta.dev() != f.dev
            || meta.ino() != f.ino
            || meta.len() != f.size
            || (meta.mtime(), meta.mtime_nsec()) != f.mtime
        {
            return Err(changed("it is no longer the file that was measured"));
        }
        if self.reflinks.worth_trying() {
            let out = self.create(f, made)?;
            match self
                .reflinks
                .clone_file(&out, &file)
                .map_err(|e| write_failed(&f.path, &e))?
            {
                Cloned::Yes => return self.cloned(index, &file, meta, out, buf),
                Cloned::No => return self.written(index, &mut file, meta, Some(out), buf, made),
            }
        }
        self.written(index, &mut file, meta, None, buf, made)
    }

    /// The clone of file `index` (just made in `out` from `file`, measured as `meta`): the
    /// source must not have changed since it was measured, and the clone, which nothing but
    /// this thread writes, is read whole and scanned; refused, it is removed.
    fn cloned(
        &self,
        index: usize,
        file: &File,
        meta: fs::Metadata,
        mut out: File,
        buf: &mut Vec<u8>,
    ) -> Result<Outcome, Error> {
        let f = &self.selection.files[index];
        let changed = |w: &str| {
            let why = format!("{} changed while it was being copied: {w}", f.path);
            Error::new(ErrorCode::SourceChanged, why)
        };
        let after = file.metadata().map_err(|e| write_failed(&f.path, &e))?;
        if !same_state(&meta, &after) {
            return Err(changed("it was written to while it was cloned"));
        }
        // Whatever the source held at the moment of the clone is what the copy holds: its
        // size and bytes are read from the clone, not from the source.
        let held = out.metadata().map_err(|e| write_failed(&f.path, &e))?;
        if held.len() != f.size {
            return Err(changed("its size changed"));
        }
        let content =
            read_measured(&mut out, f.size, buf).map_err(|e| write_failed(&f.path, &e))?;
        if content.len() as u64 != f.size {
            return Err(changed("its size changed"));
        }
        self.count(f.size)?;
        if let Some(blocked) = self.refused(f, content) {
            drop(out);
            let dst = self.copy_dir.join(&f.path);
            fs::remove_file(&dst).map_err(|e| write_failed(&f.path, &e))?;
            return Ok(blocked);
        }
        self.finish(index, meta, out, true)
    }

    /// File `index` read from `file` (measured as `meta`), scanned, and written: into `out`
    /// when it was already created (empty), else into a file created now.
    fn written(
        &self,
        index: usize,
        file: &mut File,
        meta: fs::Metadata,
        out: Option<File>,
        buf: &mut Vec<u8>,
        made: &mut HashSet<PathBuf>,
    ) -> Result<Outcome, Error> {
        let f = &self.selection.files[index];
        let why = |why: &str| format!("{} changed while it was being copied: {why}", f.path);
        let changed = |w: &str| Error::new(ErrorCode::SourceChanged, why(w));
        let failed =
            |w: &str, e: std::io::Error| Error::caused_by(ErrorCode::SourceChanged, why(w), e);
        let content =
            read_measured(file, f.size, buf).map_err(|e| failed("it could not be read", e))?;
        if content.len() as u64 != f.size {
            return Err(changed("its size changed"));
        }
        // The same file, untouched while it was read: no write landed in the middle.
        let after = file
            .metadata()
            .map_err(|e| failed("it could not be measured", e))?;
        if !same_state(&meta, &after) {
            return Err(changed("it was written to while it was read"));
        }
        self.count(f.size)?;
        if let Some(blocked) = self.refused(f, content) {
            if out.is_some() {
                drop(out);
                let dst = self.copy_dir.join(&f.path);
                fs::remove_file(&dst).map_err(|e| write_failed(&f.path, &e))?;
            }
            return Ok(blocked);
        }
        let mut out = match out {
            Some(out) => out,
            None => self.create(f, made)?,
        };
        out.write_all(content)
            .map_err(|e| write_failed(&f.path, &e))?;
        self.finish(index, meta, out, false)
    }

    /// Adds `size` bytes read to the copy's total: `COPY_LIMIT_EXCEEDED` past the limit.
    fn count(&self, size: u64) -> Result<(), Error> {
        let total = self
            .bytes
            .fetch_add(size, Ordering::Relaxed)
            .saturating_add(size);
        if total > self.limits.max_bytes {
            return Err(Error::new(
                ErrorCode::CopyLimitExceeded,
                format!(
                    "more than {} bytes were read from the project",
                    self.limits.max_bytes
                ),
            ));
        }
        Ok(())
    }

    /// The preflight's verdict on `content`, the whole of what `f` would hold in the copy.
    fn refused(&self, f: &SelectedFile, content: &[u8]) -> Option<Outcome> {
        let (reason, rule) = scan_selected(f.pending_rule, content)?;
        Some(Outcome::Blocked(BlockedFile {
            path: f.path.clone(),
            reason,
            rule: rule.to_string(),
        }))
    }

    /// Creates `f`'s file in the copy, new and empty (its directory too, once per thread).
    /// It is opened for reading as well: a clone is read back to be scanned.
    fn create(&self, f: &SelectedFile, made: &mut HashSet<PathBuf>) -> Result<File, Error> {
        let dst = self.copy_dir.join(&f.path);
        if let Some(parent) = dst.parent()
            && !made.contains(parent)
        {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| write_failed(&f.path, &e))?;
            made.insert(parent.to_path_buf());
        }
        let mode = if f.mode & 0o111 != 0 { 0o755 } else { 0o644 };
        OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&dst)
            .map_err(|e| write_failed(&f.path, &e))
    }

    /// Gives the finished copy of file `index` the source's mtime and measures it.
    fn finish(
        &self,
        index: usize,
        meta: fs::Metadata,
        out: File,
        cloned: bool,
    ) -> Result<Outcome, Error> {
        let f = &self.selection.files[index];
        // The source's mtime, as `cp -p` keeps it: besides telling build tools in the copy
        // how old each file is, it keeps the baseline's index free of racily clean entries
        // (a file changed in the second its index was written), which git would re-read.
        if let Ok(mtime) = meta.modified() {
            out.set_times(fs::FileTimes::new().set_modified(mtime))
                .map_err(|e| write_failed(&f.path, &e))?;
        }
        let copy = out.metadata().map_err(|e| write_failed(&f.path, &e))?;
        Ok(Outcome::Copied {
            index,
            source: meta,
            copy,
            cloned,
        })
    }
}

/// Reads `file`, measured at `size` bytes, into `buf` (kept between files, grown as
/// needed): one `read` of `size + 1` bytes when the file still has that size, so that a file
/// that grew shows it. Returns the bytes read; the caller compares the size measured after.
fn read_measured<'b>(
    file: &mut File,
    size: u64,
    buf: &'b mut Vec<u8>,
) -> std::io::Result<&'b [u8]> {
    let want = usize::try_from(size)
        .ok()
        .and_then(|s| s.checked_add(1))
        .ok_or_else(|| std::io::Error::other("the file is too large"))?;
    if buf.len() < want {
        buf.resize(want, 0);
    }
    let mut n = 0;
    // A short read of a regular file ends at its end; reading on until `read` says so would
    // cost a call per file, and the size measured after the read catches a file that grew.
    while n < want - 1 {
        match file.read(&mut buf[n..want]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(&buf[..n])
}

/// Whether two measures of one open file show it unchanged: same inode, size, mtime and
/// ctime (any write or metadata change moves the ctime).
fn same_state(a: &fs::Metadata, b: &fs::Metadata) -> bool {
    (
        a.ino(),
        a.size(),
        a.mtime(),
        a.mtime_nsec(),
        a.ctime(),
        a.ctime_nsec(),
    ) == (
        b.ino(),
        b.size(),
        b.mtime(),
        b.mtime_nsec(),
        b.ctime(),
        b.ctime_nsec(),
    )
}

fn write_failed(path: &str, e: &std::io::Error) -> Error {
    Error::new(
        ErrorCode::InvalidWorkspace,
        format!("{path} could not be written into the copy: {e}"),
    )
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
