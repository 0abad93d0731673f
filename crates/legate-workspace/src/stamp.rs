//! A copy's stamp: how every entry beneath a copy, and its baseline's repository (objects
//! aside), looks to `lstat`, hashed, so that hashes read from the copy once can be used again
//! later without reading it, only when nothing in it has changed since.
//!
//! [`copy_stamp`] first reads the file system's clock where the copy lives (the change time
//! of a file it writes in the baseline, which must be on the copy's file system), then
//! measures every entry in name order without following a link (files, directories, links,
//! anything: ignored files too; each on the device of its tree, the copy's root or the
//! baseline's repository), and hashes each one's path, mode (type included), owner,
//! size, links, device, inode, and modification and change times. A write to an entry after
//! it was measured moves its change time, which no unprivileged process can set, to the
//! clock's time then: not before the clock read first. An entry whose change time is not
//! before that read is *racy* (it may change again within the same tick with its times
//! unmoved), and then there is no stamp: the caller reads the copy again. A replaced entry
//! has another inode; an added or removed one changes the listing. So two stamps that are
//! equal prove that nothing measured changed in between, except through a writable shared
//! mapping of a process still alive (which the times follow only lazily): a copy whose
//! agent's processes could not be shown gone is never to be stamped (the engine checks).
//!
//! It must never follow a symbolic link, read a file's content, change the copy, or walk
//! more than its bound (a larger copy has no stamp).

use crate::baseline::Baseline;
use legate_core::{Error, ErrorCode};
use sha2::{Digest, Sha256};
use std::fs::{self, Metadata};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The file in the baseline directory whose change time is the clock's reading.
const CLOCK: &str = "clock";

/// Why there is no stamp; the caller reads the copy again in every case.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unstamped {
    /// An entry changed within the clock's last tick: it may change again unseen.
    Racy,
    /// More entries than the bound.
    TooLarge,
    /// The baseline is not on the copy's file system, or an entry is on another one: their
    /// clocks may tick differently.
    OtherFileSystem,
}

/// The stamp of the copy behind `baseline` now (a lower-case hex sha256), measuring at most
/// `max_entries` entries; see the module docs. `Ok(Err(why))` when there is none.
///
/// Errors: `COPY_UNAVAILABLE` when the copy or the baseline is gone, `SOURCE_CHANGED` when
/// an entry vanished while it was measured, `INTERNAL` when the clock file cannot be written.
pub fn copy_stamp(
    baseline: &Baseline,
    max_entries: usize,
) -> Result<Result<String, Unstamped>, Error> {
    let gone = |e: std::io::Error| {
        Error::caused_by(
            ErrorCode::CopyUnavailable,
            format!("the copy {} cannot be measured", baseline.copy().display()),
            e,
        )
    };
    let root = fs::symlink_metadata(baseline.copy()).map_err(gone)?;
    if !root.is_dir() {
        return Err(Error::new(
            ErrorCode::CopyUnavailable,
            format!("the copy {} is not a directory", baseline.copy().display()),
        ));
    }
    let clock = read_clock(baseline.dir())?;
    // One device, or one mount: a copy and a baseline that are snapshots of a project's base
    // are two subvolumes, each its own `st_dev`, of one btrfs file system and one clock.
    let one_clock = clock.dev() == root.dev()
        || crate::subvolume::one_mount(&[&baseline.dir().join(CLOCK), baseline.copy()]);
    if !one_clock {
        return Ok(Err(Unstamped::OtherFileSystem));
    }
    let git = baseline.git_dir();
    let git_meta = fs::symlink_metadata(&git).map_err(gone)?;
    // The repository beside its clock (one subvolume for a snapshot baseline, one device
    // for any other).
    if git_meta.dev() != clock.dev() {
        return Ok(Err(Unstamped::OtherFileSystem));
    }
    let mut walk = Walk {
        hash: Sha256::new(),
        left: max_entries,
        dev: root.dev(),
        now: (clock.ctime(), clock.ctime_nsec()),
    };
    let stamped = (|| {
        walk.entry(b"", &root)?;
        walk.dir(baseline.copy(), b"")?;
        // The baseline's own state (its HEAD, refs, index, ignore and attribute files),
        // under a name no copy's path can have; its objects only ever grow and are left out.
        walk.dev = git_meta.dev();
        walk.entry(BASELINE, &git_meta)?;
        walk.dir(&git, BASELINE)
    })();
    match stamped {
        Ok(()) => Ok(Ok(walk
            .hash
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect())),
        Err(Stop::Unstamped(why)) => Ok(Err(why)),
        Err(Stop::Failed(e)) => Err(e),
    }
}

/// The name the baseline's repository is measured under.
const BASELINE: &[u8] = b"\0baseline";

