//! The task's span ([`task_span`]: one turn of a task from the queue to its end, a child of
//! whatever span launched it, such as a front's request carrying the caller's trace
//! context), and the spans of the work its events tell of: each tool call (from its
//! announcement to its last status) and each permission decision (who decided, and what),
//! children of the turn's span, made from the events the pump stored. They come out the same
//! for every backend (ACP, agy, a remote Legate), since they are read from the one event model.
//!
//! This module owns which events open and close those spans and what they record: ids,
//! kinds, statuses, sizes and deciders, never a prompt, a title, an input, a reason or any
//! text the agent wrote. It never stores or relays an event. The spans exist only for subscribers that
//! want them (see the binary's `telemetry`): with none, each is a disabled span.

use legate_core::{EventKind, Task, ToolStatus};
use std::collections::HashMap;
use tracing::Span;

/// At most this many tool calls are open spans at once; past it, a new call gets none.
const MAX_OPEN: usize = 256;
/// The longest tool call id recorded (the agent chooses it).
const MAX_ID: usize = 128;

/// The span a task's drive runs in, from its launch (queued) to its end or its wait for
/// input; `reply` for a turn that answers a task waiting for input. Its parent is the
/// current span (the front's request, when a front launched it).
pub(crate) fn task_span(task: &Task, reply: bool) -> Span {
    tracing::info_span!(
        "legate.task",
        legate.task.id = %task.id,
        legate.context.id = %task.context_id,
        legate.agent = %task.agent,
        legate.workspace = task.workspace.as_str(),
        legate.mode = task.mode.as_str(),
        legate.prompt.bytes = task.prompt.len(),
        legate.turn.entry = if reply { "reply" } else { "new" },
        legate.task.state = tracing::field::Empty,
        legate.error.code = tracing::field::Empty,
        otel.status_code = tracing::field::Empty,
    )
}

/// The open tool-call spans of one turn.
#[derive(Debug)]
pub(crate) struct TurnSpans {
    turn: Span,
    open: HashMap<String, Span>,
}

impl TurnSpans {
    /// Spans under `turn` (the turn's span).
    pub(crate) fn new(turn: Span) -> Self {
        Self {
            turn,
            open: HashMap::new(),
        }
    }

    /// Opens, closes or records what `event` tells of.
    pub(crate) fn observe(&mut self, event: &EventKind) {
        if self.turn.is_disabled() {
            return;
        }
        match event {
            EventKind::ToolCall(call) => {
                if self.open.len() >= MAX_OPEN && !self.open.contains_key(&call.id) {
                    return;
                }
                let span = tracing::info_span!(
                    parent: &self.turn,
                    "legate.tool_call",
                    legate.tool_call.id = bounded(&call.id),
                    legate.tool.kind = call.tool_kind.as_str(),
                    legate.tool.status = call.status.as_str(),
                );
                if is_done(call.status) {
                    return;
                }
                self.open.insert(call.id.clone(), span);
            }
            EventKind::ToolCallUpdate(update) => {
                let Some(status) = update.status else {
                    return;
                };
                if let Some(span) = self.open.get(&update.id) {
                    span.record("legate.tool.status", status.as_str());
                }
                if is_done(status) {
                    self.open.remove(&update.id);
                }
            }
            EventKind::Permission {
                tool_call_id,
                tool_kind,
                verdict,
                ..
            } => {
                let parent = self.open.get(tool_call_id).unwrap_or(&self.turn);
                let _decided = tracing::info_span!(
                    parent: parent,
                    "legate.permission",
                    legate.tool_call.id = bounded(tool_call_id),
                    legate.tool.kind = tool_kind.as_str(),
                    legate.permission.decider = verdict.decider.as_str(),
                    legate.permission.decision = if verdict.is_allow() { "allow" } else { "deny" },
                    legate.permission.rule_id = verdict.rule_id.as_deref().map(bounded),
                );
            }
            _ => {}
        }
    }
}

fn is_done(status: ToolStatus) -> bool {
    matches!(status, ToolStatus::Completed | ToolStatus::Failed)
}

/// `s`, cut at [`MAX_ID`] bytes (on a character boundary).
fn bounded(s: &str) -> &str {
    if s.len() <= MAX_ID {
        return s;
    }
    let mut end = MAX_ID;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_id_is_cut_on_a_character_boundary() {
        let id = "é".repeat(100);
        let cut = bounded(&id);
        assert!(cut.len() <= MAX_ID && id.starts_with(cut));
        assert_eq!(bounded("short"), "short");
    }
}
