//! The selection against a work tree that no longer matches the index: tracked files whose
//! directory became a symlink, a file, or nothing, and tracked files now ignored, which the
//! selection drops before anything it found of them counts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Fixture, git};
use legate_workspace::Selection;
use std::fs;

fn blocked(sel: &Selection) -> Vec<(String, String)> {
    sel.blocked
        .iter()
        .map(|b| (b.path.clone(), b.rule.clone()))
        .collect()
}

fn paths(sel: &Selection) -> Vec<&str> {
    sel.files.iter().map(|f| f.path.as_str()).collect()
}

#[test]
fn tracked_files_under_a_directory_now_a_link_a_file_or_gone_are_never_measured_through_it() {
    let f = Fixture::new(&[
        ("src/a.rs", b"a"),
        ("linked/b.rs", b"b"),
        ("filed/c.rs", b"c"),
        ("gone/d.rs", b"d"),
        ("keep.txt", b"k"),
    ]);
    f.commit_all();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("b.rs"), b"outside the project").unwrap();
    fs::remove_dir_all(f.project.join("linked")).unwrap();
    std::os::unix::fs::symlink(outside.path(), f.project.join("linked")).unwrap();
    fs::remove_dir_all(f.project.join("filed")).unwrap();
    fs::write(f.project.join("filed"), b"a file now").unwrap();
    fs::remove_dir_all(f.project.join("gone")).unwrap();
    let sel = f.select(&[]).unwrap();
    assert_eq!(paths(&sel), ["filed", "keep.txt", "src/a.rs"]);
    // What was deleted is not part of the project any more; what lies behind a link or a
    // file is left out, by name.
    assert_eq!(
        blocked(&sel),
        [
            ("filed/c.rs".to_string(), "symlinked-directory".to_string()),
            ("linked".to_string(), "symlink".to_string()),
            ("linked/b.rs".to_string(), "symlinked-directory".to_string()),
        ]
    );
}

#[test]
fn a_tracked_file_now_ignored_is_left_out_whatever_it_is_now() {
    let f = Fixture::new(&[
        ("src/a.rs", b"a"),
        ("build/out.rs", b"generated"),
        ("build/gone.rs", b"generated"),
        (".env", b"TOKEN=1\n"),
    ]);
    git(&f.project, &["add", "-f", ".env"]);
    f.commit_all();
    // Ignored now: a directory rule (the kind that makes git measure each tracked file) and
    // a name rule; under the ignored directory, a file deleted and one swapped for a link.
    fs::write(f.project.join(".gitignore"), "build/\n.env\n").unwrap();
    fs::remove_file(f.project.join("build/gone.rs")).unwrap();
    fs::remove_file(f.project.join("build/out.rs")).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", f.project.join("build/out.rs")).unwrap();
    let sel = f.select(&[]).unwrap();
    assert_eq!(paths(&sel), [".gitignore", "src/a.rs"]);
    assert_eq!(blocked(&sel), []);
    // An include path naming only ignored files matches nothing.
    let err = f.select(&["build/"]).unwrap_err();
    assert_eq!(err.code, legate_core::ErrorCode::InvalidIncludePath);
}
