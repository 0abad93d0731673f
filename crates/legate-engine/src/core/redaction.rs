//! Redaction of what an agent prints, at the one point every turn's events pass before the
//! store and the fan-out (the event pump, `Core::spawn_pump`), and of a task's error before
//! its end is stored or logged.
//!
//! This module owns which fields of an event are the agent's words and how each is hidden:
//! the answer, the reasoning and stderr are streams (`legate_credentials::StreamRedactor`, so a
//! credential split between two chunks is still found, and each stream is held apart so that
//! interleaving them does not help); everything else an agent writes (tool titles, raw input
//! and output, plans, attachments' text, notices' detail, raw events, unparsed lines, errors)
//! is redacted whole, JSON walked string by string. Each credential becomes
//! `[REDACTED:<rule id>]`. It must never log, store or relay a credential it found, and never
//! touch a workspace's files: a copy's patch is the user's change, reviewed and integrated as
//! written (docs/permissions.md, "Redaction").

use legate_core::{Error, EventKind};
use legate_credentials::{StreamRedactor, redact};
use std::path::PathBuf;

/// How long a stream holds a chunk that ended inside a run of credential characters when the
/// agent sends nothing more: then it is relayed (a credential whose halves come further apart
/// than this shows its first half).
pub(crate) const RELEASE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// The streams of one turn, each redacted as it arrives.
pub(crate) struct TurnRedactor {
    message: StreamRedactor,
    thought: StreamRedactor,
    stderr: StreamRedactor,
    /// The turn's last plan, entry by entry: its text as the agent sent it, and as redacted
    /// when that differs. A plan update repeats the whole plan, so an entry whose text is the
    /// one at its place in the last plan is not scanned again (the scan of a text depends on
    /// nothing else).
    plan: Vec<(String, Option<String>)>,
}

impl TurnRedactor {
    pub(crate) fn new() -> Self {
        Self {
            message: StreamRedactor::new(),
            thought: StreamRedactor::new(),
            stderr: StreamRedactor::new(),
            plan: Vec::new(),
        }
    }

    /// What of `event` may be stored and relayed now, redacted (a stream's chunk may be held
    /// for now, or come out with text held before it).
    pub(crate) fn take(&mut self, event: EventKind, out: &mut Vec<EventKind>) {
        match event {
            EventKind::Message { text } => {
                let pieces = self.message.push(&text);
                out.extend(pieces.into_iter().map(|text| EventKind::Message { text }));
            }
            EventKind::Thought { text } => {
                let pieces = self.thought.push(&text);
                out.extend(pieces.into_iter().map(|text| EventKind::Thought { text }));
            }
            EventKind::Stderr { line } => {
                let text = self.stderr.push(&format!("{line}\n"));
                stderr_lines(text, out);
            }
            EventKind::Plan { mut entries } => {
                self.hide_plan(&mut entries);
                out.push(EventKind::Plan { entries });
            }
            other => out.push(redact_event(other)),
        }
    }

    /// Each entry of a plan redacted as [`redact_event`] does, scanning only the entries
    /// whose text is not the one at their place in the turn's last plan.
    fn hide_plan(&mut self, entries: &mut [legate_core::PlanEntry]) {
        self.plan.truncate(entries.len());
        for (i, e) in entries.iter_mut().enumerate() {
            let hidden = |text: &str| match redact(text) {
                std::borrow::Cow::Borrowed(_) => None,
                std::borrow::Cow::Owned(r) => Some(r),
            };
            match self.plan.get_mut(i) {
                Some((raw, _)) if *raw == e.content => {}
                Some(slot) => *slot = (e.content.clone(), hidden(&e.content)),
                None => self.plan.push((e.content.clone(), hidden(&e.content))),
            }
            if let Some((_, Some(h))) = self.plan.get(i) {
                e.content.clone_from(h);
            }
        }
    }

    /// Whether a stream holds text (a chunk that ended inside a run of credential characters).
    pub(crate) fn holds(&self) -> bool {
        self.message.holds() || self.thought.holds() || self.stderr.holds()
    }

    /// What the streams hold, redacted, when the agent went quiet for [`RELEASE_AFTER`]: a
    /// chunk that ended inside a word is not kept from the caller longer than that.
    pub(crate) fn release(&mut self, out: &mut Vec<EventKind>) {
        let (thought, message) = (self.thought.release(), self.message.release());
        out.extend(thought.into_iter().map(|text| EventKind::Thought { text }));
        out.extend(message.into_iter().map(|text| EventKind::Message { text }));
        stderr_lines(self.stderr.release(), out);
    }

