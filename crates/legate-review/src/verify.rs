//! Acceptance criteria and their verification against the copy's real files.
//!
//! This module owns criteria (id, description, optional check: `file-exists`, `file-absent`,
//! `file-contains`, `file-not-contains`), the caller's reviews (one per criterion: verdict,
//! path, line, quote, explanation), running the checks on the copy, confirming that each
//! quote stands exactly at the cited line, and recording which files the verdict rests on
//! (with their sha256) so that any later change makes it stale.
//!
//! A passing verification shows the declared conditions and that the citations are real; it
//! never claims the interpretation is right (reviews are `client-reported`). It must never
//! read outside the copy or follow a symlink there.

use legate_core::Error;
use legate_workspace::{path_problem, read_inside, sha256_hex};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::path::Path;

/// The most criteria one task may carry.
pub const MAX_CRITERIA: usize = 50;

/// What a check looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum CheckKind {
    /// The file exists.
    FileExists,
    /// The file does not exist.
    FileAbsent,
    /// The file contains `text`.
    FileContains,
    /// The file does not contain `text`.
    FileNotContains,
}

/// A deterministic check of a criterion.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Check {
    /// What to check: file-exists, file-absent, file-contains, file-not-contains.
    pub kind: CheckKind,
    /// The relative path.
    pub path: String,
    /// The text, for `file-contains` and `file-not-contains`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

/// An acceptance criterion, given when the task is submitted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Criterion {
    /// Unique within the task (1 to 100 characters, no control characters).
    pub id: String,
    /// What must hold.
    pub description: String,
    /// An optional deterministic check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<Check>,
}

/// A reviewer's verdict on a criterion.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Verdict {
    /// The criterion holds.
    Passed,
    /// It does not.
    Failed,
    /// The reviewer could not tell.
    Unverified,
}

/// The evidence for one criterion, as the caller reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Review {
    /// The criterion it is about.
    pub criterion_id: String,
    /// The verdict.
    pub verdict: Verdict,
    /// The cited file (relative).
    pub path: String,
    /// The cited line, 1-based.
    pub line: u64,
    /// Text that stands exactly at that line (it may continue on the following lines).
    pub quote: String,
    /// Why.
    pub explanation: String,
}

/// How one criterion fared.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CriterionResult {
    /// The criterion.
    pub criterion_id: String,
    /// The reviewer's verdict; `None` when no review was given.
    pub verdict: Option<Verdict>,
    /// The check's outcome; `None` when the criterion has no check.
    pub check_passed: Option<bool>,
    /// Whether the quote was found exactly at the cited line.
    pub citation_checked: bool,
    /// Whether the criterion passes: verdict passed, check passed (if any), citation real.
    pub passed: bool,
    /// What went wrong, for a person (always written, empty when nothing did).
    #[serde(default)]
    pub problems: Vec<String>,
}

/// A verification, bound to a patch and to the files it rests on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Verification {
    /// The patch sha256 it was made against.
    pub sha256: String,
    /// Whether every criterion passed.
    pub passed: bool,
    /// Per criterion, in the task's order.
    pub criteria: Vec<CriterionResult>,
    /// Files cited or checked → their sha256 in the copy (`None`: absent).
    pub evidence: BTreeMap<String, Option<String>>,
    /// Reviews are the caller's claims: always `client-reported`.
    pub source: String,
}

