//! The work a turn does in its workspace on threads of its own: writing a file the agent asked
//! the client to write, applying a remote's patch, unpacking what came back from a pod.
//!
//! A turn given up on (its timeout, a cancel, an output ceiling) is dropped, but a blocking
//! thread it started cannot be: it runs on. Were the engine to read the workspace or end the
//! task meanwhile, the turn's patch would be read from a half-written copy, and a review, an
//! integration, a discard or the next turn could start while the thread still writes. So each
//! turn carries a [`WorkspaceWork`]: a backend runs such work through it, and the engine waits
//! for it to end ([`WorkspaceWork::finished`]) before it reads the workspace or lets the turn
//! go. The wait is bounded by the work itself (git's own time limit; one file's write).
//!
//! It never decides what may be written: the callers have checked that already.

use legate_core::{Error, Result};
use tokio::task::{JoinError, JoinHandle};
use tokio_util::task::TaskTracker;

/// The blocking work of one turn in its workspace; clones share it.
#[derive(Debug, Clone, Default)]
pub struct WorkspaceWork(TaskTracker);

impl WorkspaceWork {
    /// A turn's work, none started yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Starts `f` on the blocking pool as this turn's work, now (not when the handle is first
    /// polled). If no one waits for the handle, `f` still runs to its end, and
    /// [`Self::finished`] waits for it.
    pub fn spawn_blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> JoinHandle<T> {
        self.0.spawn_blocking(f)
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
        self.0.len()
    }

    /// Waits until every piece of work this turn started has ended. Work started after this
    /// returns is waited for by the next call.
    pub async fn finished(&self) {
        self.0.close();
        self.0.wait().await;
        self.0.reopen();
    }
}

/// What a joined piece of work answered; `INTERNAL` naming `what` when it panicked.
pub(crate) fn joined<T>(what: &str, joined: std::result::Result<T, JoinError>) -> Result<T> {
    joined.map_err(|e| Error::internal(format!("{what} stopped: {e}")))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, mpsc};

    /// Work whose caller was dropped (a turn given up on) is still waited for.
    #[tokio::test]
    async fn work_a_dropped_caller_started_is_waited_for() {
        let work = WorkspaceWork::new();
        let (go, wait) = mpsc::channel::<()>();
        let done = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let running = work.run_blocking("the test's work", move || {
            wait.recv().unwrap();
            flag.store(true, Ordering::SeqCst);
        });
        // Started, then given up on.
        let started = tokio::time::timeout(std::time::Duration::from_millis(1), running).await;
        assert!(started.is_err());
        assert_eq!(work.running(), 1);
        let finished = tokio::spawn({
            let work = work.clone();
            async move { work.finished().await }
        });
        tokio::task::yield_now().await;
        assert!(!finished.is_finished());
        go.send(()).unwrap();
        finished.await.unwrap();
        assert!(done.load(Ordering::SeqCst));
        assert_eq!(work.running(), 0);
        // Reusable: later work is waited for too.
        assert_eq!(work.run_blocking("more", || 7).await.unwrap(), 7);
        work.finished().await;
    }
}
