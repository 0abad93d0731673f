//! What one task keeps of its agent's output: the `[output]` limits ([`OutputLimits`])
//! applied by the event pump (`core/pump.rs`) to every event a turn reports, before the store
//! and the fan-out, so that what is relayed is what was stored.
//!
//! This module owns the counting (the task's events and their bytes as stored, starting from
//! what the store already holds; the answer and stderr of the turn), the fate of each event
//! (kept, kept cut at the answer's or stderr's limit, dropped but still part of the answer,
//! or gone), the notices that say what was dropped (one when a limit is reached, one at the
//! end of the turn with the events and bytes dropped per kind), the answer's marker, and the
//! ceiling past which the turn must end (`TASK_OUTPUT_LIMIT`: twice `max_events` or
//! `max_event_bytes` of output sent, stored or not). It never stores, relays or stops
//! anything itself, and never sees the events Legate writes itself (statuses, the workspace
//! and end-of-turn notices), which are never dropped.

use crate::config::OutputLimits;
use legate_core::EventKind;
use legate_core::PlanTrail;
use legate_core::plan_change::PlanStep;
use std::collections::{BTreeMap, BTreeSet};

/// What becomes of one event of the agent's.
#[derive(Debug, PartialEq)]
pub(crate) enum Fate {
    /// Stored and relayed (a message or stderr line possibly cut at its limit).
    Keep(EventKind),
    /// Not stored: past the events' limits. A message still counts into the answer.
    Drop(EventKind),
    /// Nothing of it is kept.
    Gone,
}

/// A limit of `[output]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Limit {
    Events,
    EventBytes,
    Answer,
    Stderr,
}

impl Limit {
    fn key(self) -> &'static str {
        match self {
            Limit::Events => "output.max_events",
            Limit::EventBytes => "output.max_event_bytes",
            Limit::Answer => "output.max_answer_bytes",
            Limit::Stderr => "output.max_stderr_bytes",
        }
    }
}

/// The accounting of one task's turn.
#[derive(Debug)]
pub(crate) struct Meter {
    limits: OutputLimits,
    /// The task's stored events and their bytes.
    events: u64,
    bytes: u64,
    /// Everything the agent sent, stored or not, with what the task held before the turn.
    sent_events: u64,
    sent_bytes: u64,
    /// The answer's and stderr's bytes kept this turn.
    answer: u64,
    stderr: u64,
    /// The answer's bytes past its limit.
    answer_cut: u64,
    /// The limits reached this turn (each said once).
    reached: BTreeSet<Limit>,
    /// Events dropped, by kind: how many, and their bytes.
    dropped: BTreeMap<&'static str, (u64, u64)>,
    /// The turn's plans as the store keeps them (what changed, with keyframes), so that a
    /// plan counts the bytes it is stored in, not the whole plan again.
    plans: PlanTrail,
}

/// The error of a task whose agent was stopped at the ceiling of `limits`.
pub(crate) fn ceiling_error(limits: &OutputLimits) -> legate_core::Error {
    legate_core::Error::new(
        legate_core::ErrorCode::TaskOutputLimit,
        format!(
            "the agent sent more than twice what a task keeps ({} events or {} bytes of events: {} and {}); it was stopped",
            limits.max_events,
            limits.max_event_bytes,
            Limit::Events.key(),
            Limit::EventBytes.key()
        ),
    )
}

/// What a plan stored as its changes takes beside its hunks (`{"type":"plan","keyframe":…,
/// "since":…,"hunks":…}`), about.
const CHANGES_ROW: u64 = 64;

/// The bytes `event` takes as stored whole (its JSON), counted without building it.
pub(crate) fn stored_size(event: &EventKind) -> u64 {
    legate_core::plan_change::json_size(event)
}

