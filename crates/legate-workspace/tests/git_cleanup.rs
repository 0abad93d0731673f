//! Git runs bounded in time, in their own process group, and their end proven: a git that
//! hangs is stopped within the bound and the copy stays usable; a git whose output a process
//! outside its group keeps open is `GIT_CLEANUP_UNVERIFIED`, and its copy is then refused
//! (open, lock: what preview, test, integration, a turn and discard all pass through).
//!
//! One test: the bounds are process-wide.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use legate_core::ErrorCode;
use legate_workspace::*;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Writes an executable fake git at `dir/name` running `body` (sh).
fn fake_git(dir: &Path, name: &str, body: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

fn bounded(program: PathBuf) {
    set_git_bounds(GitBounds {
        program,
        time_limit: Duration::from_millis(800),
        grace: Duration::from_millis(700),
    });
}

/// Previews the copy, which must fail.
fn preview_fails(baseline: &Baseline) -> legate_core::Error {
    legate_review::preview(baseline, &SecretPatterns::default(), &CopyLimits::default())
        .unwrap_err()
}

#[test]
fn a_git_that_cannot_be_shown_gone_blocks_its_copy() {
    let f = Fixture::new(&[("a.txt", b"one\n")]);
    f.commit_all();
    let (report, baseline) = f.copy(&[]);
    std::fs::write(report.copy_directory.join("a.txt"), b"two\n").unwrap();
    let tools = tempfile::tempdir().unwrap();

    // A git that hangs, and a child of it ignoring SIGTERM: killed with its group, proven
    // gone; the operation fails within the bound and the copy stays usable.
    let hangs = fake_git(
        tools.path(),
        "hangs",
        "trap '' TERM\nsleep 30 &\nwait\nwait",
    );
    bounded(hangs);
    let started = Instant::now();
    let err = preview_fails(&baseline);
    assert!(started.elapsed() < Duration::from_secs(5), "{err}");
    assert_eq!(err.code, ErrorCode::Internal, "{err}");
    assert!(err.message.contains("was stopped"), "{err}");
    assert!(!baseline.dir().join(CLEANUP_MARKER).exists());

    // A git whose output a process outside its group (a new session, ignoring SIGTERM)
    // keeps open: its end cannot be proven.
    let pid_file = tools.path().join("holder.pid");
    let holder = fake_git(
        tools.path(),
        "holder",
        &format!(
            "setsid sh -c 'trap \"\" TERM; echo $$ > {0}; exec sleep 30' &\n\
             while [ ! -s {0} ]; do sleep 0.01; done\nsleep 30",
            pid_file.display()
        ),
    );
    bounded(holder);
    let started = Instant::now();
    let err = preview_fails(&baseline);
    let took = started.elapsed();
    let holder_pid = std::fs::read_to_string(&pid_file).unwrap();
    let _ = std::process::Command::new("kill")
        .args(["-KILL", holder_pid.trim()])
        .status();
    assert!(took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(err.code, ErrorCode::GitCleanupUnverified, "{err}");
    assert!(baseline.dir().join(CLEANUP_MARKER).exists());

    // With a working git again, the blocked copy is still refused: every review, test,
    // integration, turn and discard opens it or takes its lock first.
    set_git_bounds(GitBounds::default());
    let opened = Baseline::open(baseline.dir(), &report.copy_directory).unwrap_err();
    assert_eq!(opened.code, ErrorCode::GitCleanupUnverified, "{opened}");
    let locked = baseline.lock().unwrap_err();
    assert_eq!(locked.code, ErrorCode::GitCleanupUnverified, "{locked}");
    let tried = baseline.try_lock().unwrap_err();
    assert_eq!(tried.code, ErrorCode::GitCleanupUnverified, "{tried}");
    // Removing the marker (after ending the process) lifts the block.
    std::fs::remove_file(baseline.dir().join(CLEANUP_MARKER)).unwrap();
    let b = Baseline::open(baseline.dir(), &report.copy_directory).unwrap();
    let p = legate_review::preview(&b, &SecretPatterns::default(), &CopyLimits::default()).unwrap();
    assert_eq!(p.files.len(), 1);
}
