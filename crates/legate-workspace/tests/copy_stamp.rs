//! A copy's stamp: the same while nothing in the copy changes, and moved by every change an
//! agent can make, even one that keeps a file's size and modification time (a rewrite of the
//! same length with its time set back), one only git would not see (a new ignored file, a
//! group's execute bit), a file swapped for a link, and a change to the baseline's index;
//! none for a copy past its bound.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Fixture, write};
use legate_workspace::*;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

/// The copy's stamp, once no entry changed within the clock's last tick (a few ticks at
/// most after the last write).
fn settled_stamp(b: &Baseline) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match copy_stamp(b, 10_000).unwrap() {
            Ok(s) => return s,
            Err(Unstamped::Racy) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(why) => panic!("no stamp: {why:?}"),
        }
    }
}

/// A stamp taken after a change: it must differ from `before` (a racy one, for a change in
/// the clock's last tick, is no stamp at all, which proves nothing either).
fn moved(b: &Baseline, before: &str, what: &str) {
    match copy_stamp(b, 10_000).unwrap() {
        Ok(now) => assert_ne!(now, before, "{what} did not move the stamp"),
        Err(Unstamped::Racy) => {}
        Err(why) => panic!("{what}: no stamp: {why:?}"),
    }
    // Once the change is out of the clock's tick, the stamp differs for certain.
    assert_ne!(settled_stamp(b), before, "{what} did not move the stamp");
}

fn copy_with(files: &[(&str, &[u8])]) -> (Fixture, Baseline) {
    let f = Fixture::new(files);
    f.commit_all();
    let (_, b) = f.copy(&[]);
    (f, b)
}

#[test]
fn a_stamp_stays_while_nothing_changes_and_reading_does_not_move_it() {
    let (_f, b) = copy_with(&[("a.txt", b"alpha\n"), ("src/lib.rs", b"pub fn f() {}\n")]);
    let first = settled_stamp(&b);
    // Reading the copy (a preview stages it in a scratch index) changes nothing measured.
    preview_twice(&b);
    assert_eq!(copy_stamp(&b, 10_000).unwrap().unwrap(), first);
}

fn preview_twice(b: &Baseline) {
    for _ in 0..2 {
        stage_tree(b).unwrap();
    }
}

#[test]
fn a_rewrite_of_the_same_length_with_its_time_set_back_moves_the_stamp() {
    let (_f, b) = copy_with(&[("a.txt", b"alpha\n")]);
    let path = b.copy().join("a.txt");
    let modified = fs::metadata(&path).unwrap().modified().unwrap();
    let before = settled_stamp(&b);
    fs::write(&path, b"omega\n").unwrap();
    fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    assert_eq!(fs::metadata(&path).unwrap().modified().unwrap(), modified);
    moved(&b, &before, "a same-length rewrite with its mtime restored");
}

/// A change an agent makes to the copy at its root.
type Change = Box<dyn Fn(&Path)>;

#[test]
fn every_kind_of_change_moves_the_stamp() {
    let (f, b) = copy_with(&[
        ("a.txt", b"alpha\n"),
        (".gitignore", b"build/\n"),
        ("src/lib.rs", b"pub fn f() {}\n"),
    ]);
    let copy = b.copy().to_path_buf();
    let changes: Vec<(&str, Change)> = vec![
        (
            "a new file in an ignored directory",
            Box::new(|c| write(c, "build/out.bin", b"x")),
        ),
        (
            "the group's execute bit",
            Box::new(|c| {
                fs::set_permissions(c.join("a.txt"), fs::Permissions::from_mode(0o654)).unwrap()
            }),
        ),
        (
            "a file swapped for a link to the same bytes",
            Box::new(|c| {
                fs::write(c.join("twin.txt"), b"pub fn f() {}\n").unwrap();
                fs::remove_file(c.join("src/lib.rs")).unwrap();
                std::os::unix::fs::symlink("../twin.txt", c.join("src/lib.rs")).unwrap();
            }),
        ),
        (
            "a rename",
            Box::new(|c| fs::rename(c.join("twin.txt"), c.join("twin2.txt")).unwrap()),
        ),
        (
            "a file whose name is not UTF-8",
            Box::new(|c| {
                use std::os::unix::ffi::OsStrExt;
                let name = std::ffi::OsStr::from_bytes(b"odd\xff.txt");
                fs::write(c.join(name), b"x").unwrap();
            }),
        ),
        (
            "an empty directory",
            Box::new(|c| fs::create_dir(c.join("empty")).unwrap()),
        ),
        (
            "a deletion",
            Box::new(|c| fs::remove_file(c.join("a.txt")).unwrap()),
        ),
    ];
    for (what, change) in changes {
        let before = settled_stamp(&b);
        change(&copy);
        moved(&b, &before, what);
    }
    // The baseline's own state is measured too: a different index is another patch.
    let before = settled_stamp(&b);
    let index = b.git_dir().join("index");
    let bytes = fs::read(&index).unwrap();
    fs::write(&index, bytes).unwrap();
    moved(&b, &before, "a rewritten baseline index");
    drop(f);
}

