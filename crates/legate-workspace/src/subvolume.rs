//! Btrfs subvolumes: made empty, snapshotted whole, and told apart from other directories.
//!
//! This module owns the two `ioctl`s a project's base needs (`BTRFS_IOC_SUBVOL_CREATE` and
//! `BTRFS_IOC_SNAP_CREATE`) and the checks that say whether they can be asked at all: the
//! directory lies on btrfs (`statfs`), and two directories lie on one mount (`statx`'s mount
//! id), so a snapshot made in one of a subvolume in the other is possible.
//!
//! A snapshot is a new subvolume sharing every block and every inode of its source, inode
//! numbers and times included, until either side writes; only `st_dev` differs (each
//! subvolume has its own). A subvolume is removed as a directory is (`rmdir` deletes an
//! empty one, Linux 4.18 and later), so `fs::remove_dir_all` removes a snapshot whole.
//!
//! It must never be asked to snapshot a path it did not open itself without following links,
//! nor to name a new subvolume with anything but a single path component.

use std::ffi::OsStr;
use std::fs::File;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// `BTRFS_SUPER_MAGIC`, the `f_type` `statfs` gives for btrfs.
const BTRFS_MAGIC: u64 = 0x9123_683E;

/// Whether `dir` lies on btrfs.
pub(crate) fn is_btrfs(dir: &Path) -> bool {
    rustix::fs::statfs(dir).is_ok_and(|s| s.f_type as u64 == BTRFS_MAGIC)
}

/// The id of the mount `path` lies on (`statx`'s `stx_mnt_id`), links not followed; `None`
/// when the kernel or the path cannot tell.
pub(crate) fn mount_id(path: &Path) -> Option<u64> {
    use rustix::fs::{AtFlags, StatxFlags};
    let st = rustix::fs::statx(
        rustix::fs::CWD,
        path,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::MNT_ID,
    )
    .ok()?;
    (StatxFlags::from_bits_retain(st.stx_mask) & StatxFlags::MNT_ID == StatxFlags::MNT_ID)
        .then_some(st.stx_mnt_id)
}

/// Whether every path of `paths` lies on one mount (and so on one file system, whose clock
/// and whose snapshots they share).
pub(crate) fn one_mount(paths: &[&Path]) -> bool {
    let mut ids = paths.iter().map(|p| mount_id(p));
    match ids.next() {
        Some(Some(first)) => ids.all(|id| id == Some(first)),
        _ => false,
    }
}

/// Opens the directory `path`, never through a link.
fn open_dir(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// The parent of `path` opened, and `path`'s last component, checked to be one plain name.
fn parent_and_name(path: &Path) -> io::Result<(File, &OsStr)> {
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a plain name in a directory",
        )
    };
    let name = path.file_name().ok_or_else(invalid)?;
    let parent = path.parent().ok_or_else(invalid)?;
    Ok((open_dir(parent)?, name))
}

/// Makes the empty subvolume `path` (which must not exist; its parent must).
pub(crate) fn create(path: &Path) -> io::Result<()> {
    let (parent, name) = parent_and_name(path)?;
    sys::vol_args(&parent, None, name.as_bytes(), sys::SUBVOL_CREATE)
}

/// Makes `dest` (which must not exist; its parent must, on the same mount) a writable
/// snapshot of the subvolume `source`.
pub(crate) fn snapshot(source: &Path, dest: &Path) -> io::Result<()> {
    let src = open_dir(source)?;
    let (parent, name) = parent_and_name(dest)?;
    sys::vol_args(&parent, Some(&src), name.as_bytes(), sys::SNAP_CREATE)
}

mod sys {
    #![allow(unsafe_code)]
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsFd, AsRawFd};

    /// `struct btrfs_ioctl_vol_args`: a descriptor and a name, 4,096 bytes in all.
    #[repr(C)]
    struct VolArgs {
        fd: i64,
        name: [u8; NAME_MAX + 1],
    }

    /// `BTRFS_PATH_NAME_MAX`.
    const NAME_MAX: usize = 4087;

    /// `_IOW(BTRFS_IOCTL_MAGIC, nr, struct btrfs_ioctl_vol_args)`.
    const fn iow(nr: u64) -> u64 {
        (1 << 30) | ((std::mem::size_of::<VolArgs>() as u64) << 16) | (0x94 << 8) | nr
    }

    /// `BTRFS_IOC_SNAP_CREATE`.
    pub(super) const SNAP_CREATE: u64 = iow(1);
    /// `BTRFS_IOC_SUBVOL_CREATE`.
    pub(super) const SUBVOL_CREATE: u64 = iow(14);

    /// Calls `request` on `dir` with `fd` (or -1) and `name`.
    pub(super) fn vol_args(
        dir: &File,
        fd: Option<&File>,
        name: &[u8],
        request: u64,
    ) -> io::Result<()> {
        if name.is_empty() || name.len() > NAME_MAX || name.contains(&b'/') || name.contains(&0) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a subvolume's name must be one path component",
            ));
        }
        let mut args = VolArgs {
            fd: fd.map_or(-1, |f| i64::from(f.as_fd().as_raw_fd())),
            name: [0; NAME_MAX + 1],
        };
        args.name[..name.len()].copy_from_slice(name);
        // SAFETY: `dir` is an open descriptor for the call's length, and `args` is a live,
        // initialized `struct btrfs_ioctl_vol_args` of the size the request number encodes,
        // its name NUL-terminated (at most NAME_MAX bytes were copied into NAME_MAX + 1).
        let rc = unsafe {
            libc::ioctl(
                dir.as_raw_fd(),
                request as libc::Ioctl,
                &mut args as *mut VolArgs,
            )
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_request_numbers_are_the_kernel_s() {
            // From linux/btrfs.h, as the compiler evaluates them on x86_64 and aarch64.
            assert_eq!(std::mem::size_of::<super::VolArgs>(), 4096);
            assert_eq!(super::SNAP_CREATE, 0x5000_9401);
            assert_eq!(super::SUBVOL_CREATE, 0x5000_940E);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_with_a_slash_or_none_is_refused_before_any_call() {
        let dir = tempfile::tempdir().unwrap();
        let f = File::open(dir.path()).unwrap();
        for name in [&b""[..], b"a/b", b"a\0b"] {
            let e = sys::vol_args(&f, None, name, sys::SUBVOL_CREATE).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }
        assert!(!dir.path().join("a").exists());
    }

    #[test]
    fn one_mount_is_told_by_the_mount_not_the_path() {
        // The test directory lies wherever TMPDIR is; only a btrfs one may say yes.
        let dir = tempfile::tempdir().unwrap();
        assert!(one_mount(&[dir.path(), &dir.path().join(".")]));
        assert!(!one_mount(&[dir.path(), Path::new("/proc")]));
        assert!(!one_mount(&[dir.path(), &dir.path().join("missing")]));
    }
}
