#![allow(clippy::unwrap_used, clippy::panic)]
use super::*;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};

/// A tree with files at the top and in nested directories, a link, an executable and a
/// directory, named so that git's byte order interleaves the directories (`a/b.txt` sorts
/// between `a/b` and `a/b/c.txt`).
fn tree() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path();
    fs::create_dir_all(r.join("a/b")).unwrap();
    fs::write(r.join("top.txt"), b"top").unwrap();
    fs::write(r.join("a/b.txt"), b"b").unwrap();
    fs::write(r.join("a/b/c.txt"), b"cc").unwrap();
    fs::write(r.join("a/c.txt"), b"ccc").unwrap();
    fs::write(r.join("a/run.sh"), b"#!/bin/sh\n").unwrap();
    fs::set_permissions(r.join("a/run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
    symlink("/etc/passwd", r.join("a/link")).unwrap();
    dir
}

fn stat_of(root: &Path, path: &str) -> FileState {
    FileState::of(&fs::symlink_metadata(root.join(path)).unwrap())
}

#[test]
fn each_file_is_measured_as_std_lstat_measures_it_in_the_order_asked() {
    let dir = tree();
    let paths = [
        "a/b.txt",
        "a/b/c.txt",
        "top.txt",
        "a/c.txt",
        "a/run.sh",
        "a/link",
        "a/b",
    ];
    let measured = measure(dir.path(), &paths);
    assert_eq!(measured.len(), paths.len());
    for (path, m) in paths.iter().zip(measured) {
        let Measured::Found(stat) = m else {
            panic!("{path}: {m:?}");
        };
        // Every field, the device's encoding included: a state measured here must equal the
        // one the scan verdict cache records through `std::fs` for the same file.
        assert_eq!(stat, stat_of(dir.path(), path), "{path}");
    }
    let kinds: Vec<(bool, bool)> = ["a/b.txt", "a/link", "a/b"]
        .iter()
        .map(|p| {
            let s = stat_of(dir.path(), p);
            (s.is_file(), s.is_symlink())
        })
        .collect();
    assert_eq!(kinds, [(true, false), (false, true), (false, false)]);
}

#[test]
fn a_directory_that_is_a_link_or_a_file_or_gone_is_told_apart() {
    let dir = tree();
    let r = dir.path();
    let outside = tempfile::tempdir().unwrap();
    fs::write(outside.path().join("o.txt"), b"outside").unwrap();
    // `a/b` swapped for a link to a directory outside that holds a file of the same name.
    fs::remove_dir_all(r.join("a/b")).unwrap();
    fs::create_dir(outside.path().join("b")).unwrap();
    fs::write(outside.path().join("b/c.txt"), b"outside").unwrap();
    symlink(outside.path().join("b"), r.join("a/b")).unwrap();
    // `d` a file where a directory was; `gone/` removed with its files.
    fs::write(r.join("d"), b"a file").unwrap();
    let paths = [
        "a/b/c.txt",
        "d/e.txt",
        "gone/f.txt",
        "a/missing.txt",
        "a/c.txt",
    ];
    let measured = measure(r, &paths);
    assert!(
        matches!(measured[0], Measured::LinkedDirectory),
        "{:?}",
        measured[0]
    );
    assert!(
        matches!(measured[1], Measured::LinkedDirectory),
        "{:?}",
        measured[1]
    );
    assert!(matches!(measured[2], Measured::Gone), "{:?}", measured[2]);
    assert!(matches!(measured[3], Measured::Gone), "{:?}", measured[3]);
    assert!(
        matches!(measured[4], Measured::Found(_)),
        "{:?}",
        measured[4]
    );
}

#[test]
fn the_fallback_by_whole_path_answers_the_same() {
    let dir = tree();
    let r = dir.path();
    fs::write(r.join("d"), b"a file").unwrap();
    for path in ["a/b.txt", "a/b/c.txt", "top.txt", "a/link"] {
        let (Measured::Found(by_fd), Measured::Found(whole)) =
            (measure(r, &[path]).pop().unwrap(), by_path(r, path))
        else {
            panic!("{path}");
        };
        assert_eq!(by_fd, whole, "{path}");
    }
    assert!(matches!(by_path(r, "d/e.txt"), Measured::LinkedDirectory));
    assert!(matches!(by_path(r, "gone/f.txt"), Measured::Gone));
}

#[test]
fn without_statx_a_file_measures_the_same() {
    let dir = tree();
    let held = Root::open(dir.path()).unwrap();
    let a = held.open_dir(Path::new("a")).unwrap();
    for name in ["b.txt", "run.sh", "link", "b"] {
        let with = lstat_at(&a, name).unwrap();
        let without = lstat_at_without_statx(&a, name).unwrap();
        assert_eq!(with, without, "{name}");
        assert_eq!(with, stat_of(dir.path(), &format!("a/{name}")), "{name}");
    }
    assert_eq!(
        lstat_at_without_statx(&a, "missing").unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
}

#[test]
fn many_directories_are_each_measured() {
    // More directories than a process may by default hold open at once (a soft limit of
    // 1,024); each handle is dropped before the next directory is opened.
    let dir = tempfile::tempdir().unwrap();
    let names: Vec<String> = (0..1500).map(|i| format!("d{i}/f")).collect();
    for n in &names {
        let p = dir.path().join(n);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, b"x").unwrap();
    }
    let paths: Vec<&str> = names.iter().map(String::as_str).collect();
    let found = measure(dir.path(), &paths)
        .iter()
        .filter(|m| matches!(m, Measured::Found(s) if s.is_file()))
        .count();
    assert_eq!(found, paths.len());
}
