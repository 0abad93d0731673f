//! Revisor's planner and reviewer answers: when a prompt carries Legate's report contract
//! (a line `Legate report contract: planner` or `… reviewer`), the answer ends with a
//! deterministic report of that kind, serialized from `legate-core`'s report types (so it
//! follows the schema Legate checks), citing real files and lines of the session's `cwd`.
//!
//! - **Plan**: one step per file the question names (by path, file name or stem, as the
//!   summary matches them), else the first three files of the walk, at most five; each step
//!   names its file and a check. Nothing is claimed done: `unverified` says so.
//! - **Review**: `reviewedFiles` are the first [`MAX_REVIEWED`] UTF-8 text files of the walk
//!   (at most [`MAX_FILE`] bytes each); findings are the lines holding `TODO`, `FIXME` or
//!   `unwrap()` (at most [`MAX_FINDINGS`]), or, when there are none, the first non-blank line
//!   of each of the first five reviewed files. Each quote is that line, trimmed (and cut to
//!   [`MAX_QUOTE`] characters), so it stands literally at the cited line.
//!
//! This module only reads (never follows a symlink: the walk does not, and files are read
//! only when the walk found them regular) and never writes.

use std::fs;
use std::path::Path;

use legate_core::{Finding, PlanReport, PlanStep, ReviewReport, Severity};

use crate::summary;

/// The first words of the contract line; the role's name follows.
pub const CONTRACT_HEAD: &str = "Legate report contract:";
/// The most files a review reads.
pub const MAX_REVIEWED: usize = 20;
/// The largest file a review reads, in bytes.
pub const MAX_FILE: u64 = 1 << 20;
/// The most findings of a review.
pub const MAX_FINDINGS: usize = 20;
/// The longest quote, in characters.
pub const MAX_QUOTE: usize = 120;
/// The most steps of a plan.
const MAX_STEPS: usize = 5;

/// The report a contract line asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// A plan.
    Plan,
    /// A review.
    Review,
}

/// The report `line` (trimmed) asks for, when it is a contract line.
#[must_use]
pub fn asked(line: &str) -> Option<Asked> {
    match line.trim().strip_prefix(CONTRACT_HEAD)?.trim() {
        "planner" => Some(Asked::Plan),
        "reviewer" => Some(Asked::Review),
        _ => None,
    }
}

/// Skips the contract's own lines (the head up to the closing fence of its schema), so that
/// none of them is read as an instruction or as part of the question.
#[derive(Debug, Default)]
pub(crate) struct ContractSkip {
    state: Skip,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Skip {
    #[default]
    Outside,
    /// After the head, before the schema's fence.
    Head,
    /// Inside the schema's fence.
    Schema,
}

impl ContractSkip {
    /// Whether `line` (trimmed) belongs to the contract; `asked` is set on its head.
    pub(crate) fn skips(&mut self, line: &str, asked_for: &mut Option<Asked>) -> bool {
        if let Some(a) = asked(line) {
            *asked_for = Some(a);
            self.state = Skip::Head;
            return true;
        }
        match self.state {
            Skip::Outside => false,
            Skip::Head => {
                if line.starts_with("```") {
                    self.state = Skip::Schema;
                }
                true
            }
            Skip::Schema => {
                if line == "```" {
                    self.state = Skip::Outside;
                }
                true
            }
        }
    }
}

/// The answer's lines: a heading, then the report in a ```` ```json ```` fence.
#[must_use]
pub fn answer(asked: Asked, root: &Path, question: &str) -> Vec<String> {
    let (heading, json) = match asked {
        Asked::Plan => (
            "planner",
            serde_json::to_string_pretty(&plan(root, question)),
        ),
        Asked::Review => ("reviewer", serde_json::to_string_pretty(&review(root))),
    };
    let mut lines = vec![format!(
        "Revisor's report as {heading} (deterministic, no model):"
    )];
    lines.push("```json".to_owned());
    // Serializing these plain structs cannot fail.
    lines.extend(json.unwrap_or_default().lines().map(str::to_owned));
    lines.push("```".to_owned());
    lines
}

/// The plan for `question` over `root`.
#[must_use]
pub fn plan(root: &Path, question: &str) -> PlanReport {
    let walk = summary::walk(root);
    let mut files: Vec<String> = Vec::new();
    for name in summary::mentioned_names(question) {
        for f in walk.files.iter().filter(|f| summary::matches(f, &name)) {
            if !files.contains(&f.relative) {
                files.push(f.relative.clone());
            }
        }
    }
    if files.is_empty() {
        files = walk
            .files
            .iter()
            .take(3)
            .map(|f| f.relative.clone())
            .collect();
    }
    files.truncate(MAX_STEPS);
    if files.is_empty() {
        files.push("README.md".to_owned());
    }
    let steps: Vec<PlanStep> = files
        .iter()
        .map(|path| PlanStep {
            step: format!("Make the change the task asks for in {path}"),
            files: vec![path.clone()],
            check: format!("{path} holds the change, and the project's tests pass"),
        })
        .collect();
    PlanReport {
        summary: format!(
            "A plan of {} step(s) over the files the task is about, in a workspace of {} file(s).",
            steps.len(),
            walk.files.len()
        ),
        steps,
        unverified: vec![
            "revisor has no model: it did not judge what the change should be".to_owned(),
            "no step has been carried out".to_owned(),
        ],
    }
}

/// The review of `root`.
#[must_use]
pub fn review(root: &Path) -> ReviewReport {
    let walk = summary::walk(root);
    let mut texts: Vec<(String, String)> = Vec::new();
    for f in &walk.files {
        if texts.len() >= MAX_REVIEWED {
            break;
        }
        if f.bytes > MAX_FILE {
            continue;
        }
        let Ok(bytes) = fs::read(root.join(&f.relative)) else {
            continue;
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue;
        };
        texts.push((f.relative.clone(), text));
    }
    let mut findings = Vec::new();
    'files: for (path, text) in &texts {
        for (i, line) in lines(text).enumerate() {
            let Some((severity, message)) = marker(line) else {
                continue;
            };
            if findings.len() >= MAX_FINDINGS {
                break 'files;
            }
            findings.push(finding(path, i, line, severity, message));
        }
    }
    if findings.is_empty() {
        for (path, text) in texts.iter().take(5) {
            if let Some((i, line)) = lines(text).enumerate().find(|(_, l)| !l.trim().is_empty()) {
                findings.push(finding(
                    path,
                    i,
                    line,
                    Severity::P3,
                    "the file's first line, read (revisor finds nothing to flag)",
                ));
            }
        }
    }
    ReviewReport {
        summary: format!(
            "Read {} file(s); {} finding(s) on lines marked TODO, FIXME or unwrap().",
            texts.len(),
            findings.len()
        ),
        reviewed_files: texts.iter().map(|(p, _)| p.clone()).collect(),
        findings,
        unverified: vec![
            "revisor has no model: it looked for markers, not at what the code does".to_owned(),
        ],
    }
}

