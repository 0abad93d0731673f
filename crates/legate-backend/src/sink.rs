//! The channel a backend reports a turn's events on, and how much of them may wait unread.
//!
//! A sink made by [`EventSink::channel`] never holds a backend back. One made by
//! [`EventSink::bounded`] (a task's turn, read by the engine's event pump) counts what waits
//! unread, in events and bytes, and a backend that reads an agent's output asks
//! [`EventSink::room`] before it reads more: while the reader is behind, the agent waits on
//! its pipe instead of Legate's memory growing with its flood. Sending itself never blocks.
//!
//! Each event is stamped with when it was sent, so that the reader can tell how long the
//! oldest of a batch waited for it ([`EventStream::recv_many_since`]: the engine's relay lag).
//!
//! A sink may also carry the task's wire tap ([`EventSink::with_tap`]): the backend hands
//! each raw frame to [`EventSink::tap`], which does nothing for an untapped task.

use crate::tap::TapRecorder;
use legate_core::{EventKind, TapDirection, TapProtocol};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tokio::sync::{Notify, mpsc};

/// What waits unread in a bounded sink, and the limits of it.
#[derive(Debug)]
struct Backlog {
    events: AtomicUsize,
    bytes: AtomicUsize,
    max_events: usize,
    max_bytes: usize,
    /// Raised when the reader takes events, and when it is gone.
    room: Notify,
}

impl Backlog {
    fn has_room(&self) -> bool {
        self.events.load(Ordering::Acquire) < self.max_events
            && self.bytes.load(Ordering::Acquire) < self.max_bytes
    }
}

/// About the bytes `event` holds: its text, or its JSON for the other kinds.
fn weight(event: &EventKind) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0 += b.len();
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    match event {
        EventKind::Message { text } | EventKind::Thought { text } => text.len() + 32,
        EventKind::Stderr { line } => line.len() + 32,
        other => {
            let mut count = Count(0);
            let _ = serde_json::to_writer(&mut count, other);
            count.0
        }
    }
}

/// The sending half: backends push events here, in the order they happened.
#[derive(Debug, Clone)]
pub struct EventSink {
    tx: mpsc::UnboundedSender<(Instant, EventKind)>,
    backlog: Option<Arc<Backlog>>,
    /// Where the task's raw frames go, when it is tapped.
    tap: Option<Arc<dyn TapRecorder>>,
}

/// The receiving half, held by the engine.
#[derive(Debug)]
pub struct EventStream {
    rx: mpsc::UnboundedReceiver<(Instant, EventKind)>,
    backlog: Option<Arc<Backlog>>,
    /// Where [`EventStream::recv_many`] takes stamped events before it hands them on (kept,
    /// so that a batch allocates nothing once it has grown).
    scratch: Vec<(Instant, EventKind)>,
}

impl EventSink {
    /// A new sink and the stream that reads it, with no bound on what waits unread.
    pub fn channel() -> (EventSink, EventStream) {
        let (tx, rx) = mpsc::unbounded_channel();
        (
            EventSink {
                tx,
                backlog: None,
                tap: None,
            },
            EventStream {
                rx,
                backlog: None,
                scratch: Vec::new(),
            },
        )
    }

    /// A new sink whose [`EventSink::room`] waits while `max_events` events or `max_bytes`
    /// bytes wait unread (one event past either may be sent: sending never blocks).
    pub fn bounded(max_events: usize, max_bytes: usize) -> (EventSink, EventStream) {
        let (tx, rx) = mpsc::unbounded_channel();
        let backlog = Arc::new(Backlog {
            events: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            max_events,
            max_bytes,
            room: Notify::new(),
        });
        (
            EventSink {
                tx,
                backlog: Some(backlog.clone()),
                tap: None,
            },
            EventStream {
                rx,
                backlog: Some(backlog),
                scratch: Vec::new(),
            },
        )
    }

    /// The same sink, recording the task's raw frames on `recorder` (the wire tap).
    pub fn with_tap(mut self, recorder: Arc<dyn TapRecorder>) -> Self {
        self.tap = Some(recorder);
        self
    }

    /// Whether the task is tapped: a backend may skip making a frame's text otherwise.
    pub fn taps(&self) -> bool {
        self.tap.is_some()
    }

    /// Records one raw frame of the task's wire, when it is tapped; nothing otherwise.
    pub fn tap(&self, direction: TapDirection, protocol: TapProtocol, frame: &str) {
        if let Some(tap) = &self.tap {
            tap.record(direction, protocol, frame);
        }
    }

    /// Reports one event. Never blocks; an event sent after the engine stopped listening is
    /// dropped (the turn is over for it).
    pub fn send(&self, event: EventKind) {
        if let Some(b) = &self.backlog {
            b.events.fetch_add(1, Ordering::AcqRel);
            b.bytes.fetch_add(weight(&event), Ordering::AcqRel);
        }
        let _ = self.tx.send((Instant::now(), event));
    }