/// Writes the clock file and reads its times back.
///
/// It is written twice, its times read after each write. A kernel with fine-grained change
/// times (Linux 6.13 and later, on ext4, xfs, btrfs and tmpfs) stamps a change at the clock's
/// tick unless someone read the file's times since its last change, and then at the
/// nanosecond; so the first write (of a file just made, at a copy's first stamp) may read a
/// whole tick early, and every entry the agent changed within that tick would be racy, where
/// the second write reads the time now. Any change after it is stamped no earlier (the
/// kernel never hands out a coarse time before a fine one it gave), so the reading stays
/// sound. A kernel without them stamps both at the tick, as before.
fn read_clock(dir: &Path) -> Result<Metadata, Error> {
    let failed = |e: std::io::Error| {
        Error::caused_by(ErrorCode::Internal, "the copy's clock could not be read", e)
    };
    let mut f = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(dir.join(CLOCK))
        .map_err(failed)?;
    // A write always moves the times, whatever the file held.
    f.write_all(b"t").map_err(failed)?;
    f.metadata().map_err(failed)?;
    f.write_all(b"t").map_err(failed)?;
    f.metadata().map_err(failed)
}

/// Why a walk stopped before its end.
enum Stop {
    Unstamped(Unstamped),
    Failed(Error),
}

struct Walk {
    hash: Sha256,
    /// Entries still allowed.
    left: usize,
    dev: u64,
    /// The clock's reading: the change time an entry must be before.
    now: (i64, i64),
}

impl Walk {
    /// Measures `dir`'s entries (named beneath `prefix`) in name order, and descends into
    /// each real directory (never through a link).
    fn dir(&mut self, dir: &Path, prefix: &[u8]) -> Result<(), Stop> {
        let changed = |e: std::io::Error| {
            Stop::Failed(Error::caused_by(
                ErrorCode::SourceChanged,
                format!("{} changed while it was measured", dir.display()),
                e,
            ))
        };
        let mut names: Vec<std::ffi::OsString> = Vec::new();
        for entry in fs::read_dir(dir).map_err(changed)? {
            names.push(entry.map_err(changed)?.file_name());
            if names.len() > self.left {
                return Err(Stop::Unstamped(Unstamped::TooLarge));
            }
        }
        names.sort();
        for name in names {
            if prefix == BASELINE && name == "objects" {
                continue;
            }
            let mut path = prefix.to_vec();
            path.push(b'/');
            path.extend_from_slice(name.as_bytes());
            let full = dir.join(&name);
            let meta = fs::symlink_metadata(&full).map_err(changed)?;
            self.entry(&path, &meta)?;
            if meta.file_type().is_dir() {
                self.dir(&full, &path)?;
            }
        }
        Ok(())
    }

    /// Hashes one entry.
    fn entry(&mut self, path: &[u8], m: &Metadata) -> Result<(), Stop> {
        self.left = self
            .left
            .checked_sub(1)
            .ok_or(Stop::Unstamped(Unstamped::TooLarge))?;
        if m.dev() != self.dev {
            return Err(Stop::Unstamped(Unstamped::OtherFileSystem));
        }
        if (m.ctime(), m.ctime_nsec()) >= self.now {
            return Err(Stop::Unstamped(Unstamped::Racy));
        }
        let h = &mut self.hash;
        h.update((path.len() as u64).to_be_bytes());
        h.update(path);
        for n in [
            u64::from(m.mode()),
            u64::from(m.uid()),
            u64::from(m.gid()),
            m.size(),
            m.nlink(),
            m.dev(),
            m.ino(),
        ] {
            h.update(n.to_be_bytes());
        }
        for t in [m.mtime(), m.mtime_nsec(), m.ctime(), m.ctime_nsec()] {
            h.update(t.to_be_bytes());
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn walk(dev: u64, now: (i64, i64)) -> Walk {
        Walk {
            hash: Sha256::new(),
            left: 10,
            dev,
            now,
        }
    }

    #[test]
    fn an_entry_changed_at_or_after_the_clock_reading_is_racy_and_proves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let m = fs::symlink_metadata(dir.path()).unwrap();
        let changed = (m.ctime(), m.ctime_nsec());
        assert!(matches!(
            walk(m.dev(), changed).entry(b"/x", &m),
            Err(Stop::Unstamped(Unstamped::Racy))
        ));
        assert!(matches!(
            walk(m.dev(), (m.ctime() - 1, 0)).entry(b"/x", &m),
            Err(Stop::Unstamped(Unstamped::Racy))
        ));
        assert!(walk(m.dev(), (m.ctime() + 1, 0)).entry(b"/x", &m).is_ok());
        assert!(matches!(
            walk(m.dev().wrapping_add(1), (m.ctime() + 1, 0)).entry(b"/x", &m),
            Err(Stop::Unstamped(Unstamped::OtherFileSystem))
        ));
    }
}
