//! Tests of `smudge`: only an entry whose file differs (by a nanosecond) is smudged, an
//! index it cannot rewrite makes every entry racy, and git hashes a smudged file again.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::git::Git;
use crate::git_index::{OID_LEN, Oid};
use std::fs;
use std::path::PathBuf;

const BEFORE: &[u8] = b"let x = a + b;\n";
const AFTER: &[u8] = b"let x = a - b;\n";

/// An old mtime with nanoseconds: an entry recorded with it is not racily clean.
fn old() -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::new(1_577_836_800, 123_456_789)
}

/// A copy root holding `files` (each with the old mtime), and the scratch index's path beside
/// it (not written yet).
fn copy_of(files: &[(&str, &[u8])]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("copy");
    fs::create_dir(&root).unwrap();
    for (name, bytes) in files {
        let path = root.join(name);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, bytes).unwrap();
        fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old())
            .unwrap();
    }
    let index = tmp.path().join("index");
    (tmp, root, index)
}

/// An entry for `path` with the stat data of the file there now.
fn entry(root: &Path, path: &str, oid: Oid) -> Entry {
    Entry {
        path: path.as_bytes().to_vec(),
        stat: Stat::of(&fs::symlink_metadata(root.join(path)).unwrap()),
        mode: 0o100644,
        oid,
        stage: 0,
        assume_valid: false,
        skip_worktree: false,
        intent_to_add: false,
    }
}

/// The entry's stat data with its mtime moved by a nanosecond only.
fn a_nanosecond_off(e: &mut Entry) {
    e.stat.mtime.1 = (e.stat.mtime.1 + 1) % 1_000_000_000;
}

fn read(index: &Path) -> Vec<Entry> {
    git_index::parse(&fs::read(index).unwrap()).unwrap()
}

#[test]
fn only_an_entry_whose_file_differs_even_by_a_nanosecond_is_smudged() {
    let (_tmp, root, index) = copy_of(&[("a", b"same"), ("b", b"nano"), ("c", b"gone")]);
    let same = entry(&root, "a", [1; OID_LEN]);
    let mut nano = entry(&root, "b", [2; OID_LEN]);
    a_nanosecond_off(&mut nano);
    let mut gone = entry(&root, "c", [3; OID_LEN]);
    a_nanosecond_off(&mut gone);
    fs::remove_file(root.join("c")).unwrap();
    fs::write(
        &index,
        git_index::write_v2(&[same.clone(), nano.clone(), gone.clone()]),
    )
    .unwrap();

    assert_eq!(smudge(&index, &root).unwrap(), Smudged::Entries(1));
    let mut want = nano.clone();
    want.stat.size = 0;
    // Nothing else moved: ids, modes, paths and the other entries are as they were; a file
    // that is gone is git's to see.
    assert_eq!(read(&index), [same.clone(), want, gone.clone()]);

    // Nothing differs once it is smudged but that size: a second pass changes nothing more.
    let before = fs::read(&index).unwrap();
    assert_eq!(smudge(&index, &root).unwrap(), Smudged::Entries(1));
    assert_eq!(fs::read(&index).unwrap(), before);
    let written = SystemTime::now();
    assert_eq!(Smudged::Entries(1).index_mtime(written), written);
}

#[test]
fn an_index_that_matches_every_file_is_left_as_it_was() {
    let (_tmp, root, index) = copy_of(&[("a", b"one"), ("d/b", b"")]);
    let entries = [
        entry(&root, "a", [1; OID_LEN]),
        entry(&root, "d/b", [2; OID_LEN]),
    ];
    let bytes = git_index::write_v2(&entries);
    fs::write(&index, &bytes).unwrap();
    assert_eq!(smudge(&index, &root).unwrap(), Smudged::Entries(0));
    assert_eq!(fs::read(&index).unwrap(), bytes);
}

#[test]
fn an_empty_files_entry_gets_a_size_the_file_does_not_have() {
    let (_tmp, root, index) = copy_of(&[("e", b"")]);
    let mut e = entry(&root, "e", [9; OID_LEN]);
    a_nanosecond_off(&mut e);
    fs::write(&index, git_index::write_v2(&[e])).unwrap();
    assert_eq!(smudge(&index, &root).unwrap(), Smudged::Entries(1));
    assert_eq!(read(&index)[0].stat.size, 1);
}

#[test]
fn an_unreadable_index_makes_every_entry_racy_instead() {
    let (_tmp, root, index) = copy_of(&[("a", b"x")]);
    fs::write(&index, b"DIRC not an index at all, too short to hold one").unwrap();
    let before = fs::read(&index).unwrap();
    let outcome = smudge(&index, &root).unwrap();
    assert_eq!(outcome, Smudged::All);
    assert_eq!(fs::read(&index).unwrap(), before, "left as it was");
    // Not the epoch itself: git reads a zero timestamp as none, and nothing is racy then.
    let mtime = outcome.index_mtime(SystemTime::now());
    assert_eq!(mtime, SystemTime::UNIX_EPOCH + Duration::from_secs(1));
    // No index at all is no better.
    assert_eq!(smudge(&root.join("missing"), &root).unwrap(), Smudged::All);
}

#[test]
fn an_index_write_v2_cannot_hold_makes_every_entry_racy_instead() {
    let (_tmp, root, index) = copy_of(&[("a", b"x")]);
    let mut e = entry(&root, "a", [1; OID_LEN]);
    a_nanosecond_off(&mut e);
    // The same path twice (as a conflict's stages would be): not sorted and unique.
    let bytes = git_index::write_v2(&[e.clone(), e]);
    fs::write(&index, &bytes).unwrap();
    assert_eq!(smudge(&index, &root).unwrap(), Smudged::All);
    assert_eq!(fs::read(&index).unwrap(), bytes);
}

