//! The task's span ([`task_span`]: one turn of a task from the queue to its end, a child of
//! whatever span launched it, such as a front's request carrying the caller's trace
//! context), and the spans of the work its events tell of: each tool call (from its
//! announcement to its last status) and each permission decision (who decided, and what),
//! children of the turn's span, made from the events the pump stored. They come out the same
//! for every backend (ACP, agy, a remote Legate), since they are read from the one event model.
//!
//! A task keeps its first turn's trace context in the store ([`keep_trace`]); a reply into it
//! and a turn re-attached after a restart continue that trace ([`continue_trace`]): the kept
//! context is their task span's parent, and the trace that launched the turn (a front's
//! request), when another, is a link.
//!
//! This module owns which events open and close those spans and what they record: ids,
//! kinds, statuses, sizes and deciders, never a prompt, a title, an input, a reason or any
//! text the agent wrote. It never stores or relays an event. The spans exist only for subscribers that
//! want them (see the binary's `telemetry`): with none, each is a disabled span.

use legate_core::{EventKind, Task, TaskId, ToolStatus};
use legate_store::Store;
use legate_trace::TraceContext;
use std::collections::HashMap;
use tracing::Span;

/// At most this many tool calls are open spans at once; past it, a new call gets none.
const MAX_OPEN: usize = 256;
/// The longest tool call id recorded (the agent chooses it).
const MAX_ID: usize = 128;

/// How a task's turn began, on its span (`legate.turn.entry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TurnEntry {
    /// A new task.
    New,
    /// A reply into a task that waited for input.
    Reply,
    /// A remote task followed again by the engine that took it over after a restart.
    Reattach,
}

impl TurnEntry {
    fn as_str(self) -> &'static str {
        match self {
            Self::New => "new",
            Self::Reply => "reply",
            Self::Reattach => "reattach",
        }
    }
}

/// Keeps the trace context of `span` (a new task's span, not yet entered) with task `id`,
/// when traces are on and the task has none yet. A failure to store is logged: the task runs.
pub(crate) fn keep_trace(store: &Store, id: &TaskId, span: &Span) {
    let Some(cx) = TraceContext::of(span) else {
        return;
    };
    if let Err(e) = store.keep_task_trace(id, cx.traceparent(), cx.tracestate()) {
        tracing::warn!(task = %id, error = %e, "could not keep the task's trace context");
    }
}

/// Makes task `id`'s kept trace context the parent of `span` (just made, never entered), when
/// traces are on and one was kept; the trace `span` would have joined (the current one, a
/// front's request), when another, becomes a link. Nothing changes otherwise.
pub(crate) fn continue_trace(store: &Store, id: &TaskId, span: &Span) {
    if span.is_disabled() {
        return;
    }
    let kept = match store.task_trace(id) {
        Ok(Some((parent, state))) => TraceContext::new(&parent, state.as_deref()),
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(task = %id, error = %e, "could not read the task's trace context");
            None
        }
    };
    let Some(kept) = kept else {
        return;
    };
    // The span that launched this turn (a front's request), not `span` itself.
    let launcher = TraceContext::current();
    if kept.adopt(span)
        && let Some(launcher) = launcher
        && launcher.trace_id() != kept.trace_id()
    {
        launcher.link(span);
    }
}

/// The span a task's drive runs in, from its launch (queued) to its end or its wait for
/// input; `entry` says how the turn began. Its parent is the current span (the front's
/// request, when a front launched it), unless [`continue_trace`] gives it the task's own.
pub(crate) fn task_span(task: &Task, entry: TurnEntry) -> Span {
    tracing::info_span!(
        "legate.task",
        legate.task.id = %task.id,
        legate.context.id = %task.context_id,
        legate.agent = %task.agent,
        legate.workspace = task.workspace.as_str(),
        legate.mode = task.mode.as_str(),
        legate.prompt.bytes = task.prompt.len(),
        legate.turn.entry = entry.as_str(),
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
