//! A file's stat identity: the fields of its metadata that show, without reading it, that it
//! is still the same file in the same state.
//!
//! This module owns [`FileState`], the one definition of "unchanged by stat" that the copy
//! (a file measured before and after it is read or cloned), the scan verdict cache (a file
//! measured now against the key a verdict was recorded under) and integration (an original
//! looked at again just before it is replaced) all compare. Two states compare equal only
//! when every field does; a field more is only stricter: a file wrongly seen as changed costs
//! a re-read or a `SOURCE_CHANGED`, never a wrong answer.
//!
//! It must never be used as a proof of a file's content by itself. Equal states say the bytes
//! are the same only where every write moves the ctime (the scan cache's trusted file
//! systems, with its rule against racily clean files, a write-back against writes through a
//! mapping) or where the bytes were read between two equal measures of one open file. A state
//! from another machine, or kept across a clock set back, proves nothing.

use serde::{Deserialize, Serialize};
use std::fs::Metadata;
use std::os::unix::fs::MetadataExt;

/// What stat data say of a file: which file it is and the state it is in.
///
/// Its serde form (an object of these six fields, the times as `[seconds, nanoseconds]`) is
/// part of the scan verdict cache's file format: a change to it needs that format's version
/// bumped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileState {
    /// The file system: inode numbers are only unique within one (a path looked up twice
    /// can cross a mount placed between the two).
    dev: u64,
    /// The file: a file renamed into place over it (an editor's save, a `git checkout`) has
    /// another inode, whatever its times.
    ino: u64,
    /// Its size: a write that grew or cut it shows here even before its times do.
    size: u64,
    /// Its type and permission bits: a chmod moves the ctime too, so this only makes the test
    /// stricter, where a ctime is not trusted to have moved; a copy keeps the executable bit
    /// and integration the original's mode, so a file with other bits is another state.
    mode: u32,
    /// Its mtime to the nanosecond: moved by every write, but settable by anyone who may
    /// write the file (`touch -d`, `utimensat`), so never enough alone.
    mtime: (i64, i64),
    /// Its ctime to the nanosecond: moved by every write and every metadata change, and set
    /// by no call a user can make.
    ctime: (i64, i64),
}

