//! A bound on the file contents Legate has read for the agent and not yet written to its
//! stdin.
//!
//! An `fs/read_text_file` answer can be 64 MiB ([`super::fs::MAX_READ_BYTES`]), and the
//! SDK queues answers without bound until they are written to the agent's stdin. An agent
//! that asks for a large (sparse) file again and again and never reads its stdin would have
//! Legate hold every answer: memory that is Legate's, not the agent's. So a read first
//! reserves room for the largest answer, then keeps what it read; every line written to the
//! agent's stdin gives its bytes back. Past [`MAX_UNWRITTEN`] a read waits for the agent to
//! read what it was sent.
//!
//! It owns the count only; it never reads or writes.

use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// Bytes of file contents read for the agent and not yet written to it, at most.
pub(crate) const MAX_UNWRITTEN: u64 = 2 * super::fs::MAX_READ_BYTES;

/// The bytes read for one session's agent and not yet written to it.
#[derive(Debug, Default)]
pub(crate) struct Unwritten {
    bytes: Mutex<u64>,
    room: Notify,
}

fn lock(m: &Mutex<u64>) -> MutexGuard<'_, u64> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Unwritten {
    /// Room for one read's answer, waiting while the unwritten bytes leave none.
    pub(crate) async fn reserve(self: &Arc<Self>) -> Reservation {
        let want = super::fs::MAX_READ_BYTES;
        loop {
            let notified = self.room.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut bytes = lock(&self.bytes);
                if *bytes + want <= MAX_UNWRITTEN {
                    *bytes += want;
                    return Reservation {
                        of: Arc::clone(self),
                        bytes: want,
                    };
                }
            }
            notified.await;
        }
    }

    /// An answer of `n` bytes was written to the agent's stdin (only answers give bytes
    /// back: Legate's own requests and notifications hold no read's content).
    pub(crate) fn written(&self, n: usize) {
        let mut bytes = lock(&self.bytes);
        *bytes = bytes.saturating_sub(n as u64);
        drop(bytes);
        self.room.notify_waiters();
    }

    fn release(&self, n: u64) {
        let mut bytes = lock(&self.bytes);
        *bytes = bytes.saturating_sub(n);
        drop(bytes);
        self.room.notify_waiters();
    }

    #[cfg(test)]
    fn bytes(&self) -> u64 {
        *lock(&self.bytes)
    }
}

/// Room held for one read; given back when dropped, unless [`Reservation::keep`] turned it
/// into the answer's own bytes.
#[derive(Debug)]
pub(crate) struct Reservation {
    of: Arc<Unwritten>,
    bytes: u64,
}

impl Reservation {
    /// The answer holds `n` bytes: they stay counted until written.
    pub(crate) fn keep(mut self, n: usize) {
        let n = n as u64;
        {
            let mut bytes = lock(&self.of.bytes);
            *bytes = bytes.saturating_sub(self.bytes) + n;
        }
        self.bytes = 0;
        self.of.room.notify_waiters();
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.bytes > 0 {
            self.of.release(self.bytes);
        }
    }
}

/// The bytes `text` takes as a JSON string's content: what the answer's line holds of it (a
/// NUL is six bytes there, `\u0000`).
pub(crate) fn escaped_len(text: &str) -> usize {
    text.bytes()
        .map(|b| match b {
            b'"' | b'\\' | b'\n' | b'\r' | b'\t' | 0x08 | 0x0c => 2,
            0..=0x1f => 6,
            _ => 1,
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn a_read_waits_while_answers_are_unwritten() {
        let u = Arc::new(Unwritten::default());
        let big = usize::try_from(super::super::fs::MAX_READ_BYTES).unwrap_or(usize::MAX);
        u.reserve().await.keep(big);
        u.reserve().await.keep(big);
        assert_eq!(u.bytes(), MAX_UNWRITTEN);
        // A third read waits: the agent has read none of the first two answers.
        let third = u.reserve();
        tokio::pin!(third);
        assert!(third.as_mut().now_or_never().is_none());
        // The agent reads one answer: the third goes on.
        u.written(big);
        let r = third.await;
        // A failed read gives its room back.
        drop(r);
        assert_eq!(u.bytes(), super::super::fs::MAX_READ_BYTES);
        u.reserve().await.keep(10);
        assert_eq!(u.bytes(), super::super::fs::MAX_READ_BYTES + 10);
        // What the line holds: a NUL is six bytes there.
        assert_eq!(escaped_len("a\0\n\"é"), 1 + 6 + 2 + 2 + 2);
        assert_eq!(
            escaped_len("a\0\n\"é"),
            serde_json::to_string("a\0\n\"é").unwrap().len() - 2
        );
    }
}
