//! The running and queued places: at most `max_running` turns run at once and at most
//! `max_queued` tasks wait to start. A task holds a [`QueuedSlot`] from just before it is
//! stored until it takes a [`RunningSlot`] (or ends first); each is given back by its guard's
//! `Drop`, so a turn that fails, is canceled or panics at any stage frees its place.
//!
//! This module owns the two counts. It never decides which task runs next (the context's turn
//! lock and the room in `admission` do that) and never releases a place by hand.

use crate::metrics::histogram::{Histogram, HistogramSnapshot};
use legate_core::{Error, ErrorCode, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How many tasks of this engine run a turn and how many wait to start, now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotCounts {
    /// Tasks holding one of the `max_running` places.
    pub running: usize,
    /// Tasks submitted (or replied to) that have not taken a running place yet.
    pub queued: usize,
}

/// The places themselves.
#[derive(Debug)]
pub(crate) struct Slots {
    max_running: usize,
    max_queued: usize,
    running: Arc<Semaphore>,
    queued: Arc<AtomicUsize>,
    /// How long tasks held a queued place before they took a running one.
    waits: Arc<Histogram>,
}

/// A queued place, given back on drop.
#[derive(Debug)]
pub(crate) struct QueuedSlot {
    queued: Arc<AtomicUsize>,
    since: Instant,
    waits: Arc<Histogram>,
}

impl QueuedSlot {
    /// Gives the place back because its task took a running place, counting how long it
    /// waited (a task that ends before it runs is not counted).
    pub(crate) fn started(self) {
        self.waits.observe(self.since.elapsed());
    }
}

impl Drop for QueuedSlot {
    fn drop(&mut self) {
        self.queued.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A running place, given back on drop.
#[derive(Debug)]
pub(crate) struct RunningSlot {
    _permit: OwnedSemaphorePermit,
}

impl Slots {
    /// `max_running` (at least one) running places and `max_queued` queued ones.
    pub(crate) fn new(max_running: usize, max_queued: usize) -> Self {
        let max_running = max_running.max(1);
        Self {
            max_running,
            max_queued,
            running: Arc::new(Semaphore::new(max_running)),
            queued: Arc::new(AtomicUsize::new(0)),
            waits: Arc::new(Histogram::new(&crate::metrics::WAIT_BOUNDS_SECS)),
        }
    }

    /// Takes a queued place, or `QUEUE_FULL`. Counted before the task is stored, so two
    /// submits cannot both take the last place.
    ///
    /// A task that will find a free running place does not wait, so it does not count against
    /// `max_queued`: the room is the free running places plus `max_queued` (with
    /// `max_queued = 0`, a task is taken exactly when it can start now). A task takes its
    /// running place before it gives its queued one back, so the two counts can only overlap
    /// for a moment, which makes this check stricter, never looser.
    pub(crate) fn queue(&self) -> Result<QueuedSlot> {
        let before = self.queued.fetch_add(1, Ordering::SeqCst);
        // From here the guard owns the increment: an early return gives it back.
        let slot = QueuedSlot {
            queued: self.queued.clone(),
            since: Instant::now(),
            waits: self.waits.clone(),
        };
        if before >= self.room() {
            return Err(Error::new(
                ErrorCode::QueueFull,
                format!(
                    "{} tasks are already waiting; try again when one has started",
                    self.max_queued
                ),
            ));
        }
        Ok(slot)
    }

    /// Waits for a running place. An error only when the places were closed (never while the
    /// engine lives).
    pub(crate) async fn run(&self) -> Result<RunningSlot> {
        let permit = self
            .running
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Error::internal("the engine is shutting down"))?;
        Ok(RunningSlot { _permit: permit })
    }

    /// Whether [`Slots::queue`] would give a place now (another submit may still take it
    /// first).
    pub(crate) fn has_room(&self) -> bool {
        self.queued.load(Ordering::SeqCst) < self.room()
    }

    /// How many more tasks [`Slots::queue`] would take now.
    pub(crate) fn free(&self) -> usize {
        self.room()
            .saturating_sub(self.queued.load(Ordering::SeqCst))
    }

    /// How many tasks may be between submitted and running: those that will start at once
    /// and those that may wait.
    fn room(&self) -> usize {
        self.running
            .available_permits()
            .saturating_add(self.max_queued)
    }

    /// How long the tasks that started waited for their running place.
    pub(crate) fn waits(&self) -> HistogramSnapshot {
        self.waits.snapshot()
    }

    /// The counts now.
    pub(crate) fn counts(&self) -> SlotCounts {
        SlotCounts {
            running: self
                .max_running
                .saturating_sub(self.running.available_permits()),
            queued: self.queued.load(Ordering::SeqCst),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_full_queue_refuses_and_gives_the_refused_place_back() {
        let slots = Slots::new(1, 2);
        // The one running place is taken.
        let starting = slots.queue().unwrap();
        let _running = slots.run().await.unwrap();
        drop(starting);
        let a = slots.queue().unwrap();
        let _b = slots.queue().unwrap();
        assert_eq!(slots.queue().unwrap_err().code, ErrorCode::QueueFull);
        assert_eq!(slots.counts().queued, 2);
        drop(a);
        assert_eq!(slots.counts().queued, 1);
        let _c = slots.queue().unwrap();
    }

    #[tokio::test]
    async fn a_free_running_place_takes_a_task_even_with_no_queue() {
        let slots = Slots::new(1, 0);
        // The running place is free: the task is taken, and starts.
        let first = slots.queue().unwrap();
        assert!(!slots.has_room());
        // A second one would have to wait, and no one may.
        assert_eq!(slots.queue().unwrap_err().code, ErrorCode::QueueFull);
        let running = slots.run().await.unwrap();
        drop(first);
        assert_eq!(slots.queue().unwrap_err().code, ErrorCode::QueueFull);
        // The place is given back: the next task is taken again.
        drop(running);
        assert!(slots.has_room());
        let _next = slots.queue().unwrap();
    }

    #[tokio::test]
    async fn the_queue_counts_only_tasks_that_must_wait() {
        let slots = Slots::new(2, 1);
        let a = slots.queue().unwrap();
        let b = slots.queue().unwrap();
        let c = slots.queue().unwrap();
        assert_eq!(slots.queue().unwrap_err().code, ErrorCode::QueueFull);
        let _ra = slots.run().await.unwrap();
        drop(a);
        let _rb = slots.run().await.unwrap();
        drop(b);
        // Two run, one waits: the one queued place is taken.
        assert_eq!(slots.queue().unwrap_err().code, ErrorCode::QueueFull);
        drop(c);
        let _d = slots.queue().unwrap();
    }

    #[tokio::test]
    async fn a_task_aborted_or_panicking_while_holding_its_places_gives_them_back() {
        let slots = Arc::new(Slots::new(1, 1));
        let queued = slots.queue().unwrap();
        let held = slots.clone();
        let (taken_tx, taken_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(async move {
            let _queued = queued;
            let _running = held.run().await.unwrap();
            let _ = taken_tx.send(());
            std::future::pending::<()>().await;
        });
        taken_rx.await.unwrap();
        assert_eq!(
            slots.counts(),
            SlotCounts {
                running: 1,
                queued: 1
            }
        );
        task.abort();
        assert!(task.await.unwrap_err().is_cancelled());
        assert_eq!(
            slots.counts(),
            SlotCounts {
                running: 0,
                queued: 0
            }
        );

        let queued = slots.queue().unwrap();
        let held = slots.clone();
        let task = tokio::spawn(async move {
            let _queued = queued;
            let _running = held.run().await.unwrap();
            panic!("a turn that panics");
        });
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(
            slots.counts(),
            SlotCounts {
                running: 0,
                queued: 0
            }
        );
    }
}
