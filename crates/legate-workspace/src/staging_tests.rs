//! Tests of `staging`: the index written as the copy lands.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use std::fs;

fn entry(path: &str, stat: Stat, oid: u8) -> Entry {
    Entry {
        path: path.as_bytes().to_vec(),
        stat,
        mode: 0o100644,
        oid: [oid; OID_LEN],
        stage: 0,
        assume_valid: false,
        skip_worktree: false,
        intent_to_add: false,
    }
}

/// A source index over one real file, written `later` seconds after the file's ctime.
fn index_over(meta: &Metadata, later: i64, edit: impl Fn(&mut Entry)) -> SourceIndex {
    let mut e = entry("f", Stat::of(meta), 7);
    edit(&mut e);
    SourceIndex::from_entries(vec![e], meta.ctime().max(meta.mtime()) + later)
}

#[test]
fn only_an_exact_old_plain_entry_vouches_for_a_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("f");
    fs::write(&path, b"content").unwrap();
    let meta = fs::metadata(&path).unwrap();
    let clean = index_over(&meta, 1, |_| {});
    assert_eq!(clean.clean_blob("f", &meta), Some([7; OID_LEN]));
    assert_eq!(clean.clean_blob("g", &meta), None);
    // Racily clean: written in the same second as the file's last change.
    assert_eq!(index_over(&meta, 0, |_| {}).clean_blob("f", &meta), None);
    assert_eq!(index_over(&meta, -5, |_| {}).clean_blob("f", &meta), None);
    // Any differing field: dirty.
    let edits: [fn(&mut Entry); 11] = [
        |e| e.stat.ctime.1 ^= 1,
        |e| e.stat.ctime.0 ^= 1,
        |e| e.stat.mtime.1 ^= 1,
        |e| e.stat.dev ^= 1,
        |e| e.stat.ino ^= 1,
        |e| e.stat.uid ^= 1,
        |e| e.stat.gid ^= 1,
        |e| e.stat.size ^= 1,
        |e| e.assume_valid = true,
        |e| e.skip_worktree = true,
        |e| e.intent_to_add = true,
    ];
    for (i, edit) in edits.iter().enumerate() {
        assert_eq!(
            index_over(&meta, 1, edit).clean_blob("f", &meta),
            None,
            "{i}"
        );
    }
    for mode in [0o120000, 0o160000, 0o040000] {
        let idx = index_over(&meta, 1, |e| e.mode = mode);
        assert_eq!(idx.clean_blob("f", &meta), None);
    }
    let exec = index_over(&meta, 1, |e| e.mode = 0o100755);
    assert!(exec.clean_blob("f", &meta).is_some());
    // A conflicted path vouches for nothing, even with a stage 0 entry beside it.
    let mut stage2 = entry("f", Stat::of(&meta), 8);
    stage2.stage = 2;
    let conflicted = SourceIndex::from_entries(
        vec![entry("f", Stat::of(&meta), 7), stage2],
        meta.ctime() + 1,
    );
    assert_eq!(conflicted.clean_blob("f", &meta), None);
}

#[test]
fn quoting_keeps_paths_literal() {
    assert_eq!(quote("a/b.rs"), b"\"a/b.rs\"\n");
    assert_eq!(quote("\"x\" y"), b"\"\\\"x\\\" y\"\n");
    assert_eq!(quote("a\\b\nc"), b"\"a\\\\b\\012c\"\n");
    assert_eq!(parse_hex(&"ab".repeat(20)), Some([0xab; OID_LEN]));
    assert_eq!(parse_hex("ab"), None);
    assert_eq!(parse_hex(&"zz".repeat(20)), None);
}
