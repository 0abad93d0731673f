//! Live fan-out of stored events to subscribers, with no gap and no duplicate.
//!
//! Events reach this module only after they are committed to the store. A subscriber first
//! listens live, then reads the store from its cursor, then takes live events whose number
//! is past what it has seen. If it falls behind the live channel it reads the store again, so a
//! slow subscriber costs itself, never the agent. Tasks run by another process are followed by
//! polling the store.

use legate_core::{Event, EventKind, Result, TaskId};
use legate_store::Store;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::sync::broadcast;

/// How often a subscriber looks at the store when nothing arrives live.
const POLL: Duration = Duration::from_millis(250);

/// The live side: one channel for every task of this engine.
#[derive(Debug, Clone)]
pub struct Fanout {
    tx: broadcast::Sender<Event>,
}

impl Fanout {
    /// A fan-out that buffers `capacity` events per subscriber before it lags.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity);
        Self { tx }
    }

    /// Announces stored events.
    pub fn publish(&self, events: &[Event]) {
        if self.tx.receiver_count() == 0 {
            return;
        }
        for e in events {
            let _ = self.tx.send(e.clone());
        }
    }

    /// Follows one task from `after` (exclusive).
    pub fn subscribe(&self, store: Store, task_id: TaskId, after: u64) -> Subscription {
        Subscription {
            rx: self.tx.subscribe(),
            store,
            task_id,
            cursor: after,
            backlog: VecDeque::new(),
            done: false,
        }
    }
}

/// One subscriber's view of one task's events.
#[derive(Debug)]
pub struct Subscription {
    rx: broadcast::Receiver<Event>,
    store: Store,
    task_id: TaskId,
    cursor: u64,
    backlog: VecDeque<Event>,
    done: bool,
}

impl Subscription {
    /// The next event, or `None` after the task's terminal status event.
    pub async fn next(&mut self) -> Result<Option<Event>> {
        loop {
            if let Some(e) = self.backlog.pop_front() {
                return Ok(Some(self.deliver(e)));
            }
            if self.done {
                return Ok(None);
            }
            // Catch up from the store first: it holds everything committed so far.
            let stored = self.store.events(&self.task_id, self.cursor, 1000)?;
            if !stored.is_empty() {
                self.backlog.extend(stored);
                continue;
            }
            match tokio::time::timeout(POLL, self.rx.recv()).await {
                Ok(Ok(e)) => {
                    if e.task_id == self.task_id && e.seq == self.cursor + 1 {
                        self.backlog.push_back(e);
                        // Take whatever else is already waiting without another store read.
                        while let Ok(more) = self.rx.try_recv() {
                            if more.task_id == self.task_id {
                                let expected = self.cursor + 1 + self.backlog.len() as u64;
                                if more.seq == expected {
                                    self.backlog.push_back(more);
                                } else if more.seq > expected {
                                    break; // a gap: the store read on the next loop fills it
                                }
                            }
                        }
                    }
                    // An event of another task, or one we already have: loop, and the store
                    // read (cheap when nothing is new) keeps the order exact.
                }
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => {}
                Ok(Err(broadcast::error::RecvError::Closed)) | Err(_) => {}
            }
        }
    }

    fn deliver(&mut self, e: Event) -> Event {
        self.cursor = e.seq;
        if let EventKind::Status { state, .. } = &e.kind
            && state.is_terminal()
        {
            self.done = true;
            self.backlog.clear();
        }
        e
    }

    /// The number of the last event delivered.
    pub fn cursor(&self) -> u64 {
        self.cursor
    }
}
