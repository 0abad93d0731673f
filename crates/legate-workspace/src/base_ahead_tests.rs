#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use crate::base::tests::{project, reflink_fs::ReflinkFs};
use legate_core::Error;
use std::path::PathBuf;

/// Legate's home on the image: its copies, baselines, verdicts and bases.
struct Home(PathBuf);

impl Home {
    fn dirs(&self, name: &str) -> [PathBuf; 4] {
        [
            self.0.join("copies").join(name),
            self.0.join("baselines").join(name),
            self.0.join("verdicts"),
            self.0.join("bases"),
        ]
    }
}

fn places(dirs: &[PathBuf; 4]) -> CopyPlaces<'_> {
    CopyPlaces {
        copy_dir: &dirs[0],
        baseline_dir: &dirs[1],
        verdicts: &dirs[2],
        bases: &dirs[3],
    }
}

/// A settled project on a btrfs image, its base made by a first copy (`t1`).
struct Made {
    /// The image, unmounted when dropped.
    _fs: ReflinkFs,
    home: Home,
    root: PathBuf,
    /// The project's base.
    dir: PathBuf,
}

fn made() -> Option<Made> {
    let fs_ = ReflinkFs::mount_btrfs(256)?;
    let home = Home(fs_.path().join("home"));
    let root = project(fs_.path());
    let (secrets, limits) = (SecretPatterns::default(), CopyLimits::default());
    let first = home.dirs("t1");
    select_and_copy(&root, &[], &secrets, &limits, places(&first)).unwrap();
    let dir = base_dir(&first[3], &root);
    assert!(dir.join(crate::base::MANIFEST).is_file());
    Some(Made {
        _fs: fs_,
        home,
        root,
        dir,
    })
}

#[test]
fn the_base_is_locked_while_its_snapshots_wait_for_the_selection() {
    let Some(m) = made() else {
        return;
    };
    let (home, root, dir) = (&m.home, &m.root, &m.dir);
    let (secrets, limits) = (SecretPatterns::default(), CopyLimits::default());
    // While the selection runs beside the snapshots, no one else may take the base's lock
    // (a copy making the base again, a sweep): what is snapshotted is what is compared.
    let select = || {
        let other = std::fs::File::open(dir.join("lock")).unwrap();
        assert_eq!(
            rustix::fs::flock(&other, rustix::fs::FlockOperation::NonBlockingLockExclusive),
            Err(rustix::io::Errno::WOULDBLOCK),
            "the base's lock is free while its snapshots are taken"
        );
        crate::select::select(root, &[], &secrets, &limits)
    };
    let second = home.dirs("t2");
    let Ahead::Made((report, _)) =
        ahead(root, &secrets, &limits, places(&second), &select).unwrap()
    else {
        panic!("the base holds the unchanged project");
    };
    assert!(report.snapshot && report.scanned_files == 0, "{report:?}");
    // Released once compared: the next taker gets it at once.
    let after = std::fs::File::open(dir.join("lock")).unwrap();
    rustix::fs::flock(&after, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
}

#[test]
fn a_selection_that_panics_leaves_no_snapshot_and_frees_the_lock() {
    let Some(m) = made() else {
        return;
    };
    let (home, root, dir) = (&m.home, &m.root, &m.dir);
    let (secrets, limits) = (SecretPatterns::default(), CopyLimits::default());
    let second = home.dirs("t2");
    let select = || -> Result<Selection, Error> { panic!("the selection stopped") };
    let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ahead(root, &secrets, &limits, places(&second), &select)
    }));
    assert!(stopped.is_err(), "the panic goes on");
    assert!(!second[0].exists() && !second[1].exists());
    let after = std::fs::File::open(dir.join("lock")).unwrap();
    rustix::fs::flock(&after, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
}

#[test]
fn a_base_whose_lock_cannot_be_taken_leaves_the_copy_to_be_made_in_full() {
    let Some(m) = made() else {
        return;
    };
    let (home, root, dir) = (&m.home, &m.root, &m.dir);
    let (secrets, limits) = (SecretPatterns::default(), CopyLimits::default());
    // Where the lock file was, a directory: it cannot be opened for writing.
    std::fs::remove_file(dir.join("lock")).unwrap();
    std::fs::create_dir(dir.join("lock")).unwrap();
    let second = home.dirs("t2");
    let (report, _) = select_and_copy(root, &[], &secrets, &limits, places(&second)).unwrap();
    assert!(!report.snapshot, "{report:?}");
    assert_eq!(report.included_files, 20, "{report:?}");
}