#[test]
fn a_copy_past_the_bound_has_no_stamp() {
    let (_f, b) = copy_with(&[("a.txt", b"alpha\n"), ("b.txt", b"beta\n")]);
    settled_stamp(&b);
    assert_eq!(copy_stamp(&b, 2).unwrap(), Err(Unstamped::TooLarge));
}

/// Whether this kernel stamps a change at the nanosecond once the file's times were read
/// since its last change (fine-grained change times): a file written, then another written
/// and read twice, the second's change time after the first's, ten times in ten.
fn fine_grained_change_times() -> bool {
    let dir = tempfile::tempdir().unwrap();
    (0..10).all(|i| {
        let (a, c) = (
            dir.path().join(format!("a{i}")),
            dir.path().join(format!("c{i}")),
        );
        fs::write(&a, b"x").unwrap();
        let mut f = fs::File::create(&c).unwrap();
        std::io::Write::write_all(&mut f, b"t").unwrap();
        f.metadata().unwrap();
        std::io::Write::write_all(&mut f, b"t").unwrap();
        let clock = f.metadata().unwrap();
        let written = fs::symlink_metadata(&a).unwrap();
        use std::os::unix::fs::MetadataExt;
        (written.ctime(), written.ctime_nsec()) < (clock.ctime(), clock.ctime_nsec())
    })
}

/// The agent's last write lands just before its turn ends, and the turn's end stamps the copy
/// at once: on a kernel that can tell them apart, that write is before the clock, not racy
/// (at a copy's first stamp, its clock file just made, it used to read a whole tick early:
/// racy nearly every time).
#[test]
fn a_write_just_before_a_copys_first_stamp_is_not_racy_where_the_kernel_can_tell() {
    if !fine_grained_change_times() {
        eprintln!("this kernel stamps changes at its tick only: nothing to check");
        return;
    }
    for i in 0..10 {
        let (_f, b) = copy_with(&[("a.txt", b"alpha\n")]);
        write(b.copy(), "n.txt", format!("node {i}\n").as_bytes());
        assert!(
            copy_stamp(&b, 10_000).unwrap().is_ok(),
            "round {i}: the write just before the stamp was racy"
        );
    }
}

#[test]
fn a_vanished_copy_is_unavailable() {
    let (_f, b) = copy_with(&[("a.txt", b"alpha\n")]);
    fs::remove_dir_all(b.copy()).unwrap();
    let err = copy_stamp(&b, 10_000).unwrap_err();
    assert_eq!(err.code, legate_core::ErrorCode::CopyUnavailable);
}

/// Unmounts a mount point when dropped (pass or panic).
struct Mounted(std::path::PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

#[test]
fn a_baseline_repository_on_another_file_system_than_its_clock_has_no_stamp() {
    if rustix::process::geteuid().as_raw() != 0 {
        eprintln!("skipped: mounting needs root");
        return;
    }
    let (_f, b) = copy_with(&[("a.txt", b"alpha\n")]);
    settled_stamp(&b);
    // Its repository replaced by an empty tmpfs: the entries there tick by another clock
    // than the clock file beside it.
    let git = b.git_dir();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "tmpfs"])
        .arg(&git)
        .status()
        .unwrap()
        .success();
    assert!(ok, "tmpfs could not be mounted");
    let _mounted = Mounted(git);
    assert_eq!(
        copy_stamp(&b, 10_000).unwrap(),
        Err(Unstamped::OtherFileSystem)
    );
}
