//! Making the copy: the selected files' bytes, written into a new private directory.
//!
//! This module owns the copy itself. Each file is opened without following links, checked
//! to be the very file that was measured (device, inode, size, mtime), read once, scanned
//! for credential patterns, and only then written: the bytes checked are the bytes copied.
//! The limits are enforced again on what is actually read.
//!
//! It must never adopt an existing directory as a copy, follow a symlink, write outside the
//! new directory, or leave a half-made copy behind on failure.

use crate::baseline::Baseline;
use crate::secrets::{BlockReason, BlockedFile, scan_content};
use crate::select::Selection;
use crate::{CopyLimits, private_dir};
use legate_core::{Error, ErrorCode};
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

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
}

/// Copies `selection` into `copy_dir`, which must not exist yet; its parent is created with
/// mode 0700 when missing.
///
/// Errors: `SOURCE_CHANGED` when a file is not the one measured or changes size while being
/// read, `COPY_LIMIT_EXCEEDED` when the bytes read pass the limit, `INVALID_WORKSPACE` when
/// the directory cannot be made. On any error the new directory is removed.
pub fn make_copy(
    selection: &Selection,
    copy_dir: &Path,
    limits: &CopyLimits,
) -> Result<CopyReport, Error> {
    if let Some(parent) = copy_dir.parent() {
        private_dir(parent)?;
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(copy_dir)
        .map_err(|e| {
            Error::new(
                ErrorCode::InvalidWorkspace,
                format!("the copy {} could not be created: {e}", copy_dir.display()),
            )
        })?;
    let result = fill(selection, copy_dir, limits, &mut |_| Ok(()));
    if result.is_err() {
        let _ = fs::remove_dir_all(copy_dir);
    }
    result
}

/// [`make_copy`] and [`Baseline::create_from`] in one pass: the baseline (in `baseline_dir`,
/// which must not exist yet, borrowing the source's objects) stages each file while the next
/// ones are copied, so git's hashing overlaps the copy. On any error neither directory is
/// left.
pub fn make_copy_with_baseline(
    selection: &Selection,
    copy_dir: &Path,
    baseline_dir: &Path,
    limits: &CopyLimits,
) -> Result<(CopyReport, Baseline), Error> {
    if let Some(parent) = copy_dir.parent() {
        private_dir(parent)?;
    }
    fs::DirBuilder::new()
        .mode(0o700)
        .create(copy_dir)
        .map_err(|e| {
            Error::new(
                ErrorCode::InvalidWorkspace,
                format!("the copy {} could not be created: {e}", copy_dir.display()),
            )
        })?;
    let result = (|| {
        let copy = fs::canonicalize(copy_dir).map_err(|e| {
            Error::new(
                ErrorCode::InvalidWorkspace,
                format!("the copy {} cannot be resolved: {e}", copy_dir.display()),
            )
        })?;
        let borrow = crate::baseline::source_objects(&selection.root);
        let baseline = Baseline::init(baseline_dir, &copy, borrow)?;
        let staged = (|| {
            let mut stager = baseline.stager()?;
            let report = fill(selection, &copy, limits, &mut |path| stager.add(path))?;
            stager.finish()?;
            baseline.commit()?;
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

/// Copies the selection; `written` is told each relative path once its file is complete.
fn fill(
    selection: &Selection,
    copy_dir: &Path,
    limits: &CopyLimits,
    written: &mut dyn FnMut(&str) -> Result<(), Error>,
) -> Result<CopyReport, Error> {
    let copy_dir = fs::canonicalize(copy_dir).map_err(|e| {
        Error::new(
            ErrorCode::InvalidWorkspace,
            format!("the copy {} cannot be resolved: {e}", copy_dir.display()),
        )
    })?;
    let mut blocked = selection.blocked.clone();
    let mut made: HashSet<PathBuf> = HashSet::new();
    let mut copied = 0usize;
    let mut bytes = 0u64;
    let mut buf = Vec::new();
    for f in &selection.files {
        let changed = |why: &str| {
            Error::new(
                ErrorCode::SourceChanged,
                format!("{} changed while it was being copied: {why}", f.path),
            )
        };
        let src = selection.root.join(&f.path);
        let mut file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&src)
            .map_err(|e| changed(&format!("it could not be opened ({e})")))?;
        let meta = file
            .metadata()
            .map_err(|e| changed(&format!("it could not be measured ({e})")))?;
        if !meta.is_file()
            || meta.dev() != f.dev
            || meta.ino() != f.ino
            || meta.len() != f.size
            || (meta.mtime(), meta.mtime_nsec()) != f.mtime
        {
            return Err(changed("it is no longer the file that was measured"));
        }
        buf.clear();
        (&mut file)
            .take(f.size.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| changed(&format!("it could not be read ({e})")))?;
        if buf.len() as u64 != f.size {
            return Err(changed("its size changed"));
        }
        bytes = bytes.saturating_add(f.size);
        if bytes > limits.max_bytes {
            return Err(Error::new(
                ErrorCode::CopyLimitExceeded,
                format!(
                    "more than {} bytes were read from the project",
                    limits.max_bytes
                ),
            ));
        }
        if let Some(rule) = scan_content(&buf) {
            blocked.push(BlockedFile {
                path: f.path.clone(),
                reason: BlockReason::SecretContent,
                rule: rule.to_string(),
            });
            continue;
        }
        let dst = copy_dir.join(&f.path);
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
        let mut out = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&dst)
            .map_err(|e| write_failed(&f.path, &e))?;
        out.write_all(&buf).map_err(|e| write_failed(&f.path, &e))?;
        drop(out);
        written(&f.path)?;
        copied += 1;
    }
    blocked.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(CopyReport {
        copy_directory: copy_dir,
        source: selection.root.clone(),
        included_files: copied,
        bytes,
        blocked_files: blocked,
    })
}

fn write_failed(path: &str, e: &std::io::Error) -> Error {
    Error::new(
        ErrorCode::InvalidWorkspace,
        format!("{path} could not be written into the copy: {e}"),
    )
}

/// Reads a file inside `root` at the safe relative `path` without following any symlink on
/// the way: `Ok(None)` when it does not exist, `UNSAFE_PATH` when a component is a link or
/// the file is not a regular file.
pub fn read_inside(root: &Path, path: &str) -> Result<Option<Vec<u8>>, Error> {
    Ok(read_inside_with_metadata(root, path)?.map(|(bytes, _)| bytes))
}

/// [`read_inside`], with the metadata of the file read (taken from the open file).
pub(crate) fn read_inside_with_metadata(
    root: &Path,
    path: &str,
) -> Result<Option<(Vec<u8>, fs::Metadata)>, Error> {
    crate::include::check_path(path)?;
    let mut dir = root.to_path_buf();
    let parts: Vec<&str> = path.split('/').collect();
    for part in &parts[..parts.len().saturating_sub(1)] {
        dir.push(part);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(_) => {
                return Err(Error::new(
                    ErrorCode::UnsafePath,
                    format!("{path}: a directory on the way is a link or not a directory"),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::internal(format!("{path} could not be read: {e}"))),
        }
    }
    let full = root.join(path);
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&full)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(Error::new(
                ErrorCode::UnsafePath,
                format!("{path} is a symbolic link"),
            ));
        }
        Err(e) => return Err(Error::internal(format!("{path} could not be read: {e}"))),
    };
    read_regular(file, path).map(Some)
}

fn read_regular(mut file: File, path: &str) -> Result<(Vec<u8>, fs::Metadata), Error> {
    let meta = file
        .metadata()
        .map_err(|e| Error::internal(format!("{path} could not be read: {e}")))?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorCode::UnsafePath,
            format!("{path} is not a regular file"),
        ));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut buf)
        .map_err(|e| Error::internal(format!("{path} could not be read: {e}")))?;
    Ok((buf, meta))
}
