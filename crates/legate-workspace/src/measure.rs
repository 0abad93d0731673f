//! Measuring the selection's files: each file's `lstat`, taken through a handle on its
//! directory that was opened beneath the project's root without following a link.
//!
//! This module owns that measuring only. A directory is opened once for all the files git
//! listed in it ([`legate_beneath::Root::open_dir`]: resolved in the kernel, any symlink on
//! the way refused), then each file is measured by its name in it (`statx` with
//! `AT_SYMLINK_NOFOLLOW`; `fstatat` where the kernel has no `statx`, as the standard library
//! falls back). One lookup of one name per file instead of a walk of its whole path is most of
//! what made measuring 10,000 files cheaper, and a directory swapped for a link between the
//! two steps cannot redirect a file's measure.
//!
//! Where no handle can be had (the root cannot be opened, or the process is out of file
//! descriptors), files are measured by their whole path, each directory on the way checked
//! first, as the selection always did: a link swapped in between can then redirect a measure,
//! but never a copy, which opens each file beneath the root and checks it is the very file
//! measured (`copy`).
//!
//! It must never follow a symlink, read a file, or decide which files a copy gets (that is
//! `select`).

use crate::file_state::FileState;
use legate_beneath::{BeneathError, Root};
use rustix::fs::{AtFlags, StatxFlags};
use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;

/// What measuring one listed path found.
#[derive(Debug)]
pub(crate) enum Measured {
    /// Nothing is there any more (a tracked file deleted, or its directory).
    Gone,
    /// A directory on the way is a symlink, or not a directory.
    LinkedDirectory,
    /// The path's own `lstat`.
    Found(FileState),
    /// The measure failed.
    Failed(std::io::Error),
}

/// The state of a file from its `statx`, its fields derived as the standard library derives
/// them (`st_dev` is `makedev(major, minor)`), so that it equals [`FileState::of`] the same
/// file's `std::fs` metadata.
fn of_statx(s: &rustix::fs::Statx) -> FileState {
    FileState::from_parts(
        (
            libc::makedev(s.stx_dev_major, s.stx_dev_minor),
            s.stx_ino,
            s.stx_size,
            u32::from(s.stx_mode),
        ),
        (s.stx_mtime.tv_sec, i64::from(s.stx_mtime.tv_nsec)),
        (s.stx_ctime.tv_sec, i64::from(s.stx_ctime.tv_nsec)),
    )
}

/// Measures each of `paths` (relative to `root`, `/`-separated, already checked safe by
/// `include::path_problem`), answering in the same order.
pub(crate) fn measure(root: &Path, paths: &[&str]) -> Vec<Measured> {
    let held = match Root::open(root) {
        Ok(held) => held,
        // The root itself cannot be held: measure by whole paths, as the fallback does.
        Err(_) => return paths.iter().map(|p| by_path(root, p)).collect(),
    };
    // Each directory once, for all its files, whatever order git listed them in.
    let mut by_dir: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, p) in paths.iter().enumerate() {
        let dir = p.rsplit_once('/').map_or("", |(d, _)| d);
        by_dir.entry(dir).or_default().push(i);
    }
    let mut out: Vec<Option<Measured>> = paths.iter().map(|_| None).collect();
    for (dir, at) in by_dir {
        match open_dir(&held, dir) {
            Ok(fd) => {
                for i in at {
                    let name = paths[i].rsplit_once('/').map_or(paths[i], |(_, n)| n);
                    out[i] = Some(by_name(&fd, name));
                }
            }
            Err(DirRefused::NoHandle) => {
                for i in at {
                    out[i] = Some(by_path(root, paths[i]));
                }
            }
            Err(opened) => {
                for i in at {
                    out[i] = Some(opened.again());
                }
            }
        }
    }
    out.into_iter()
        .map(|m| m.unwrap_or(Measured::Gone))
        .collect()
}