/// A repository whose work tree file `f` holds `AFTER`, and the id of `BEFORE` written in it.
fn repository() -> (tempfile::TempDir, Git, Oid) {
    let (tmp, root, _) = copy_of(&[("f", AFTER)]);
    let git = Git::source(&root);
    git.run(&["init", "-q"]).unwrap();
    let id = git
        .run_input(&["hash-object", "-w", "--stdin"], Some(BEFORE))
        .unwrap();
    let id = String::from_utf8(id).unwrap();
    let mut oid = [0u8; OID_LEN];
    for (j, byte) in oid.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&id[2 * j..2 * j + 2], 16).unwrap();
    }
    (tmp, git, oid)
}

/// The blob id `git add --all` stages for `f` with the index `index`, its mtime set to `mtime`.
fn staged(git: &Git, index: &Path, mtime: SystemTime) -> String {
    fs::File::options()
        .write(true)
        .open(index)
        .unwrap()
        .set_modified(mtime)
        .unwrap();
    let git = git.with_index(index);
    git.run(&["add", "--all"]).unwrap();
    let listed = git.run(&["ls-files", "-s", "f"]).unwrap();
    String::from_utf8(listed)
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .to_string()
}

fn hex(oid: &Oid) -> String {
    oid.iter().map(|b| format!("{b:02x}")).collect()
}

/// The case itself, built directly: an entry recorded for `BEFORE` in the same second as the
/// file now holding `AFTER` (same size, mtime, inode), its ctime a few nanoseconds earlier.
/// Git alone keeps the old blob; smudged, git hashes the file.
#[test]
fn git_hashes_again_a_file_its_second_granular_check_calls_clean() {
    let (tmp, git, before) = repository();
    let root = tmp.path().join("copy");
    let mut e = entry(&root, "f", before);
    e.stat.ctime.1 = e.stat.ctime.1.checked_sub(1).unwrap_or(1);
    let bytes = git_index::write_v2(&[e]);
    let index = tmp.path().join("index");
    let written = SystemTime::now();

    // Without smudging, git's blind spot: the old blob is kept.
    fs::write(&index, &bytes).unwrap();
    assert_eq!(staged(&git, &index, written), hex(&before));

    fs::write(&index, &bytes).unwrap();
    let outcome = smudge(&index, &root).unwrap();
    assert_eq!(outcome, Smudged::Entries(1));
    let id = staged(&git, &index, outcome.index_mtime(written));
    assert_ne!(id, hex(&before));
    let shown = git.run(&["cat-file", "-p", &id]).unwrap();
    assert_eq!(shown, AFTER);
}

/// The fallback: an index whose mtime is one second after the epoch has every entry racy, so
/// git re-reads even a file whose stat data match its entry exactly.
#[test]
fn the_fallback_mtime_makes_git_read_every_file_again() {
    let (tmp, git, before) = repository();
    let root = tmp.path().join("copy");
    let bytes = git_index::write_v2(&[entry(&root, "f", before)]);
    let index = tmp.path().join("index");
    fs::write(&index, &bytes).unwrap();
    assert_eq!(staged(&git, &index, SystemTime::now()), hex(&before));
    fs::write(&index, &bytes).unwrap();
    let id = staged(&git, &index, Smudged::All.index_mtime(SystemTime::now()));
    assert_eq!(git.run(&["cat-file", "-p", &id]).unwrap(), AFTER);
}

/// A tracked file that cannot be measured (here its name is longer than a file system takes:
/// `ENAMETOOLONG`; an unreadable directory as a user that is not root does the same) is
/// refused: git would skip it with a warning and keep its old blob.
#[test]
fn a_tracked_file_that_cannot_be_measured_refuses_the_staging() {
    let (_tmp, root, index) = copy_of(&[("a.txt", BEFORE), ("d/x", BEFORE)]);
    let mut long = entry(&root, "a.txt", [1; OID_LEN]);
    long.path = format!("d/{}", "n".repeat(300)).into_bytes();
    let entries = vec![entry(&root, "a.txt", [1; OID_LEN]), long];
    fs::write(&index, git_index::write_v2(&entries)).unwrap();
    let err = smudge(&index, &root).unwrap_err();
    assert_eq!(err.code, ErrorCode::UnsafePath, "{err}");
    assert!(err.message.contains("cannot be looked at"), "{err}");
}

/// Fields are compared as git records them, truncated to 32 bits: a state whose inode only
/// differs above the low 32 bits is the same entry (no re-hash at every staging on a file
/// system of 64-bit inode numbers); one a nanosecond off is not.
#[test]
fn fields_are_compared_truncated_as_git_records_them() {
    let (_tmp, root, _index) = copy_of(&[("a.txt", BEFORE)]);
    let e = entry(&root, "a.txt", [1; OID_LEN]);
    let now = FileState::of(&fs::symlink_metadata(root.join("a.txt")).unwrap());
    let ((dev, ino, size, mode), mtime, ctime) = now.parts();
    let high = FileState::from_parts((dev, ino | (1 << 40), size, mode), mtime, ctime);
    assert!(is_exactly(&e.stat, high));
    let off = FileState::from_parts((dev, ino, size, mode), mtime, (ctime.0, ctime.1 ^ 1));
    assert!(!is_exactly(&e.stat, off));
}
