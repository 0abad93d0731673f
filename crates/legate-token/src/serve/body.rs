//! A request body that tells its connection when it started and when it ended, so the
//! connection's task can close a connection whose body does not arrive in time.
//!
//! The deadline is enforced by the connection's task, not here, so it holds even when no
//! handler is reading the body. Only the *request* body is timed: a response, however long it
//! streams (SSE, an MCP `wait`), is never cut by it.

use super::conns::Conn;
use axum::body::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

/// `Incoming`, with its connection told when it ends.
#[derive(Debug)]
pub(crate) struct TimedBody {
    inner: Incoming,
    conn: Arc<Conn>,
    /// `Some` while the body is still being read.
    generation: Option<u64>,
}

impl TimedBody {
    /// Wraps `inner`; a body that is not already complete must be within `limit`.
    pub(crate) fn new(inner: Incoming, conn: Arc<Conn>, limit: Duration) -> Self {
        let generation = (!inner.is_end_stream()).then(|| conn.body_started(limit));
        Self {
            inner,
            conn,
            generation,
        }
    }

    fn end(&mut self) {
        if let Some(g) = self.generation.take() {
            self.conn.body_ended(g);
        }
    }
}

impl Body for TimedBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => self.end(),
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.end(),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl Drop for TimedBody {
    fn drop(&mut self) {
        // A body dropped unread is not waited for: hyper closes the connection after the
        // response instead of reading the rest.
        self.end();
    }
}
