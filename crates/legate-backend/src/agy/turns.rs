//! What the egress gate of one `agy` run needs: the run's task, events and abort signal, and
//! the session's supervision and channel (see `crate::egress`).
//!
//! It only carries them; it never decides or waits.

use crate::EventSink;
use crate::approvals::{Abort, AbortHandle, ApprovalChannel};
use crate::egress::Turns;
use legate_core::{EventKind, TaskId};
use legate_supervisor::Supervision;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// At most this many connections of one run wait for a supervisor at once.
const MAX_PENDING_ASKS: usize = 8;

/// One run's turn, as its egress gate sees it.
#[derive(Debug)]
pub(crate) struct RunTurn {
    pub(crate) task_id: TaskId,
    pub(crate) sink: EventSink,
    pub(crate) abort: AbortHandle,
    pub(crate) supervision: Supervision,
    pub(crate) channel: Option<Arc<dyn ApprovalChannel>>,
    asks: Arc<AtomicUsize>,
}

impl RunTurn {
    pub(crate) fn new(
        task_id: TaskId,
        sink: EventSink,
        supervision: Supervision,
        channel: Option<Arc<dyn ApprovalChannel>>,
    ) -> Self {
        Self {
            task_id,
            sink,
            abort: Abort::pair().0,
            supervision,
            channel,
            asks: Arc::default(),
        }
    }
}

/// A place of a connection waiting for a supervisor, freed on drop.
struct Place(Arc<AtomicUsize>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Turns for RunTurn {
    fn turn(&self) -> Option<(TaskId, EventSink, Abort)> {
        Some((
            self.task_id.clone(),
            self.sink.clone(),
            self.abort.subscribe(),
        ))
    }

    fn supervision(&self) -> Supervision {
        self.supervision.clone()
    }

    fn channel(&self) -> Option<Arc<dyn ApprovalChannel>> {
        self.channel.clone()
    }

    fn ask_place(&self) -> Option<Box<dyn Send + Sync>> {
        let taken = self
            .asks
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < MAX_PENDING_ASKS).then_some(n + 1)
            })
            .is_ok();
        taken.then(|| Box::new(Place(self.asks.clone())) as Box<dyn Send + Sync>)
    }

    fn emit(&self, event: EventKind) -> bool {
        self.sink.send(event);
        true
    }
}

impl Drop for RunTurn {
    fn drop(&mut self) {
        // The run ended: nothing of it may still wait for a supervisor.
        self.abort.raise("the agy run ended");
    }
}
