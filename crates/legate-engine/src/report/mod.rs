//! Structured reports of the read-only roles: the contract a planner or reviewer is
//! prompted with ([`contract`]), the JSON Schema a backend with structured output is given
//! ([`json_schema`]), and the check of a finished turn's answer ([`check`]): the report is
//! found in the answer ([`parse`]), deserialized into the core types and bounded
//! ([`validate`]), and, for a review, its citations are found in the workspace ([`cite`]).
//!
//! This module owns what Legate accepts as a report and the wording of `REPORT_INVALID` and
//! `CITATION_NOT_FOUND`. It never stores anything and never decides a task's state (the
//! ending does, from its result), never opens an agent-named path by its full name (every
//! citation is read beneath the held root by `legate-beneath`, no symlink followed), and
//! never takes a report as evidence that a plan's steps were carried out or as authority to
//! integrate: a report is what the agent said, checked for shape and citations only.

pub(crate) mod cite;
pub(crate) mod parse;
pub(crate) mod validate;

use legate_core::{
    Attachment, Error, ErrorCode, PlanReport, Report, ReportBody, ReportOrigin, Result,
    ReviewReport, RoleBase,
};
use std::path::Path;

/// The first line of every report contract, followed by the base's wire name. Agents (the
/// revisor among them) key on it.
pub const CONTRACT_HEAD: &str = "Legate report contract:";

/// The name of the attachment that carries a structured-output backend's answer (agy's).
const STRUCTURED_OUTPUT: &str = legate_backend::agy::STRUCTURED_OUTPUT;

/// The JSON Schema of `base`'s report, derived from the core types; `None` for an
/// implementer, which reports nothing.
pub(crate) fn json_schema(base: RoleBase) -> Option<serde_json::Value> {
    let schema = match base {
        RoleBase::Implementer => return None,
        RoleBase::Planner => schemars::schema_for!(PlanReport),
        RoleBase::Reviewer => schemars::schema_for!(ReviewReport),
    };
    Some(schema.to_value())
}

/// The text block that tells an agent of base `base` how to answer: its first line is
/// exactly `Legate report contract: planner` (or `reviewer`), then the rules and the
/// schema. `None` for an implementer.
pub(crate) fn contract(base: RoleBase) -> Option<String> {
    let schema = json_schema(base)?;
    // Serializing a `Value` to a string cannot fail.
    let schema = serde_json::to_string_pretty(&schema).unwrap_or_default();
    let duty = match base {
        RoleBase::Implementer => return None,
        RoleBase::Planner => {
            "You are the planner: read the workspace and change nothing. Your report is a plan: \
             each step names the files it touches (relative to the workspace root; a step may \
             name a file it would create) and an observable check that would show it done. \
             None of the steps has been carried out, and the report must not say otherwise. \
             Put what you assumed without checking in `unverified`."
        }
        RoleBase::Reviewer => {
            "You are the reviewer: read the workspace and change nothing (Legate checks that \
             the workspace is unchanged after your turn). List in `reviewedFiles` the files you \
             read. Each finding cites `path` (relative to the workspace root), `line` (from 1) \
             and `quote`: text copied literally from that line (a quote may continue on the \
             following lines). Legate opens every cited file and refuses the whole report if a \
             file, a line or a quote is not there. Put what you did not check in `unverified`."
        }
    };
    Some(format!(
        "{CONTRACT_HEAD} {base}\n\
         {duty}\n\
         Answer with one JSON object following this JSON Schema, as the last thing in your \
         answer, in a ```json fenced block or bare. Fields not in the schema are refused. \
         Paths are relative and normalised: no leading `/`, no `.` or `..` components.\n\
         ```json\n{schema}\n```"
    ))
}

/// What a finished turn answered, as the report check needs it.
pub(crate) struct Answer<'a> {
    /// The answer's text (its message chunks, joined).
    pub(crate) text: &'a str,
    /// What the agent handed over besides its text.
    pub(crate) attachments: &'a [Attachment],
    /// Whether the turn was given a JSON Schema (structured output): then the structured
    /// output attachment is the report, when there is one.
    pub(crate) structured: bool,
}

/// The checked report of a `base` turn whose workspace is `root`: `REPORT_INVALID` when no
/// valid report is found, `CITATION_NOT_FOUND` when a review cites what is not there. Blocks
/// (reads files): run it on a blocking thread. `Ok(None)` for an implementer.
pub(crate) fn check(base: RoleBase, answer: &Answer<'_>, root: &Path) -> Result<Option<Report>> {
    if base == RoleBase::Implementer {
        return Ok(None);
    }
    let value = found(answer)?;
    let report = match base {
        RoleBase::Implementer => return Ok(None),
        RoleBase::Planner => {
            let plan: PlanReport = validate::deserialize(value)?;
            validate::plan(&plan)?;
            Report {
                origin: ReportOrigin::AgentReported,
                citations_checked: false,
                body: ReportBody::Plan(plan),
            }
        }
        RoleBase::Reviewer => {
            let review: ReviewReport = validate::deserialize(value)?;
            validate::review(&review)?;
            cite::check(&review, root)?;
            Report {
                origin: ReportOrigin::AgentReported,
                citations_checked: true,
                body: ReportBody::Review(review),
            }
        }
    };
    Ok(Some(report))
}

/// The report's JSON: the structured output of a structured turn, else the last JSON object
/// of the answer's text.
fn found(answer: &Answer<'_>) -> Result<serde_json::Value> {
    if answer.structured
        && let Some(text) = answer
            .attachments
            .iter()
            .rev()
            .find(|a| a.name.as_deref() == Some(STRUCTURED_OUTPUT))
            .and_then(|a| a.text.as_deref())
    {
        if text.len() > parse::MAX_REPORT_BYTES {
            return Err(invalid(format!(
                "the structured output is larger than {} bytes",
                parse::MAX_REPORT_BYTES
            )));
        }
        return match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) if v.is_object() => Ok(v),
            Ok(_) => Err(invalid("the structured output is not a JSON object")),
            Err(e) => Err(invalid(format!("the structured output is not JSON: {e}"))),
        };
    }
    parse::last_object(answer.text)
}

/// `REPORT_INVALID` with `message`.
pub(crate) fn invalid(message: impl Into<String>) -> Error {
    Error::new(
        ErrorCode::ReportInvalid,
        format!("the report is invalid: {}", message.into()),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_contract_starts_with_its_head_and_holds_the_schema() {
        assert!(contract(RoleBase::Implementer).is_none());
        assert!(json_schema(RoleBase::Implementer).is_none());
        for (base, field) in [
            (RoleBase::Planner, "steps"),
            (RoleBase::Reviewer, "reviewedFiles"),
        ] {
            let text = contract(base).unwrap();
            assert_eq!(
                text.lines().next().unwrap(),
                format!("Legate report contract: {base}")
            );
            assert!(text.contains(field), "{text}");
            let schema = json_schema(base).unwrap();
            assert_eq!(schema["additionalProperties"], false, "{schema}");
            assert!(schema["required"].as_array().unwrap().len() >= 3);
        }
    }
}
