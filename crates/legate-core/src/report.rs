//! The structured reports of the read-only roles: a planner's [`PlanReport`] and a
//! reviewer's [`ReviewReport`], and the [`Report`] Legate stores after checking one.
//!
//! These types are the schema: the JSON Schema an agent is given is derived from them, and
//! an answer is accepted only if it deserializes into them (unknown fields refused). This
//! module owns the shapes only; parsing an answer, bounds and citation checks belong to the
//! engine. A report is what an agent *said*: it is never evidence that a step was carried
//! out, and never authority to integrate.

use serde::{Deserialize, Serialize};

crate::wire_enum! {
    /// How serious a finding is, P0 the most.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Severity {
        /// Must be fixed before anything ships: data loss, security, a broken build.
        P0 => "P0",
        /// Should be fixed before merging.
        P1 => "P1",
        /// Worth fixing.
        P2 => "P2",
        /// A nit.
        P3 => "P3",
    }
}

/// One step of a plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PlanStep {
    /// What to do.
    pub step: String,
    /// The files it touches, relative to the workspace root.
    pub files: Vec<String>,
    /// An observable check that shows the step is done (a command, a test, a behaviour).
    pub check: String,
}

/// A planner's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PlanReport {
    /// The plan in a few sentences.
    pub summary: String,
    /// The steps, in order. None of them has been carried out.
    pub steps: Vec<PlanStep>,
    /// What the planner assumed without checking.
    pub unverified: Vec<String>,
}

/// One finding of a review, citing the copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Finding {
    /// How serious it is.
    pub severity: Severity,
    /// The file, relative to the workspace root.
    pub path: String,
    /// The line the quote stands at, from 1.
    pub line: u32,
    /// Text copied literally from that line.
    pub quote: String,
    /// What is wrong.
    pub message: String,
    /// What it breaks, for whom.
    pub impact: String,
    /// How to fix it.
    pub suggestion: String,
}

/// A reviewer's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ReviewReport {
    /// The review in a few sentences.
    pub summary: String,
    /// The files read, relative to the workspace root.
    pub reviewed_files: Vec<String>,
    /// What was found; empty when nothing was.
    pub findings: Vec<Finding>,
    /// What the reviewer did not check.
    pub unverified: Vec<String>,
}

/// A report's content: a plan or a review.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ReportBody {
    /// A planner's.
    Plan(PlanReport),
    /// A reviewer's.
    Review(ReviewReport),
}

crate::wire_enum! {
    /// Who a report comes from, as far as Legate can vouch.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub enum ReportOrigin {
        /// The agent wrote it; Legate checked its shape (and, for a review, its citations),
        /// not its judgement.
        #[default]
        AgentReported => "agent-reported",
    }
}

/// A report as Legate accepted it, stored in the task's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Report {
    /// Who it comes from.
    pub origin: ReportOrigin,
    /// Whether every finding's file, line and quote were found in the copy. Always `false`
    /// for a plan (a plan cites nothing that is checked).
    pub citations_checked: bool,
    /// The content.
    #[serde(flatten)]
    pub body: ReportBody,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_report_refuses_unknown_fields() {
        let ok = serde_json::json!({
            "summary": "s", "reviewedFiles": ["a.rs"], "unverified": [],
            "findings": [{"severity": "P1", "path": "a.rs", "line": 3, "quote": "x",
                          "message": "m", "impact": "i", "suggestion": "g"}]
        });
        let report: ReviewReport = serde_json::from_value(ok.clone()).unwrap();
        assert_eq!(report.findings[0].severity, Severity::P1);
        let mut extra = ok;
        extra["approved"] = serde_json::json!(true);
        assert!(serde_json::from_value::<ReviewReport>(extra).is_err());
    }

    #[test]
    fn a_stored_report_names_its_kind_and_origin() {
        let report = Report {
            origin: ReportOrigin::AgentReported,
            citations_checked: false,
            body: ReportBody::Plan(PlanReport {
                summary: "s".into(),
                steps: vec![],
                unverified: vec![],
            }),
        };
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["kind"], "plan");
        assert_eq!(json["origin"], "agent-reported");
        assert_eq!(serde_json::from_value::<Report>(json).unwrap(), report);
    }
}
