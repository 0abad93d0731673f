//! The channel a backend reports a turn's events on.

use legate_core::EventKind;
use tokio::sync::mpsc;

/// The sending half: backends push events here, in the order they happened.
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: mpsc::UnboundedSender<EventKind>,
}

/// The receiving half, held by the engine.
pub type EventStream = mpsc::UnboundedReceiver<EventKind>;

impl EventSink {
    /// A new sink and the stream that reads it.
    pub fn channel() -> (EventSink, EventStream) {
        let (tx, rx) = mpsc::unbounded_channel();
        (EventSink { tx }, rx)
    }

    /// Reports one event. Never blocks; an event sent after the engine stopped listening is
    /// dropped (the turn is over for it).
    pub fn send(&self, event: EventKind) {
        let _ = self.tx.send(event);
    }
}
