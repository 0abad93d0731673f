//! What an adapter did without asking, as far as ACP lets Legate see it: a tool call that
//! ended (`completed` or `failed`) with no permission request for its id is reported as a
//! notice, `ranWithoutAsking`. Claude's adapter runs read-only commands (`ls`, `echo`) and
//! reads this way; Codex runs a command in its own sandbox without asking unless the model
//! asks to leave it.
//!
//! This module only words the notice. It never decides anything (the supervisor was not
//! asked, so there is nothing to decide), and it never trusts the agent's title: it is
//! bounded and stripped of control characters and bidirectional overrides. What ACP does not show (a command an adapter
//! ran and never announced as a tool call) cannot be reported here; `docs/backends/acp.md`
//! says which adapters do that.

use super::translate::KnownTool;
use legate_core::{EventKind, ToolKind, ToolStatus};

/// At most this many `ranWithoutAsking` notices per turn; then one saying more were left out.
pub(crate) const MAX_UNASKED_NOTICES: usize = 50;

/// The longest title quoted.
const TITLE_MAX: usize = 200;

/// Whether a tool call of this kind, ending so, is worth a notice: `think` changes nothing.
pub(crate) fn worth_a_notice(kind: Option<ToolKind>, status: ToolStatus) -> bool {
    matches!(status, ToolStatus::Completed | ToolStatus::Failed) && kind != Some(ToolKind::Think)
}

/// The notice for tool call `id`, ended with `status`, never asked about.
pub(crate) fn notice(id: &str, known: &KnownTool, status: ToolStatus) -> EventKind {
    let clean = |s: &str| super::backend::agent_words(s, TITLE_MAX);
    let title = clean(known.title.as_deref().unwrap_or(id));
    let kind = known.kind.map(|k| k.as_str()).unwrap_or("other");
    let status = status.as_str();
    EventKind::Notice {
        message: format!(
            "ran without asking: the agent's {kind} tool call \"{title}\" ended {status} with no permission request; the supervisor was not consulted"
        ),
        detail: serde_json::json!({
            "ranWithoutAsking": {
                "toolCallId": clean(id),
                "title": title,
                "kind": kind,
                "status": status,
            }
        }),
    }
}

/// The notice that tool calls ended that Legate could not track (more than `max` in one
/// turn), so whether they were asked about is not known.
pub(crate) fn untracked(max: usize) -> EventKind {
    EventKind::Notice {
        message: format!(
            "more than {max} tool calls were announced in this turn: Legate no longer tracks which were asked about, and later ones may have run without asking"
        ),
        detail: serde_json::json!({ "ranWithoutAsking": { "untracked": true } }),
    }
}

/// The notice that more tool calls ran without asking than are listed.
pub(crate) fn more() -> EventKind {
    EventKind::Notice {
        message: format!(
            "more than {MAX_UNASKED_NOTICES} tool calls ran without asking in this turn; the rest are not listed"
        ),
        detail: serde_json::json!({ "ranWithoutAsking": { "truncated": true } }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn only_ended_calls_that_do_something() {
        assert!(worth_a_notice(
            Some(ToolKind::Execute),
            ToolStatus::Completed
        ));
        assert!(worth_a_notice(Some(ToolKind::Read), ToolStatus::Failed));
        assert!(worth_a_notice(None, ToolStatus::Completed));
        assert!(!worth_a_notice(
            Some(ToolKind::Think),
            ToolStatus::Completed
        ));
        assert!(!worth_a_notice(
            Some(ToolKind::Execute),
            ToolStatus::InProgress
        ));
        assert!(!worth_a_notice(
            Some(ToolKind::Execute),
            ToolStatus::Pending
        ));
    }

    #[test]
    fn a_hostile_title_is_bounded_and_clean() {
        let known = KnownTool {
            title: Some(format!("ls\n\u{1b}[2J\u{202e}{}", "x".repeat(5000))),
            kind: Some(ToolKind::Execute),
            ..KnownTool::default()
        };
        let EventKind::Notice { message, detail } = notice("id\r\n", &known, ToolStatus::Completed)
        else {
            panic!("a notice");
        };
        assert!(!message.chars().any(char::is_control), "{message:?}");
        assert!(!message.contains('\u{202e}'), "{message:?}");
        assert!(message.len() < 400, "{}", message.len());
        let d = &detail["ranWithoutAsking"];
        assert_eq!(d["kind"], "execute");
        assert_eq!(d["status"], "completed");
        assert_eq!(d["toolCallId"], "id  ");
    }
}
