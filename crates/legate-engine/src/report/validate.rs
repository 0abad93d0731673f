//! A report's shape and bounds: deserializing into the core types (unknown fields refused,
//! the failing field named by its path) and the limits Legate sets on what it stores: string
//! lengths, how many steps, findings and files, and paths that are relative and normalised.
//!
//! This module never touches the file system: whether a cited file exists is `cite`'s
//! question. A plan's files need not exist (a plan may create them), but must be safe names.

use super::invalid;
use legate_core::{Finding, PlanReport, Result, ReviewReport};
use serde::de::DeserializeOwned;

/// The longest `summary`, in bytes.
pub(crate) const MAX_SUMMARY: usize = 8 * 1024;
/// The longest step, check, message, impact, suggestion or `unverified` entry, in bytes.
pub(crate) const MAX_TEXT: usize = 4 * 1024;
/// The longest quote, in bytes.
pub(crate) const MAX_QUOTE: usize = 2 * 1024;
/// The longest path, in bytes.
pub(crate) const MAX_PATH: usize = 1024;
/// The most steps of a plan.
pub(crate) const MAX_STEPS: usize = 100;
/// The most files of one step.
pub(crate) const MAX_STEP_FILES: usize = 50;
/// The most findings of a review.
pub(crate) const MAX_FINDINGS: usize = 200;
/// The most `reviewedFiles`.
pub(crate) const MAX_REVIEWED: usize = 1000;
/// The most `unverified` entries.
pub(crate) const MAX_UNVERIFIED: usize = 100;

/// `value` as a `T`, or `REPORT_INVALID` naming the field that does not fit.
pub(crate) fn deserialize<T: DeserializeOwned>(value: serde_json::Value) -> Result<T> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if path == "." {
            invalid(inner.to_string())
        } else {
            invalid(format!("`{path}`: {inner}"))
        }
    })
}

/// A plan's bounds.
pub(crate) fn plan(plan: &PlanReport) -> Result<()> {
    text("summary", &plan.summary, MAX_SUMMARY)?;
    // No steps is a plan too: nothing needs doing (its summary says why).
    count("steps", plan.steps.len(), 0, MAX_STEPS)?;
    for (i, step) in plan.steps.iter().enumerate() {
        let at = |field: &str| format!("step {} (steps[{i}]): `{field}`", i + 1);
        text(&at("step"), &step.step, MAX_TEXT)?;
        text(&at("check"), &step.check, MAX_TEXT)?;
        count(&at("files"), step.files.len(), 1, MAX_STEP_FILES)?;
        for (j, file) in step.files.iter().enumerate() {
            path(&at(&format!("files[{j}]")), file)?;
        }
    }
    unverified(&plan.unverified)
}

/// A review's bounds (its citations are checked against the workspace by `cite`).
pub(crate) fn review(review: &ReviewReport) -> Result<()> {
    text("summary", &review.summary, MAX_SUMMARY)?;
    // A review that found something must say what it read; one of an empty workspace may
    // have read nothing.
    let min_reviewed = usize::from(!review.findings.is_empty());
    count(
        "reviewedFiles",
        review.reviewed_files.len(),
        min_reviewed,
        MAX_REVIEWED,
    )?;
    for (i, file) in review.reviewed_files.iter().enumerate() {
        path(&format!("`reviewedFiles[{i}]`"), file)?;
    }
    count("findings", review.findings.len(), 0, MAX_FINDINGS)?;
    for (i, f) in review.findings.iter().enumerate() {
        finding(i, f)?;
    }
    unverified(&review.unverified)
}

fn finding(i: usize, f: &Finding) -> Result<()> {
    let at = |field: &str| format!("{}: `{field}`", finding_name(i));
    path(&at("path"), &f.path)?;
    if f.line < 1 {
        return Err(invalid(format!("{} must be ≥ 1", at("line"))));
    }
    text(&at("quote"), &f.quote, MAX_QUOTE)?;
    text(&at("message"), &f.message, MAX_TEXT)?;
    text(&at("impact"), &f.impact, MAX_TEXT)?;
    text(&at("suggestion"), &f.suggestion, MAX_TEXT)
}

/// "finding 3 (findings[2])": the finding's number from 1, and its index.
pub(crate) fn finding_name(i: usize) -> String {
    format!("finding {} (findings[{i}])", i + 1)
}

fn unverified(items: &[String]) -> Result<()> {
    count("unverified", items.len(), 0, MAX_UNVERIFIED)?;
    for (i, item) in items.iter().enumerate() {
        text(&format!("`unverified[{i}]`"), item, MAX_TEXT)?;
    }
    Ok(())
}

fn count(field: &str, n: usize, min: usize, max: usize) -> Result<()> {
    if n < min {
        return Err(invalid(format!("{field} must have at least {min} entry")));
    }
    if n > max {
        return Err(invalid(format!("{field} has {n} entries; at most {max}")));
    }
    Ok(())
}