/// Why a directory could not be opened, for each of its files.
enum DirRefused {
    Gone,
    LinkedDirectory,
    /// Out of file descriptors: measured by path instead.
    NoHandle,
    /// The failure's kind and, when it came from the system, its `errno`.
    Failed(std::io::ErrorKind, Option<i32>),
}

impl DirRefused {
    fn again(&self) -> Measured {
        match self {
            Self::Gone => Measured::Gone,
            Self::LinkedDirectory => Measured::LinkedDirectory,
            Self::NoHandle => Measured::Failed(std::io::Error::from_raw_os_error(libc::EMFILE)),
            Self::Failed(_, Some(errno)) => {
                Measured::Failed(std::io::Error::from_raw_os_error(*errno))
            }
            Self::Failed(kind, None) => Measured::Failed(std::io::Error::from(*kind)),
        }
    }
}

fn open_dir(held: &Root, dir: &str) -> Result<OwnedFd, DirRefused> {
    match held.open_dir(Path::new(dir)) {
        Ok(fd) => Ok(fd),
        Err(BeneathError::Symlink { .. }) => Err(DirRefused::LinkedDirectory),
        Err(e) if e.is_not_found() => Err(DirRefused::Gone),
        Err(e) => match e.io_error() {
            // A file where a directory was.
            Some(io) if io.raw_os_error() == Some(libc::ENOTDIR) => {
                Err(DirRefused::LinkedDirectory)
            }
            Some(io) if matches!(io.raw_os_error(), Some(libc::EMFILE | libc::ENFILE)) => {
                Err(DirRefused::NoHandle)
            }
            Some(io) => Err(DirRefused::Failed(io.kind(), io.raw_os_error())),
            None => Err(DirRefused::LinkedDirectory),
        },
    }
}

/// The `lstat` of `name` in the directory `dir`.
fn by_name(dir: &impl AsFd, name: &str) -> Measured {
    match lstat_at(dir, name) {
        Ok(stat) => Measured::Found(stat),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Measured::Gone,
        Err(e) => Measured::Failed(e),
    }
}

/// `statx` of `name` in `dir`, links not followed; `fstatat` where this kernel has no
/// `statx` (rustix answers `ENOSYS` then, a seccomp filter's refusal included).
fn lstat_at(dir: &impl AsFd, name: &str) -> std::io::Result<FileState> {
    match rustix::fs::statx(
        dir,
        name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::BASIC_STATS,
    ) {
        Ok(s) => Ok(of_statx(&s)),
        Err(rustix::io::Errno::NOSYS) => lstat_at_without_statx(dir, name),
        Err(e) => Err(e.into()),
    }
}

/// `fstatat` of `name` in `dir`, links not followed: what the standard library measures
/// where there is no `statx`.
fn lstat_at_without_statx(dir: &impl AsFd, name: &str) -> std::io::Result<FileState> {
    let s = rustix::fs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW)?;
    // The fields' widths differ by architecture; every value fits the wider type.
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    Ok(FileState::from_parts(
        (
            s.st_dev as u64,
            s.st_ino as u64,
            s.st_size as u64,
            s.st_mode as u32,
        ),
        (s.st_mtime as i64, s.st_mtime_nsec as i64),
        (s.st_ctime as i64, s.st_ctime_nsec as i64),
    ))
}

/// The fallback: `lstat` by the whole path, each directory on the way checked first.
fn by_path(root: &Path, path: &str) -> Measured {
    let mut end = 0;
    while let Some(pos) = path[end..].find('/') {
        let dir = &path[..end + pos];
        match std::fs::symlink_metadata(root.join(dir)) {
            Ok(m) if m.file_type().is_dir() => {}
            Ok(_) => return Measured::LinkedDirectory,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Measured::Gone,
            Err(e) => return Measured::Failed(e),
        }
        end += pos + 1;
    }
    match std::fs::symlink_metadata(root.join(path)) {
        Ok(m) => Measured::Found(FileState::of(&m)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Measured::Gone,
        Err(e) => Measured::Failed(e),
    }
}

#[cfg(test)]
#[path = "measure_tests.rs"]
mod tests;
