//! The agent's requests Legate has not answered yet, bounded.
//!
//! Each request the agent sends (`fs/read_text_file`, `session/request_permission`, a method
//! the SDK refuses) waits in the SDK's queue, and then in a handler, until its answer is
//! written to the agent's stdin; the SDK's queue has no bound. An agent writing requests
//! faster than they are answered (a flood of reads it never reads the answers of) would have
//! Legate hold them all. So the transport counts the requests it passes on and the answers
//! it writes, and past [`MAX_ASKED`] unanswered it stops reading the agent's stdout: the
//! agent waits on its own pipe, as it does when a turn's reader is behind.
//!
//! It owns the count only; it never reads or writes a line.

use agent_client_protocol::RawJsonRpcId;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use tokio::sync::Notify;

/// Requests of the agent's unanswered at once before its stdout is no longer read.
pub(crate) const MAX_ASKED: usize = 64;

/// The agent's unanswered requests on one connection.
#[derive(Debug, Default)]
pub(crate) struct Asked {
    state: Mutex<State>,
    room: Notify,
}

#[derive(Debug, Default)]
struct State {
    /// Unanswered requests by id (an agent may reuse an id).
    ids: HashMap<RawJsonRpcId, usize>,
    count: usize,
    /// Nothing more can be written: nobody waits for room any more.
    closed: bool,
}

impl Asked {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The agent sent request `id`; it is passed on.
    pub(crate) fn asked(&self, id: RawJsonRpcId) {
        let mut s = self.lock();
        *s.ids.entry(id).or_default() += 1;
        s.count += 1;
    }

    /// An answer to `id` was written to the agent.
    pub(crate) fn answered(&self, id: &RawJsonRpcId) {
        let mut s = self.lock();
        let Some(n) = s.ids.get_mut(id) else {
            return;
        };
        *n -= 1;
        if *n == 0 {
            s.ids.remove(id);
        }
        s.count -= 1;
        drop(s);
        self.room.notify_waiters();
    }

    /// Writing to the agent failed: nothing will be answered, and nothing waits for it.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.room.notify_waiters();
    }

    /// Waits while [`MAX_ASKED`] requests are unanswered.
    pub(crate) async fn room(&self) {
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let s = self.lock();
                if s.closed || s.count < MAX_ASKED {
                    return;
                }
            }
            notified.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn past_the_bound_the_reader_waits_for_an_answer() {
        let asked = Asked::default();
        for i in 0..MAX_ASKED {
            asked.asked(RawJsonRpcId::Number(i as i64));
        }
        assert!(asked.room().now_or_never().is_none());
        // An answer to an id never asked changes nothing.
        asked.answered(&RawJsonRpcId::Number(-1));
        assert!(asked.room().now_or_never().is_none());
        asked.answered(&RawJsonRpcId::Number(3));
        assert!(asked.room().now_or_never().is_some());
        asked.asked(RawJsonRpcId::Number(3));
        assert!(asked.room().now_or_never().is_none());
        asked.close();
        assert!(asked.room().now_or_never().is_some());
    }
}
