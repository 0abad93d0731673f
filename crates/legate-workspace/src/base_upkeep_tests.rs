//! The probe and the sweep of leftovers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::base::tests::reflink_fs;

#[test]
fn the_probe_says_no_off_btrfs_and_yes_on_it_leaving_nothing() {
    let plain = tempfile::tempdir().unwrap();
    if !subvolume::is_btrfs(plain.path()) {
        assert!(!probe(plain.path()));
        assert_eq!(fs::read_dir(plain.path()).unwrap().count(), 0);
    }
    let Some(img) = reflink_fs::ReflinkFs::mount_btrfs(256) else {
        return;
    };
    let bases = img.path().join("bases");
    fs::create_dir(&bases).unwrap();
    assert!(probe(&bases));
    assert_eq!(fs::read_dir(&bases).unwrap().count(), 0);
}

#[test]
fn a_sweep_leaves_a_probe_under_way_and_removes_an_old_one_and_any_removal_left() {
    let dir = tempfile::tempdir().unwrap();
    let young = dir.path().join(format!("{PROBE}young"));
    let old = dir.path().join(format!("{PROBE}old"));
    let left = dir.path().join(format!("{REMOVED}{}-1", "a".repeat(64)));
    for d in [&young, &old, &left] {
        fs::create_dir(d).unwrap();
        fs::write(d.join("f"), b"").unwrap();
    }
    let then = std::time::SystemTime::now() - PROBE_AGE - Duration::from_secs(60);
    fs::File::open(&old).unwrap().set_modified(then).unwrap();
    assert_eq!(prune(dir.path(), Duration::ZERO), 0);
    assert!(young.exists());
    assert!(!old.exists());
    assert!(!left.exists());
}
