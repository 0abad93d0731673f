//! Tests of the copy-workspace manifests' checks: hostile paths, sizes and hashes.

use super::*;
use proptest::prelude::*;

/// The workspace's rule, restated for these tests (the real one is
/// `legate_workspace::path_problem`; legate-core cannot depend on it).
fn rule(path: &str) -> Option<&'static str> {
    if path.is_empty() {
        return Some("is empty");
    }
    if path.starts_with('/') {
        return Some("is absolute");
    }
    if path.chars().any(char::is_control) {
        return Some("contains a NUL or control character");
    }
    if path.contains('\\') {
        return Some("contains a backslash");
    }
    for part in path.split('/') {
        match part {
            "" | "." | ".." => return Some("has a bad component"),
            p if p.eq_ignore_ascii_case(".git") => return Some("names a .git directory"),
            _ => {}
        }
    }
    None
}

fn file(path: &str, bytes: &[u8]) -> ManifestFile {
    ManifestFile {
        path: path.into(),
        size: bytes.len() as u64,
        sha256: sha256_hex(bytes),
        executable: false,
    }
}

#[test]
fn a_manifest_of_safe_files_passes_and_its_id_ignores_order() {
    let m = SentManifest::of(vec![file("src/b.rs", b"b"), file("a.txt", b"a")]);
    assert_eq!(m.files[0].path, "a.txt");
    assert_eq!(m.total_bytes, 2);
    m.check(2, &rule).unwrap();
    let reversed = SentManifest::of(vec![file("a.txt", b"a"), file("src/b.rs", b"b")]);
    assert_eq!(m.baseline_id, reversed.baseline_id);
    let mut exec = m.files.clone();
    exec[0].executable = true;
    assert_ne!(
        baseline_id(&exec),
        m.baseline_id,
        "the mode is part of the id"
    );
}

#[test]
fn hostile_paths_are_refused() {
    for bad in [
        "../x",
        "a/../../x",
        "/etc/passwd",
        "a\0b",
        ".git/config",
        "sub/.GIT/hooks/pre-commit",
        "a//b",
        "./a",
        "a\\..\\b",
        "",
    ] {
        let m = SentManifest::of(vec![file(bad, b"x")]);
        let e = m.check(u64::MAX, &rule).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidWorkspace, "{bad:?}");
    }
    let long = "a/".repeat(MAX_MANIFEST_PATH_BYTES / 2) + "b";
    let e = SentManifest::of(vec![file(&long, b"x")])
        .check(u64::MAX, &rule)
        .unwrap_err();
    assert!(e.message.contains("longer than"), "{}", e.message);
}

#[test]
fn duplicates_case_tricks_and_file_directory_clashes_are_refused() {
    for pair in [
        ["a.txt", "a.txt"],
        ["README", "readme"],
        ["Src/x", "src/X"],
        ["a", "a/b"],
        ["A", "a-x"],
    ] {
        let m = SentManifest::of(vec![file(pair[0], b"1"), file(pair[1], b"2")]);
        let r = m.check(u64::MAX, &rule);
        if pair == ["A", "a-x"] {
            r.unwrap();
        } else {
            assert_eq!(r.unwrap_err().code, ErrorCode::InvalidWorkspace, "{pair:?}");
        }
    }
    let m = SentManifest::of(vec![file("A", b"1"), file("a-x", b"2"), file("a/b", b"3")]);
    assert!(
        m.check(u64::MAX, &rule).is_err(),
        "a clash behind a sibling"
    );
}

#[test]
fn sizes_totals_hashes_and_ids_must_hold() {
    let m = SentManifest::of(vec![file("a", &[0; 10])]);
    assert_eq!(m.check(9, &rule).unwrap_err().code, ErrorCode::CopyTooLarge);
    m.check(10, &rule).unwrap();
    let mut lie = m.clone();
    lie.total_bytes = 1;
    assert_eq!(
        lie.check(10, &rule).unwrap_err().code,
        ErrorCode::InvalidWorkspace
    );
    let mut lie = m.clone();
    lie.files[0].sha256 = "AB".repeat(32);
    assert!(
        lie.check(10, &rule).is_err(),
        "upper-case hex is not the wire form"
    );
    let mut lie = m.clone();
    lie.baseline_id = "0".repeat(64);
    assert!(
        lie.check(10, &rule)
            .unwrap_err()
            .message
            .contains("baseline id")
    );
    let mut overflow = SentManifest::of(vec![file("a", b""), file("b", b"")]);
    overflow.files[0].size = u64::MAX;
    overflow.files[1].size = 2;
    assert_eq!(
        overflow.check(u64::MAX, &rule).unwrap_err().code,
        ErrorCode::CopyTooLarge
    );
    let many = SentManifest::of(
        (0..=MAX_TRANSFER_FILES)
            .map(|i| file(&format!("f{i}"), b""))
            .collect(),
    );
    assert!(
        many.check(u64::MAX, &rule)
            .unwrap_err()
            .message
            .contains("limit")
    );
}

