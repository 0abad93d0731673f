//! Files opened, read, written and made strictly beneath a directory handle, resolved in the
//! kernel.
//!
//! Legate serves files for an agent it does not trust, and reads and writes inside workspaces
//! that agent wrote. A check of the path followed by an open *by path* loses to an agent that
//! swaps a component for a symlink between the two. This crate owns the only safe shape: the
//! root is opened once (`O_DIRECTORY`) and held as a [`Root`]; every later access names a
//! path *relative to that handle*, which the kernel resolves beneath it in the same call that
//! opens the file:
//!
//! - **Linux 5.6+**: `openat2(2)` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_MAGICLINKS` (the raw syscall, through rustix's `linux_raw` backend).
//! - **Elsewhere** (`openat2` missing, `ENOSYS`, or refused by a seccomp filter, `EPERM`):
//!   a walk that opens one component at a time from the held directory fd with
//!   `openat(…, O_PATH | O_DIRECTORY | O_NOFOLLOW)`, the last with `O_NOFOLLOW`, and makes
//!   missing parents with `mkdirat`.
//!
//! Rules, whichever resolver runs:
//!
//! - the path is handled lexically first: `.` and empty components are dropped, `..` removes
//!   the component before it and is refused when it would leave the root; an absolute path is
//!   refused (or, with [`Root::relative`], must start with the root and is stripped of it);
//! - **any symlink component is refused**, including one that points back inside the root;
//! - writes go to a new temporary file made beneath the same directory (`O_CREAT | O_EXCL |
//!   O_NOFOLLOW`, named `.legate-beneath-<pid>-<n>.tmp`) which `renameat` then puts in
//!   place. Nothing is ever written through an existing name, so neither a symlink nor a
//!   hard link planted at the target can redirect the write, and a reader never sees half a
//!   file. The target's permission bits are kept. The data is not `fsync`ed;
//! - reads open with `O_NONBLOCK` (a FIFO planted at the path cannot hang the reader) and
//!   read only regular files, up to a caller's limit.
//!
//! This crate must never follow a symlink, open anything by an absolute path other than the
//! root, or decide whether an access is allowed (that is the caller's policy).
//!
//! ```
//! use legate_beneath::{BeneathError, Root};
//! use std::path::Path;
//!
//! # fn main() -> Result<(), BeneathError> {
//! let dir = tempfile::tempdir().map_err(|source| BeneathError::Root {
//!     path: "tmp".into(),
//!     source,
//! })?;
//! let root = Root::open(dir.path())?;
//! root.write(Path::new("notes/today.txt"), b"hello\n", true)?;
//! assert_eq!(root.read(Path::new("notes/./today.txt"), 1024)?, b"hello\n");
//!
//! // A symlink is refused, wherever it points.
//! std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link")).unwrap();
//! assert!(matches!(
//!     root.read(Path::new("link"), 1024),
//!     Err(BeneathError::Symlink { .. })
//! ));
//! // So is leaving the root.
//! assert!(root.read(Path::new("../x"), 1024).is_err());
//! # Ok(())
//! # }
//! ```

mod error;
mod path;
mod resolve;

pub use error::BeneathError;
pub use path::{components, strip_root};
pub use resolve::Resolver;

use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::{AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// What a path beneath the root names, seen without following it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file.
    File,
    /// A directory.
    Directory,
    /// A symlink (never followed).
    Symlink,
    /// A FIFO, socket or device.
    Other,
}

impl Kind {
    fn of(mode: u32) -> Self {
        match FileType::from_raw_mode(mode) {
            FileType::RegularFile => Self::File,
            FileType::Directory => Self::Directory,
            FileType::Symlink => Self::Symlink,
            _ => Self::Other,
        }
    }
}

/// A directory held open; every path is resolved beneath it.
#[derive(Debug)]
pub struct Root {
    dir: OwnedFd,
    path: PathBuf,
    resolver: Resolver,
}

/// How many fresh temporary names a write tries before giving up.
const TEMP_TRIES: usize = 16;

impl Root {
    /// Opens `path` (`O_PATH | O_DIRECTORY`) and holds it, resolving with the best resolver
    /// this kernel offers.
    ///
    /// `path` is Legate's own, not the agent's: it is opened as given (following symlinks in
    /// it), once.
    ///
    /// # Errors
    /// [`BeneathError::Root`] when it cannot be opened as a directory.
    pub fn open(path: &Path) -> Result<Self, BeneathError> {
        let dir = open_root(path)?;
        let resolver = resolve::best(dir.as_fd());
        Ok(Self {
            dir,
            path: path.to_path_buf(),
            resolver,
        })
    }