/// The longest prefix of `text` of at most `room` bytes that ends on a character.
fn prefix(text: &str, room: u64) -> &str {
    let mut end = usize::try_from(room).unwrap_or(usize::MAX).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

impl Meter {
    /// A meter for a turn of a task that already stores `stored` (events, bytes).
    pub(crate) fn new(limits: OutputLimits, stored: (u64, u64)) -> Self {
        Self {
            limits,
            events: stored.0,
            bytes: stored.1,
            sent_events: stored.0,
            sent_bytes: stored.1,
            answer: 0,
            stderr: 0,
            answer_cut: 0,
            reached: BTreeSet::new(),
            dropped: BTreeMap::new(),
            plans: PlanTrail::default(),
        }
    }

    fn events_full(&self) -> bool {
        self.reached.contains(&Limit::Events) || self.reached.contains(&Limit::EventBytes)
    }

    fn count_drop(&mut self, kind: &'static str, bytes: u64) {
        let d = self.dropped.entry(kind).or_default();
        d.0 += 1;
        d.1 += bytes;
    }

    /// Before redaction: whether `event` is past its kind's limit already (a message past
    /// the answer's, stderr past its own or the events', anything else past the events'). It
    /// is then counted as dropped and needs no more work.
    pub(crate) fn past_limit(&mut self, event: &EventKind) -> bool {
        let (past, bytes) = match event {
            EventKind::Message { text } => (self.reached.contains(&Limit::Answer), text.len()),
            EventKind::Stderr { line } => (
                self.events_full() || self.reached.contains(&Limit::Stderr),
                line.len() + 1,
            ),
            EventKind::Thought { text } => (self.events_full(), text.len()),
            _ => (self.events_full(), 0),
        };
        if !past {
            return false;
        }
        let bytes = match bytes {
            0 => stored_size(event),
            n => n as u64,
        };
        self.sent_events += 1;
        self.sent_bytes += bytes;
        if matches!(event, EventKind::Message { .. }) {
            self.answer_cut += bytes;
        }
        self.count_drop(event.type_name(), bytes);
        true
    }

    /// Notes that `limit` was reached: its notice, once a turn.
    fn reach(&mut self, limit: Limit, notices: &mut Vec<EventKind>) {
        if !self.reached.insert(limit) {
            return;
        }
        let l = &self.limits;
        let message = match limit {
            Limit::Events => format!(
                "the task reached its limit of {} events ({}); the agent's further events are dropped, neither stored nor relayed (its answer is still kept up to {})",
                l.max_events,
                limit.key(),
                Limit::Answer.key()
            ),
            Limit::EventBytes => format!(
                "the task's events reached their limit of {} bytes ({}); the agent's further events are dropped, neither stored nor relayed (its answer is still kept up to {})",
                l.max_event_bytes,
                limit.key(),
                Limit::Answer.key()
            ),
            Limit::Answer => format!(
                "the answer reached its limit of {} bytes ({}); the rest of it is dropped and the answer ends with a marker",
                l.max_answer_bytes,
                limit.key()
            ),
            Limit::Stderr => format!(
                "the agent's stderr reached its limit of {} bytes for this turn ({}); further lines are dropped",
                l.max_stderr_bytes,
                limit.key()
            ),
        };
        let value = match limit {
            Limit::Events => l.max_events,
            Limit::EventBytes => l.max_event_bytes,
            Limit::Answer => l.max_answer_bytes,
            Limit::Stderr => l.max_stderr_bytes,
        };
        notices.push(EventKind::Notice {
            message,
            detail: serde_json::json!({
                "event": "output.truncated",
                "limit": limit.key(),
                "value": value,
            }),
        });
    }

    /// `text` cut to what is left of the turn's `limit` (the answer's or stderr's); `None`
    /// when nothing of it is left. What is cut off counts as sent.
    fn cut(&mut self, limit: Limit, text: String, notices: &mut Vec<EventKind>) -> Option<String> {
        let (used, max) = match limit {
            Limit::Answer => (self.answer, self.limits.max_answer_bytes),
            _ => (self.stderr, self.limits.max_stderr_bytes),
        };
        let room = max.saturating_sub(used);
        let kept = if (text.len() as u64) <= room {
            text
        } else {
            let kept = prefix(&text, room).to_string();
            let lost = (text.len() - kept.len()) as u64;
            self.sent_bytes += lost;
            if limit == Limit::Answer {
                self.answer_cut += lost;
            }
            self.reach(limit, notices);
            kept
        };
        match limit {
            Limit::Answer => self.answer += kept.len() as u64,
            _ => self.stderr += kept.len() as u64,
        }
        (!kept.is_empty()).then_some(kept)
    }

    /// The fate of one redacted event of the agent's; the notices it causes go to `notices`,
    /// to be stored before it.
    pub(crate) fn admit(&mut self, event: EventKind, notices: &mut Vec<EventKind>) -> Fate {
        let kind = event.type_name();
        let event = match event {
            EventKind::Message { text } => {
                let len = text.len() as u64;
                match self.cut(Limit::Answer, text, notices) {
                    Some(text) => EventKind::Message { text },
                    None => return self.gone(kind, len),
                }
            }
            // A line's newline counts, as the backend reads it.
            EventKind::Stderr { line } => {
                let len = line.len() as u64 + 1;
                match self.cut(Limit::Stderr, line + "\n", notices) {
                    Some(mut line) => {
                        if line.ends_with('\n') {
                            line.pop();
                        }
                        EventKind::Stderr { line }
                    }
                    None => return self.gone(kind, len),
                }
            }
            other => other,
        };
        let size = match &event {
            EventKind::Plan { entries } => match self.plans.step(entries) {
                PlanStep::Changes { bytes, .. } => bytes + CHANGES_ROW,
                PlanStep::Whole => stored_size(&event),
            },
            _ => stored_size(&event),
        };
        self.sent_events += 1;
        self.sent_bytes += size;
        if !self.events_full() {
            if self.events >= self.limits.max_events {
                self.reach(Limit::Events, notices);
            } else if self.bytes + size > self.limits.max_event_bytes {
                self.reach(Limit::EventBytes, notices);
            }
        }
        if self.events_full() {
            if matches!(event, EventKind::Plan { .. }) {
                // Not stored: the next plan counts from the last one that was (whole).
                self.plans = PlanTrail::default();
            }
            self.count_drop(kind, size);
            return Fate::Drop(event);
        }
        self.events += 1;
        self.bytes += size;
        Fate::Keep(event)
    }

    /// An event of `bytes` cut to nothing (`cut` counted them as sent): counted as dropped.
    fn gone(&mut self, kind: &'static str, bytes: u64) -> Fate {
        self.sent_events += 1;
        self.count_drop(kind, bytes);
        Fate::Gone
    }

    /// Whether the agent has sent more than twice what the task may keep, in events or
    /// bytes (stored or not): the turn must end (`TASK_OUTPUT_LIMIT`).
    pub(crate) fn over_ceiling(&self) -> bool {
        self.sent_events > self.limits.max_events.saturating_mul(2)
            || self.sent_bytes > self.limits.max_event_bytes.saturating_mul(2)
    }

    /// What the answer ends with when it was cut.
    pub(crate) fn answer_marker(&self) -> Option<String> {
        (self.answer_cut > 0).then(|| {
            format!(
                "\n\n[Legate: the answer was cut at {} bytes ({}); {} more bytes were dropped]",
                self.limits.max_answer_bytes,
                Limit::Answer.key(),
                self.answer_cut
            )
        })
    }

    /// The turn's one notice of what was dropped, by kind (events and bytes), if anything.
    pub(crate) fn summary(&self) -> Option<EventKind> {
        if self.dropped.is_empty() {
            return None;
        }
        let (events, bytes) = self
            .dropped
            .values()
            .fold((0, 0), |(e, b), (de, db)| (e + de, b + db));
        let kinds: serde_json::Map<String, serde_json::Value> = self
            .dropped
            .iter()
            .map(|(kind, (e, b))| {
                (
                    (*kind).to_string(),
                    serde_json::json!({ "events": e, "bytes": b }),
                )
            })
            .collect();
        let by_kind = self
            .dropped
            .iter()
            .map(|(kind, (e, b))| format!("{kind} {e} ({b} bytes)"))
            .collect::<Vec<_>>()
            .join(", ");
        Some(EventKind::Notice {
            message: format!(
                "{events} events of the agent's ({bytes} bytes) were dropped past the task's output limits: {by_kind}"
            ),
            detail: serde_json::json!({
                "event": "output.dropped",
                "events": events,
                "bytes": bytes,
                "dropped": kinds,
                "answerCutBytes": self.answer_cut,
                "limits": self.reached.iter().map(|l| l.key()).collect::<Vec<_>>(),
            }),
        })
    }
}

#[cfg(test)]
#[path = "output_tests.rs"]
mod tests;