fn text(field: &str, value: &str, max: usize) -> Result<()> {
    if value.trim().is_empty() {
        return Err(invalid(format!("{field} must not be empty")));
    }
    if value.len() > max {
        return Err(invalid(format!(
            "{field} is {} bytes; at most {max}",
            value.len()
        )));
    }
    Ok(())
}

/// `REPORT_INVALID` unless `p` is a safe relative path (see [`path_problem`]).
pub(crate) fn path(field: &str, p: &str) -> Result<()> {
    match path_problem(p) {
        None => Ok(()),
        Some(why) => Err(invalid(format!("{field} {why}"))),
    }
}

/// Why `p` is not a relative, normalised path, or `None`: empty, longer than [`MAX_PATH`],
/// holding a NUL or another control character or an invisible one
/// ([`legate_core::text::is_unseen`]), absolute, or with an empty, `.` or `..`
/// component (so `a//b`, `a/`, `./a` and `a/../b` are all refused).
pub(crate) fn path_problem(p: &str) -> Option<String> {
    if p.is_empty() {
        return Some("is empty".into());
    }
    if p.len() > MAX_PATH {
        return Some(format!("is longer than {MAX_PATH} bytes"));
    }
    if p.chars().any(char::is_control) {
        return Some("holds a control character (NUL among them)".into());
    }
    if p.chars().any(legate_core::text::is_unseen) {
        return Some("holds an invisible or text-direction character".into());
    }
    if p.starts_with('/') {
        return Some(format!(
            "{p:?} is absolute; paths are relative to the workspace root"
        ));
    }
    for component in p.split('/') {
        let why = match component {
            "" => "has an empty component",
            "." => "has a `.` component",
            ".." => "has a `..` component",
            _ => continue,
        };
        return Some(format!("{p:?} {why}; paths must be normalised"));
    }
    None
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use legate_core::ErrorCode;
    use proptest::prelude::*;
    use serde_json::json;

    fn review_json() -> serde_json::Value {
        json!({
            "summary": "s", "reviewedFiles": ["a.rs"], "unverified": [],
            "findings": [
                {"severity": "P1", "path": "a.rs", "line": 3, "quote": "x",
                 "message": "m", "impact": "i", "suggestion": "g"},
                {"severity": "P2", "path": "a.rs", "line": 1, "quote": "y",
                 "message": "m", "impact": "i", "suggestion": "g"},
            ]
        })
    }

    fn refused(value: serde_json::Value) -> String {
        let err = deserialize::<ReviewReport>(value)
            .and_then(|r| review(&r))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ReportInvalid);
        err.message
    }

    #[test]
    fn a_valid_review_passes() {
        let r: ReviewReport = deserialize(review_json()).unwrap();
        review(&r).unwrap();
    }

    #[test]
    fn the_offending_field_and_finding_are_named() {
        let mut v = review_json();
        v["findings"][1]["verdict"] = json!("ok");
        let m = refused(v);
        assert!(m.contains("findings[1]") && m.contains("verdict"), "{m}");
        let mut v = review_json();
        v["findings"][1]["line"] = json!(0);
        let m = refused(v);
        assert!(
            m.contains("finding 2 (findings[1]): `line` must be ≥ 1"),
            "{m}"
        );
        let mut v = review_json();
        v["findings"][0]["path"] = json!("../etc/passwd");
        assert!(refused(v).contains("`..`"));
        let mut v = review_json();
        v["findings"][0]["severity"] = json!("P9");
        assert!(refused(v).contains("findings[0].severity"));
        let mut v = review_json();
        v["findings"][0]["quote"] = json!("  ");
        assert!(refused(v).contains("`quote` must not be empty"));
        let mut v = review_json();
        v["reviewedFiles"] = json!(["/abs"]);
        assert!(refused(v).contains("absolute"));
        // A cited path that would read as another one.
        let mut v = review_json();
        v["findings"][0]["path"] = json!("src/lib\u{202E}sr.rs");
        assert!(refused(v).contains("invisible or text-direction"));
    }

    #[test]
    fn a_plan_may_name_new_files_but_claims_nothing_done() {
        let plan = json!({"summary": "s", "unverified": [],
            "steps": [{"step": "add b", "files": ["new/b.rs"], "check": "cargo test"}]});
        let p: PlanReport = deserialize(plan.clone()).unwrap();
        super::plan(&p).unwrap();
        let mut done = plan;
        done["steps"][0]["done"] = json!(true);
        let err = deserialize::<PlanReport>(done).unwrap_err();
        assert!(err.message.contains("steps[0]"), "{}", err.message);
    }

    proptest! {
        #[test]
        fn paths_are_refused_or_relative_and_normal(p in "[a-z./\\x00\\\\]{0,12}") {
            match path_problem(&p) {
                Some(_) => {}
                None => {
                    prop_assert!(!p.starts_with('/') && !p.contains('\0'));
                    prop_assert!(p.split('/').all(|c| !c.is_empty() && c != "." && c != ".."));
                    let normal: std::path::PathBuf = std::path::Path::new(&p).components().collect();
                    prop_assert_eq!(normal.to_str().unwrap(), p.as_str());
                }
            }
        }
    }
}
