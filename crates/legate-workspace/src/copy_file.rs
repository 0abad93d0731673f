//! Copying one file of a selection into the copy: the per-file half of `copy`, run by its
//! threads.
//!
//! This module owns what happens to one file. It is opened without following links and
//! checked to be the very file that was measured (device, inode, size, mtime). Where the file
//! system can share blocks (`reflink`), the open file is cloned into the new one, the source
//! is measured again (another `FileState` than before, a write that landed meanwhile, is
//! `SOURCE_CHANGED`), and the clone itself, which only this thread writes, is read whole and
//! scanned; refused, it is removed.
//! Elsewhere the file is read once, measured again on the open file, scanned, and only then
//! written. Either way the bytes checked are exactly the bytes in the copy, whatever a racing
//! writer does to the source, and the copy keeps the source's mtime.
//!
//! A file the scan verdict cache (`scan_cache`) vouches for (its key matches the file as
//! opened, in every field) is not read: it is cloned, or copied in the kernel
//! (`copy_file_range`), and measured again; a file that changed meanwhile has its copy
//! removed and goes the full way above. A file scanned on a file system the cache trusts is
//! written back and measured first, so that its verdict can be recorded for the next copy.
//!
//! It must never follow a symlink, write outside the copy, write a byte that was neither
//! scanned nor covered by a verdict whose key still matched after it was copied, or leave a
//! refused file in the copy.

use crate::CopyLimits;
use crate::file_state::FileState;
use crate::reflink::{Cloned, Reflinks};
use crate::scan_cache::{self, Entry, ScanCache, Verdict};
use crate::secrets::{BlockedFile, scan_selected};
use crate::select::{SelectedFile, Selection};
use legate_core::{Error, ErrorCode};
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// What copying one file came to.
#[derive(Debug)]
// Sent once per file and consumed at once: boxing the larger variant would only add an
// allocation per file.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Outcome {
    /// Written into the copy.
    Copied {
        index: usize,
        source: fs::Metadata,
        copy: fs::Metadata,
        /// Made by sharing the source's blocks.
        cloned: bool,
        /// Its verdict, for the next copy's cache.
        remember: Option<Entry>,
    },
    /// Left out: its content matched a secret rule (with the verdict for the next copy).
    Blocked(BlockedFile, Option<Entry>),
}

/// What every copying thread shares.
#[derive(Debug)]
pub(crate) struct Copier<'a> {
    pub(crate) selection: &'a Selection,
    pub(crate) copy_dir: &'a Path,
    pub(crate) limits: &'a CopyLimits,
    /// Bytes read so far, by every thread.
    pub(crate) bytes: AtomicU64,
    /// Whether files are cloned.
    pub(crate) reflinks: Reflinks,
    /// The project's recorded verdicts, when the copy uses them.
    pub(crate) cache: Option<&'a ScanCache>,
    /// Files whose content was read and scanned.
    pub(crate) scanned: AtomicUsize,
    /// Files copied (or left out) on a recorded verdict, their content not read.
    pub(crate) trusted: AtomicUsize,
}