    /// Waits until the reader has room for more: at once for an unbounded sink, or when the
    /// reader is gone.
    pub async fn room(&self) {
        let Some(b) = &self.backlog else {
            return;
        };
        loop {
            let notified = b.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if b.has_room() || self.tx.is_closed() {
                return;
            }
            notified.await;
        }
    }
}

impl EventStream {
    fn took<'a>(&self, events: impl ExactSizeIterator<Item = &'a EventKind>) {
        if let Some(b) = &self.backlog
            && events.len() > 0
        {
            let n = events.len();
            let bytes = events.map(weight).sum::<usize>();
            b.events.fetch_sub(n, Ordering::AcqRel);
            b.bytes.fetch_sub(bytes, Ordering::AcqRel);
            b.room.notify_waiters();
        }
    }

    /// The next event, or `None` once every sink is gone and nothing is left.
    pub async fn recv(&mut self) -> Option<EventKind> {
        let (_, event) = self.rx.recv().await?;
        self.took(std::iter::once(&event));
        Some(event)
    }

    /// The next event if one waits.
    ///
    /// # Errors
    /// When none waits, or every sink is gone.
    pub fn try_recv(&mut self) -> Result<EventKind, mpsc::error::TryRecvError> {
        let (_, event) = self.rx.try_recv()?;
        self.took(std::iter::once(&event));
        Ok(event)
    }

    /// Up to `limit` waiting events appended to `buf`, waiting for at least one; how many
    /// (0 once every sink is gone and nothing is left).
    pub async fn recv_many(&mut self, buf: &mut Vec<EventKind>, limit: usize) -> usize {
        self.recv_many_since(buf, limit).await.0
    }

    /// [`EventStream::recv_many`], and when the first of the events taken was sent (`None`
    /// when none was taken): how long the oldest of the batch has waited since its backend
    /// reported it.
    pub async fn recv_many_since(
        &mut self,
        buf: &mut Vec<EventKind>,
        limit: usize,
    ) -> (usize, Option<Instant>) {
        let mut scratch = std::mem::take(&mut self.scratch);
        let n = self.rx.recv_many(&mut scratch, limit).await;
        self.took(scratch.iter().map(|(_, e)| e));
        let first = scratch.first().map(|(at, _)| *at);
        buf.extend(scratch.drain(..).map(|(_, e)| e));
        self.scratch = scratch;
        (n, first)
    }
}

impl Drop for EventStream {
    fn drop(&mut self) {
        // A backend waiting for room would wait for a reader that is gone.
        self.rx.close();
        if let Some(b) = &self.backlog {
            b.room.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn message(n: usize) -> EventKind {
        EventKind::Message {
            text: "m".repeat(n),
        }
    }

    #[tokio::test]
    async fn room_waits_while_the_reader_is_behind() {
        let (sink, mut stream) = EventSink::bounded(2, 1 << 20);
        sink.send(message(1));
        sink.room().await;
        sink.send(message(1));
        let waiting = tokio::spawn({
            let sink = sink.clone();
            async move { sink.room().await }
        });
        // Not a synchronisation: the waiter has had time to see the backlog full.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        let mut buf = Vec::new();
        assert_eq!(stream.recv_many(&mut buf, 8).await, 2);
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
    }

    #[tokio::test]
    async fn a_batch_says_when_its_oldest_event_was_sent() {
        let (sink, mut stream) = EventSink::bounded(100, 1 << 20);
        let before = Instant::now();
        sink.send(message(1));
        let between = Instant::now();
        sink.send(message(1));
        let mut buf = Vec::new();
        let (n, first) = stream.recv_many_since(&mut buf, 8).await;
        assert_eq!((n, buf.len()), (2, 2));
        let first = first.unwrap();
        assert!(before <= first && first <= between, "{first:?}");
        // Taken, the backlog is empty again.
        assert!(sink.tx.is_closed() || stream.backlog.as_ref().unwrap().has_room());
        drop(sink);
        assert_eq!(stream.recv_many_since(&mut buf, 8).await, (0, None));
    }

    #[tokio::test]
    async fn bytes_count_and_a_gone_reader_frees_the_sink() {
        let (sink, mut stream) = EventSink::bounded(100, 1_000);
        sink.send(message(2_000));
        let waiting = tokio::spawn({
            let sink = sink.clone();
            async move { sink.room().await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished());
        assert!(matches!(stream.try_recv(), Ok(EventKind::Message { .. })));
        tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .unwrap()
            .unwrap();
        sink.send(message(2_000));
        drop(stream);
        tokio::time::timeout(Duration::from_secs(5), sink.room())
            .await
            .unwrap();
        // An unbounded sink always has room.
        let (sink, _stream) = EventSink::channel();
        for _ in 0..10_000 {
            sink.send(message(100));
        }
        sink.room().await;
    }
}
