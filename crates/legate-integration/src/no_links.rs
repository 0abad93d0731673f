//! File operations on absolute paths in the user's project that follow no symlink anywhere
//! on the path.
//!
//! Each opens the path's parent directory from `/` with every symlink refused
//! (`legate_beneath`: `openat2` with `RESOLVE_NO_SYMLINKS`, or a walk with `O_NOFOLLOW`
//! where the kernel lacks it), then acts on the last name through that directory, never
//! following it either. A project's root is canonical (resolved once, when its task was
//! made), so a symlink met on the way was put there since: by another writer of the
//! project (a shared-directory task's agent among them) swapping a directory for a link
//! between integration's check and its write. Such a path fails, naming the link, and
//! nothing is written, renamed or removed outside the project.
//!
//! It must never follow a link, nor act on a path that is not absolute.

use legate_beneath::{BeneathError, Root};
use rustix::fd::OwnedFd;
use rustix::fs::{AtFlags, Mode, OFlags};
use std::ffi::OsStr;
use std::fs::{File, Metadata};
use std::io;
use std::path::Path;
use std::sync::OnceLock;

/// `/`, held once opened: every path is resolved beneath it with no symlink followed. A
/// failure to open it is not kept: the next call tries again.
fn slash() -> io::Result<&'static Root> {
    static SLASH: OnceLock<Root> = OnceLock::new();
    if let Some(root) = SLASH.get() {
        return Ok(root);
    }
    let root = Root::open(Path::new("/")).map_err(to_io)?;
    Ok(SLASH.get_or_init(|| root))
}

/// A refusal or a failed call as an `io::Error` of the same kind (a refusal: `Other`).
fn to_io(e: BeneathError) -> io::Error {
    let kind = if e.is_not_found() {
        io::ErrorKind::NotFound
    } else {
        e.io_error().map_or(io::ErrorKind::Other, io::Error::kind)
    };
    io::Error::new(kind, e)
}

/// The parent directory of the absolute `path`, opened with no symlink followed, and the
/// last name.
fn parent_of(path: &Path) -> io::Result<(OwnedFd, &OsStr)> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} has no parent", path.display()),
        ));
    };
    let rel = parent.strip_prefix("/").map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not absolute", path.display()),
        )
    })?;
    Ok((slash()?.open_dir(rel).map_err(to_io)?, name))
}

/// Opens the last name of `path` through its parent, with `flags` (`O_NOFOLLOW` and
/// `O_CLOEXEC` always) and `mode`.
fn open_at(path: &Path, flags: OFlags, mode: u32) -> io::Result<File> {
    let (dir, name) = parent_of(path)?;
    let flags = flags | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&dir, name, flags, Mode::from_raw_mode(mode))?;
    Ok(File::from(fd))
}

/// Creates the new file `path` (`O_EXCL`) with `mode`, open for writing.
pub(crate) fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    open_at(path, OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL, mode)
}

/// Opens the file `path` for writing, refusing it unless it is what [`create_new`] just
/// made there: a regular file with one link and nothing in it. Nothing is cut on the open, so
/// a hard link to another file planted at that name meanwhile (by another writer of the
/// project) is refused before a byte of it changes.
pub(crate) fn open_fresh(path: &Path) -> io::Result<File> {
    // Non-blocking: a FIFO renamed onto the name fails the open (`ENXIO`), never waits.
    let file = open_at(path, OFlags::WRONLY | OFlags::NONBLOCK, 0)?;
    let meta = file.metadata()?;
    if !meta.is_file() || std::os::unix::fs::MetadataExt::nlink(&meta) != 1 || meta.len() != 0 {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!("{} is not the empty file just made there", path.display()),
        ));
    }
    Ok(file)
}

/// Opens the file or directory `path` for reading (to sync it). A FIFO is not waited on.
pub(crate) fn open_read(path: &Path) -> io::Result<File> {
    open_at(path, OFlags::RDONLY | OFlags::NONBLOCK, 0)
}