impl Copier<'_> {
    /// Copies file `index` of the selection; `buf` and `made` (directories made) are the
    /// thread's own.
    pub(crate) fn one(
        &self,
        index: usize,
        buf: &mut Vec<u8>,
        made: &mut HashSet<PathBuf>,
    ) -> Result<Outcome, Error> {
        let f = &self.selection.files[index];
        let changed = |w: &str| changed(&f.path, w);
        let failed = |w: &str, e: std::io::Error| changed_by(&f.path, w, e);
        let src = self.selection.root.join(&f.path);
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&src)
            .map_err(|e| failed("it could not be opened", e))?;
        let measure = |file: &File| {
            let meta = file
                .metadata()
                .map_err(|e| failed("it could not be measured", e))?;
            let same = meta.is_file()
                && meta.dev() == f.dev
                && meta.ino() == f.ino
                && meta.len() == f.size
                && (meta.mtime(), meta.mtime_nsec()) == f.mtime;
            if same {
                Ok(meta)
            } else {
                Err(changed("it is no longer the file that was measured"))
            }
        };
        let mut meta = measure(&file)?;
        if let Some(entry) = self.cache.and_then(|c| c.lookup(f, &file, &meta)) {
            return self.trusted(index, &mut file, meta, entry, buf, made);
        }
        // To be recorded, a verdict needs the file written back, then measured, with times
        // earlier than the clock read before (`scan_cache`).
        let mut record = false;
        if self.cache.is_some() && scan_cache::trusted_fs(&file) {
            let before = scan_cache::record_before();
            if scan_cache::write_back(&file) {
                meta = measure(&file)?;
                record = scan_cache::settled(&meta, before);
            }
        }
        if self.reflinks.worth_trying() {
            let out = self.create(f, made)?;
            match self
                .reflinks
                .clone_file(&out, &file)
                .map_err(|e| write_failed(&f.path, &e))?
            {
                Cloned::Yes => return self.cloned(index, &file, meta, out, buf, record),
                Cloned::No => {
                    return self.written(index, &mut file, meta, Some(out), buf, made, record);
                }
            }
        }
        self.written(index, &mut file, meta, None, buf, made, record)
    }

    /// File `index`, opened as `file` and measured as `meta`, whose recorded verdict
    /// `entry` matches: left out on it, or cloned (else copied in the kernel) without being
    /// read, then measured again; changed meanwhile, its copy is removed and it is read and
    /// scanned as any file.
    fn trusted(
        &self,
        index: usize,
        file: &mut File,
        meta: fs::Metadata,
        entry: &Entry,
        buf: &mut Vec<u8>,
        made: &mut HashSet<PathBuf>,
    ) -> Result<Outcome, Error> {
        let f = &self.selection.files[index];
        if let Some(blocked) = entry.blocked() {
            self.trusted.fetch_add(1, Ordering::Relaxed);
            return Ok(Outcome::Blocked(blocked, Some(entry.clone())));
        }
        let out = self.create(f, made)?;
        let mut cloned = false;
        if self.reflinks.worth_trying() {
            cloned = self
                .reflinks
                .clone_file(&out, file)
                .map_err(|e| write_failed(&f.path, &e))?
                == Cloned::Yes;
        }
        let copied = cloned || kernel_copy(file, &out, f.size).unwrap_or(false);
        let unchanged = copied
            && file
                .metadata()
                .is_ok_and(|after| FileState::of(&meta).matches(&after))
            && out.metadata().is_ok_and(|held| held.len() == f.size);
        if !unchanged {
            drop(out);
            let dst = self.copy_dir.join(&f.path);
            fs::remove_file(&dst).map_err(|e| write_failed(&f.path, &e))?;
            return self.written(index, file, meta, None, buf, made, false);
        }
        self.count(f.size)?;
        self.trusted.fetch_add(1, Ordering::Relaxed);
        self.finish(index, meta, out, cloned, Some(entry.clone()))
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
        record: bool,
    ) -> Result<Outcome, Error> {
        let f = &self.selection.files[index];
        let changed = |w: &str| changed(&f.path, w);
        let after = file.metadata().map_err(|e| write_failed(&f.path, &e))?;
        if !FileState::of(&meta).matches(&after) {
            return Err(changed("it was written to while it was cloned"));
        }
        // Whatever the source held at the moment of the clone is what the copy holds: its
        // size and bytes are read from the clone, not from the source.
        let held = out.metadata().map_err(|e| write_failed(&f.path, &e))?;
        if held.len() != f.size {
            return Err(changed("its size changed"));
        }
        self.scanned.fetch_add(1, Ordering::Relaxed);
        let content =
            read_measured(&mut out, f.size, buf).map_err(|e| write_failed(&f.path, &e))?;
        if content.len() as u64 != f.size {
            return Err(changed("its size changed"));
        }
        self.count(f.size)?;
        let verdict = verdict(f, content);
        let remember = record
            .then(|| Entry::new(f, &meta, verdict.clone()))
            .flatten();
        if let Some(blocked) = verdict.blocked(&f.path) {
            drop(out);
            let dst = self.copy_dir.join(&f.path);
            fs::remove_file(&dst).map_err(|e| write_failed(&f.path, &e))?;
            return Ok(Outcome::Blocked(blocked, remember));
        }
        self.finish(index, meta, out, true, remember)
    }

    /// File `index` read from `file` (measured as `meta`), scanned, and written: into `out`
    /// when it was already created (empty), else into a file created now; its verdict kept
    /// for the next copy when `record`.
    #[allow(clippy::too_many_arguments)]
    fn written(
        &self,
        index: usize,
        file: &mut File,
        meta: fs::Metadata,
        out: Option<File>,
        buf: &mut Vec<u8>,
        made: &mut HashSet<PathBuf>,
        record: bool,
    ) -> Result<Outcome, Error> {
        let f = &self.selection.files[index];
        let changed = |w: &str| changed(&f.path, w);
        let failed = |w: &str, e: std::io::Error| changed_by(&f.path, w, e);
        self.scanned.fetch_add(1, Ordering::Relaxed);
        let content =
            read_measured(file, f.size, buf).map_err(|e| failed("it could not be read", e))?;
        if content.len() as u64 != f.size {
            return Err(changed("its size changed"));
        }
        // The same file, untouched while it was read: no write landed in the middle.
        let after = file
            .metadata()
            .map_err(|e| failed("it could not be measured", e))?;
        if !FileState::of(&meta).matches(&after) {
            return Err(changed("it was written to while it was read"));
        }
        self.count(f.size)?;
        let verdict = verdict(f, content);
        let remember = record
            .then(|| Entry::new(f, &meta, verdict.clone()))
            .flatten();
        if let Some(blocked) = verdict.blocked(&f.path) {
            if out.is_some() {
                drop(out);
                let dst = self.copy_dir.join(&f.path);
                fs::remove_file(&dst).map_err(|e| write_failed(&f.path, &e))?;
            }
            return Ok(Outcome::Blocked(blocked, remember));
        }
        let mut out = match out {
            Some(out) => out,
            None => self.create(f, made)?,
        };
        out.write_all(content)
            .map_err(|e| write_failed(&f.path, &e))?;
        self.finish(index, meta, out, false, remember)
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
        remember: Option<Entry>,
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
            remember,
        })
    }
}

