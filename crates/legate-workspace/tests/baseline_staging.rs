//! The baseline of a new copy names exactly the bytes copied, whatever state the source's
//! files are in: clean (their ids taken from the source's index), dirty, racily clean,
//! converted by git on the way into the index (CRLF, a filter), untracked, executable, or
//! at paths whose order is easy to get wrong.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Fixture, blob_id, files_under, git, git_in, write};
use legate_review::*;
use legate_workspace::*;
use proptest::prelude::*;
use sha1::{Digest, Sha1};
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

fn chmod(root: &Path, path: &str, mode: u32) {
    fs::set_permissions(root.join(path), fs::Permissions::from_mode(mode)).unwrap();
}

/// Git in the baseline, with the copy as its work tree.
fn in_baseline(b: &Baseline, args: &[&str]) -> Vec<u8> {
    let git_dir = b.git_dir();
    git_in(
        b.copy(),
        &[("GIT_DIR", &git_dir), ("GIT_WORK_TREE", b.copy())],
        args,
    )
}

/// The baseline's commit names exactly the copy's files, bytes and exec bits; its index is
/// that commit, with the copy's own stat data (so git never needs to re-read the copy).
fn assert_baseline_is_the_copy(b: &Baseline) -> BTreeMap<String, String> {
    let copy = b.copy();
    let mut want = BTreeMap::new();
    for path in files_under(copy) {
        let full = copy.join(&path);
        let exec = fs::metadata(&full).unwrap().mode() & 0o100 != 0;
        let mode = if exec { "100755" } else { "100644" };
        want.insert(path, (mode.to_string(), blob_id(&fs::read(&full).unwrap())));
    }
    let listed = in_baseline(b, &["ls-tree", "-r", "-z", "--full-tree", "HEAD"]);
    let mut got = BTreeMap::new();
    for item in listed.split(|c| *c == 0).filter(|s| !s.is_empty()) {
        let item = std::str::from_utf8(item).unwrap();
        let (meta, path) = item.split_once('\t').unwrap();
        let parts: Vec<&str> = meta.split(' ').collect();
        assert_eq!(parts[1], "blob", "{path}");
        got.insert(
            path.to_string(),
            (parts[0].to_string(), parts[2].to_string()),
        );
    }
    assert_eq!(got, want, "the baseline's commit is not the copy");
    // Every object is well formed (trees in git's order), the commit reaches them all.
    in_baseline(b, &["fsck", "--strict", "--no-dangling", "--no-progress"]);
    // The index is the commit, and its stat data are the copy's.
    assert!(in_baseline(b, &["diff-index", "--cached", "--raw", "HEAD"]).is_empty());
    // `-z --debug`: each path ends with a NUL, then five lines of stat data.
    let debug = String::from_utf8(in_baseline(b, &["ls-files", "--debug", "-z"])).unwrap();
    let mut rest = debug.as_str();
    let mut seen = 0;
    while let Some((path, after)) = rest.split_once('\0') {
        let meta = fs::symlink_metadata(copy.join(path)).unwrap();
        let mut lines = after.splitn(6, '\n');
        let mut next = || lines.next().unwrap().trim().to_string();
        let (ctime, mtime, ino, _owner, size) = (next(), next(), next(), next(), next());
        rest = lines.next().unwrap_or("");
        assert_eq!(
            ctime,
            format!("ctime: {}:{}", meta.ctime(), meta.ctime_nsec()),
            "{path}"
        );
        assert_eq!(
            mtime,
            format!("mtime: {}:{}", meta.mtime(), meta.mtime_nsec()),
            "{path}"
        );
        assert!(ino.contains(&format!("ino: {}", meta.ino())), "{path}");
        assert!(
            size.starts_with(&format!("size: {}\t", meta.size())),
            "{path}"
        );
        seen += 1;
    }
    assert_eq!(seen, want.len());
    // Nothing to preview: git agrees the copy is the baseline.
    let p = preview(b, &SecretPatterns::default(), &CopyLimits::default()).unwrap();
    assert!(p.files.is_empty(), "{:?}", p.files);
    want.into_iter().map(|(p, (_, id))| (p, id)).collect()
}

