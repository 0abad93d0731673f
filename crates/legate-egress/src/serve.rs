//! The accept loop: one task per accepted connection, at most `max_connections` at once
//! (beyond that, `503`), all of them dropped when the shutdown future resolves.
//!
//! This module never reads a request itself and never outlives its shutdown: every
//! connection task it starts is aborted when it returns.

use crate::lookups::Lookups;
use crate::respond;
use crate::{Gate, Limits, conn};
use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;

/// How long accepting pauses after running out of file descriptors or memory.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// Serves one namespace's listener until `shutdown` resolves or the listener fails; each
/// accepted connection is one proxied request. In-flight connections are dropped at the end.
pub async fn serve(
    listener: TcpListener,
    gate: Arc<dyn Gate>,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send,
) {
    let permits = Arc::new(Semaphore::new(limits.max_connections));
    let lookups = Lookups::new(limits.max_lookups);
    let mut tasks = JoinSet::new();
    let local = listener.local_addr().ok();
    tracing::info!(address = ?local, max_connections = limits.max_connections, "egress proxy serving");
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                        tracing::warn!(%peer, max_connections = limits.max_connections, "egress connection refused: too many connections");
                        let busy = respond::answer(503, "too many connections through the egress proxy", false);
                        let _ = stream.try_write(&busy);
                        continue;
                    };
                    let gate = Arc::clone(&gate);
                    let limits = limits.clone();
                    let lookups = lookups.clone();
                    tasks.spawn(async move {
                        conn::handle(stream, gate, limits, lookups).await;
                        drop(permit);
                    });
                }
                Err(error) if transient(&error) => {
                    tracing::warn!(%error, "egress accept failed; retrying");
                    if exhausted(&error) {
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                }
                Err(error) => {
                    tracing::error!(%error, "egress listener failed");
                    break;
                }
            },
        }
    }
    tasks.shutdown().await;
    tracing::info!(address = ?local, "egress proxy stopped");
}

/// An accept error that concerns one connection or a passing shortage, not the listener.
fn transient(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::TimedOut
    ) || exhausted(error)
}

/// Out of file descriptors, buffers or memory.
fn exhausted(error: &io::Error) -> bool {
    // EMFILE 24, ENFILE 23, ENOBUFS 105, ENOMEM 12 (Linux).
    matches!(error.raw_os_error(), Some(24 | 23 | 105 | 12))
        || error.kind() == io::ErrorKind::OutOfMemory
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn transient_errors() {
        assert!(transient(&io::Error::from_raw_os_error(24)));
        assert!(transient(&io::ErrorKind::ConnectionAborted.into()));
        assert!(!transient(&io::Error::from_raw_os_error(9)));
        assert!(!transient(&io::ErrorKind::InvalidInput.into()));
    }
}