/// The preflight's verdict on `content`, the whole of what `f` would hold in the copy.
fn verdict(f: &SelectedFile, content: &[u8]) -> Verdict {
    match scan_selected(f.pending_rule, content) {
        None => Verdict::Clean,
        Some((reason, rule)) => Verdict::Blocked {
            reason,
            rule: rule.to_string(),
        },
    }
}

/// Copies `size` bytes of `src` into `dst` (new, empty) in the kernel, from offset 0 of
/// both (the descriptors' own offsets untouched). `false` when fewer came.
fn kernel_copy(src: &File, dst: &File, size: u64) -> std::io::Result<bool> {
    let (mut off_in, mut off_out) = (0u64, 0u64);
    while off_in < size {
        let want = usize::try_from(size - off_in).unwrap_or(usize::MAX);
        let n = rustix::fs::copy_file_range(src, Some(&mut off_in), dst, Some(&mut off_out), want)?;
        if n == 0 {
            return Ok(false);
        }
    }
    Ok(true)
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

/// `SOURCE_CHANGED`: `path` changed while it was being copied (`why`).
fn changed(path: &str, why: &str) -> Error {
    Error::new(
        ErrorCode::SourceChanged,
        format!("{path} changed while it was being copied: {why}"),
    )
}

/// [`changed`], with the failure that showed it as the cause.
fn changed_by(path: &str, why: &str, e: std::io::Error) -> Error {
    Error::caused_by(
        ErrorCode::SourceChanged,
        format!("{path} changed while it was being copied: {why}"),
        e,
    )
}

fn write_failed(path: &str, e: &std::io::Error) -> Error {
    Error::new(
        ErrorCode::InvalidWorkspace,
        format!("{path} could not be written into the copy: {e}"),
    )
}