/// Validates criteria at submit time: `INVALID_INPUT` naming the problem.
pub fn validate_criteria(criteria: &[Criterion]) -> Result<(), Error> {
    if criteria.len() > MAX_CRITERIA {
        return Err(Error::invalid_input(format!(
            "{} criteria were given; the limit is {MAX_CRITERIA}",
            criteria.len()
        )));
    }
    let mut ids = HashSet::new();
    for c in criteria {
        if c.id.trim().is_empty() || c.id.len() > 100 || c.id.chars().any(char::is_control) {
            return Err(Error::invalid_input(
                "a criterion id must be 1 to 100 characters with no control characters",
            ));
        }
        if !ids.insert(c.id.as_str()) {
            return Err(Error::invalid_input(format!(
                "the criterion id {:?} is given twice",
                c.id
            )));
        }
        if c.description.trim().is_empty() {
            return Err(Error::invalid_input(format!(
                "criterion {:?} has no description",
                c.id
            )));
        }
        if let Some(check) = &c.check {
            if let Some(why) = path_problem(&check.path) {
                return Err(Error::invalid_input(format!(
                    "criterion {:?}: the check path {:?} {why}",
                    c.id, check.path
                )));
            }
            let needs_text = matches!(
                check.kind,
                CheckKind::FileContains | CheckKind::FileNotContains
            );
            match (&check.text, needs_text) {
                (None, true) | (Some(_), false) => {
                    return Err(Error::invalid_input(format!(
                        "criterion {:?}: file-contains and file-not-contains need text, the others take none",
                        c.id
                    )));
                }
                (Some(t), true) if t.is_empty() => {
                    return Err(Error::invalid_input(format!(
                        "criterion {:?}: the check text is empty",
                        c.id
                    )));
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Verifies `reviews` against `criteria` on the copy at `copy`, for the patch `sha256`.
///
/// A review for an unknown criterion, or two reviews for one, is `INVALID_INPUT`. Unsafe
/// cited paths are `UNSAFE_PATH`. A file past `max_bytes` (the copy's `max_bytes`: no file
/// Legate copied or staged is larger, an ignored one the agent made may be) is
/// `COPY_LIMIT_EXCEEDED`, refused by its size before it is read. Everything else becomes a
/// per-criterion result.
pub fn verify(
    copy: &Path,
    criteria: &[Criterion],
    reviews: &[Review],
    sha256: &str,
    max_bytes: u64,
) -> Result<Verification, Error> {
    let known: HashSet<&str> = criteria.iter().map(|c| c.id.as_str()).collect();
    let mut by_id: BTreeMap<&str, &Review> = BTreeMap::new();
    for r in reviews {
        if !known.contains(r.criterion_id.as_str()) {
            return Err(Error::invalid_input(format!(
                "a review names the unknown criterion {:?}",
                r.criterion_id
            )));
        }
        if by_id.insert(r.criterion_id.as_str(), r).is_some() {
            return Err(Error::invalid_input(format!(
                "criterion {:?} is reviewed twice",
                r.criterion_id
            )));
        }
        legate_workspace::check_path(&r.path)?;
    }
    let mut evidence: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut read = |path: &str| -> Result<Option<Vec<u8>>, Error> {
        let bytes = read_inside(copy, path, max_bytes)?;
        evidence.insert(path.to_string(), bytes.as_deref().map(sha256_hex));
        Ok(bytes)
    };
    let mut results = Vec::with_capacity(criteria.len());
    for c in criteria {
        let mut problems = Vec::new();
        let check_passed = match &c.check {
            None => None,
            Some(check) => {
                let bytes = read(&check.path)?;
                let text = check.text.as_deref().unwrap_or_default().as_bytes();
                let contains =
                    |b: &[u8]| !text.is_empty() && b.windows(text.len()).any(|w| w == text);
                let ok = match (check.kind, &bytes) {
                    (CheckKind::FileExists, b) => b.is_some(),
                    (CheckKind::FileAbsent, b) => b.is_none(),
                    (CheckKind::FileContains, Some(b)) => contains(b),
                    (CheckKind::FileNotContains, Some(b)) => !contains(b),
                    (CheckKind::FileContains | CheckKind::FileNotContains, None) => false,
                };
                if !ok {
                    problems.push(format!(
                        "the check {} on {} did not hold",
                        serde_json::to_value(check.kind)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default(),
                        check.path
                    ));
                }
                Some(ok)
            }
        };
        let review = by_id.get(c.id.as_str());
        let citation_checked = match review {
            None => {
                problems.push("no review was given".to_string());
                false
            }
            Some(r) => {
                let found = match read(&r.path)? {
                    None => {
                        problems.push(format!("the cited file {} does not exist", r.path));
                        false
                    }
                    Some(b) => {
                        let ok = quote_at(&b, r.line, &r.quote);
                        if !ok {
                            problems
                                .push(format!("the quote does not stand at {}:{}", r.path, r.line));
                        }
                        ok
                    }
                };
                if r.verdict != Verdict::Passed {
                    problems.push(format!(
                        "the reviewer's verdict is {}",
                        serde_json::to_value(r.verdict)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_string))
                            .unwrap_or_default()
                    ));
                }
                found
            }
        };
        let verdict = review.map(|r| r.verdict);
        let passed =
            verdict == Some(Verdict::Passed) && citation_checked && check_passed.unwrap_or(true);
        results.push(CriterionResult {
            criterion_id: c.id.clone(),
            verdict,
            check_passed,
            citation_checked,
            passed,
            problems,
        });
    }
    Ok(Verification {
        sha256: sha256.to_string(),
        passed: results.iter().all(|r| r.passed),
        criteria: results,
        evidence,
        source: "client-reported".to_string(),
    })
}

/// Whether `quote` (non-empty) stands on line `line` (1-based) of `bytes`, continuing on the
/// following lines when it spans several: a one-line quote is a literal substring of that
/// line (its `\r` trimmed); a quote of several lines ends the cited line, equals the lines
/// between, and starts the last one. A file that is not UTF-8 holds no quote. Shared by the
/// verification of criteria and the engine's check of a reviewer's findings.
pub fn quote_at(bytes: &[u8], line: u64, quote: &str) -> bool {
    if quote.trim().is_empty() || line == 0 {
        return false;
    }
    let Ok(text) = std::str::from_utf8(bytes) else {
        return false;
    };
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let lines: Vec<&str> = text.split('\n').collect();
    let start = (line - 1) as usize;
    let span = quote.matches('\n').count() + 1;
    if start + span > lines.len() {
        return false;
    }
    let window: Vec<&str> = lines[start..start + span]
        .iter()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    let quote_lines: Vec<&str> = quote
        .split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect();
    if span == 1 {
        return window[0].contains(quote_lines[0]);
    }
    // First line ends with the quote's first line, middle lines are equal, last starts with
    // the quote's last line.
    window[0].ends_with(quote_lines[0])
        && window[1..span - 1] == quote_lines[1..span - 1]
        && window[span - 1].starts_with(quote_lines[span - 1])
}

/// Why `v` is stale against the current patch `sha256` and the copy's files, or `None`.
/// A file read within `max_bytes` as [`verify`] reads it (one past it is stale).
pub fn staleness(copy: &Path, v: &Verification, sha256: &str, max_bytes: u64) -> Option<String> {
    if v.sha256 != sha256 {
        return Some("the patch changed since it was verified".to_string());
    }
    for (path, hash) in &v.evidence {
        let now = read_inside(copy, path, max_bytes)
            .ok()
            .map(|b| b.as_deref().map(sha256_hex));
        if now.as_ref() != Some(hash) {
            return Some(format!("{path} changed since it was verified"));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_core::ErrorCode;
    use std::fs;

    const MAX: u64 = 1 << 20;

    fn criterion(id: &str, check: Option<Check>) -> Criterion {
        Criterion {
            id: id.into(),
            description: format!("{id} holds"),
            check,
        }
    }

    fn review(id: &str, path: &str, line: u64, quote: &str) -> Review {
        Review {
            criterion_id: id.into(),
            verdict: Verdict::Passed,
            path: path.into(),
            line,
            quote: quote.into(),
            explanation: "read it".into(),
        }
    }

    #[test]
    fn checks_and_citations_decide_each_criterion() {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path();
        fs::write(copy.join("a.txt"), "one\r\ntwo three\r\nfour\n").unwrap();
        let criteria = vec![
            criterion(
                "has-two",
                Some(Check {
                    kind: CheckKind::FileContains,
                    path: "a.txt".into(),
                    text: Some("two".into()),
                }),
            ),
            criterion(
                "no-b",
                Some(Check {
                    kind: CheckKind::FileAbsent,
                    path: "b.txt".into(),
                    text: None,
                }),
            ),
            criterion("plain", None),
        ];
        validate_criteria(&criteria).unwrap();
        let reviews = vec![
            review("has-two", "a.txt", 2, "two three"),
            review("no-b", "a.txt", 2, "three\nfour"),
            review("plain", "a.txt", 1, "four"),
        ];
        let v = verify(copy, &criteria, &reviews, "abc", MAX).unwrap();
        assert!(v.criteria[0].passed);
        assert!(v.criteria[1].passed, "{:?}", v.criteria[1]);
        assert!(!v.criteria[2].passed);
        assert!(v.criteria[2].problems[0].contains("a.txt:1"));
        assert!(!v.passed);
        assert_eq!(v.source, "client-reported");
        assert!(v.evidence.contains_key("b.txt"));
        assert_eq!(staleness(copy, &v, "abc", MAX), None);
        assert!(staleness(copy, &v, "def", MAX).is_some());
        fs::write(copy.join("b.txt"), "now here").unwrap();
        assert!(staleness(copy, &v, "abc", MAX).unwrap().contains("b.txt"));
    }

    /// A file is read within the copy's own `max_bytes`, not a fixed bound: a file past it is
    /// refused by its size, and stale.
    #[test]
    fn files_are_read_within_the_copy_s_max_bytes() {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path();
        fs::write(copy.join("a.txt"), "x".repeat(100)).unwrap();
        let exists = |id: &str, path: &str| {
            criterion(
                id,
                Some(Check {
                    kind: CheckKind::FileContains,
                    path: path.into(),
                    text: Some("x".into()),
                }),
            )
        };
        let err = verify(copy, &[exists("a", "a.txt")], &[], "s", 99).unwrap_err();
        assert_eq!(err.code, ErrorCode::CopyLimitExceeded);
        let v = verify(copy, &[exists("a", "a.txt")], &[], "s", 100).unwrap();
        assert!(v.criteria[0].check_passed == Some(true));
        assert!(staleness(copy, &v, "s", 100).is_none());
        assert!(
            staleness(copy, &v, "s", 99).is_some(),
            "past the bound is stale"
        );
    }

    #[test]
    fn bad_criteria_and_reviews_are_refused() {
        let dup = vec![criterion("a", None), criterion("a", None)];
        assert!(validate_criteria(&dup).is_err());
        let no_text = vec![criterion(
            "a",
            Some(Check {
                kind: CheckKind::FileContains,
                path: "x".into(),
                text: None,
            }),
        )];
        assert!(validate_criteria(&no_text).is_err());
        let escape = vec![criterion(
            "a",
            Some(Check {
                kind: CheckKind::FileExists,
                path: "../x".into(),
                text: None,
            }),
        )];
        assert!(validate_criteria(&escape).is_err());
        let tmp = tempfile::tempdir().unwrap();
        let c = vec![criterion("a", None)];
        let err = verify(tmp.path(), &c, &[review("zzz", "x", 1, "q")], "s", MAX).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput);
        let err = verify(
            tmp.path(),
            &c,
            &[review("a", "/etc/passwd", 1, "root")],
            "s",
            MAX,
        )
        .unwrap_err();
        assert_eq!(err.code, ErrorCode::UnsafePath);
    }
}