#[test]
fn every_kind_of_source_file_reaches_the_baseline_as_copied() {
    let p = Fixture::new(&[]);
    let root = &p.project;
    // Paths whose orders differ between bytes, trees and naive comparisons.
    for path in [
        "a",
        "a-b",
        "a.b",
        "a0",
        "b/a",
        "b-/x",
        "b.c/y",
        "b/c/d.txt",
        "sp ace.txt",
        "\"quoted\".txt",
        "é.txt",
        "Z",
    ] {
        write(root, path, format!("clean {path}\n").as_bytes());
    }
    // (laid after the commit?, path, bytes, mode): before the commit, then dirty in every
    // way after it, and untracked files.
    let files: &[(bool, &str, &[u8], u32)] = &[
        (false, "a-dir/b", b"under a-dir\n", 0o644),
        (false, "run.sh", b"#!/bin/sh\necho hi\n", 0o755),
        (false, "to-exec.sh", b"echo later\n", 0o644),
        (false, "dirty-same-size.txt", b"before\n", 0o644),
        (false, "dirty-grown.txt", b"before\n", 0o644),
        (false, "deep/er/still/file.rs", b"fn main() {}\n", 0o644),
        // Converted on the way into the index: CRLF by `text=auto`, and a filter that
        // keeps the size (upper-case), which no size comparison can see.
        (
            false,
            ".gitattributes",
            b"*.crlf text=auto\n*.up filter=upper\n",
            0o644,
        ),
        (false, "windows.crlf", b"one\r\ntwo\r\n", 0o644),
        (false, "shout.up", b"quiet words\n", 0o644),
        (true, "dirty-same-size.txt", b"after!\n", 0o644),
        (true, "dirty-grown.txt", b"after, and longer\n", 0o644),
        (true, "to-exec.sh", b"echo later\n", 0o755),
        (true, "untracked.txt", b"new\n", 0o644),
        (true, "new-dir/untracked.rs", b"// new\n", 0o644),
        (true, "new.sh", b"echo new\n", 0o755),
    ];
    let lay = |later: bool| {
        for (_, path, bytes, mode) in files.iter().filter(|f| f.0 == later) {
            if fs::read(root.join(path)).ok().as_deref() != Some(*bytes) {
                write(root, path, bytes);
            }
            chmod(root, path, *mode);
        }
    };
    lay(false);
    git(root, &["config", "filter.upper.clean", "tr a-z A-Z"]);
    git(root, &["config", "filter.upper.smudge", "cat"]);
    p.commit_all();
    // The clean filter made the blob upper-case; the file is not.
    let staged = String::from_utf8(git(root, &["ls-files", "-s", "shout.up"])).unwrap();
    assert!(staged.contains(&blob_id(b"QUIET WORDS\n")));
    lay(true);
    // Make sure the index is written in a later second than every file changed (nothing racy
    // here): the clock passing a second is the condition, not an event.
    into_a_later_second();
    git(
        root,
        &["update-index", "-q", "--refresh", "--force-write-index"],
    );

    let (report, b) = p.copy_as("kinds", &[]);
    assert_eq!(report.included_files, files_under(root).len());
    let ids = assert_baseline_is_the_copy(&b);
    assert_eq!(ids["windows.crlf"], blob_id(b"one\r\ntwo\r\n"));
    assert_eq!(ids["shout.up"], blob_id(b"quiet words\n"));
    assert_eq!(ids["dirty-same-size.txt"], blob_id(b"after!\n"));
    let tree = String::from_utf8(in_baseline(&b, &["ls-tree", "HEAD", "to-exec.sh"])).unwrap();
    assert!(tree.starts_with("100755 "), "{tree}");
}

