//! Copies on a file system that can clone files (an xfs image with reflinks on a loop
//! device): the copy shares the project's blocks, holds the same bytes, and keeps every rule
//! of the preflight and the selection; and on this machine's own file system it writes bytes
//! as before.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
#[path = "common/reflink_fs.rs"]
mod reflink_fs;

use common::{Fixture, files_under, git};
use legate_review::preview;
use legate_workspace::*;
use reflink_fs::{ReflinkFs, shared_extent_bytes};
use std::fs;
use std::os::unix::fs::MetadataExt;

/// Deterministic bytes of no credential shape.
fn filler(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i as u64 * 7 + seed as u64 * 13) % 26) as u8)
        .collect()
}

const MIB: usize = 1024 * 1024;

#[test]
fn a_copy_on_a_reflink_file_system_shares_the_projects_blocks_and_keeps_its_bytes() {
    let Some(xfs) = ReflinkFs::mount(400) else {
        return;
    };
    let big: Vec<Vec<u8>> = (0..8).map(|i| filler(i, 4 * MIB + 123)).collect();
    let mut files: Vec<(String, Vec<u8>)> = big
        .iter()
        .enumerate()
        .map(|(i, b)| (format!("data/big{i}.txt"), b.clone()))
        .collect();
    files.push(("src/lib.rs".into(), b"pub fn x() {}\n".to_vec()));
    files.push(("empty".into(), Vec::new()));
    let refs: Vec<(&str, &[u8])> = files
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let f = Fixture::new_in(xfs.path(), &refs);
    f.commit_all();
    fs::write(f.project.join("untracked.txt"), b"not yet committed\n").unwrap();
    let before = xfs.free_bytes();
    let (report, baseline) = f.copy(&[]);
    let used = before.saturating_sub(xfs.free_bytes());
    assert_eq!(report.included_files, 11, "{report:?}");
    assert_eq!(
        report.reflinked_files, 11,
        "every file is a clone: {report:?}"
    );
    // 32 MiB copied; what the copy took is its directories, inodes and the baseline.
    assert!(
        used < 4 * MIB as u64,
        "the copy took {used} bytes of disk for 32 MiB of files"
    );
    for (path, bytes) in &files {
        let copied = report.copy_directory.join(path);
        assert_eq!(&fs::read(&copied).unwrap(), bytes, "{path}");
        let src = fs::metadata(f.project.join(path)).unwrap();
        let dst = fs::metadata(&copied).unwrap();
        assert_eq!(dst.mtime(), src.mtime(), "{path} keeps its mtime");
        if bytes.len() >= MIB {
            let (shared, all) = shared_extent_bytes(&copied);
            assert!(
                all >= bytes.len() as u64 && shared == all,
                "{path}: {shared} of {all} shared"
            );
        }
    }
    // The baseline knows the copy as unchanged; a write to the copy leaves the project alone
    // and is a change like any other.
    assert!(
        preview(
            &baseline,
            &SecretPatterns::default(),
            &CopyLimits::default()
        )
        .unwrap()
        .files
        .is_empty()
    );
    fs::write(report.copy_directory.join("data/big0.txt"), b"rewritten\n").unwrap();
    assert_eq!(fs::read(f.project.join("data/big0.txt")).unwrap(), big[0]);
    let p = preview(
        &baseline,
        &SecretPatterns::default(),
        &CopyLimits::default(),
    )
    .unwrap();
    assert_eq!(p.files.len(), 1);
}

