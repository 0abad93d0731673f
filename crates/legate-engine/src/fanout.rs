//! Live fan-out of stored events to subscribers, with no gap and no duplicate.
//!
//! Events reach this module only after they are committed to the store. A subscriber first
//! listens live, then reads the store from its cursor, then takes live events whose numbers
//! follow on from the last it delivered, without touching the store. A gap, a lag (it fell
//! behind the live channel) or a quiet spell sends it back to the store, so a slow subscriber
//! costs itself, never the agent. Tasks run by another process are followed by polling the
//! store.

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
            catch_up: true,
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
    /// Whether the store may hold events the live channel did not bring (at the start, after
    /// a gap or a lag, and after a quiet spell that may mean another process is writing).
    catch_up: bool,
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
            if self.catch_up {
                let stored = self.store.events(&self.task_id, self.cursor, 1000)?;
                if !stored.is_empty() {
                    self.backlog.extend(stored);
                    continue;
                }
                self.catch_up = false;
            }
            match tokio::time::timeout(POLL, self.rx.recv()).await {
                Ok(Ok(e)) => self.take_live(e),
                Ok(Err(broadcast::error::RecvError::Lagged(_))) => self.catch_up = true,
                Ok(Err(broadcast::error::RecvError::Closed)) => {
                    // No live side (another process runs the task): poll the store.
                    tokio::time::sleep(POLL).await;
                    self.catch_up = true;
                }
                Err(_quiet) => self.catch_up = true,
            }
        }
    }

    /// Takes a live event and whatever else is already waiting, as long as the numbers follow
    /// on from the cursor; a gap sends the subscriber back to the store.
    fn take_live(&mut self, first: Event) {
        let mut next = Some(first);
        while let Some(e) = next.take() {
            if e.task_id == self.task_id {
                let expected = self.cursor + 1 + self.backlog.len() as u64;
                if e.seq == expected {
                    self.backlog.push_back(e);
                } else if e.seq > expected {
                    self.catch_up = true;
                    return;
                }
            }
            next = match self.rx.try_recv() {
                Ok(e) => Some(e),
                Err(broadcast::error::TryRecvError::Lagged(_)) => {
                    self.catch_up = true;
                    None
                }
                Err(_) => None,
            };
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