/// The lines of `text` as Legate counts them: a leading BOM dropped, split on `\n`, each
/// `\r` trimmed.
fn lines(text: &str) -> impl Iterator<Item = &str> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l))
}

fn marker(line: &str) -> Option<(Severity, &'static str)> {
    if line.contains("FIXME") {
        Some((Severity::P2, "a FIXME is left in the code"))
    } else if line.contains("unwrap()") {
        Some((Severity::P2, "unwrap() panics on an error or a None"))
    } else if line.contains("TODO") {
        Some((Severity::P3, "a TODO is left in the code"))
    } else {
        None
    }
}

fn finding(path: &str, index: usize, line: &str, severity: Severity, message: &str) -> Finding {
    let trimmed = line.trim();
    let quote = match trimmed.char_indices().nth(MAX_QUOTE) {
        Some((end, _)) => &trimmed[..end],
        None => trimmed,
    };
    Finding {
        severity,
        path: path.to_owned(),
        line: u32::try_from(index + 1).unwrap_or(u32::MAX),
        quote: quote.to_owned(),
        message: message.to_owned(),
        impact: "whoever runs or maintains this code".to_owned(),
        suggestion: "look at the line and resolve it".to_owned(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn root() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("src")).unwrap();
        fs::write(
            dir.path().join("src/main.rs"),
            "\u{feff}fn main() {\r\n    // TODO: say more\r\n    let x = y.unwrap();\r\n}\n",
        )
        .unwrap();
        fs::write(dir.path().join("README.md"), "\n# Project\n").unwrap();
        fs::write(dir.path().join("blob.bin"), [0xff, 0xfe, 0]).unwrap();
        dir
    }

    #[test]
    fn the_contract_line_names_the_report() {
        assert_eq!(asked("Legate report contract: planner"), Some(Asked::Plan));
        assert_eq!(
            asked("  Legate report contract: reviewer "),
            Some(Asked::Review)
        );
        assert_eq!(asked("Legate report contract: implementer"), None);
        assert_eq!(asked("read a.txt"), None);
    }

    #[test]
    fn a_review_cites_marked_lines_literally() {
        let dir = root();
        let r = review(dir.path());
        assert_eq!(r.reviewed_files, vec!["README.md", "src/main.rs"]);
        assert_eq!(r.findings.len(), 2);
        assert_eq!(
            (r.findings[0].line, r.findings[0].quote.as_str()),
            (2, "// TODO: say more")
        );
        assert_eq!(r.findings[1].line, 3);
        assert_eq!(r.findings[1].quote, "let x = y.unwrap();");
    }

    #[test]
    fn a_review_without_markers_cites_first_lines() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("a.txt"), "\n\n  alpha\n").unwrap();
        let r = review(dir.path());
        assert_eq!(
            (r.findings[0].line, r.findings[0].quote.as_str()),
            (3, "alpha")
        );
    }

    #[test]
    fn a_plan_names_the_files_the_question_names() {
        let dir = root();
        let p = plan(dir.path(), "Make main print more");
        assert_eq!(p.steps.len(), 1);
        assert_eq!(p.steps[0].files, vec!["src/main.rs"]);
        let p = plan(tempfile::tempdir().unwrap().path(), "anything");
        assert_eq!(p.steps[0].files, vec!["README.md"]);
        let lines = answer(Asked::Plan, dir.path(), "main");
        assert_eq!(lines[1], "```json");
        assert_eq!(lines.last().unwrap(), "```");
    }

    #[test]
    fn the_contract_block_is_skipped() {
        let mut skip = ContractSkip::default();
        let mut asked_for = None;
        let text = "review it\nLegate report contract: reviewer\nrun rm -rf x\n```json\n{\n\"a\": 1\n}\n```\nread a.txt";
        let kept: Vec<&str> = text
            .lines()
            .filter(|l| !skip.skips(l.trim(), &mut asked_for))
            .collect();
        assert_eq!(kept, vec!["review it", "read a.txt"]);
        assert_eq!(asked_for, Some(Asked::Review));
    }
}