/// Rewrites the blob id of `path` in the project's index to `id` (keeping its stat data),
/// with a fresh checksum, and gives the index file the mtime `mtime`.
fn forge_index(root: &Path, path: &str, id: &str, mtime: std::time::SystemTime) {
    let index = root.join(".git/index");
    let mut bytes = fs::read(&index).unwrap();
    let old = String::from_utf8(git(root, &["rev-parse", &format!(":{path}")])).unwrap();
    let hex = |s: &str| -> Vec<u8> {
        (0..20)
            .map(|i| u8::from_str_radix(&s.trim()[2 * i..2 * i + 2], 16).unwrap())
            .collect()
    };
    let (old, new) = (hex(&old), hex(id));
    let at = bytes.windows(20).position(|w| w == old.as_slice()).unwrap();
    bytes[at..at + 20].copy_from_slice(&new);
    let body = bytes.len() - 20;
    let sum = Sha1::digest(&bytes[..body]);
    bytes[body..].copy_from_slice(&sum);
    fs::write(&index, &bytes).unwrap();
    let f = fs::File::options().write(true).open(&index).unwrap();
    f.set_modified(mtime).unwrap();
}

#[test]
fn the_source_index_is_trusted_only_when_clean_and_not_racy() {
    let p = Fixture::new(&[]);
    let root = &p.project;
    write(root, "f.txt", b"AAAA\n");
    p.commit_all();
    // A blob of the same size that is not the file's.
    fs::write(root.join("other"), b"BBBB\n").unwrap();
    let other = String::from_utf8(git(root, &["hash-object", "-w", "other"])).unwrap();
    fs::remove_file(root.join("other")).unwrap();
    // The second the file last changed (its ctime is never before its mtime).
    let ctime = fs::metadata(root.join("f.txt")).unwrap().ctime();
    let file_time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(ctime as u64);

    // Racily clean: the index says it was written in the second the file last changed, so
    // its stat data prove nothing; the file is hashed from the copy.
    forge_index(root, "f.txt", other.trim(), file_time);
    let (_, b) = p.copy_as("racy", &[]);
    let ids = assert_baseline_is_the_copy(&b);
    assert_eq!(ids["f.txt"], blob_id(b"AAAA\n"));

    // The same entry in an index written two seconds later is trusted without reading the
    // file: that is the point of it, and why only an exactly clean entry may vouch.
    forge_index(
        root,
        "f.txt",
        other.trim(),
        file_time + std::time::Duration::from_secs(2),
    );
    let (_, b) = p.copy_as("trusted", &[]);
    let tree = String::from_utf8(in_baseline(&b, &["ls-tree", "HEAD", "f.txt"])).unwrap();
    assert!(tree.contains(other.trim()), "{tree}");

    // Once the file is touched, its stat data no longer match and the file is hashed.
    let recorded = fs::metadata(root.join("f.txt"))
        .unwrap()
        .modified()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    // Same bytes, new stat data: rewrite until the clock's tick gives it another mtime.
    while fs::metadata(root.join("f.txt"))
        .unwrap()
        .modified()
        .unwrap()
        == recorded
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the mtime never changed"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
        write(root, "f.txt", b"AAAA\n");
    }
    let (_, b) = p.copy_as("touched", &[]);
    let ids = assert_baseline_is_the_copy(&b);
    assert_eq!(ids["f.txt"], blob_id(b"AAAA\n"));
}

#[test]
fn a_source_without_commits_or_from_a_linked_worktree_stages_the_same() {
    // Nothing committed, some files staged: the index has ids for those.
    let p = Fixture::new(&[]);
    write(&p.project, "staged.txt", b"staged\n");
    write(&p.project, "loose.txt", b"not staged\n");
    git(&p.project, &["add", "staged.txt"]);
    write(&p.project, "staged.txt", b"staged, then changed\n");
    let (_, b) = p.copy_as("fresh", &[]);
    assert_baseline_is_the_copy(&b);

    // A linked worktree keeps its own index under the main repository's git directory.
    let q = Fixture::new(&[]);
    write(&q.project, "x/y.txt", b"y\n");
    write(&q.project, "z.txt", b"z\n");
    q.commit_all();
    let wt = q.project.parent().unwrap().join("linked");
    git(
        &q.project,
        &["worktree", "add", "-q", "--detach", wt.to_str().unwrap()],
    );
    write(&wt, "z.txt", b"changed in the worktree\n");
    let limits = CopyLimits::default();
    let sel = select(&wt, &[], &SecretPatterns::default(), &limits).unwrap();
    let (_, b) = make_copy_with_baseline(
        &sel,
        &q.home.join("copies/wt"),
        &q.home.join("baselines/wt"),
        &limits,
    )
    .unwrap();
    let ids = assert_baseline_is_the_copy(&b);
    assert_eq!(ids["z.txt"], blob_id(b"changed in the worktree\n"));
}

