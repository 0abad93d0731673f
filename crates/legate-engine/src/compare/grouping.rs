//! Grouping the findings of a comparison's finished reviews by file and line, literally.
//!
//! A group is one `(path, line)`. Its agreement is `identical` when every finished review
//! reported exactly the same findings there (severity, quote, message, impact and suggestion
//! equal, byte for byte), `different` when every finished review reported something there
//! but not the same, and `not-reported-by-all` when some finished review reported nothing
//! there. Each distinct finding is kept as a variant with the reviews that reported it.
//!
//! This is bookkeeping, not judgement: it never compares meaning, never votes, never drops
//! a finding, and an absence of findings proves neither agreement nor correctness. It only
//! groups findings whose citations Legate checked (reports with `citationsChecked`), and
//! skips any path that is not a safe relative path (they cannot be in such a report; a
//! stored record is still read as hostile).

use legate_core::{Finding, ReviewReport, Severity, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

legate_core::wire_enum! {
    /// How the finished reviews' findings at one file and line relate.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Agreement {
        /// Every finished review reported literally the same findings there.
        Identical => "identical",
        /// Every finished review reported something there, not all the same.
        Different => "different",
        /// Some finished review reported nothing there.
        NotReportedByAll => "not-reported-by-all",
    }
}

/// One distinct finding at a file and line, and who reported it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FindingVariant {
    /// How serious the reviewers said it is.
    pub severity: Severity,
    /// The quoted text (checked to stand at that line of each reviewer's copy).
    pub quote: String,
    /// What is wrong, as said.
    pub message: String,
    /// What it breaks, as said.
    pub impact: String,
    /// How to fix it, as said.
    pub suggestion: String,
    /// The review tasks that reported exactly this.
    pub reported_by: Vec<TaskId>,
}

/// The findings at one file and line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupedFinding {
    /// The file, relative to the copy's root.
    pub path: String,
    /// The line, from 1.
    pub line: u32,
    /// The quote, when every variant quotes the same text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quote: Option<String>,
    /// `identical`, `different` or `not-reported-by-all`.
    pub agreement: Agreement,
    /// The review tasks that reported anything here.
    pub reported_by: Vec<TaskId>,
    /// Each distinct finding here.
    pub variants: Vec<FindingVariant>,
}

/// A finding without its place, ordered so that variants sort the same in every run.
type Said = (Severity, String, String, String, String);

fn said(f: &Finding) -> Said {
    (
        f.severity,
        f.quote.clone(),
        f.message.clone(),
        f.impact.clone(),
        f.suggestion.clone(),
    )
}

