//! The preview's bounds against an agent that writes many files of one content: git stores
//! a content once however many files hold it, so staging's own bound (the objects git
//! writes) does not see them, while the preview, the patch and an integration hold every
//! path's bytes. A real project, a real copy and baseline, real git.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::ErrorCode;
use legate_testkit::git;
use legate_workspace::{Baseline, CopyLimits, SecretPatterns};
use std::path::Path;

/// A committed project holding `a.txt`, copied with its baseline under a home in `dir`.
fn copied(dir: &Path) -> Baseline {
    let project = dir.join("project");
    std::fs::create_dir_all(&project).unwrap();
    std::fs::write(project.join("a.txt"), "alpha\n").unwrap();
    git(&project, &["init", "-q"]);
    git(&project, &["add", "-A"]);
    git(&project, &["commit", "-q", "-m", "init"]);
    let limits = CopyLimits::default();
    let sel = legate_workspace::select(&project, &[], &SecretPatterns::default(), &limits).unwrap();
    let home = dir.join("home");
    let (_, baseline) = legate_workspace::make_copy_with_baseline(
        &sel,
        &home.join("copies/t"),
        &home.join("baselines/t"),
        &limits,
    )
    .unwrap();
    baseline
}

/// Eight files of one 1 MiB content are 8 MiB written, past a 4 MiB copy, though git stored
/// one object; three are within it.
#[test]
fn files_of_one_content_count_once_each() {
    let dir = tempfile::tempdir().unwrap();
    let baseline = copied(&std::fs::canonicalize(dir.path()).unwrap());
    let limits = CopyLimits {
        max_bytes: 4 << 20,
        ..CopyLimits::default()
    };
    let content = vec![b'x'; 1 << 20];
    for i in 0..3 {
        std::fs::write(baseline.copy().join(format!("same-{i}.bin")), &content).unwrap();
    }
    let secrets = SecretPatterns::default();
    let preview = legate_review::preview(&baseline, &secrets, &limits).unwrap();
    assert_eq!(preview.files.len(), 3);
    for i in 3..8 {
        std::fs::write(baseline.copy().join(format!("same-{i}.bin")), &content).unwrap();
    }
    let err = legate_review::preview(&baseline, &secrets, &limits).unwrap_err();
    assert_eq!(err.code, ErrorCode::ChangeLimitExceeded, "{}", err.message);
    assert!(
        err.message.contains("past the copy limit"),
        "{}",
        err.message
    );
}

/// Empty files are one object too: five hundred of them are refused by the index's count
/// as they are staged, before a diff of them is made.
#[test]
fn many_empty_files_are_refused_as_they_are_staged() {
    let dir = tempfile::tempdir().unwrap();
    let baseline = copied(&std::fs::canonicalize(dir.path()).unwrap());
    for i in 0..500 {
        std::fs::write(baseline.copy().join(format!("empty-{i}")), "").unwrap();
    }
    let err = legate_review::preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap_err();
    assert_eq!(err.code, ErrorCode::ChangeLimitExceeded, "{}", err.message);
    assert!(
        err.message.contains("more files than its baseline"),
        "{}",
        err.message
    );
}
