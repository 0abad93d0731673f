//! One true positive per preflight rule, and a true negative wherever a rule has a known
//! false-positive shape (documented examples, placeholders, headers without key material,
//! lockfile hashes, templated values). Every fake credential is built at run time
//! (`common/fake.rs`), so this file holds none; the cases are in `common/name_cases.rs` and
//! `common/content_cases.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/content_cases.rs"]
mod content_cases;
#[path = "common/fake.rs"]
mod fake;
#[path = "common/name_cases.rs"]
mod name_cases;

use content_cases::content_cases;
use fake::*;
use legate_credentials::{RuleKind, scan_content, secret_rules};
use legate_workspace::{BlockReason, SecretPatterns};
use name_cases::name_cases;
use proptest::prelude::*;
use std::collections::BTreeSet;

#[test]
fn every_rule_has_a_true_positive_and_its_negatives_pass() {
    let secrets = SecretPatterns::default();
    let mut cases = name_cases();
    cases.extend(content_cases());
    let covered: BTreeSet<&str> = cases.iter().map(|c| c.rule).collect();
    let all: BTreeSet<&str> = secret_rules().iter().map(|r| r.id).collect();
    assert_eq!(covered, all, "every rule has a case, and every case a rule");
    let kinds: std::collections::HashMap<&str, RuleKind> =
        secret_rules().iter().map(|r| (r.id, r.kind)).collect();
    let mut failures = Vec::new();
    for c in &cases {
        assert!(!c.positives.is_empty(), "{} has no true positive", c.rule);
        for (path, bytes) in &c.positives {
            let got = secrets.check(path, bytes);
            let want_reason = match kinds[c.rule] {
                RuleKind::Content => BlockReason::SecretContent,
                _ => BlockReason::SecretFile,
            };
            match got {
                Some(b) if b.rule == c.rule && b.reason == want_reason => {
                    // Never a byte of the content in what is reported.
                    let json = serde_json::to_string(&b).unwrap();
                    assert!(json.len() < 200 + path.len(), "{json}");
                }
                other => failures.push(format!("{}: {path} gave {other:?}", c.rule)),
            }
            if kinds[c.rule] == RuleKind::Content {
                // In the middle of a binary file too.
                let mut bin = vec![0u8, 159, 146, 150, b'\n'];
                bin.extend_from_slice(bytes);
                bin.extend_from_slice(&[b'\n', 0, 0xff]);
                if scan_content(&bin) != Some(c.rule) {
                    failures.push(format!("{}: {path} in binary", c.rule));
                }
            }
        }
        for (path, bytes) in &c.negatives {
            if let Some(b) = secrets.check(path, bytes) {
                failures.push(format!("{}: negative {path} blocked by {}", c.rule, b.rule));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn a_secret_at_the_end_of_a_large_file_is_found() {
    let mut big = "fn ordinary() {}\n".repeat(600_000).into_bytes();
    assert!(big.len() > 8 << 20);
    big.extend_from_slice(format!("{}_{}\n", "ghp", rnd(ALNUM, 36, 700)).as_bytes());
    assert_eq!(scan_content(&big), Some("github-token"));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Arbitrary bytes never make the scanner panic, and it only ever names its own rules.
    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..8192)) {
        let ids: BTreeSet<&str> = secret_rules().iter().map(|r| r.id).collect();
        if let Some(rule) = scan_content(&bytes) {
            prop_assert!(ids.contains(rule), "{rule}");
        }
        let _ = SecretPatterns::default().check("a/b.key", &bytes);
    }

    /// A token planted anywhere in arbitrary bytes is found: nothing is truncated, and the
    /// bounded look-back around a match never reads outside the file.
    #[test]
    fn a_planted_token_is_found_anywhere(
        before in proptest::collection::vec(any::<u8>(), 0..20_000),
        after in proptest::collection::vec(any::<u8>(), 0..2_000),
        seed in any::<u64>(),
    ) {
        let mut bytes = before;
        bytes.push(b'\n');
        bytes.extend_from_slice(format!("{}_{}", "ghp", rnd(ALNUM, 36, seed)).as_bytes());
        bytes.push(b'\n');
        bytes.extend_from_slice(&after);
        prop_assert!(scan_content(&bytes).is_some());
    }

    /// Paths: any relative path gets a verdict without panicking.
    #[test]
    fn arbitrary_paths_never_panic(path in "[a-zA-Z0-9._~/-]{1,80}") {
        let p = SecretPatterns::default();
        let _ = p.check_name(&path);
        let _ = p.content_confirmed_name(&path);
    }
}
