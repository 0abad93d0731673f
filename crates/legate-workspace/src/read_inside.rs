//! Reading one file of a directory Legate does not trust (a copy the agent works in), by a
//! relative path, resolved beneath the directory in the kernel.
//!
//! This module owns that read only. It must never follow a symbolic link on the way, read
//! anything but a regular file, or resolve a path outside the directory.

use legate_core::{Error, ErrorCode};
use std::fs::{self, File};
use std::io::Read;
use std::path::Path;

/// Reads a file inside `root` at the safe relative `path` without following any symlink on
/// the way: `Ok(None)` when it does not exist, `UNSAFE_PATH` when a component is a link or
/// the file is not a regular file, `COPY_LIMIT_EXCEEDED` when it holds more than `max`
/// bytes (said by its size, or found while reading: a sparse file of a terabyte costs the
/// agent nothing, and would cost Legate that much memory).
///
/// The path is resolved beneath `root` in the kernel ([`legate_beneath`]), in the same call
/// that opens the file, so a directory swapped for a symlink meanwhile cannot redirect it.
pub fn read_inside(root: &Path, path: &str, max: u64) -> Result<Option<Vec<u8>>, Error> {
    Ok(read_inside_with_metadata(root, path, max)?.map(|(bytes, _)| bytes))
}

/// [`read_inside`], with the metadata of the file read (taken from the open file).
pub fn read_inside_with_metadata(
    root: &Path,
    path: &str,
    max: u64,
) -> Result<Option<(Vec<u8>, fs::Metadata)>, Error> {
    use legate_beneath::BeneathError;
    crate::include::check_path(path)?;
    let unreadable =
        |e: &dyn std::fmt::Display| Error::internal(format!("{path} could not be read: {e}"));
    let held = legate_beneath::Root::open(root).map_err(|e| match e.io_error() {
        Some(io) => unreadable(io),
        None => unreadable(&e),
    })?;
    match held.open_file(Path::new(path)) {
        Ok((file, _)) => read_regular(file, path, max).map(Some),
        Err(e) if e.is_not_found() => Ok(None),
        Err(BeneathError::Symlink { .. }) => Err(Error::new(
            ErrorCode::UnsafePath,
            format!("{path} is a symbolic link, or a directory on the way is"),
        )),
        Err(BeneathError::IsDirectory { .. } | BeneathError::NotRegular { .. }) => Err(Error::new(
            ErrorCode::UnsafePath,
            format!("{path} is not a regular file"),
        )),
        Err(e) if e.is_refusal() => Err(Error::new(ErrorCode::UnsafePath, format!("{path}: {e}"))),
        // A directory on the way that is a file.
        Err(e) if e.io_error().and_then(std::io::Error::raw_os_error) == Some(libc::ENOTDIR) => {
            Err(Error::new(
                ErrorCode::UnsafePath,
                format!("{path}: a directory on the way is not a directory"),
            ))
        }
        Err(e) => Err(match e.io_error() {
            Some(io) => unreadable(io),
            None => unreadable(&e),
        }),
    }
}

/// The most bytes read ahead of a file's size: what a file says of itself is not trusted.
const READ_AHEAD: u64 = 64 * 1024 * 1024;

fn read_regular(file: File, path: &str, max: u64) -> Result<(Vec<u8>, fs::Metadata), Error> {
    let meta = file.metadata().map_err(|e| {
        Error::caused_by(ErrorCode::Internal, format!("{path} could not be read"), e)
    })?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorCode::UnsafePath,
            format!("{path} is not a regular file"),
        ));
    }
    let over = || {
        Error::new(
            ErrorCode::CopyLimitExceeded,
            format!("{path} holds more than {max} bytes, the most Legate reads of one file here"),
        )
    };
    if meta.len() > max {
        return Err(over());
    }
    let mut buf = Vec::with_capacity(meta.len().min(READ_AHEAD) as usize);
    file.take(max.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| {
            Error::caused_by(ErrorCode::Internal, format!("{path} could not be read"), e)
        })?;
    if buf.len() as u64 > max {
        return Err(over());
    }
    Ok((buf, meta))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    /// A sparse file that says it is a terabyte is refused by its size, before any byte is
    /// read or any memory asked for; one within the bound is read whole.
    #[test]
    fn a_file_past_the_bound_is_refused_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let huge = File::create(root.join("huge")).unwrap();
        huge.set_len(1 << 40).unwrap();
        std::fs::write(root.join("small"), b"abc").unwrap();
        let err = read_inside(&root, "huge", 1 << 20).unwrap_err();
        assert_eq!(err.code, ErrorCode::CopyLimitExceeded, "{}", err.message);
        assert_eq!(read_inside(&root, "small", 3).unwrap().unwrap(), b"abc");
        let err = read_inside(&root, "small", 2).unwrap_err();
        assert_eq!(err.code, ErrorCode::CopyLimitExceeded);
        assert!(read_inside(&root, "absent", 2).unwrap().is_none());
    }
}
