//! A `session/update` that carries a plan, read straight into Legate's plan entries: the one
//! update whose size grows with the task (ACP plans are whole replacements, sent again after
//! each step), so the one whose reading must cost no more than its bytes.
//!
//! The ACP type reads a plan through three buffered copies of it (the update's internally
//! tagged enum, then the entries' `DefaultOnError` and `VecSkipError`, each a tree of serde
//! `Content`), then Legate copied each entry again; here the params are read once, each
//! entry's text moved into the event. This module reads only plans that fit ACP's types
//! strictly (every member of the right type, every entry valid, no member twice) and then
//! gives exactly what the ACP type and `translate::update_event` would; for anything else
//! (an entry ACP would skip, entries that are not an array, a member twice, another kind of
//! update) it gives `None` and the transport reads the update through the ACP type as
//! before, so what a plan becomes never depends on which path read it. It never decides
//! anything about a plan and never sees any other update.

use super::translate::{plan_priority, plan_status};
use agent_client_protocol::v1::schema as acp;
use legate_core::PlanEntry;
use serde::Deserialize;
use serde::de::IgnoredAny;

/// A `session/update`'s params, as ACP's `SessionNotification` has them.
#[derive(Deserialize)]
struct Params {
    #[serde(rename = "sessionId")]
    _session_id: String,
    update: Update,
    #[serde(rename = "_meta", default)]
    _meta: Option<IgnoredAny>,
}

/// The update, when it is a plan (ACP's `SessionUpdate::Plan`).
#[derive(Deserialize)]
struct Update {
    #[serde(rename = "sessionUpdate")]
    _kind: PlanTag,
    entries: Vec<Entry>,
    #[serde(rename = "_meta", default)]
    _meta: Option<IgnoredAny>,
}

/// The one kind of update read here.
#[derive(Deserialize)]
enum PlanTag {
    #[serde(rename = "plan")]
    Plan,
}

/// A plan entry, as ACP's `PlanEntry` has it.
#[derive(Deserialize)]
struct Entry {
    content: String,
    priority: acp::PlanEntryPriority,
    status: acp::PlanEntryStatus,
    #[serde(rename = "_meta", default)]
    _meta: Option<IgnoredAny>,
}

/// The entries of the plan `params` carry, when they are a plan update that fits ACP's
/// types strictly; `None` otherwise (the update is then read through the ACP type).
pub(crate) fn plan_entries(params: &str) -> Option<Vec<PlanEntry>> {
    // Most updates are not plans: those that cannot be are not read here at all.
    if !params.contains("\"plan\"") {
        return None;
    }
    let params: Params = serde_json::from_str(params).ok()?;
    let entries = params
        .update
        .entries
        .into_iter()
        .map(|e| PlanEntry {
            priority: plan_priority(&e.priority),
            status: plan_status(&e.status),
            content: e.content,
        })
        .collect();
    Some(entries)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::acp::translate::update_event;
    use legate_core::EventKind;

    /// What the ACP type and the translation make of `params`.
    fn through_acp(params: &str) -> Option<Vec<PlanEntry>> {
        let n: acp::SessionNotification = serde_json::from_str(params).ok()?;
        match update_event(&n.update)? {
            EventKind::Plan { entries } => Some(entries),
            _ => None,
        }
    }

    #[test]
    fn a_plan_that_fits_is_read_as_the_acp_type_reads_it() {
        let plans = [
            r#"{"sessionId":"s","update":{"sessionUpdate":"plan","entries":[]}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"plan","entries":[{"content":"a \"b\"\n\u00e9","priority":"high","status":"pending"},{"content":"","priority":"medium","status":"in_progress","_meta":{"x":1}},{"content":"c","priority":"low","status":"completed","extra":[1]}]},"_meta":null}"#,
            // The tag after the entries, members unknown to ACP, any `_meta`.
            r#"{"update":{"entries":[{"status":"completed","content":"x","priority":"low"}],"_meta":7,"sessionUpdate":"plan","more":{}},"sessionId":"s","_meta":"m"}"#,
        ];
        for p in plans {
            let fast = plan_entries(p);
            assert!(fast.is_some(), "{p}");
            assert_eq!(fast, through_acp(p), "{p}");
        }
    }

    #[test]
    fn priorities_and_statuses_are_their_wire_names() {
        use acp::{PlanEntryPriority as P, PlanEntryStatus as S};
        let wire = |v: serde_json::Value| v.as_str().unwrap().to_owned();
        for p in [P::High, P::Medium, P::Low] {
            assert_eq!(plan_priority(&p), wire(serde_json::to_value(&p).unwrap()));
        }
        for s in [S::Pending, S::InProgress, S::Completed] {
            assert_eq!(plan_status(&s), wire(serde_json::to_value(&s).unwrap()));
        }
    }

    #[test]
    fn anything_else_is_left_to_the_acp_type() {
        for p in [
            // An entry ACP skips (an unknown status), entries ACP defaults (not an array).
            r#"{"sessionId":"s","update":{"sessionUpdate":"plan","entries":[{"content":"a","priority":"high","status":"later"},{"content":"b","priority":"high","status":"pending"}]}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"plan","entries":{"content":"a"}}}"#,
            // A member twice; no session id; another kind of update that says "plan".
            r#"{"sessionId":"s","update":{"sessionUpdate":"plan","entries":[],"entries":[]}}"#,
            r#"{"update":{"sessionUpdate":"plan","entries":[]}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_message_chunk","content":{"type":"text","text":"plan"}}}"#,
            r#"{"sessionId":"s","update":{"sessionUpdate":"agent_thought_chunk","content":{"type":"text","text":"\"plan\""}}}"#,
        ] {
            assert_eq!(plan_entries(p), None, "{p}");
        }
        // What the ACP type makes of the first: the valid entry alone.
        let skipped = r#"{"sessionId":"s","update":{"sessionUpdate":"plan","entries":[{"content":"a","priority":"high","status":"later"},{"content":"b","priority":"high","status":"pending"}]}}"#;
        assert_eq!(through_acp(skipped).map(|e| e.len()), Some(1));
    }
}
