//! Two Legate processes copying one project on one home at once, on a btrfs image: each a
//! real child (this test binary again) making copies as the engine does (the base
//! snapshotted beside the selection), one under two sets of rules in turn and one under the
//! default rules, so that one process's snapshots taken ahead meet the other's base made
//! again. Every copy either process gets
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
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Set in the child: the project, Legate's home, and whether its rules alternate.
const PROJECT: &str = "LEGATE_TEST_BASE_PROCESSES_PROJECT";
const HOME: &str = "LEGATE_TEST_BASE_PROCESSES_HOME";
const RULES: &str = "LEGATE_TEST_BASE_PROCESSES_RULES";

/// How many copies the process under alternating rules makes; the other copies until it
/// has ended (at most [`MAX_COPIES`]).
const COPIES: usize = 12;
const MAX_COPIES: usize = 400;

/// The child's half: does nothing unless started by the test below. Waits for a line on its
/// standard input (both children start at once), then copies the project under rules
/// alternating between two sets (one leaves `src/f001.txt` out) [`COPIES`] times, or under
/// the default rules until the file `stop` appears in the home; checks each copy and says
/// how it was made. A failed check ends it with a panic, which the test reads as its exit
/// status.
#[test]
fn copier() {
    let (Some(project), Some(home)) = (std::env::var_os(PROJECT), std::env::var_os(HOME)) else {
        return;
    };
    let (project, home) = (PathBuf::from(project), PathBuf::from(home));
    let alternate = std::env::var(RULES).unwrap() == "alternate";
    let rules = [
        SecretPatterns::new(&["src/f001.txt".to_string()], &[]).unwrap(),
        SecretPatterns::default(),
    ];
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let count = if alternate { COPIES } else { MAX_COPIES };
    for i in 0..count {
        if !alternate && home.join("stop").exists() {
            break;
        }
        let which = if alternate { i % 2 } else { 1 };
        let name = format!("p{}-{i}", std::process::id());
        let (r, b) = copy_full(&project, &home, &name, &rules[which]);
        let left_out: &[&str] = if which == 0 {
            &["config/leak.txt", "src/f001.txt"]
        } else {
            &["config/leak.txt"]
        };
        holds_the_project(&r.copy_directory, &project, left_out);
        assert!(look(&b).files.is_empty(), "copy {i}: {r:?}");
        // Which way it was made: snapshots of a base that held the selection, or the base
        // made again (after the snapshots taken beside the selection were removed).
        println!("{}", if r.scanned_files == 0 { "HELD" } else { "MADE" });
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
    let mut children: Vec<_> = ["alternate", "default"]
        .into_iter()
        .map(|rules| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "copier", "--nocapture", "--test-threads=1"])
                .env(PROJECT, &f.project)
                .env(HOME, &f.home)
                .env(RULES, rules)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in &mut children {
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    }
    let mut children = children.into_iter();
    let (alternating, default) = (children.next().unwrap(), children.next().unwrap());
    let alternating = alternating.wait_with_output().unwrap();
    std::fs::write(f.home.join("stop"), b"").unwrap();
    let default = default.wait_with_output().unwrap();
    assert!(
        alternating.status.success() && default.status.success(),
        "a copier failed"
    );
    let ways = |out: &std::process::Output| {
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (text.matches("HELD").count(), text.matches("MADE").count())
    };
    let (alt_held, alt_made) = ways(&alternating);
    let (def_held, def_made) = ways(&default);
    assert_eq!(alt_held + alt_made, COPIES);
    // The race was run, not avoided: the default rules' copies found the base held for them,
    // and also found it made for the other rules (then made it again).
    assert!(
        def_held > 0 && def_made > 0,
        "held {def_held}, made {def_made}"
    );
    // Nothing of either left but its copies, their baselines and the base's own files.
    let copies = std::fs::read_dir(f.home.join("copies")).unwrap().count();
    let baselines = std::fs::read_dir(f.home.join("baselines")).unwrap().count();
    let made = 1 + COPIES + def_held + def_made;
    assert_eq!((copies, baselines), (made, made));
    let mut left: Vec<String> = std::fs::read_dir(base_of(&f))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["baseline", "lock", "manifest", "tree"]);
}
