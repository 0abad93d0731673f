//! Two Legate processes copying one project on one home at once, on a btrfs image: each a
//! real child (this test binary again) making copies as the engine does (the base
//! snapshotted beside the selection), under two sets of rules in turn, so that one process's
//! snapshots taken ahead meet the other's base made again. Every copy either process gets
//! holds the project exactly as its own rules select it, and its baseline sees no change.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/base_fixture.rs"]
mod base_fixture;
mod common;
#[path = "common/reflink_fs.rs"]
mod reflink_fs;
#[path = "common/settled.rs"]
mod settled;

use base_fixture::*;
use legate_workspace::*;
use reflink_fs::ReflinkFs;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Set in the child: the project, Legate's home, and which rules it starts with.
const PROJECT: &str = "LEGATE_TEST_BASE_PROCESSES_PROJECT";
const HOME: &str = "LEGATE_TEST_BASE_PROCESSES_HOME";
const FIRST: &str = "LEGATE_TEST_BASE_PROCESSES_FIRST";

/// How many copies each process makes.
const COPIES: usize = 12;

/// The child's half: does nothing unless started by the test below. Copies the project
/// [`COPIES`] times, the rules alternating (one leaves `src/f001.txt` out), and checks each
/// copy; a failed check ends it with a panic, which the test reads as its exit status.
#[test]
fn copier() {
    let (Some(project), Some(home)) = (std::env::var_os(PROJECT), std::env::var_os(HOME)) else {
        return;
    };
    let (project, home) = (PathBuf::from(project), PathBuf::from(home));
    let first: usize = std::env::var(FIRST).unwrap().parse().unwrap();
    let rules = [
        SecretPatterns::new(&["src/f001.txt".to_string()], &[]).unwrap(),
        SecretPatterns::default(),
    ];
    for i in 0..COPIES {
        let which = (first + i) % 2;
        let name = format!("p{}-{i}", std::process::id());
        let (r, b) = copy_full(&project, &home, &name, &rules[which]);
        let left_out: &[&str] = if which == 0 {
            &["config/leak.txt", "src/f001.txt"]
        } else {
            &["config/leak.txt"]
        };
        holds_the_project(&r.copy_directory, &project, left_out);
        assert!(look(&b).files.is_empty(), "copy {i}: {r:?}");
    }
}

#[test]
fn two_processes_copying_one_project_each_get_the_project() {
    let Some(fs_) = ReflinkFs::mount_btrfs(768) else {
        return;
    };
    let f = project_in(fs_.path(), 60);
    // A base to snapshot ahead from the start.
    copy(&f, "t0");
    let children: Vec<_> = (0..2)
        .map(|first| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "copier", "--nocapture", "--test-threads=1"])
                .env(PROJECT, &f.project)
                .env(HOME, &f.home)
                .env(FIRST, first.to_string())
                .stdout(Stdio::null())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    for mut child in children {
        assert!(child.wait().unwrap().success(), "a copier failed");
    }
    // Nothing of either left but its copies, their baselines and the base's own files.
    let copies = std::fs::read_dir(f.home.join("copies")).unwrap().count();
    let baselines = std::fs::read_dir(f.home.join("baselines")).unwrap().count();
    assert_eq!((copies, baselines), (1 + 2 * COPIES, 1 + 2 * COPIES));
    let mut left: Vec<String> = std::fs::read_dir(base_of(&f))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["baseline", "lock", "manifest", "tree"]);
}
