#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use proptest::prelude::*;

const BOUNDS: MemoryBounds = MemoryBounds {
    max_entries: 3,
    max_bytes: 20,
};

fn sha(n: u8) -> String {
    format!("{:02x}", n).repeat(32)
}

#[test]
fn null_creates_the_current_hash_replaces_and_anything_else_changes_nothing() {
    let s = Store::open_in_memory().unwrap();
    let w = |text: &str, h: u8, expected: Option<&str>| {
        s.memory_write("/p", "reviewer", text, &sha(h), expected, BOUNDS)
            .unwrap()
    };
    assert_eq!(w("one", 1, None), MemoryWrite::Written);
    // Creating again is a conflict naming the stored version.
    assert_eq!(
        w("two", 2, None),
        MemoryWrite::Changed {
            current: Some(sha(1))
        }
    );
    // A stale hash changes nothing.
    assert_eq!(
        w("two", 2, Some(&sha(9))),
        MemoryWrite::Changed {
            current: Some(sha(1))
        }
    );
    assert_eq!(
        s.memory_entry("/p", "reviewer").unwrap().unwrap().text,
        "one"
    );
    assert_eq!(w("two", 2, Some(&sha(1))), MemoryWrite::Written);
    let e = s.memory_entry("/p", "reviewer").unwrap().unwrap();
    assert_eq!(
        (e.text.as_str(), e.meta.sha256.as_str(), e.meta.bytes),
        ("two", sha(2).as_str(), 3)
    );
    // Removal needs the current hash too.
    assert_eq!(
        s.memory_remove("/p", "reviewer", &sha(1)).unwrap(),
        MemoryWrite::Changed {
            current: Some(sha(2))
        }
    );
    assert_eq!(
        s.memory_remove("/p", "reviewer", &sha(2)).unwrap(),
        MemoryWrite::Written
    );
    assert_eq!(
        s.memory_remove("/p", "reviewer", &sha(2)).unwrap(),
        MemoryWrite::Changed { current: None }
    );
    assert!(s.memory_entry("/p", "reviewer").unwrap().is_none());
}

#[test]
fn limits_hold_over_the_whole_store_and_a_replacement_counts_its_own_bytes_once() {
    let s = Store::open_in_memory().unwrap();
    for (i, p) in ["/a", "/b", "/c"].iter().enumerate() {
        assert_eq!(
            s.memory_write(p, "x", "12345", &sha(i as u8), None, BOUNDS)
                .unwrap(),
            MemoryWrite::Written
        );
    }
    assert_eq!(
        s.memory_write("/d", "x", "1", &sha(7), None, BOUNDS)
            .unwrap(),
        MemoryWrite::TooManyEntries { entries: 3 }
    );
    // 15 bytes stored; replacing 5 by 10 makes 20 (at the limit), by 11 makes 21.
    assert_eq!(
        s.memory_write("/a", "x", "12345678901", &sha(8), Some(&sha(0)), BOUNDS)
            .unwrap(),
        MemoryWrite::TooManyBytes { total: 21 }
    );
    assert_eq!(
        s.memory_write("/a", "x", "1234567890", &sha(8), Some(&sha(0)), BOUNDS)
            .unwrap(),
        MemoryWrite::Written
    );
    assert_eq!(
        s.memory_totals().unwrap(),
        MemoryTotals {
            entries: 3,
            bytes: 20
        }
    );
    let listed = s.memory_list("/a", None).unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].bytes, 10);
    assert!(s.memory_list("/a", Some("other")).unwrap().is_empty());
}

