//! The wire tap's recorder: a tapped task's raw protocol frames, as its backend hands them
//! to the turn's sink ([`legate_backend::TapRecorder`]), redacted, bounded and stored.
//!
//! The agent's streamed text chunks are first held while a credential may run on into the
//! next one, and scanned joined (`core::tap_chunks`). Each frame passes the credential
//! detector first (`legate_credentials::redact_escaped`:
//! frames are JSON with escaped strings), whole, and is then cut at `[tap] max_frame_kb`
//! (marked truncated, its size on the wire kept). The task keeps at most `[tap]
//! max_task_mb` of frames, counted as stored, across its turns; the first frame past it
//! stores one marker frame instead, and when the turn's recorder ends the marker says how
//! many frames (and wire bytes) were dropped in all. Redaction, the cut and the count happen
//! where the backend calls (so what waits to be stored is bounded by the cap); the store is
//! written by a task of its own, in batches, and the turn waits for it before the task's end
//! is stored.
//!
//! This module decides what of the wire is kept. It never decides whether a task is tapped
//! (the submit does, `core::request`), and never speaks an agent protocol.

use crate::config::TapLimits;
use crate::core::Core;
use crate::core::tap_chunks::{Held, chunk_text};
use legate_backend::{EventSink, TapRecorder};
use legate_core::{NewTapFrame, TapDirection, TapProtocol, Task, TaskId};
use legate_store::Store;
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Frames stored in one write, at most.
const BATCH: usize = 256;

/// What the task's tap kept and dropped.
#[derive(Debug, Default)]
struct Count {
    /// Bytes of frames kept (as stored).
    kept: u64,
    /// Whether the marker is stored or on its way.
    capped: bool,
    /// Frames dropped past the cap, and their bytes on the wire.
    dropped: u64,
    dropped_bytes: u64,
    /// The marker's number, once it is stored (or from an earlier turn).
    marker_seq: Option<u64>,
    /// Chunk frames held while a credential may run on into the next (`core::tap_chunks`).
    held: Held,
}

/// The recorder a tapped turn's sink carries.
#[derive(Debug)]
struct Recorder {
    limits: TapLimits,
    count: Arc<Mutex<Count>>,
    tx: mpsc::UnboundedSender<NewTapFrame>,
}

fn lock(count: &Mutex<Count>) -> MutexGuard<'_, Count> {
    count.lock().unwrap_or_else(|p| p.into_inner())
}

/// `text` cut to at most `max` bytes, on a character boundary.
fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The marker's sentence.
fn marker_text(limits: &TapLimits, dropped: u64, dropped_bytes: u64) -> String {
    format!(
        "the wire tap reached its cap of {} bytes for this task ([tap] max_task_mb); {dropped} later frame{} ({dropped_bytes} bytes on the wire) dropped",
        limits.max_task_bytes,
        if dropped == 1 { "" } else { "s" }
    )
}

impl Recorder {
    /// The frame as stored: redacted whole, then cut. `wire`: its size as it came.
    fn kept(
        &self,
        direction: TapDirection,
        protocol: TapProtocol,
        frame: &str,
        wire: u64,
    ) -> NewTapFrame {
        let redacted = legate_credentials::redact_escaped(frame);
        let max = usize::try_from(self.limits.max_frame_bytes).unwrap_or(usize::MAX);
        let kept = cut(&redacted, max);
        NewTapFrame {
            direction,
            protocol,
            truncated: kept.len() < redacted.len(),
            frame: kept.to_string(),
            wire_bytes: wire,
            dropped: 0,
        }
    }

    /// Releases the chunk frames held, in order, before anything else is kept.
    fn release_held(&self, c: &mut Count) {
        if c.held.holds() {
            for (frame, wire) in c.held.release() {
                self.keep(c, TapDirection::FromAgent, TapProtocol::Acp, &frame, wire);
            }
        }
    }