/// What `path` is, not following it (`None` when nothing is there, its directory included).
pub(crate) fn metadata(path: &Path) -> io::Result<Option<Metadata>> {
    let (dir, name) = match parent_of(path) {
        Ok(found) => found,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let flags = OFlags::PATH | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    match rustix::fs::openat(&dir, name, flags, Mode::empty()) {
        Ok(fd) => File::from(fd).metadata().map(Some),
        Err(rustix::io::Errno::NOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Renames `from` to `to`, both in the same directory.
pub(crate) fn rename_within(from: &Path, to: &Path) -> io::Result<()> {
    if from.parent() != to.parent() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "{} and {} are not in one directory",
                from.display(),
                to.display()
            ),
        ));
    }
    let (dir, from_name) = parent_of(from)?;
    let to_name = to
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "a path without a name"))?;
    Ok(rustix::fs::renameat(&dir, from_name, &dir, to_name)?)
}

/// Creates the directory `path` (its parent exists), as `mkdir` would (0777 less the
/// umask).
pub(crate) fn create_dir(path: &Path) -> io::Result<()> {
    let (dir, name) = parent_of(path)?;
    Ok(rustix::fs::mkdirat(&dir, name, Mode::from_raw_mode(0o777))?)
}

/// Removes the file (or link) `path`.
pub(crate) fn remove_file(path: &Path) -> io::Result<()> {
    let (dir, name) = parent_of(path)?;
    Ok(rustix::fs::unlinkat(&dir, name, AtFlags::empty())?)
}

/// Removes the empty directory `path`.
pub(crate) fn remove_dir(path: &Path) -> io::Result<()> {
    let (dir, name) = parent_of(path)?;
    Ok(rustix::fs::unlinkat(&dir, name, AtFlags::REMOVEDIR)?)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_symlink_anywhere_on_the_path_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let outside = base.join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::create_dir(base.join("real")).unwrap();
        std::os::unix::fs::symlink(&outside, base.join("link")).unwrap();
        let through = base.join("link/new.txt");
        assert!(create_new(&through, 0o600).is_err());
        assert!(create_dir(&base.join("link/d")).is_err());
        assert!(metadata(&through).is_err());
        assert!(std::fs::read_dir(&outside).unwrap().next().is_none());
        // The link itself, as a last name, is looked at and removed, never followed.
        assert!(
            metadata(&base.join("link"))
                .unwrap()
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(open_read(&base.join("link")).is_err());
        remove_file(&base.join("link")).unwrap();
        assert!(outside.is_dir());
        // A real path works; a fresh file opens again, one with content or a second link not.
        drop(create_new(&base.join("real/a.txt"), 0o600).unwrap());
        let mut f = open_fresh(&base.join("real/a.txt")).unwrap();
        std::io::Write::write_all(&mut f, b"x").unwrap();
        assert!(open_fresh(&base.join("real/a.txt")).is_err());
        drop(create_new(&base.join("real/e.txt"), 0o600).unwrap());
        std::fs::hard_link(base.join("real/e.txt"), base.join("real/f.txt")).unwrap();
        assert!(open_fresh(&base.join("real/e.txt")).is_err());
        rustix::fs::mknodat(
            rustix::fs::CWD,
            base.join("real/fifo"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert!(open_fresh(&base.join("real/fifo")).is_err());
        rename_within(&base.join("real/a.txt"), &base.join("real/b.txt")).unwrap();
        assert_eq!(std::fs::read(base.join("real/b.txt")).unwrap(), b"x");
        assert!(metadata(&base.join("real/a.txt")).unwrap().is_none());
        assert!(metadata(&base.join("missing/a.txt")).unwrap().is_none());
        assert!(rename_within(&base.join("real/b.txt"), &base.join("c.txt")).is_err());
        assert!(create_new(Path::new("relative/x"), 0o600).is_err());
    }
}
