//! Unit and property tests of the copy-workspace message parsing: every part and manifest is
//! hostile.

use super::*;
use a2a::Role;
use legate_core::remote::ManifestFile;
use proptest::prelude::*;
use serde_json::json;

fn file_part(path: &str, bytes: &[u8]) -> Part {
    let mut p = Part::raw(bytes.to_vec());
    p.filename = Some(path.into());
    p.metadata = Some(HashMap::from([(MANIFEST_KEY.to_string(), json!("file"))]));
    p
}

fn manifest_part(files: &[(&str, &[u8])]) -> Part {
    let m = SentManifest::of(
        files
            .iter()
            .map(|(p, b)| ManifestFile {
                path: (*p).into(),
                size: b.len() as u64,
                sha256: sha256_hex(b),
                executable: p.ends_with(".sh"),
            })
            .collect(),
    );
    let mut p = Part::data(serde_json::to_value(m).unwrap());
    p.metadata = Some(HashMap::from([(
        MANIFEST_KEY.to_string(),
        json!("manifest"),
    )]));
    p
}

fn message(parts: Vec<Part>) -> Message {
    Message::new(Role::User, parts)
}

fn error_of(m: &Message, max: u64) -> String {
    format!("{:?}", received(m, max).unwrap_err())
}

#[test]
fn a_message_without_the_extension_is_left_to_the_usual_path() {
    let mut m = message(vec![Part::text("hi")]);
    m.extensions = Some(vec![legate_core::remote::COPY_WORKSPACE_EXTENSION.into()]);
    assert!(
        received(&m, 10).unwrap().is_none(),
        "declared but no files: as today"
    );
}

#[test]
fn a_well_formed_bundle_becomes_a_received_copy() {
    let m = message(vec![
        Part::text("fix it"),
        file_part("src/a.rs", b"a"),
        file_part("run.sh", b"#!/bin/sh\n"),
        manifest_part(&[("src/a.rs", b"a"), ("run.sh", b"#!/bin/sh\n")]),
        Part::text("please"),
    ]);
    let b = received(&m, 1024).unwrap().unwrap();
    assert_eq!(b.text, "fix it\nplease");
    let WorkspaceRequest::Received(files) = b.workspace else {
        panic!("{:?}", b.workspace);
    };
    let paths: Vec<(&str, bool)> = files
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.executable))
        .collect();
    assert_eq!(paths, [("run.sh", true), ("src/a.rs", false)]);
    assert!(
        !format!("{files:?}").contains("bin/sh"),
        "bytes are never printed"
    );
}

#[test]
fn hostile_shapes_are_refused() {
    let ok_manifest = || manifest_part(&[("a", b"1")]);
    let cases: Vec<(Vec<Part>, &str)> = vec![
        (vec![file_part("a", b"1")], "no manifest"),
        (
            vec![file_part("a", b"1"), ok_manifest(), ok_manifest()],
            "two manifests",
        ),
        (
            vec![file_part("a", b"1"), file_part("a", b"1"), ok_manifest()],
            "twice",
        ),
        (vec![file_part("a", b"2"), ok_manifest()], "does not match"),
        (vec![file_part("b", b"1"), ok_manifest()], "not sent"),
        (vec![ok_manifest()], "carries 0 files"),
        (
            vec![
                Part::raw(b"1".to_vec()),
                file_part("a", b"1"),
                ok_manifest(),
            ],
            "CONTENT_TYPE",
        ),
        (
            vec![Part::url("https://example.com/a"), ok_manifest()],
            "CONTENT_TYPE",
        ),
    ];
    for (parts, says) in cases {
        let e = error_of(&message(parts), 1024);
        assert!(
            e.contains(says) || (says == "CONTENT_TYPE" && e.contains("-32005")),
            "{says:?} not in {e}"
        );
    }
    let mut named = file_part("a", b"1");
    named.filename = None;
    assert!(error_of(&message(vec![named, ok_manifest()]), 1024).contains("no filename"));
    let mut both = message(vec![file_part("a", b"1"), ok_manifest()]);
    both.metadata = Some(HashMap::from([(
        crate::workspace::KEY.to_string(),
        json!({"kind": "sandbox"}),
    )]));
    assert!(error_of(&both, 1024).contains("names no other workspace"));
    let mut lying = message(vec![file_part("a", b"1"), ok_manifest()]);
    lying.metadata = Some(HashMap::from([(
        MANIFEST_KEY.to_string(),
        json!({"baselineId": "0".repeat(64)}),
    )]));
    assert!(error_of(&lying, 1024).contains("baselineId"));
    let big = message(vec![file_part("a", b"1"), ok_manifest()]);
    assert!(error_of(&big, 0).contains("COPY_TOO_LARGE"));
}

proptest! {
    /// Whatever path a sender names, a bundle is accepted exactly when the workspace's
    /// safe-path rule accepts it, and never panics.
    #[test]
    fn any_path_is_accepted_exactly_when_the_workspace_rule_accepts_it(
        path in "\\PC{0,16}|[a./\\\\\\x00]{0,10}|(\\.\\./)+[a-z]{1,3}|[a-z]{1,3}/\\.[gG][iI][tT]/[a-z]{1,3}|/[a-z]{1,5}"
    ) {
        let m = message(vec![Part::text("x"), file_part(&path, b"1"), manifest_part(&[(&path, b"1")])]);
        let ok = legate_engine::path_problem(&path).is_none();
        prop_assert_eq!(received(&m, 1024).is_ok(), ok, "{:?}", path);
    }

    /// Bytes that differ from the manifest's are refused, whatever they are.
    #[test]
    fn bytes_must_match_the_manifest(sent in proptest::collection::vec(any::<u8>(), 0..64), listed in proptest::collection::vec(any::<u8>(), 0..64)) {
        let m = message(vec![file_part("f", &sent), manifest_part(&[("f", &listed)])]);
        prop_assert_eq!(received(&m, 1024).is_ok(), sent == listed);
    }
}
