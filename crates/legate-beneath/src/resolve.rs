//! The kernel side: one open of a list of names beneath a directory fd, never following a
//! symlink.
//!
//! This module owns the two resolvers. [`Resolver::Openat2`] hands the whole relative path
//! to `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`, so
//! the kernel refuses any symlink and any escape during the very lookup that opens the file.
//! [`Resolver::Walk`] opens one component at a time from the held directory fd with
//! `openat(…, O_NOFOLLOW)` (`O_PATH | O_DIRECTORY` for the directories on the way), so each
//! step starts from a directory already opened beneath the root. Neither ever passes a path
//! with `..`, a leading `/` or a symlink to the kernel for it to follow, and neither ever
//! reopens anything by its full path.

use crate::BeneathError;
use rustix::fd::{AsFd, BorrowedFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// How paths are resolved beneath a root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolver {
    /// `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS`
    /// (Linux 5.6+).
    Openat2,
    /// One `openat(…, O_NOFOLLOW)` per component from the root's directory fd, where
    /// `openat2` is missing (`ENOSYS`) or refused by a seccomp filter (`EPERM`).
    Walk,
}

const RESOLVE: ResolveFlags = ResolveFlags::BENEATH
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS);

/// How many times an `openat2` that answered `EAGAIN` (a rename raced the lookup) is tried.
const EAGAIN_TRIES: usize = 16;

/// The resolver this kernel supports, probed once per process on the first root opened.
pub(crate) fn best(dir: BorrowedFd<'_>) -> Resolver {
    static BEST: OnceLock<Resolver> = OnceLock::new();
    *BEST.get_or_init(|| {
        match rustix::fs::openat2(
            dir,
            ".",
            OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
            RESOLVE,
        ) {
            Ok(_) => Resolver::Openat2,
            Err(errno) => {
                tracing::warn!(
                    %errno,
                    "openat2 is not available; files beneath a root are resolved one O_NOFOLLOW component at a time"
                );
                Resolver::Walk
            }
        }
    })
}

fn io(op: &'static str, path: &Path, errno: Errno) -> BeneathError {
    BeneathError::Io {
        op,
        path: path.to_path_buf(),
        source: errno.into(),
    }
}

/// Whether `name` in `dir` is a symlink right now (only to word an error: the open that
/// failed already refused it).
fn is_symlink(dir: BorrowedFd<'_>, name: &OsString) -> bool {
    rustix::fs::statat(dir, name.as_os_str(), AtFlags::SYMLINK_NOFOLLOW)
        .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::Symlink)
}

/// Opens `names` beneath `dir` with `flags` (`O_CLOEXEC` and `O_NOFOLLOW` are added).
///
/// `shown` is the path named in errors. An empty `names` opens `dir` itself (`.`).
pub(crate) fn open(
    resolver: Resolver,
    dir: BorrowedFd<'_>,
    names: &[OsString],
    flags: OFlags,
    mode: Mode,
    shown: &Path,
) -> Result<OwnedFd, BeneathError> {
    let flags = flags | OFlags::CLOEXEC | OFlags::NOFOLLOW;
    match resolver {
        Resolver::Openat2 => {
            let joined: PathBuf = if names.is_empty() {
                PathBuf::from(".")
            } else {
                names.iter().collect()
            };
            let mut tries = 0;
            loop {
                match rustix::fs::openat2(dir, &joined, flags, mode, RESOLVE) {
                    Ok(fd) => return Ok(fd),
                    Err(Errno::AGAIN) if tries < EAGAIN_TRIES => tries += 1,
                    // ELOOP: a symlink on the way (RESOLVE_NO_SYMLINKS) or at the end
                    // (O_NOFOLLOW); EXDEV: the lookup would have left the root.
                    Err(Errno::LOOP) => {
                        return Err(BeneathError::Symlink {
                            path: shown.to_path_buf(),
                        });
                    }
                    Err(Errno::XDEV) => {
                        return Err(BeneathError::Escapes {
                            path: shown.to_path_buf(),
                        });
                    }
                    // `O_DIRECTORY` on a trailing symlink answers ENOTDIR: let the walk,
                    // as safe, tell a symlink from a file on the way.
                    Err(Errno::NOTDIR) => {
                        return open(Resolver::Walk, dir, names, flags, mode, shown);
                    }
                    Err(errno) => return Err(io("open", shown, errno)),
                }
            }
        }
        Resolver::Walk => {
            let Some((last, parents)) = names.split_last() else {
                return rustix::fs::openat(dir, ".", flags, mode).map_err(|e| io("open", shown, e));
            };
            let mut held: Option<OwnedFd> = None;
            for name in parents {
                let cur = held.as_ref().map_or(dir, AsFd::as_fd);
                let next = step(
                    cur,
                    name,
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                    shown,
                )?;
                held = Some(next);
            }
            let cur = held.as_ref().map_or(dir, AsFd::as_fd);
            step(cur, last, flags, mode, shown)
        }
    }
}

/// One component: `openat(dir, name, flags)` with `O_NOFOLLOW` already in `flags`.
fn step(
    dir: BorrowedFd<'_>,
    name: &OsString,
    flags: OFlags,
    mode: Mode,
    shown: &Path,
) -> Result<OwnedFd, BeneathError> {
    match rustix::fs::openat(dir, name.as_os_str(), flags, mode) {
        // `O_PATH | O_NOFOLLOW` without `O_DIRECTORY` opens a trailing symlink itself, as
        // openat2 does: the caller sees it in `fstat`.
        Ok(fd) => Ok(fd),
        Err(Errno::LOOP) => Err(BeneathError::Symlink {
            path: shown.to_path_buf(),
        }),
        Err(Errno::NOTDIR) if is_symlink(dir, name) => Err(BeneathError::Symlink {
            path: shown.to_path_buf(),
        }),
        Err(errno) => Err(io("open", shown, errno)),
    }
}

/// The directory `names` beneath `dir`, made (with `mkdirat`, one component at a time, never
/// through a symlink) where missing when `create` is set.
pub(crate) fn directory(
    resolver: Resolver,
    dir: BorrowedFd<'_>,
    names: &[OsString],
    create: bool,
    shown: &Path,
) -> Result<OwnedFd, BeneathError> {
    let flags = OFlags::PATH | OFlags::DIRECTORY;
    match open(resolver, dir, names, flags, Mode::empty(), shown) {
        Err(e) if create && e.is_not_found() => {}
        other => return other,
    }
    let mut held: Option<OwnedFd> = None;
    for name in names {
        let cur = held.as_ref().map_or(dir, AsFd::as_fd);
        let one = std::slice::from_ref(name);
        let next = match open(resolver, cur, one, flags, Mode::empty(), shown) {
            Err(e) if e.is_not_found() => {
                match rustix::fs::mkdirat(cur, name.as_os_str(), Mode::from_raw_mode(0o777)) {
                    // Someone else made it meanwhile: open whatever is there now, beneath.
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(errno) => return Err(io("create the directory", shown, errno)),
                }
                open(resolver, cur, one, flags, Mode::empty(), shown)?
            }
            other => other?,
        };
        held = Some(next);
    }
    match held {
        Some(fd) => Ok(fd),
        None => open(resolver, dir, &[], flags, Mode::empty(), shown),
    }
}