/// Groups the findings of `reviews` (the finished reviews: each task's review report whose
/// citations were checked), in path then line order.
pub(crate) fn group(reviews: &[(TaskId, &ReviewReport)]) -> Vec<GroupedFinding> {
    let finished: BTreeSet<&TaskId> = reviews.iter().map(|(id, _)| id).collect();
    // (path, line) → what → who said it.
    let mut places: BTreeMap<(String, u32), BTreeMap<Said, BTreeSet<TaskId>>> = BTreeMap::new();
    for (id, report) in reviews {
        for f in &report.findings {
            if crate::report::validate::path_problem(&f.path).is_some() || f.line == 0 {
                continue;
            }
            places
                .entry((f.path.clone(), f.line))
                .or_default()
                .entry(said(f))
                .or_default()
                .insert(id.clone());
        }
    }
    places
        .into_iter()
        .map(|((path, line), variants)| {
            let reporters: BTreeSet<&TaskId> = variants.values().flatten().collect();
            // What each reporter said here, to see whether they all said the same.
            let mut by_reporter: BTreeMap<&TaskId, BTreeSet<&Said>> = BTreeMap::new();
            for (s, who) in &variants {
                for id in who {
                    by_reporter.entry(id).or_default().insert(s);
                }
            }
            let mut sets = by_reporter.values();
            let first = sets.next();
            let agreement = if reporters.len() < finished.len() {
                Agreement::NotReportedByAll
            } else if sets.all(|s| Some(s) == first) {
                Agreement::Identical
            } else {
                Agreement::Different
            };
            let quotes: BTreeSet<&String> = variants.keys().map(|s| &s.1).collect();
            let quote = match quotes.len() {
                1 => quotes.into_iter().next().cloned(),
                _ => None,
            };
            GroupedFinding {
                path,
                line,
                quote,
                agreement,
                reported_by: reporters.into_iter().cloned().collect(),
                variants: variants
                    .into_iter()
                    .map(|(s, who)| FindingVariant {
                        severity: s.0,
                        quote: s.1,
                        message: s.2,
                        impact: s.3,
                        suggestion: s.4,
                        reported_by: who.into_iter().collect(),
                    })
                    .collect(),
            }
        })
        .collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn f(path: &str, line: u32, quote: &str, message: &str) -> Finding {
        Finding {
            severity: Severity::P2,
            path: path.into(),
            line,
            quote: quote.into(),
            message: message.into(),
            impact: "i".into(),
            suggestion: "s".into(),
        }
    }

    fn report(findings: Vec<Finding>) -> ReviewReport {
        ReviewReport {
            summary: "s".into(),
            reviewed_files: vec![],
            findings,
            unverified: vec![],
        }
    }

    fn id(s: &str) -> TaskId {
        TaskId(s.into())
    }

    #[test]
    fn each_agreement_kind_is_told_apart() {
        let a = report(vec![f("a.rs", 2, "x", "m"), f("a.rs", 3, "y", "one")]);
        let b = report(vec![f("a.rs", 2, "x", "m"), f("a.rs", 3, "y", "two")]);
        let c = report(vec![
            f("a.rs", 2, "x", "m"),
            f("a.rs", 3, "y", "one"),
            f("b.rs", 1, "z", "m"),
        ]);
        let g = group(&[(id("a"), &a), (id("b"), &b), (id("c"), &c)]);
        let kinds: Vec<_> = g
            .iter()
            .map(|g| (g.path.as_str(), g.line, g.agreement))
            .collect();
        assert_eq!(
            kinds,
            vec![
                ("a.rs", 2, Agreement::Identical),
                ("a.rs", 3, Agreement::Different),
                ("b.rs", 1, Agreement::NotReportedByAll),
            ]
        );
        assert_eq!(g[1].quote.as_deref(), Some("y"));
        assert_eq!(g[1].variants.len(), 2);
        assert_eq!(g[1].variants[0].reported_by, vec![id("a"), id("c")]);
        assert_eq!(g[2].reported_by, vec![id("c")]);
    }

    #[test]
    fn a_hostile_path_in_a_stored_report_is_never_grouped() {
        let a = report(vec![
            f("../etc/passwd", 1, "root", "m"),
            f("/abs", 1, "q", "m"),
        ]);
        let b = report(vec![
            f("../etc/passwd", 1, "root", "m"),
            f("ok.rs", 0, "q", "m"),
        ]);
        assert!(group(&[(id("a"), &a), (id("b"), &b)]).is_empty());
    }

    proptest! {
        /// Nothing is dropped or invented: every safe finding is in exactly one variant of
        /// its place, with its reviewer; `identical` only where every review said the same.
        #[test]
        fn grouping_keeps_every_finding_and_names_agreement_literally(
            raw in proptest::collection::vec(
                proptest::collection::vec((0u8..3, 1u32..4, 0u8..2, 0u8..2), 0..6), 1..5)
        ) {
            let reports: Vec<ReviewReport> = raw.iter().map(|fs| report(fs.iter().map(|(p, l, q, m)| {
                f(["a.rs", "b/c.rs", "../x"][usize::from(*p)], *l, ["q", "r"][usize::from(*q)], ["m", "n"][usize::from(*m)])
            }).collect())).collect();
            let ids: Vec<TaskId> = (0..reports.len()).map(|i| id(&format!("t{i}"))).collect();
            let input: Vec<(TaskId, &ReviewReport)> = ids.iter().cloned().zip(reports.iter()).collect();
            let g = group(&input);
            for (tid, r) in &input {
                for x in &r.findings {
                    let found = g.iter().filter(|g| g.path == x.path && g.line == x.line)
                        .flat_map(|g| &g.variants)
                        .filter(|v| v.quote == x.quote && v.message == x.message && v.reported_by.contains(tid))
                        .count();
                    prop_assert_eq!(found, usize::from(x.path != "../x"));
                }
            }
            for grp in &g {
                prop_assert!(grp.path != "../x");
                let all = grp.reported_by.len() == input.len();
                match grp.agreement {
                    Agreement::NotReportedByAll => prop_assert!(!all),
                    Agreement::Identical => prop_assert!(all && grp.variants.iter().all(|v| v.reported_by.len() == input.len())),
                    Agreement::Different => prop_assert!(all && grp.variants.iter().any(|v| v.reported_by.len() < input.len())),
                }
            }
        }
    }
}