    /// Everything the streams still hold, redacted, at the end of the turn.
    pub(crate) fn finish(&mut self, out: &mut Vec<EventKind>) {
        let (thought, message) = (self.thought.finish(), self.message.finish());
        out.extend(thought.into_iter().map(|text| EventKind::Thought { text }));
        out.extend(message.into_iter().map(|text| EventKind::Message { text }));
        stderr_lines(self.stderr.finish(), out);
    }
}

/// One stderr event per line of `pieces`, as the backend reported them.
fn stderr_lines(pieces: Vec<String>, out: &mut Vec<EventKind>) {
    let text = pieces.concat();
    if text.is_empty() {
        return;
    }
    for line in text.strip_suffix('\n').unwrap_or(&text).split('\n') {
        out.push(EventKind::Stderr {
            line: line.to_string(),
        });
    }
}

/// `s`, redacted in place.
fn hide(s: &mut String) {
    if let std::borrow::Cow::Owned(r) = redact(s) {
        *s = r;
    }
}

fn hide_opt(s: &mut Option<String>) {
    if let Some(s) = s {
        hide(s);
    }
}

fn hide_path(p: &mut PathBuf) {
    if let Some(s) = p.to_str()
        && let std::borrow::Cow::Owned(r) = redact(s)
    {
        *p = PathBuf::from(r);
    }
}

/// Every string in `value` redacted (object keys included); numbers and the shape kept.
pub(crate) fn hide_json(value: &mut serde_json::Value) {
    use serde_json::Value;
    match value {
        Value::String(s) => hide(s),
        Value::Array(items) => items.iter_mut().for_each(hide_json),
        Value::Object(map) => {
            let secret_key = map.keys().any(|k| redact(k) != k.as_str());
            if secret_key {
                let old = std::mem::take(map);
                for (k, mut v) in old {
                    hide_json(&mut v);
                    map.insert(redact(&k).into_owned(), v);
                }
            } else {
                map.values_mut().for_each(hide_json);
            }
        }
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

/// `report` with every string redacted (its shape kept); `None` in the unexpected case that
/// the redacted form no longer reads as a report, rather than keeping the credential.
pub(crate) fn hide_report(report: legate_core::Report) -> Option<legate_core::Report> {
    let mut value = serde_json::to_value(&report).ok()?;
    hide_json(&mut value);
    match serde_json::from_value(value) {
        Ok(hidden) => Some(hidden),
        Err(e) => {
            tracing::warn!(error = %e, "a report that held a credential was dropped");
            None
        }
    }
}

/// `error` with its text redacted: the same error when it holds no credential, else one with
/// the redacted text (the chain is not kept: its words are the agent's).
pub(crate) fn hide_error(error: Error) -> Error {
    let detail = error.detail();
    match redact(&detail) {
        std::borrow::Cow::Borrowed(_) => error,
        std::borrow::Cow::Owned(text) => Error::new(error.code, text),
    }
}

/// `event` with every field the agent wrote redacted whole (streams are [`TurnRedactor`]'s).
pub(crate) fn redact_event(mut event: EventKind) -> EventKind {
    match &mut event {
        EventKind::Message { text } | EventKind::Thought { text } => hide(text),
        EventKind::Stderr { line } | EventKind::Unparsed { line } => hide(line),
        EventKind::Attachment(a) => {
            hide_opt(&mut a.name);
            hide_opt(&mut a.uri);
            hide_opt(&mut a.text);
        }
        EventKind::ToolCall(call) => {
            hide(&mut call.title);
            call.locations.iter_mut().for_each(hide_path);
            if let Some(raw) = &mut call.raw_input {
                hide_json(raw);
            }
        }
        EventKind::ToolCallUpdate(update) => {
            hide_opt(&mut update.title);
            hide_opt(&mut update.content);
            if let Some(l) = &mut update.locations {
                l.iter_mut().for_each(hide_path);
            }
        }
        EventKind::Plan { entries } => entries.iter_mut().for_each(|e| hide(&mut e.content)),
        EventKind::Permission { title, verdict, .. } => {
            hide(title);
            hide(&mut verdict.reason);
        }
        EventKind::FsAccess { path, reason, .. } => {
            hide_path(path);
            hide_opt(reason);
        }
        EventKind::Notice { message, detail } => {
            hide(message);
            hide_json(detail);
        }
        EventKind::Raw { payload, .. } => hide_json(payload),
        EventKind::Status { message, error, .. } => {
            hide_opt(message);
            if let Some(e) = error.take() {
                *error = Some(hide_error(e));
            }
        }
        EventKind::Prompt { .. }
        | EventKind::Connection(_)
        | EventKind::Usage { .. }
        | EventKind::Mode { .. }
        | EventKind::Session { .. } => {}
    }
    event
}

#[cfg(test)]
#[path = "redaction_tests.rs"]
mod tests;
