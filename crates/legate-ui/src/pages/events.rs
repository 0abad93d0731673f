//! One event as a list item: the task page renders the stored ones, and the live stream
//! sends each new one as the same fragment (so a page that loaded without JavaScript and one
//! that updates live show the same thing).
//!
//! Every field is agent data and is escaped; nothing here is `PreEscaped`.

use crate::pages::layout;
use legate_core::{Event, EventKind};
use maud::{Markup, html};

/// The `<li>` of `event`, its id `e<seq>`.
pub fn item(event: &Event) -> Markup {
    let kind = event.kind.type_name();
    html! {
        li id={ "e" (event.seq) } class={ "event event-" (kind) } data-seq=(event.seq) {
            span.meta {
                span.seq { "#" (event.seq) } " "
                time { (layout::time(event.at)) } " "
                span.kind { (kind) }
            }
            " "
            (body(&event.kind))
        }
    }
}

fn body(kind: &EventKind) -> Markup {
    match kind {
        EventKind::Status {
            state,
            message,
            error,
        } => html! {
            span { "state " strong { (state.as_str()) } }
            @if let Some(m) = message { " — " (m) }
            @if let Some(e) = error { " " code { (e.code.as_str()) } " " (e.detail()) }
        },
        EventKind::Prompt { text, message_id } => html! {
            span { "prompt" @if let Some(id) = message_id { " " code { (id) } } ": " }
            span.text { (text) }
        },
        EventKind::Message { text } => html! { span.text { (text) } },
        EventKind::Thought { text } => html! { span.text.muted { (text) } },
        EventKind::ToolCall(t) => html! {
            span { strong { (t.title) } " (" (t.tool_kind.as_str()) ", " (t.status.as_str()) ")" }
            @for l in &t.locations { " " code { (l.display().to_string()) } }
        },
        EventKind::ToolCallUpdate(u) => html! {
            span {
                "tool call " code { (u.id) }
                @if let Some(t) = &u.title { " " strong { (t) } }
                @if let Some(s) = u.status { " → " (s.as_str()) }
            }
            @if let Some(c) = &u.content { pre { (c) } }
        },
        EventKind::Plan { entries } => html! {
            ol.plan { @for e in entries { li { "[" (e.status) "] " (e.content) } } }
        },
        EventKind::Permission {
            title,
            tool_kind,
            verdict,
            ..
        } => html! {
            span {
                "permission for " strong { (title) } " (" (tool_kind.as_str()) "): "
                strong class={ "decision-" (decision(verdict.decision)) } { (decision(verdict.decision)) }
                " by " (verdict.decider.as_str())
                @if let Some(r) = &verdict.rule_id { " (rule " code { (r) } ")" }
                @if !verdict.reason.is_empty() { " — " (verdict.reason) }
            }
        },
        EventKind::FsAccess {
            op,
            path,
            allowed,
            reason,
        } => html! {
            span {
                (op) " " code { (path.display().to_string()) } " "
                @if *allowed { "served" } @else { "refused" }
                @if let Some(r) = reason { " — " (r) }
            }
        },
        EventKind::Connection(c) => html! {
            span {
                "network " (c.method) " " code { (c.destination) } ": "
                strong class={ "decision-" (decision(c.decision)) } { (decision(c.decision)) }
                " by " (c.decider.as_str())
                @if let Some(r) = &c.rule_id { " (rule " code { (r) } ")" }
                @if let Some(a) = &c.address { " via " code { (a) } }
                @if c.decision == legate_core::Decision::Allow && c.address.is_some() {
                    " — " (c.sent) " B sent, " (c.received) " B received in " (c.duration_ms) " ms"
                } @else if !c.reason.is_empty() { " — " (c.reason) }
            }
        },
        EventKind::Usage { usage } => html! {
            span { "tokens: in " (layout::tokens(usage.input_tokens)) ", out " (layout::tokens(usage.output_tokens)) ", total " (layout::tokens(usage.total_tokens)) }
        },
        EventKind::Stderr { line } => html! { pre.stderr { (line) } },
        EventKind::Notice { message, .. } => html! { span { (message) } },
        other => html! {
            code.raw { (serde_json::to_string(other).unwrap_or_default()) }
        },
    }
}

/// `allow`, `deny` or `ask`.
pub fn decision(d: legate_core::Decision) -> &'static str {
    match d {
        legate_core::Decision::Allow => "allow",
        legate_core::Decision::Deny => "deny",
        legate_core::Decision::Ask => "ask",
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use legate_core::{TaskId, Timestamp};
    use proptest::prelude::*;

    fn event(kind: EventKind) -> Event {
        Event {
            task_id: TaskId("t".into()),
            seq: 1,
            at: Timestamp(0),
            kind,
        }
    }

    /// The caller's prompt (stored with each turn) is shown as text, escaped, with its
    /// message id, not as a JSON blob.
    #[test]
    fn a_prompt_is_shown_as_escaped_text() {
        let html = item(&event(EventKind::Prompt {
            text: "<script>alert(1)</script>".into(),
            message_id: Some("\"><img src=x onerror=alert(2)>".into()),
        }))
        .into_string();
        assert!(html.contains("event-prompt"), "{html}");
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&lt;img src=x onerror=alert(2)&gt;"),
            "{html}"
        );
        assert!(
            !html.contains("<script") && !html.contains("<img"),
            "{html}"
        );
        assert!(
            !html.contains("code class=\"raw\""),
            "shown as JSON: {html}"
        );
    }

    proptest! {
        /// Whatever text a prompt, message or stderr line holds, no tag of its own survives
        /// (every generated text opens a tag `<x`, which no markup of this module does).
        #[test]
        fn hostile_text_never_becomes_markup(tail in "\\PC{0,80}") {
            let text = format!("<x{tail}");
            for kind in [
                EventKind::Prompt { text: text.clone(), message_id: Some(text.clone()) },
                EventKind::Message { text: text.clone() },
                EventKind::Stderr { line: text.clone() },
            ] {
                let html = item(&event(kind)).into_string();
                prop_assert!(!html.contains("<x"), "{}", html);
            }
        }
    }
}