#[test]
fn unknown_fields_are_refused_on_the_wire() {
    let m = SentManifest::of(vec![file("a", b"a")]);
    let mut v = serde_json::to_value(&m).unwrap();
    assert!(v.get("totalBytes").is_some() && v.get("baselineId").is_some());
    v["extra"] = serde_json::json!(1);
    assert!(serde_json::from_value::<SentManifest>(v).is_err());
    let r = serde_json::json!({"baselineId": "0", "patchSha256": "0", "patchLength": 0,
        "postState": [{"path": "a", "sha256": null, "mode": 420}]});
    assert!(serde_json::from_value::<ReturnedManifest>(r).is_err());
}

#[test]
fn sizes_may_arrive_as_whole_doubles_but_not_as_fractions() {
    let m = SentManifest::of(vec![file("a", b"abc")]);
    let mut v = serde_json::to_value(&m).unwrap();
    v["totalBytes"] = serde_json::json!(3.0);
    v["files"][0]["size"] = serde_json::json!(3.0);
    let back: SentManifest = serde_json::from_value(v.clone()).unwrap();
    assert_eq!(back, m);
    for bad in [
        serde_json::json!(2.5),
        serde_json::json!(-1.0),
        serde_json::json!(1e300),
    ] {
        let mut v = v.clone();
        v["files"][0]["size"] = bad.clone();
        assert!(serde_json::from_value::<SentManifest>(v).is_err(), "{bad}");
    }
}

#[test]
fn a_returned_manifest_is_checked_as_hostile() {
    let ok = ReturnedManifest {
        baseline_id: "a".repeat(64),
        patch_sha256: "b".repeat(64),
        patch_length: 10,
        post_state: vec![
            PostState {
                path: "gone".into(),
                sha256: None,
                executable: false,
            },
            PostState {
                path: "new".into(),
                sha256: Some("c".repeat(64)),
                executable: true,
            },
        ],
    };
    ok.check(10, &rule).unwrap();
    assert_eq!(
        ok.check(9, &rule).unwrap_err().code,
        ErrorCode::CopyTooLarge
    );
    for path in ["../x", "/abs", ".git/HEAD", "a\0"] {
        let mut bad = ok.clone();
        bad.post_state[0].path = path.into();
        assert_eq!(
            bad.check(10, &rule).unwrap_err().code,
            ErrorCode::RemoteProtocolError
        );
    }
    let mut dup = ok.clone();
    dup.post_state[1].path = "GONE".into();
    assert_eq!(
        dup.check(10, &rule).unwrap_err().code,
        ErrorCode::RemoteProtocolError
    );
    let mut exec_deleted = ok.clone();
    exec_deleted.post_state[0].executable = true;
    assert!(exec_deleted.check(10, &rule).is_err());
}

proptest! {
    /// Whatever path a sender names, the check accepts it exactly when the workspace rule
    /// does (and the length bound holds), and never panics.
    #[test]
    fn any_path_is_accepted_exactly_when_the_rule_accepts_it(
        path in "\\PC{0,24}|[a./\\\\\\x00A-Z]{0,12}|(\\.\\./)+[a-z]{1,3}|\\.[gG][iI][tT](/[a-z]{0,3})?"
    ) {
        let m = SentManifest::of(vec![file(&path, b"x")]);
        let ok = rule(&path).is_none() && path.len() <= MAX_MANIFEST_PATH_BYTES;
        prop_assert_eq!(m.check(u64::MAX, &rule).is_ok(), ok, "{:?}", path);
    }

    /// Two distinct safe paths pass together unless they are equal ignoring case, or one
    /// is a directory of the other.
    #[test]
    fn pairs_clash_exactly_when_they_fold_together(a in "[aAbB]{1,3}(/[aAbB]{1,2})?", b in "[aAbB]{1,3}(/[aAbB]{1,2})?") {
        let m = SentManifest::of(vec![file(&a, b"1"), file(&b, b"2")]);
        let (fa, fb) = (a.to_lowercase(), b.to_lowercase());
        let nested = |x: &str, y: &str| y.starts_with(x) && y.as_bytes().get(x.len()) == Some(&b'/');
        let clash = fa == fb || nested(&fa, &fb) || nested(&fb, &fa);
        prop_assert_eq!(m.check(u64::MAX, &rule).is_err(), clash, "{:?} {:?}", a, b);
    }
}
