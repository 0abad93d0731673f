//! A hostile agent's rewrite that git's own stat check cannot see: a tracked file rewritten
//! with other bytes of the same size, in the same wall-clock second its copy was made, its
//! mtime then set back exactly. Git compares times to the second only, so without Legate's
//! smudging of the scratch index the patch would be empty while the copy holds other bytes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Fixture;
use legate_review::{preview, read_only_changes};
use legate_workspace::{Baseline, ChangeStatus, CopyLimits, SecretPatterns};
use std::fs;
use std::io::{Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::time::{Duration, SystemTime};

const BEFORE: &[u8] = b"let x = a + b;\n";
const AFTER: &[u8] = b"let x = a - b;\n";

/// How many copies are made, at most, before every one of them rolled into the next second
/// between the copy and the rewrite (each attempt takes well under a second).
const ATTEMPTS: usize = 10;

/// A project whose tracked `f.rs` has an old mtime (so that its baseline entry is not racily
/// clean: git would then re-read it anyway), copied; then the copy's `f.rs` rewritten in place
/// (same inode, same size) and its mtime set back to the nanosecond. `None` when the ctime's
/// second rolled over between the copy and the rewrite: git would then see the change anyway.
fn rewritten_in_the_same_second(attempt: usize) -> Option<(Fixture, Baseline)> {
    let f = Fixture::new(&[("f.rs", BEFORE), ("g.rs", b"unchanged\n")]);
    let old = SystemTime::UNIX_EPOCH + Duration::new(1_577_836_800, 123_456_789);
    for name in ["f.rs", "g.rs"] {
        fs::File::options()
            .write(true)
            .open(f.project.join(name))
            .unwrap()
            .set_modified(old)
            .unwrap();
    }
    f.commit_all();
    let (report, baseline) = f.copy_as(&format!("t{attempt}"), &[]);
    let path = report.copy_directory.join("f.rs");
    let copied = fs::symlink_metadata(&path).unwrap();
    let mut file = fs::File::options().write(true).open(&path).unwrap();
    file.seek(SeekFrom::Start(0)).unwrap();
    file.write_all(AFTER).unwrap();
    file.set_modified(copied.modified().unwrap()).unwrap();
    drop(file);
    let now = fs::symlink_metadata(&path).unwrap();
    // The rewrite git's stat check cannot tell from the copy: same inode, size and mtime to
    // the nanosecond, a ctime in the same second.
    assert_eq!(
        (now.ino(), now.size(), now.mtime(), now.mtime_nsec()),
        (
            copied.ino(),
            copied.size(),
            copied.mtime(),
            copied.mtime_nsec()
        )
    );
    assert_eq!(fs::read(&path).unwrap(), AFTER);
    (now.ctime() == copied.ctime()).then_some((f, baseline))
}

#[test]
fn a_same_size_rewrite_with_its_mtime_set_back_in_the_same_second_is_in_the_patch() {
    let Some((_f, baseline)) = (0..ATTEMPTS).find_map(rewritten_in_the_same_second) else {
        eprintln!("skipped: every attempt rolled into the next second before the rewrite");
        return;
    };
    let p = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    let rows: Vec<(&str, ChangeStatus)> = p
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.status))
        .collect();
    assert_eq!(rows, [("f.rs", ChangeStatus::M)], "the rewrite is hidden");
    let patch = String::from_utf8(p.patch.clone()).unwrap();
    assert!(patch.contains("-let x = a + b;"), "{patch}");
    assert!(patch.contains("+let x = a - b;"), "{patch}");
    // The read-only check stages the copy the same way: it sees the rewrite too.
    assert_eq!(
        read_only_changes(&baseline, &CopyLimits::default()).unwrap(),
        ["f.rs"]
    );
}
