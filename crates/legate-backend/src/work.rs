//! The work a turn does in its workspace beside the agent: writing a file the agent asked the
//! client to write, applying a remote's patch, unpacking what came back from a pod, stopping an
//! agy process.
//!
//! A turn given up on (its timeout, a cancel, an output ceiling) is dropped, but a blocking
//! thread it started cannot be: it runs on, and so does a task spawned apart from it. Were the
//! engine to read the workspace or end the task meanwhile, the turn's patch would be read from
//! a half-written copy, and a review, an integration, a discard or the next turn could start
//! while that work still writes. So each turn carries a [`WorkspaceWork`]: a backend runs such
//! work through it, and the engine waits for it to end ([`WorkspaceWork::finished`]) before it
//! reads the workspace or lets the turn go. The wait is as long as the work: one file's write,
//! an apply's git commands (each under git's time limit, or reading an input already bounded),
//! an agy process's stop once the session is shut down (its kill grace, then bounded waits to
//! reap it, drain its output and check for leftover processes: about 12 s at most by default).
//!
//! It never decides what may be written: the callers have checked that already.

use legate_core::{Error, ErrorCode, Result};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::task::{JoinError, JoinHandle};
use tokio_util::task::TaskTracker;

/// The work of one turn in its workspace; clones share it.
#[derive(Debug, Clone)]
pub struct WorkspaceWork {
    /// Closed from the start: work may still be started on a closed tracker, and waiting on
    /// one ends once it is empty, whoever waits and however often.
    tracker: TaskTracker,
    /// How many pieces of work were started, ever.
    started: Arc<AtomicUsize>,
}

impl Default for WorkspaceWork {
    fn default() -> Self {
        Self::new()
    }
}

impl WorkspaceWork {
    /// A turn's work, none started yet.
    pub fn new() -> Self {
        let tracker = TaskTracker::new();
        tracker.close();
        Self {
            tracker,
            started: Arc::default(),
        }
    }

    /// Starts `f` on the blocking pool as this turn's work, now (not when the handle is first
    /// polled). If no one waits for the handle, `f` still runs to its end, and
    /// [`Self::finished`] waits for it.
    pub fn spawn_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.tracker.spawn_blocking(f)
    }

    /// Spawns `work` as this turn's work, now; as [`Self::spawn_blocking`], it runs to its end
    /// whoever waits for it, and [`Self::finished`] waits for it.
    pub fn spawn<F>(&self, work: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.tracker.spawn(work)
    }

    /// Runs `f` as this turn's work ([`Self::spawn_blocking`]) and answers what it returned;
    /// `INTERNAL` naming `what` when it panicked.
    pub async fn run_blocking<T: Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T> {
        joined(what, self.spawn_blocking(f).await)
    }

    /// How many pieces of work are still running.
    pub fn running(&self) -> usize {
        self.tracker.len()
    }

    /// How many pieces of work this turn started, ended or not.
    pub fn started(&self) -> usize {
        self.started.load(Ordering::Relaxed)
    }

    /// Waits until every piece of work started so far has ended (any number of callers, any
    /// number of times).
    pub async fn finished(&self) {
        self.tracker.wait().await;
    }
}

/// What a joined piece of work answered; `INTERNAL` naming `what` when it panicked.
pub(crate) fn joined<T>(what: &str, joined: std::result::Result<T, JoinError>) -> Result<T> {
    joined.map_err(|e| Error::quoting(ErrorCode::Internal, format!("{what} stopped"), e))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::mpsc;
    use std::time::Duration;

    /// Work whose caller was dropped (a turn given up on) is still waited for, by any number
    /// of waiters at once.
    #[tokio::test]
    async fn work_a_dropped_caller_started_is_waited_for() {
        let work = WorkspaceWork::new();
        // Nothing started: no wait (a tracker left open would wait here for good).
        tokio::time::timeout(Duration::from_secs(10), work.finished())
            .await
            .unwrap();
        let (go, wait) = mpsc::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let running = work.run_blocking("the test's work", move || {
            wait.recv().unwrap();
            // Late, so that a wait that did not wait would see it unset.
            std::thread::sleep(Duration::from_millis(50));
            flag.store(true, Ordering::SeqCst);
        });
        // Started, then given up on.
        let started = tokio::time::timeout(Duration::from_millis(1), running).await;
        assert!(started.is_err());
        assert_eq!((work.running(), work.started()), (1, 1));
        let waiters: Vec<_> = (0..2)
            .map(|_| {
                let work = work.clone();
                tokio::spawn(async move { work.finished().await })
            })
            .collect();
        go.send(()).unwrap();
        for w in waiters {
            w.await.unwrap();
            assert!(done.load(Ordering::SeqCst));
        }
        assert_eq!(work.running(), 0);
        // Later work is waited for too.
        let (go, wait) = mpsc::channel::<()>();
        drop(work.spawn(async move {
            tokio::task::spawn_blocking(move || wait.recv().unwrap())
                .await
                .unwrap();
        }));
        assert_eq!((work.running(), work.started()), (1, 2));
        go.send(()).unwrap();
        work.finished().await;
        assert_eq!(work.running(), 0);
    }
}