#[test]
fn on_a_reflink_file_system_the_preflight_and_the_ignore_rules_are_unchanged() {
    let Some(xfs) = ReflinkFs::mount(300) else {
        return;
    };
    // A fake key id, made at run time (a real one has no run of letters in order).
    let leak = format!("key = {}{}\n", "AKIA", "Q3ZL7RTX2WNVD6KM");
    let f = Fixture::new_in(
        xfs.path(),
        &[
            ("src/lib.rs", b"pub fn x() {}\n"),
            (".gitignore", b"target/\n*.log\n"),
            (".env", b"TOKEN=1\n"),
            ("config/leak.txt", leak.as_bytes()),
            ("config/ok.txt", b"fine\n"),
        ],
    );
    f.commit_all();
    fs::create_dir_all(f.project.join("target")).unwrap();
    fs::write(f.project.join("target/out.bin"), b"ignored").unwrap();
    fs::write(f.project.join("debug.log"), b"ignored").unwrap();
    let (report, _b) = f.copy(&[]);
    assert_eq!(
        files_under(&report.copy_directory),
        [".gitignore", "config/ok.txt", "src/lib.rs"]
    );
    assert_eq!(report.reflinked_files, 3);
    let blocked: Vec<(&str, &str)> = report
        .blocked_files
        .iter()
        .map(|b| (b.path.as_str(), b.reason.as_str()))
        .collect();
    assert_eq!(
        blocked,
        [
            (".env", "SECRET_FILE"),
            ("config/leak.txt", "SECRET_CONTENT")
        ]
    );
    // The clone refused by the content scan left nothing behind, not even an empty file.
    assert!(!report.copy_directory.join("config/leak.txt").exists());
    // Include paths narrow it as before.
    let (narrow, _b) = f.copy_as("t2", &["config"]);
    assert_eq!(files_under(&narrow.copy_directory), ["config/ok.txt"]);
    assert_eq!(git(&f.project, &["status", "--porcelain"]), b"");
}

#[test]
fn on_a_file_system_without_reflinks_the_copy_writes_its_bytes() {
    // This machine's temporary directory (ext4 or tmpfs) cannot clone.
    let f = Fixture::new(&[("a.txt", b"one\n"), ("d/b.txt", b"two\n")]);
    f.commit_all();
    let (report, _b) = f.copy(&[]);
    assert_eq!(report.included_files, 2);
    assert_eq!(report.reflinked_files, 0, "{report:?}");
    assert_eq!(
        fs::read(report.copy_directory.join("d/b.txt")).unwrap(),
        b"two\n"
    );
}

#[test]
fn a_writer_racing_the_clone_never_gets_unscanned_bytes_into_the_copy() {
    let Some(xfs) = ReflinkFs::mount(300) else {
        return;
    };
    // Two versions of one file, the same size: clean, and with a fake key id (made at run
    // time; a real one has no run of letters in order).
    let clean = format!("key = {}\n", "x".repeat(20)).into_bytes();
    let secret = format!("key = {}{}\n", "AKIA", "Q3ZL7RTX2WNVD6KM").into_bytes();
    assert_eq!(clean.len(), secret.len());
    let f = Fixture::new_in(
        xfs.path(),
        &[("racy.txt", clean.as_slice()), ("other.txt", b"other\n")],
    );
    f.commit_all();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (stop, path) = (stop.clone(), f.project.join("racy.txt"));
        let (clean, secret) = (clean.clone(), secret.clone());
        std::thread::spawn(move || {
            use std::os::unix::fs::FileExt;
            let file = fs::OpenOptions::new().write(true).open(path).unwrap();
            let mut writes = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                // The secret in place, then gone again: a scan of the one and a clone of the
                // other is what must never happen.
                file.write_at(&secret, 0).unwrap();
                std::thread::yield_now();
                file.write_at(&clean, 0).unwrap();
                for _ in 0..(writes % 64) {
                    std::thread::yield_now();
                }
                writes += 1;
            }
            writes
        })
    };
    let limits = CopyLimits::default();
    let (mut copied, mut refused, mut changed) = (0, 0, 0);
    for i in 0..60 {
        let Ok(sel) = select(&f.project, &[], &SecretPatterns::default(), &limits) else {
            continue;
        };
        let dir = f.home.join(format!("copies/r{i}"));
        match make_copy(&sel, &dir, &limits) {
            Ok(report) => {
                assert_eq!(report.reflinked_files, report.included_files);
                match fs::read(dir.join("racy.txt")) {
                    Ok(bytes) => {
                        assert_eq!(bytes, clean, "a copy holds bytes that were not scanned");
                        copied += 1;
                    }
                    Err(_) => {
                        assert!(
                            report
                                .blocked_files
                                .iter()
                                .any(|b| b.path == "racy.txt"
                                    && b.reason.as_str() == "SECRET_CONTENT"),
                            "{report:?}"
                        );
                        refused += 1;
                    }
                }
            }
            Err(e) => {
                assert_eq!(e.code.as_str(), "SOURCE_CHANGED", "{e}");
                assert!(!dir.exists(), "a failed copy is removed");
                changed += 1;
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let writes = writer.join().unwrap();
    eprintln!("{writes} writes: {copied} copied clean, {refused} refused, {changed} changed");
}
