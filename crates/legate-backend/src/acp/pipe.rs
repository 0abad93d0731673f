//! The agent's stdout pipe, widened: an ACP plan update is the whole plan on one line, tens of
//! KiB for a long plan (800 entries: about 64 KiB, all a default pipe holds), which the agent
//! otherwise writes in pieces, each waiting for Legate to read the last.
//!
//! This module owns the pipe's size and the process-wide budgets for it. A pipe is widened to
//! [`WIDE`] while the wide pipes of this process's agents stay within [`WIDE_BUDGET`], else to
//! [`NARROW`] while the narrower ones stay within [`NARROW_BUDGET`], and beyond both it keeps
//! the kernel's size: an unprivileged user whose pipes pass the kernel's
//! `pipe-user-pages-soft` (64 MiB by default) gets every new pipe it makes cut to two pages,
//! its own shells' and git's included, so Legate's widening stays within 48 MiB of it.
//!
//! It never fails an agent's start: a size the kernel refuses (`pipe-max-size`, the user's
//! pipe pages) leaves the pipe as it was. What a budget holds is given back when Legate's
//! read end is dropped; an agent that passed its write end on to a process that outlives it
//! keeps the pipe's pages a while longer, no more than a process of the same user could make
//! for itself.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, ReadBuf};
use tokio::process::ChildStdout;

/// The size of an agent's stdout pipe within the budget.
pub(crate) const WIDE: usize = 1024 * 1024;

/// The size beyond it: still a few long plan lines.
pub(crate) const NARROW: usize = 256 * 1024;

/// The most this process's wide pipes take together: 16 agents at once, a quarter of the
/// default `pipe-user-pages-soft`.
const WIDE_BUDGET: usize = 16 * 1024 * 1024;

/// The most its narrower ones take together: 128 agents more, half of it.
const NARROW_BUDGET: usize = 32 * 1024 * 1024;

/// The wide pipes of this process's agents.
static WIDE_PIPES: Budget = Budget::new(WIDE_BUDGET);

/// The narrower ones.
static NARROW_PIPES: Budget = Budget::new(NARROW_BUDGET);

/// Bytes of pipe handed out, up to a limit.
#[derive(Debug)]
struct Budget {
    in_use: AtomicUsize,
    limit: usize,
}

impl Budget {
    const fn new(limit: usize) -> Self {
        Self {
            in_use: AtomicUsize::new(0),
            limit,
        }
    }

    /// Takes `size` when it fits: `size`, or 0.
    fn take(&self, size: usize) -> usize {
        let fits = self
            .in_use
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(size).filter(|&n| n <= self.limit)
            })
            .is_ok();
        if fits { size } else { 0 }
    }

    /// Gives back what [`Budget::take`] took.
    fn give_back(&self, size: usize) {
        self.in_use.fetch_sub(size, Ordering::AcqRel);
    }
}

/// An agent's stdout, its pipe widened; what it took of a budget is given back when it is
/// dropped (the agent's connection ended).
#[derive(Debug)]
pub(crate) struct AgentStdout {
    inner: ChildStdout,
    /// The budget it holds part of, and how much.
    lease: Option<(&'static Budget, usize)>,
}

impl AgentStdout {
    /// Widens `inner`'s pipe to [`WIDE`] within its budget, else to [`NARROW`] within its
    /// own, else leaves it as the kernel made it.
    pub(crate) fn widen(inner: ChildStdout) -> Self {
        let lease = [(&WIDE_PIPES, WIDE), (&NARROW_PIPES, NARROW)]
            .into_iter()
            .find_map(|(budget, size)| {
                if budget.take(size) == 0 {
                    return None;
                }
                match rustix::pipe::fcntl_setpipe_size(&inner, size) {
                    Ok(_) => Some((budget, size)),
                    Err(e) => {
                        budget.give_back(size);
                        tracing::debug!(error = %e, size, "the agent's stdout pipe was not widened");
                        None
                    }
                }
            });
        Self { inner, lease }
    }
}

impl Drop for AgentStdout {
    fn drop(&mut self) {
        if let Some((budget, size)) = self.lease {
            budget.give_back(size);
        }
    }
}

impl AsyncRead for AgentStdout {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn the_budget_hands_out_wide_pipes_until_full_and_takes_them_back() {
        let budget = Budget::new(3 * WIDE);
        let leases: Vec<usize> = (0..4).map(|_| budget.take(WIDE)).collect();
        assert_eq!(leases, [WIDE, WIDE, WIDE, 0]);
        budget.give_back(WIDE);
        assert_eq!(budget.take(WIDE), WIDE);
        assert_eq!(budget.take(WIDE), 0);
        assert_eq!(budget.take(NARROW), 0, "full to the byte is full");
    }

    #[tokio::test]
    async fn an_agents_stdout_pipe_is_widened_and_reads_as_before() {
        let mut child = tokio::process::Command::new("printf")
            .arg("plan\n")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let inner = child.stdout.take().unwrap();
        let before = rustix::pipe::fcntl_getpipe_size(&inner).unwrap();
        let mut stdout = AgentStdout::widen(inner);
        let after = rustix::pipe::fcntl_getpipe_size(&stdout.inner).unwrap();
        // Root may always widen; anyone else may be refused, which leaves the pipe as it was.
        if rustix::process::geteuid().is_root() {
            assert!(after >= NARROW, "{before} -> {after}");
        } else {
            assert!(after >= NARROW || after == before, "{before} -> {after}");
        }
        assert_eq!(
            after >= WIDE,
            stdout.lease.is_some_and(|(_, size)| size == WIDE),
            "{after}"
        );
        let mut read = String::new();
        stdout.read_to_string(&mut read).await.unwrap();
        assert_eq!(read, "plan\n");
        child.wait().await.unwrap();
    }
}