    /// Keeps one frame within the cap, or counts it dropped (the first one past the cap sends
    /// the marker). Called with the count locked: frames reach the writer in this order.
    fn keep(
        &self,
        c: &mut Count,
        direction: TapDirection,
        protocol: TapProtocol,
        frame: &str,
        wire: u64,
    ) {
        if c.capped {
            c.dropped += 1;
            c.dropped_bytes += wire;
            return;
        }
        let new = self.kept(direction, protocol, frame, wire);
        let size = new.frame.len() as u64;
        if c.kept + size <= self.limits.max_task_bytes {
            c.kept += size;
            // Sent under the lock: frames reach the writer in the order they were counted.
            let _ = self.tx.send(new);
            return;
        }
        c.dropped += 1;
        c.dropped_bytes += wire;
        c.capped = true;
        tracing::info!(
            cap = self.limits.max_task_bytes,
            "the wire tap reached its cap; later frames are dropped"
        );
        let _ = self.tx.send(NewTapFrame {
            direction: TapDirection::Marker,
            protocol,
            frame: marker_text(&self.limits, c.dropped, c.dropped_bytes),
            wire_bytes: c.dropped_bytes,
            truncated: false,
            dropped: c.dropped,
        });
    }
}

impl TapRecorder for Recorder {
    fn record(&self, direction: TapDirection, protocol: TapProtocol, frame: &str) {
        let wire = frame.len() as u64;
        let mut c = lock(&self.count);
        if c.capped {
            // Past the cap nothing more is redacted or held.
            c.dropped += 1;
            c.dropped_bytes += wire;
            return;
        }
        if direction == TapDirection::FromAgent
            && protocol == TapProtocol::Acp
            && let Some((parsed, text)) = chunk_text(frame)
        {
            if c.held.hold(frame, parsed, text) {
                self.release_held(&mut c);
            }
            return;
        }
        self.release_held(&mut c);
        self.keep(&mut c, direction, protocol, frame, wire);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // The turn is over: what is held goes to the writer, which is still listening.
        let count = self.count.clone();
        let mut c = lock(&count);
        self.release_held(&mut c);
    }
}

/// A tapped turn's writer: ends once every sink carrying its recorder is gone.
pub(crate) struct TapWriter {
    handle: JoinHandle<()>,
}

impl TapWriter {
    /// Waits until every frame recorded is stored, and the marker says what was dropped.
    pub(crate) async fn finish(self) {
        if let Err(e) = self.handle.await {
            tracing::error!(error = %e, "the wire tap's writer failed");
        }
    }
}

/// Stores what `rx` brings, in batches, until every recorder is gone; then brings the marker
/// up to date.
async fn write(
    store: Store,
    task_id: TaskId,
    limits: TapLimits,
    count: Arc<Mutex<Count>>,
    mut rx: mpsc::UnboundedReceiver<NewTapFrame>,
) {
    let mut batch = Vec::with_capacity(BATCH);
    while rx.recv_many(&mut batch, BATCH).await > 0 {
        match store.append_tap_frames(&task_id, &batch) {
            Ok(stored) => {
                if let Some(m) = stored.iter().find(|f| f.direction == TapDirection::Marker) {
                    lock(&count).marker_seq = Some(m.seq);
                }
            }
            Err(e) => {
                tracing::warn!(task = %task_id, error = %e, frames = batch.len(), "could not store tap frames")
            }
        }
        batch.clear();
    }
    let (seq, dropped, dropped_bytes) = {
        let c = lock(&count);
        (c.marker_seq, c.dropped, c.dropped_bytes)
    };
    if let Some(seq) = seq
        && let Err(e) = store.update_tap_marker(
            &task_id,
            seq,
            &marker_text(&limits, dropped, dropped_bytes),
            dropped,
            dropped_bytes,
        )
    {
        tracing::warn!(task = %task_id, error = %e, "could not update the tap marker");
    }
}

impl Core {
    /// `sink` carrying a recorder of `task`'s wire when it is tapped, and the writer to wait
    /// for once the turn's sinks are gone; `sink` as it was otherwise.
    pub(crate) fn tap(&self, task: &Task, sink: EventSink) -> (EventSink, Option<TapWriter>) {
        if !task.controls.tap {
            return (sink, None);
        }
        let store = self.store().clone();
        let limits = self.config().tap;
        // A later turn of the task counts on from what its earlier turns kept.
        let totals = store.tap_totals(&task.id).unwrap_or_else(|e| {
            tracing::warn!(task = %task.id, error = %e, "could not count the task's tap frames; its tap counts from 0");
            legate_store::TapTotals::default()
        });
        let count = Arc::new(Mutex::new(Count {
            kept: totals.bytes,
            capped: totals.marker.is_some(),
            dropped: totals.marker.as_ref().map_or(0, |m| m.dropped),
            dropped_bytes: totals.marker.as_ref().map_or(0, |m| m.wire_bytes),
            marker_seq: totals.marker.as_ref().map(|m| m.seq),
            held: Held::default(),
        }));
        let (tx, rx) = mpsc::unbounded_channel();
        let recorder = Arc::new(Recorder {
            limits,
            count: count.clone(),
            tx,
        });
        let handle = tokio::spawn(write(store, task.id.clone(), limits, count, rx));
        (sink.with_tap(recorder), Some(TapWriter { handle }))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn recorder(
        max_task_bytes: u64,
        max_frame_bytes: u64,
    ) -> (Recorder, mpsc::UnboundedReceiver<NewTapFrame>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            Recorder {
                limits: TapLimits {
                    max_task_bytes,
                    max_frame_bytes,
                },
                count: Arc::default(),
                tx,
            },
            rx,
        )
    }