/// What happens to a generated file after the commit.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Clean,
    SameSizeEdit,
    Grown,
    ExecToggled,
    Untracked,
    Crlf,
}

fn fate() -> impl Strategy<Value = Fate> {
    prop_oneof![
        3 => Just(Fate::Clean),
        1 => Just(Fate::SameSizeEdit),
        1 => Just(Fate::Grown),
        1 => Just(Fate::ExecToggled),
        1 => Just(Fate::Untracked),
        1 => Just(Fate::Crlf),
    ]
}

/// Paths from a few names chosen for their sort order (`-` and `.` sort before `/`).
fn path() -> impl Strategy<Value = String> {
    let part = prop::sample::select(vec!["a", "a-b", "a.b", "a0", "b", "B", "é"]);
    prop::collection::vec(part, 1..4).prop_map(|parts| parts.join("/"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    #[test]
    fn the_baseline_is_the_copy_whatever_the_source_state(
        files in prop::collection::btree_map(path(), (fate(), any::<bool>(), 0usize..40), 1..24),
    ) {
        let p = Fixture::new(&[]);
        // A file and a directory cannot share a path: keep the first of each clash.
        let mut kept: Vec<(&String, &(Fate, bool, usize))> = Vec::new();
        for (path, spec) in &files {
            let clash = kept.iter().any(|(k, _)| {
                path.starts_with(&format!("{k}/")) || k.starts_with(&format!("{path}/"))
            });
            if !clash {
                kept.push((path, spec));
            }
        }
        write(&p.project, ".gitattributes", b"* text=auto\n");
        for (path, (fate, exec, len)) in &kept {
            let body = "x".repeat(*len) + path;
            let body = match fate {
                Fate::Crlf => body.replace('x', "x\r\n"),
                _ => body,
            };
            write(&p.project, path, body.as_bytes());
            if *exec {
                chmod(&p.project, path, 0o755);
            }
        }
        git(&p.project, &["add", "-A"]);
        for (path, (fate, _, _)) in &kept {
            if matches!(fate, Fate::Untracked) {
                git(&p.project, &["rm", "-q", "--cached", "--", path]);
            }
        }
        git(&p.project, &["commit", "-q", "--allow-empty", "-m", "c"]);
        into_a_later_second();
        git(&p.project, &["update-index", "-q", "--refresh", "--force-write-index"]);
        for (path, (fate, exec, len)) in &kept {
            match fate {
                Fate::SameSizeEdit => write(&p.project, path, ("y".repeat(*len) + path).as_bytes()),
                Fate::Grown => write(&p.project, path, ("z".repeat(*len + 3) + path).as_bytes()),
                Fate::ExecToggled => chmod(&p.project, path, if *exec { 0o644 } else { 0o755 }),
                _ => {}
            }
        }
        let (_, b) = p.copy_as("prop", &[]);
        assert_baseline_is_the_copy(&b);
    }
}

/// Returns once the wall clock is in a later second than when it was called, so that whatever
/// is written next is written in a later second than every file written before (a bounded
/// retry on the clock, no fixed sleep).
fn into_a_later_second() {
    let since_epoch = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
    };
    // 50 ms into the next second: file times come from a coarse clock a tick behind this one.
    let next = std::time::Duration::from_secs(since_epoch().as_secs() + 1)
        + std::time::Duration::from_millis(50);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while since_epoch() < next {
        assert!(
            std::time::Instant::now() < deadline,
            "the clock stood still"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}