impl FileState {
    /// The state `meta` (from `stat`, `lstat` or `fstat`) shows.
    pub fn of(meta: &Metadata) -> Self {
        Self {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mode: meta.mode(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// Every field, in a fixed order (the project's base hashes them: `base`).
    pub(crate) fn to_bytes(self) -> [u8; 60] {
        let mut out = [0u8; 60];
        let fields: [&[u8]; 8] = [
            &self.dev.to_le_bytes(),
            &self.ino.to_le_bytes(),
            &self.size.to_le_bytes(),
            &self.mode.to_le_bytes(),
            &self.mtime.0.to_le_bytes(),
            &self.mtime.1.to_le_bytes(),
            &self.ctime.0.to_le_bytes(),
            &self.ctime.1.to_le_bytes(),
        ];
        let mut at = 0;
        for f in fields {
            out[at..at + f.len()].copy_from_slice(f);
            at += f.len();
        }
        out
    }

    /// Whether `meta` shows the file still in this state, in every field.
    pub fn matches(&self, meta: &Metadata) -> bool {
        *self == Self::of(meta)
    }

    /// Its fields, as [`FileState::from_parts`] takes them.
    pub(crate) fn parts(self) -> (Identity, Time, Time) {
        (
            (self.dev, self.ino, self.size, self.mode),
            self.mtime,
            self.ctime,
        )
    }

    /// Whether it is a regular file's.
    pub(crate) fn is_file(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFREG
    }

    /// Whether it is a symbolic link's.
    pub(crate) fn is_symlink(&self) -> bool {
        self.mode & libc::S_IFMT == libc::S_IFLNK
    }

    /// A state from its fields (a selection's `lstat`, a test's fixed state).
    pub(crate) fn from_parts(identity: Identity, mtime: Time, ctime: Time) -> Self {
        let (dev, ino, size, mode) = identity;
        Self {
            dev,
            ino,
            size,
            mode,
            mtime,
            ctime,
        }
    }
}

/// A file's device, inode, size and mode, as [`FileState::from_parts`] takes them.
pub(crate) type Identity = (u64, u64, u64, u32);

/// A time to the nanosecond: seconds and nanoseconds.
pub(crate) type Time = (i64, i64);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};
    use std::time::{Duration, SystemTime};

    fn state(p: &Path) -> FileState {
        FileState::of(&fs::symlink_metadata(p).unwrap())
    }

    /// A new file `f` holding `bytes` in a new directory (kept while the guard lives).
    fn fresh(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        fs::write(&p, bytes).unwrap();
        (dir, p)
    }

    #[test]
    fn an_unchanged_file_compares_equal() {
        let (_dir, p) = fresh(b"same");
        let before = state(&p);
        // Read, opened, measured through the open file: nothing changes it.
        assert_eq!(fs::read(&p).unwrap(), b"same");
        let open = fs::File::open(&p).unwrap();
        assert_eq!(FileState::of(&open.metadata().unwrap()), before);
        assert!(before.matches(&fs::metadata(&p).unwrap()));
    }

    #[test]
    fn a_chmod_changes_it() {
        let (_dir, p) = fresh(b"x");
        let before = state(&p);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        let after = state(&p);
        assert_ne!(after, before);
        // The mode alone tells, whatever the ctime did.
        assert_ne!(after.mode, before.mode);
    }

    #[test]
    fn a_touch_changes_it_even_with_the_mtime_put_back() {
        let (dir, p) = fresh(b"x");
        let meta = fs::metadata(&p).unwrap();
        let before = FileState::of(&meta);
        let file = fs::File::options().write(true).open(&p).unwrap();
        let later = SystemTime::now() + Duration::from_secs(3600);
        file.set_modified(later).unwrap();
        assert_ne!(state(&p), before, "touched");
        // The mtime set back exactly: the ctime still moved (set to the clock on each
        // change, which may be coarse: wait until it is past the first one).
        let first = (meta.ctime(), meta.ctime_nsec());
        let clock = dir.path().join("clock");
        loop {
            fs::write(&clock, b"").unwrap();
            let m = fs::metadata(&clock).unwrap();
            if (m.ctime(), m.ctime_nsec()) > first {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        file.set_modified(meta.modified().unwrap()).unwrap();
        let back = state(&p);
        assert_eq!((back.size, back.mtime), (before.size, before.mtime));
        assert_ne!(back, before, "only the ctime tells");
    }

    #[test]
    fn a_rename_into_place_of_another_inode_changes_it() {
        let (dir, p) = fresh(b"same bytes");
        let meta = fs::metadata(&p).unwrap();
        let before = FileState::of(&meta);
        let tmp = dir.path().join("f.tmp");
        fs::write(&tmp, b"same bytes").unwrap();
        fs::set_permissions(&tmp, meta.permissions()).unwrap();
        fs::File::options()
            .write(true)
            .open(&tmp)
            .unwrap()
            .set_modified(meta.modified().unwrap())
            .unwrap();
        fs::rename(&tmp, &p).unwrap();
        let after = state(&p);
        assert_eq!(
            (after.size, after.mode, after.mtime),
            (before.size, before.mode, before.mtime)
        );
        assert_ne!(after, before);
        assert_ne!(after.ino, before.ino);
    }

    #[test]
    fn its_serde_form_is_the_scan_cache_format() {
        let s = FileState::from_parts(
            (2049, 7, 10, 0o100644),
            (1_700_000_000, 5),
            (1_700_000_001, 7),
        );
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            r#"{"dev":2049,"ino":7,"size":10,"mode":33188,"mtime":[1700000000,5],"ctime":[1700000001,7]}"#
        );
        assert_eq!(serde_json::from_str::<FileState>(&json).unwrap(), s);
    }
}