    fn drain(rx: &mut mpsc::UnboundedReceiver<NewTapFrame>) -> Vec<NewTapFrame> {
        std::iter::from_fn(|| rx.try_recv().ok()).collect()
    }

    #[test]
    fn a_frame_is_redacted_whole_before_it_is_cut() {
        let (r, mut rx) = recorder(1 << 20, 60);
        let token = "ghp_R8kq2ZxP0vLm7TnW4sYb9QeHc3UjDf6GaK1o";
        // The token straddles the cut: cut first, its prefix would stay unrecognised.
        let frame = format!(
            r#"{{"text":"{}\n{token} and more after it"}}"#,
            "x".repeat(30)
        );
        r.record(TapDirection::FromAgent, TapProtocol::Acp, &frame);
        let got = drain(&mut rx);
        assert_eq!(got.len(), 1);
        assert!(!got[0].frame.contains("ghp_R8kq"), "{}", got[0].frame);
        assert!(got[0].frame.contains("[REDACTED:"), "{}", got[0].frame);
        assert!(got[0].truncated && got[0].frame.len() <= 60);
        assert_eq!(got[0].wire_bytes, frame.len() as u64);
    }

    #[test]
    fn the_cap_keeps_whole_frames_and_one_marker_counts_the_rest() {
        let (r, mut rx) = recorder(100, 1 << 10);
        for i in 0..10 {
            r.record(TapDirection::ToAgent, TapProtocol::Agy, &format!("{i:030}"));
        }
        let got = drain(&mut rx);
        let frames: Vec<_> = got
            .iter()
            .filter(|f| f.direction != TapDirection::Marker)
            .collect();
        assert_eq!(frames.len(), 3);
        assert!(frames.iter().map(|f| f.frame.len()).sum::<usize>() <= 100);
        let markers: Vec<_> = got
            .iter()
            .filter(|f| f.direction == TapDirection::Marker)
            .collect();
        assert_eq!(markers.len(), 1);
        let c = lock(&r.count);
        assert_eq!((c.dropped, c.dropped_bytes), (7, 7 * 30));
        assert!(marker_text(&r.limits, 7, 210).contains("7 later frames (210 bytes"));
    }

    #[test]
    fn a_token_streamed_in_chunks_is_kept_by_no_frame_even_when_the_turn_ends_on_it() {
        let (r, mut rx) = recorder(1 << 20, 1 << 10);
        let chunk = |text: &str| {
            serde_json::json!({"jsonrpc": "2.0", "method": "session/update", "params": {
                "sessionId": "s",
                "update": {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": text}},
            }})
            .to_string()
        };
        for piece in ["ghp_R8kq2ZxP0", "vLm7TnW4sYb9QeHc", "3UjDf6GaK1o"] {
            r.record(TapDirection::FromAgent, TapProtocol::Acp, &chunk(piece));
        }
        // Held: nothing reached the writer yet, and the turn ends here.
        assert!(drain(&mut rx).is_empty());
        drop(r);
        let got = drain(&mut rx);
        assert_eq!(got.len(), 3);
        for f in &got {
            for part in ["R8kq2ZxP0", "vLm7TnW4sYb9QeHc", "3UjDf6GaK1o"] {
                assert!(!f.frame.contains(part), "{}", f.frame);
            }
        }
        assert!(got[0].frame.contains("[REDACTED:github-token]"));
    }

    #[test]
    fn a_cut_keeps_whole_characters() {
        assert_eq!(cut("héllo", 2), "h");
        assert_eq!(cut("héllo", 3), "hé");
        assert_eq!(cut("abc", 10), "abc");
    }
}