    /// Like [`Root::open`], with a chosen resolver. [`Resolver::Openat2`] on a kernel without
    /// it fails at each access.
    ///
    /// # Errors
    /// [`BeneathError::Root`] when it cannot be opened as a directory.
    pub fn open_with(path: &Path, resolver: Resolver) -> Result<Self, BeneathError> {
        Ok(Self {
            dir: open_root(path)?,
            path: path.to_path_buf(),
            resolver,
        })
    }

    /// The path the root was opened at.
    #[must_use]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The resolver in use.
    #[must_use]
    pub fn resolver(&self) -> Resolver {
        self.resolver
    }

    /// `path` (absolute under the root, or relative to it) as a path relative to the root,
    /// by text alone: see [`strip_root`].
    ///
    /// # Errors
    /// When the path is not under the root.
    pub fn relative(&self, path: &Path) -> Result<PathBuf, BeneathError> {
        strip_root(&self.path, path)
    }

    /// What `rel` names, without following it; `None` when it does not exist. Directories on
    /// the way must not be symlinks.
    ///
    /// # Errors
    /// A refusal, or a failed call other than "not found".
    pub fn kind(&self, rel: &Path) -> Result<Option<Kind>, BeneathError> {
        let names = components(rel)?;
        match self.open_names(&names, OFlags::PATH, rel) {
            Ok(fd) => Ok(Some(Kind::of(fstat(&fd, rel)?.st_mode))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Opens the regular file `rel` for reading.
    ///
    /// # Errors
    /// A refusal, [`BeneathError::IsDirectory`] or [`BeneathError::NotRegular`] when it is
    /// not a regular file, or the failed call.
    pub fn open_file(&self, rel: &Path) -> Result<(File, u64), BeneathError> {
        let names = components(rel)?;
        let flags = OFlags::RDONLY | OFlags::NONBLOCK | OFlags::NOCTTY;
        let fd = self.open_names(&names, flags, rel)?;
        let st = fstat(&fd, rel)?;
        match Kind::of(st.st_mode) {
            Kind::File => {}
            Kind::Directory => {
                return Err(BeneathError::IsDirectory {
                    path: rel.to_path_buf(),
                });
            }
            Kind::Symlink | Kind::Other => {
                return Err(BeneathError::NotRegular {
                    path: rel.to_path_buf(),
                });
            }
        }
        // A regular file ignores O_NONBLOCK; the size is the file's at the open.
        Ok((File::from(fd), u64::try_from(st.st_size).unwrap_or(0)))
    }

    /// The whole of the regular file `rel`, at most `max` bytes.
    ///
    /// # Errors
    /// As [`Root::open_file`], and [`BeneathError::TooLarge`] past `max`.
    pub fn read(&self, rel: &Path, max: u64) -> Result<Vec<u8>, BeneathError> {
        let (file, size) = self.open_file(rel)?;
        let too_large = || BeneathError::TooLarge {
            path: rel.to_path_buf(),
            max,
        };
        if size > max {
            return Err(too_large());
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        // One byte past the limit tells a file that grew after the fstat.
        file.take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|source| BeneathError::Io {
                op: "read",
                path: rel.to_path_buf(),
                source,
            })?;
        if bytes.len() as u64 > max {
            return Err(too_large());
        }
        Ok(bytes)
    }

    /// The directory `rel` (the root for an empty path), opened `O_PATH`.
    ///
    /// # Errors
    /// A refusal, or the failed call (not found, not a directory).
    pub fn open_dir(&self, rel: &Path) -> Result<OwnedFd, BeneathError> {
        let names = components(rel)?;
        resolve::directory(self.resolver, self.dir.as_fd(), &names, false, rel)
    }

    /// Makes the directory `rel` and its missing parents beneath the root (`mkdirat`, one
    /// component at a time; an existing symlink on the way is refused, never followed).
    ///
    /// # Errors
    /// A refusal, or the failed call.
    pub fn create_dir_all(&self, rel: &Path) -> Result<(), BeneathError> {
        let names = components(rel)?;
        resolve::directory(self.resolver, self.dir.as_fd(), &names, true, rel).map(drop)
    }

    /// Makes the one directory `rel` with `mode` (before the umask), its parents beneath the
    /// root already there; an existing name (a directory, a file, a symlink) is an `Io` error
    /// of kind `AlreadyExists`.
    ///
    /// # Errors
    /// A refusal, or the failed call.
    pub fn create_dir(&self, rel: &Path, mode: u32) -> Result<(), BeneathError> {
        let names = components(rel)?;
        let Some((name, parent)) = names.split_last() else {
            return Err(io("create the directory", rel, Errno::EXIST));
        };
        let dir = resolve::directory(self.resolver, self.dir.as_fd(), parent, false, rel)?;
        rustix::fs::mkdirat(&dir, name.as_os_str(), Mode::from_raw_mode(mode))
            .map_err(|e| io("create the directory", rel, e))
    }

    /// Replaces (or creates) the file `rel` with `bytes`: a temporary file beneath the same
    /// directory, renamed into place. With `parents`, missing parent directories are made.
    ///
    /// # Errors
    /// A refusal; [`BeneathError::IsDirectory`] when `rel` is a directory (or the root);
    /// [`BeneathError::NotRegular`] when it is a FIFO, socket or device; or the failed call.
    pub fn write(&self, rel: &Path, bytes: &[u8], parents: bool) -> Result<(), BeneathError> {
        let names = components(rel)?;
        let Some((name, parent)) = names.split_last() else {
            return Err(BeneathError::IsDirectory {
                path: rel.to_path_buf(),
            });
        };
        let dir = resolve::directory(self.resolver, self.dir.as_fd(), parent, parents, rel)?;
        let one = std::slice::from_ref(name);
        // What is there now decides the error and the permission bits; the rename below
        // replaces the name, whatever it has become meanwhile, and writes through nothing.
        let keep_mode = match resolve::open(
            self.resolver,
            dir.as_fd(),
            one,
            OFlags::PATH,
            Mode::empty(),
            rel,
        ) {
            Ok(fd) => {
                let st = fstat(&fd, rel)?;
                match Kind::of(st.st_mode) {
                    Kind::File => Some(Mode::from_raw_mode(st.st_mode & 0o7777)),
                    Kind::Directory => {
                        return Err(BeneathError::IsDirectory {
                            path: rel.to_path_buf(),
                        });
                    }
                    Kind::Symlink => {
                        return Err(BeneathError::Symlink {
                            path: rel.to_path_buf(),
                        });
                    }
                    Kind::Other => {
                        return Err(BeneathError::NotRegular {
                            path: rel.to_path_buf(),
                        });
                    }
                }
            }
            Err(e) if e.is_not_found() => None,
            Err(e) => return Err(e),
        };
        let (temp, fd) = create_temp(&dir, rel)?;
        let written = (|| {
            let mut file = File::from(fd);
            file.write_all(bytes).map_err(|source| BeneathError::Io {
                op: "write",
                path: rel.to_path_buf(),
                source,
            })?;
            if let Some(mode) = keep_mode {
                rustix::fs::fchmod(&file, mode).map_err(|e| io("set the mode of", rel, e))?;
            }
            rustix::fs::renameat(&dir, &temp, &dir, name.as_os_str()).map_err(|e| match e {
                Errno::ISDIR | Errno::NOTEMPTY | Errno::EXIST => BeneathError::IsDirectory {
                    path: rel.to_path_buf(),
                },
                e => io("rename into place", rel, e),
            })
        })();
        if written.is_err() {
            // The temporary name is ours only until the agent touches it; unlinking a name
            // never follows it.
            let _ = rustix::fs::unlinkat(&dir, &temp, AtFlags::empty());
        }
        written
    }

    fn open_names(
        &self,
        names: &[OsString],
        flags: OFlags,
        shown: &Path,
    ) -> Result<OwnedFd, BeneathError> {
        resolve::open(
            self.resolver,
            self.dir.as_fd(),
            names,
            flags,
            Mode::empty(),
            shown,
        )
    }
}

fn open_root(path: &Path) -> Result<OwnedFd, BeneathError> {
    rustix::fs::open(
        path,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| BeneathError::Root {
        path: path.to_path_buf(),
        source: e.into(),
    })
}

fn io(op: &'static str, path: &Path, errno: Errno) -> BeneathError {
    BeneathError::Io {
        op,
        path: path.to_path_buf(),
        source: errno.into(),
    }
}

fn fstat(fd: &OwnedFd, shown: &Path) -> Result<rustix::fs::Stat, BeneathError> {
    rustix::fs::fstat(fd).map_err(|e| io("inspect", shown, e))
}

/// A new file in `dir` under a fresh temporary name (`O_CREAT | O_EXCL | O_NOFOLLOW`: a name
/// planted beforehand, symlink or not, is skipped, never opened).
fn create_temp(dir: &OwnedFd, shown: &Path) -> Result<(OsString, OwnedFd), BeneathError> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let mut last = Errno::EXIST;
    for _ in 0..TEMP_TRIES {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let name = OsString::from(format!(".legate-beneath-{}-{n}.tmp", std::process::id()));
        match rustix::fs::openat(
            dir,
            name.as_os_str(),
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o666),
        ) {
            Ok(fd) => return Ok((name, fd)),
            Err(Errno::EXIST) => last = Errno::EXIST,
            Err(e) => return Err(io("create a temporary file for", shown, e)),
        }
    }
    Err(io("create a temporary file for", shown, last))
}
