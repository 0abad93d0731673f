//! Reflinks: a copy's file made by sharing the source file's blocks (`FICLONE`) on a file
//! system that can (btrfs, xfs with `reflink=1`, bcachefs), so the copy costs no data writes
//! and no disk until one of the two files is written.
//!
//! This module owns the one call and the decision whether a copy tries it at all: before a
//! copy starts, its first file is cloned into an unnamed file (`O_TMPFILE`) in the new
//! directory, which disappears when closed; a file system that cannot clone is then never
//! asked for that copy, and the copy writes bytes as it always did. A file that cannot be
//! cloned although others could (a file on another file system mounted inside the project) is
//! written, on its own.
//!
//! It must never decide what a copy holds: the caller scans the clone itself (the bytes
//! checked are the bytes in the copy, whatever the source became meanwhile) and removes it
//! when it is refused. It never clones into a file that already has content.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

/// Not tried yet.
const UNKNOWN: u8 = 0;
/// A clone succeeded: try every file.
const WORKS: u8 = 1;
/// The file system cannot clone between these two places: write bytes.
const REFUSED: u8 = 2;

/// Whether one copy clones its files; shared by its copying threads.
#[derive(Debug)]
pub(crate) struct Reflinks(AtomicU8);

/// What one attempt came to.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Cloned {
    /// `dst` now holds `src`'s bytes, sharing its blocks.
    Yes,
    /// Not cloned, nothing written to `dst`: write its bytes instead.
    No,
}

impl Reflinks {
    /// A copy's reflinks, not tried yet.
    pub(crate) fn new() -> Self {
        Self(AtomicU8::new(UNKNOWN))
    }

    /// A copy's reflinks, decided by cloning `sample` (a file of the project, opened without
    /// following links; a file that is not regular decides nothing) into an unnamed file in
    /// `dir` (the new copy). Undecided when the probe cannot be made: the first files decide.
    pub(crate) fn probe(dir: &Path, sample: &Path) -> Self {
        let found = Self::new();
        let src = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(sample);
        let tmp = OpenOptions::new()
            .read(true)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_TMPFILE)
            .open(dir);
        if let (Ok(src), Ok(tmp)) = (src, tmp)
            && src.metadata().is_ok_and(|m| m.is_file())
        {
            let _ = found.clone_file(&tmp, &src);
        }
        found
    }

    /// Whether a clone has worked in this copy.
    pub(crate) fn working(&self) -> bool {
        self.0.load(Ordering::Relaxed) == WORKS
    }

    /// Whether the next file should be cloned.
    pub(crate) fn worth_trying(&self) -> bool {
        self.0.load(Ordering::Relaxed) != REFUSED
    }

    /// Clones `src` into `dst` (a file just created, empty). `Ok(Cloned::No)` when the file
    /// system cannot (the first such answer, before any clone worked, stops the copy's
    /// attempts); an error for anything else (no space, an I/O error).
    pub(crate) fn clone_file(&self, dst: &File, src: &File) -> io::Result<Cloned> {
        match rustix::fs::ioctl_ficlone(dst, src) {
            Ok(()) => {
                self.0.store(WORKS, Ordering::Relaxed);
                Ok(Cloned::Yes)
            }
            Err(e) if cannot_clone(e) => {
                // Only the probe decides for the whole copy: once a clone worked, a refusal
                // is this file's alone.
                let _ =
                    self.0
                        .compare_exchange(UNKNOWN, REFUSED, Ordering::Relaxed, Ordering::Relaxed);
                // A refused clone wrote nothing; truncating anyway keeps the promise that the
                // bytes written next are the file's only content.
                dst.set_len(0)?;
                Ok(Cloned::No)
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// The answers that mean "these two files cannot share blocks", as opposed to a failure:
/// no support in the file system (`EOPNOTSUPP`, `ENOTTY`, `ENOSYS`), two file systems
/// (`EXDEV`), a file the file system will not clone (`EINVAL`: e.g. not block-aligned on a
/// file system with a larger block; `EPERM`/`ETXTBSY`: an immutable or swap file).
fn cannot_clone(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    [
        Errno::OPNOTSUPP,
        Errno::NOTTY,
        Errno::NOSYS,
        Errno::XDEV,
        Errno::INVAL,
        Errno::PERM,
        Errno::TXTBSY,
    ]
    .contains(&e)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_refusal_before_any_clone_stops_the_attempts() {
        // The machine's temporary directory (ext4 or tmpfs here) cannot clone: the probe
        // decides, and the file is left empty for the bytes to be written.
        let tmp = tempfile::tempdir().unwrap();
        if probe_dir_clones(tmp.path()) {
            eprintln!("skipped: {} can clone", tmp.path().display());
            return;
        }
        std::fs::write(tmp.path().join("src"), b"bytes").unwrap();
        let src = File::open(tmp.path().join("src")).unwrap();
        let dst = File::create(tmp.path().join("dst")).unwrap();
        let r = Reflinks::new();
        assert!(r.worth_trying());
        assert_eq!(r.clone_file(&dst, &src).unwrap(), Cloned::No);
        assert!(!r.worth_trying());
        assert_eq!(dst.metadata().unwrap().len(), 0);
        // The probe decides the same, and leaves no file behind.
        let before = std::fs::read_dir(tmp.path()).unwrap().count();
        assert!(!Reflinks::probe(tmp.path(), &tmp.path().join("src")).worth_trying());
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), before);
        // A probe that cannot be made (no such file) leaves it to the first files.
        let undecided = Reflinks::probe(tmp.path(), &tmp.path().join("missing"));
        assert!(undecided.worth_trying() && !undecided.working());
    }

    fn probe_dir_clones(dir: &std::path::Path) -> bool {
        std::fs::write(dir.join("p"), b"p").unwrap();
        let s = File::open(dir.join("p")).unwrap();
        let d = File::create(dir.join("q")).unwrap();
        rustix::fs::ioctl_ficlone(&d, &s).is_ok()
    }
}
