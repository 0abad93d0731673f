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
/// the file is not a regular file.
///
/// The path is resolved beneath `root` in the kernel ([`legate_beneath`]), in the same call
/// that opens the file, so a directory swapped for a symlink meanwhile cannot redirect it.
pub fn read_inside(root: &Path, path: &str) -> Result<Option<Vec<u8>>, Error> {
    Ok(read_inside_with_metadata(root, path)?.map(|(bytes, _)| bytes))
}

/// [`read_inside`], with the metadata of the file read (taken from the open file).
pub fn read_inside_with_metadata(
    root: &Path,
    path: &str,
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
        Ok((file, _)) => read_regular(file, path).map(Some),
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

fn read_regular(mut file: File, path: &str) -> Result<(Vec<u8>, fs::Metadata), Error> {
    let meta = file.metadata().map_err(|e| {
        Error::caused_by(ErrorCode::Internal, format!("{path} could not be read"), e)
    })?;
    if !meta.is_file() {
        return Err(Error::new(
            ErrorCode::UnsafePath,
            format!("{path} is not a regular file"),
        ));
    }
    let mut buf = Vec::with_capacity(meta.len() as usize);
    file.read_to_end(&mut buf).map_err(|e| {
        Error::caused_by(ErrorCode::Internal, format!("{path} could not be read"), e)
    })?;
    Ok((buf, meta))
}
