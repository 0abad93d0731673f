//! A review's citations, checked against its workspace: every `reviewedFiles` entry and
//! every finding's file exists beneath the root, the cited line exists, and the quote stands
//! at that line.
//!
//! Files are read beneath the root held once (`legate_beneath::Root`): never by full name,
//! no symlink followed anywhere on the path (a cited symlink is refused, not read), FIFOs and
//! devices refused, at most [`MAX_CITED_FILE`] bytes each, each file read once however many
//! findings cite it. A quote follows the same rule as a criterion's review
//! (`legate_review::quote_at`): on one line, a literal substring of that line with its
//! `\r` trimmed; a quote may span several lines (it then ends the cited line, equals the
//! lines between, and starts the last), but never starts on another line than the cited one.
//!
//! This module only reads; it never writes and never decides a task's state.

use super::validate::finding_name;
use legate_beneath::{BeneathError, Kind, Root};
use legate_core::{Error, ErrorCode, Result, ReviewReport};
use std::collections::BTreeMap;
use std::path::Path;

/// The largest file a finding may cite, in bytes.
pub(crate) const MAX_CITED_FILE: u64 = 4 * 1024 * 1024;

/// `CITATION_NOT_FOUND` naming the first finding (or reviewed file) whose citation is not in
/// the workspace at `root`, and how many others fail too.
pub(crate) fn check(review: &ReviewReport, root: &Path) -> Result<()> {
    let held = Root::open(root).map_err(|e| {
        Error::caused_by(
            ErrorCode::CitationNotFound,
            "the review's citations could not be checked: its workspace could not be opened",
            e,
        )
    })?;
    for (i, file) in review.reviewed_files.iter().enumerate() {
        match held.kind(Path::new(file)) {
            Ok(Some(Kind::File | Kind::Directory)) => {}
            Ok(found) => {
                return Err(not_found(format!(
                    "`reviewedFiles[{i}]` {file:?} {}",
                    missing(found)
                )));
            }
            Err(e) => {
                return Err(not_found(format!(
                    "`reviewedFiles[{i}]` {file:?} cannot be read: {}",
                    refusal(&e)
                )));
            }
        }
    }
    let mut by_path: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, f) in review.findings.iter().enumerate() {
        by_path.entry(f.path.as_str()).or_default().push(i);
    }
    let mut failures: Vec<(usize, String)> = Vec::new();
    for (path, indices) in by_path {
        let bytes = match read(&held, path) {
            Ok(b) => b,
            Err(why) => {
                failures.extend(indices.iter().map(|&i| (i, why.clone())));
                continue;
            }
        };
        let lines = line_count(&bytes);
        for i in indices {
            let f = &review.findings[i];
            let why = if u64::from(f.line) > lines {
                Some(format!(
                    "line {} of {path} does not exist (the file has {lines} lines)",
                    f.line
                ))
            } else if !legate_review::quote_at(&bytes, u64::from(f.line), &f.quote) {
                Some(format!(
                    "the quote {:?} does not stand at {path}:{}",
                    shorten(&f.quote),
                    f.line
                ))
            } else {
                None
            };
            failures.extend(why.map(|w| (i, w)));
        }
    }
    failures.sort_by_key(|(i, _)| *i);
    let Some((first, why)) = failures.first() else {
        return Ok(());
    };
    let others = match failures.len() - 1 {
        0 => String::new(),
        1 => " (and 1 other finding)".into(),
        n => format!(" (and {n} other findings)"),
    };
    Err(not_found(format!(
        "{}: {why}{others}",
        finding_name(*first)
    )))
}

/// The bytes of the cited regular file, or why it cannot be cited.
fn read(held: &Root, path: &str) -> std::result::Result<Vec<u8>, String> {
    let rel = Path::new(path);
    match held.kind(rel) {
        Ok(Some(Kind::File)) => {}
        Ok(found) => return Err(format!("the file {path} {}", missing(found))),
        Err(e) => return Err(format!("the file {path} cannot be read: {}", refusal(&e))),
    }
    held.read(rel, MAX_CITED_FILE)
        .map_err(|e| format!("the file {path} cannot be read: {}", refusal(&e)))
}