#[test]
fn snapshots_are_all_or_nothing_and_outlive_their_entries() {
    let s = Store::open_in_memory().unwrap();
    s.memory_write("/p", "a", "alpha", &sha(1), None, BOUNDS)
        .unwrap();
    s.memory_write("/p", "b", "beta", &sha(2), None, BOUNDS)
        .unwrap();
    let t1 = TaskId("t1".into());
    let stale = [("a".to_string(), sha(1)), ("b".to_string(), sha(9))];
    assert_eq!(
        s.snapshot_memory(
            &t1,
            SnapshotSource::Entries {
                project: "/p",
                selection: &stale
            }
        )
        .unwrap(),
        Snapshot::Missing { index: 1 }
    );
    assert!(s.memory_snapshots(&t1).unwrap().is_empty());
    let good = [("b".to_string(), sha(2)), ("a".to_string(), sha(1))];
    let Snapshot::Taken(texts) = s
        .snapshot_memory(
            &t1,
            SnapshotSource::Entries {
                project: "/p",
                selection: &good,
            },
        )
        .unwrap()
    else {
        panic!("not taken")
    };
    assert_eq!(texts[0].text, "beta");
    // Another project's entry of the same specialist and hash is not this one.
    let other = [("a".to_string(), sha(1))];
    assert_eq!(
        s.snapshot_memory(
            &TaskId("t9".into()),
            SnapshotSource::Entries {
                project: "/q",
                selection: &other
            }
        )
        .unwrap(),
        Snapshot::Missing { index: 0 }
    );
    s.memory_remove("/p", "a", &sha(1)).unwrap();
    s.memory_write("/p", "b", "gamma", &sha(3), Some(&sha(2)), BOUNDS)
        .unwrap();
    let t2 = TaskId("t2".into());
    s.snapshot_memory(&t2, SnapshotSource::Task(&t1)).unwrap();
    let kept = s.memory_snapshots(&t2).unwrap();
    assert_eq!(
        kept.iter().map(|k| k.text.as_str()).collect::<Vec<_>>(),
        ["beta", "alpha"]
    );
    s.forget_memory_snapshots(&t2).unwrap();
    assert!(s.memory_snapshots(&t2).unwrap().is_empty());
    assert_eq!(s.memory_snapshots(&t1).unwrap().len(), 2);
}

#[test]
fn two_processes_racing_to_replace_one_version_never_both_win() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legate.db");
    let first = Store::open(&path).unwrap();
    first
        .memory_write("/p", "s", "v0", &sha(0), None, BOUNDS)
        .unwrap();
    // Separate connections, as separate processes have; each writer races from the same
    // version.
    let handles: Vec<_> = (1..=8u8)
        .map(|i| {
            let path = path.clone();
            std::thread::spawn(move || {
                let s = Store::open(&path).unwrap();
                s.memory_write("/p", "s", &format!("v{i}"), &sha(i), Some(&sha(0)), BOUNDS)
                    .unwrap()
            })
        })
        .collect();
    let outcomes: Vec<MemoryWrite> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let won = outcomes
        .iter()
        .filter(|o| **o == MemoryWrite::Written)
        .count();
    assert_eq!(won, 1, "{outcomes:?}");
    let e = first.memory_entry("/p", "s").unwrap().unwrap();
    assert_ne!(e.meta.sha256, sha(0));
    assert_eq!(
        e.text,
        format!("v{}", u8::from_str_radix(&e.meta.sha256[..2], 16).unwrap())
    );
}

proptest! {
    /// Whatever project path and specialist bytes are used as keys, an entry is found under
    /// exactly its own key: no prefix, case or separator trick reaches another's.
    #[test]
    fn an_entry_is_found_under_its_own_key_only(
        p1 in "/[a-zA-Z0-9 ./_%'\"-]{0,20}",
        p2 in "/[a-zA-Z0-9 ./_%'\"-]{0,20}",
        s1 in "[a-zA-Z0-9._%-]{1,12}",
        s2 in "[a-zA-Z0-9._%-]{1,12}",
    ) {
        let s = Store::open_in_memory().unwrap();
        s.memory_write(&p1, &s1, "one", &sha(1), None, BOUNDS).unwrap();
        let same = p1 == p2 && s1 == s2;
        prop_assert_eq!(s.memory_entry(&p2, &s2).unwrap().is_some(), same);
        prop_assert_eq!(s.memory_list(&p2, None).unwrap().len(), usize::from(p1 == p2));
        let w = s.memory_write(&p2, &s2, "two", &sha(2), None, BOUNDS).unwrap();
        prop_assert_eq!(w == MemoryWrite::Written, !same);
    }
}
