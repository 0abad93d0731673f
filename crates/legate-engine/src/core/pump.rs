//! The event pump: a turn's events, as the backend reports them, redacted
//! (`core::redaction`), held to the task's output limits (`core::output`), stored in batches
//! and only then fanned out, and folded into the turn's result (`core::accumulator`).
//!
//! This module owns the order of that path (drop what is already past its limit, redact,
//! meter, store, relay), how much may wait unread for it (the backend stops reading the
//! agent meanwhile), the signal that tells the turn the agent passed the output
//! ceiling, and the relay lag: for each batch stored and announced, the time since its
//! oldest event was reported by the backend (text the redactor held counts from the batch
//! it came in with). It never relays an event it did not store, and never decides a task's end (the
//! turn does, on the signal).

use crate::core::Core;
use crate::core::accumulator::Accumulator;
use crate::core::output::{Fate, Meter};
use crate::core::redaction::{RELEASE_AFTER, TurnRedactor};
use crate::core::spans::TurnSpans;
use legate_backend::{EventSink, EventStream};
use legate_core::{EventKind, TaskId};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

/// At most this many of a turn's events wait unread for the pump before the backend stops
/// reading the agent's output, or this many bytes of them (the agent waits on its pipe).
const BACKLOG_EVENTS: usize = 4096;
const BACKLOG_BYTES: usize = 4 << 20;

/// The sink a turn's backend reports on, bounded for the pump ([`EventSink::bounded`]).
pub(crate) fn channel() -> (EventSink, EventStream) {
    EventSink::bounded(BACKLOG_EVENTS, BACKLOG_BYTES)
}

/// A running pump: its result, and the signal raised (once) when the agent has sent more
/// than twice what the task keeps.
pub(crate) struct Pump {
    pub(crate) handle: JoinHandle<Accumulator>,
    pub(crate) overflow: Arc<Notify>,
}

impl Core {
    /// Stores a turn's events in batches, then fans them out; folds them into the result.
    /// The tool calls and permission decisions they tell of are spans under `turn`
    /// (`core::spans`).
    pub(crate) fn spawn_pump(
        &self,
        task_id: TaskId,
        mut stream: EventStream,
        turn: tracing::Span,
    ) -> Pump {
        let inner = self.inner.clone();
        let overflow = Arc::new(Notify::new());
        let signal = overflow.clone();
        let stored = inner.store.event_totals(&task_id).unwrap_or_else(|e| {
            tracing::warn!(task = %task_id, error = %e, "could not count the task's events; its output limits count from 0");
            (0, 0)
        });
        let mut meter = Meter::new(inner.config.output, stored);
        let handle = tokio::spawn(async move {
            let mut acc = Accumulator::default();
            let mut redactor = TurnRedactor::new();
            let mut batch = Vec::with_capacity(256);
            let mut clean = Vec::with_capacity(256);
            let mut kept = Vec::with_capacity(256);
            let mut signalled = false;
            let mut spans = TurnSpans::new(turn);
            // When the oldest event not yet stored was reported (held text included).
            let mut since: Option<Instant> = None;
            let mut store =
                |events: &mut Vec<EventKind>, acc: &mut Accumulator, since: Option<Instant>| {
                    if events.is_empty() {
                        return;
                    }
                    for e in events.iter() {
                        acc.add(e);
                        spans.observe(e);
                    }
                    // Given up to the store and on to the fan-out, never copied.
                    match inner
                        .store
                        .append_events_owned(&task_id, std::mem::take(events))
                    {
                        Ok(stored) => inner.fanout.publish_owned(stored, since),
                        Err(e) => {
                            tracing::error!(task = %task_id, error = %e, "could not store events")
                        }
                    }
                };
            // What the agent printed is redacted here, before anything stores or relays it.
            loop {
                let held = redactor.holds();
                let (got, first) = if held {
                    let next = stream.recv_many_since(&mut batch, 256);
                    match tokio::time::timeout(RELEASE_AFTER, next).await {
                        Ok(got) => got,
                        Err(_) => {
                            // The agent went quiet inside a word: relay what is held.
                            redactor.release(&mut clean);
                            settle(&mut meter, &mut clean, &mut acc, &mut kept);
                            store(&mut kept, &mut acc, since.take());
                            continue;
                        }
                    }
                } else {
                    stream.recv_many_since(&mut batch, 256).await
                };
                if got == 0 {
                    break;
                }
                // Held text is older than this batch; otherwise the batch's first is oldest.
                let oldest = since.or(first);
                for e in batch.drain(..) {
                    // Past its limit already: dropped before any work on it.
                    if !meter.past_limit(&e) {
                        redactor.take(e, &mut clean);
                    }
                }
                settle(&mut meter, &mut clean, &mut acc, &mut kept);
                store(&mut kept, &mut acc, oldest);
                // What the redactor still holds came with this batch, or (held before it and
                // never let go) earlier.
                since = match (redactor.holds(), held) {
                    (false, _) => None,
                    (true, true) => oldest,
                    (true, false) => first,
                };
                if !signalled && meter.over_ceiling() {
                    signalled = true;
                    tracing::warn!(task = %task_id, "the agent sent past the task's output ceiling; stopping it");
                    signal.notify_one();
                }
            }
            redactor.finish(&mut clean);
            settle(&mut meter, &mut clean, &mut acc, &mut kept);
            kept.extend(meter.summary());
            store(&mut kept, &mut acc, since.take());
            if let Some(marker) = meter.answer_marker() {
                acc.cut_answer(&marker);
            }
            acc
        });
        Pump { handle, overflow }
    }
}

/// Each of `clean`'s events metered: what is kept goes to `kept` (after the notices it
/// caused), what is dropped is still folded into the answer where it belongs there.
fn settle(
    meter: &mut Meter,
    clean: &mut Vec<EventKind>,
    acc: &mut Accumulator,
    kept: &mut Vec<EventKind>,
) {
    for e in clean.drain(..) {
        match meter.admit(e, kept) {
            Fate::Keep(e) => kept.push(e),
            Fate::Drop(e) => acc.add_dropped(&e),
            Fate::Gone => {}
        }
    }
}