fn missing(kind: Option<Kind>) -> &'static str {
    match kind {
        None => "does not exist in the workspace",
        Some(Kind::Symlink) => "is a symlink (never followed)",
        Some(Kind::Directory) => "is a directory",
        Some(Kind::Other) => "is not a regular file",
        Some(Kind::File) => "exists",
    }
}

fn refusal(e: &BeneathError) -> String {
    match e {
        BeneathError::Symlink { .. } => {
            "a component of its path is a symlink (never followed)".into()
        }
        BeneathError::TooLarge { max, .. } => format!("it is larger than {max} bytes"),
        other => other.to_string(),
    }
}

/// The lines of `bytes`: a final newline ends the last line, it does not start another.
fn line_count(bytes: &[u8]) -> u64 {
    if bytes.is_empty() {
        return 0;
    }
    let newlines = bytes.iter().filter(|&&b| b == b'\n').count() as u64;
    newlines + u64::from(bytes.last() != Some(&b'\n'))
}

/// At most 80 characters of a quote, for a message.
fn shorten(quote: &str) -> String {
    match quote.char_indices().nth(80) {
        Some((end, _)) => format!("{}…", &quote[..end]),
        None => quote.to_string(),
    }
}

fn not_found(message: String) -> Error {
    Error::new(
        ErrorCode::CitationNotFound,
        format!("the review cites what is not in its workspace: {message}"),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use legate_core::{Finding, Severity};

    fn finding(path: &str, line: u32, quote: &str) -> Finding {
        Finding {
            severity: Severity::P2,
            path: path.into(),
            line,
            quote: quote.into(),
            message: "m".into(),
            impact: "i".into(),
            suggestion: "s".into(),
        }
    }

    fn review(findings: Vec<Finding>) -> ReviewReport {
        ReviewReport {
            summary: "s".into(),
            reviewed_files: vec!["src/a.rs".into()],
            findings,
            unverified: vec![],
        }
    }

    fn root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(
            dir.path().join("src/a.rs"),
            "fn main() {\r\n    x.unwrap();\r\n}\n",
        )
        .unwrap();
        dir
    }

    fn refused(dir: &tempfile::TempDir, findings: Vec<Finding>) -> String {
        let err = check(&review(findings), dir.path()).unwrap_err();
        assert_eq!(err.code, ErrorCode::CitationNotFound);
        err.message
    }

    #[test]
    fn real_citations_pass() {
        let dir = root();
        check(
            &review(vec![
                finding("src/a.rs", 2, "x.unwrap()"),
                finding("src/a.rs", 3, "}"),
                finding("src/a.rs", 1, "{\n    x.unwrap"),
            ]),
            dir.path(),
        )
        .unwrap();
    }

    #[test]
    fn a_missing_line_file_or_quote_names_the_finding() {
        let dir = root();
        let ok = finding("src/a.rs", 2, "unwrap");
        let m = refused(&dir, vec![ok.clone(), finding("src/a.rs", 4, "}")]);
        assert!(
            m.contains(
                "finding 2 (findings[1]): line 4 of src/a.rs does not exist (the file has 3 lines)"
            ),
            "{m}"
        );
        let m = refused(&dir, vec![finding("src/b.rs", 1, "x"), ok.clone()]);
        assert!(
            m.contains("finding 1 (findings[0]): the file src/b.rs does not exist"),
            "{m}"
        );
        let m = refused(&dir, vec![ok.clone(), finding("src/a.rs", 1, "unwrap")]);
        assert!(
            m.contains("finding 2") && m.contains("does not stand at src/a.rs:1"),
            "{m}"
        );
        let m = refused(
            &dir,
            vec![
                finding("src/a.rs", 1, "nope"),
                finding("src/a.rs", 2, "nope"),
            ],
        );
        assert!(
            m.contains("finding 1") && m.contains("and 1 other finding"),
            "{m}"
        );
    }

    #[test]
    fn symlinks_are_never_followed() {
        let dir = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "password\n").unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        let m = refused(&dir, vec![finding("link", 1, "password")]);
        assert!(m.contains("symlink"), "{m}");
        let m = refused(&dir, vec![finding("out/secret", 1, "password")]);
        assert!(m.contains("symlink"), "{m}");
        let mut r = review(vec![]);
        r.reviewed_files = vec!["out".into()];
        let err = check(&r, dir.path()).unwrap_err();
        assert!(err.message.contains("reviewedFiles[0]"), "{}", err.message);
    }
}
