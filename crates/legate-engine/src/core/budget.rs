//! The process's budget of file descriptors and processes, and admission against it.
//!
//! Every agent session costs Legate file descriptors (the agent's three pipes, and a few more
//! while it starts) and processes (the agent, and what it runs), counted against this
//! process's `RLIMIT_NOFILE` and its user's `RLIMIT_NPROC`. Before a task starts an agent, the
//! engine asks this module whether there is room: the descriptors open now (`/proc/self/fd`)
//! plus those promised to tasks that are still starting, plus what a new session needs, plus a
//! reserve for everything else Legate does (the store, the fronts' connections, copying),
//! must fit under the limit. When they do not, the engine stops idle sessions first, least
//! recently used first, and otherwise keeps the task waiting until something is freed.
//!
//! This module owns the measuring, the arithmetic and the promises ([`Reservation`]). It never
//! stops a session and never decides a task's state; it never fails a task either: a limit
//! it cannot read is no limit.

use legate_core::{Error, ErrorCode};
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;

/// Descriptors one agent session holds in Legate at its peak (while it starts: three pipes,
/// the pipe that reports a failed `exec`, the Landlock ruleset, the pidfd), rounded up. Measured
/// on revisor and the scripted agent (see docs/configuration.md, "Sessions within a budget").
pub(crate) const FDS_PER_SESSION: u64 = 8;
/// Extra descriptors a copy task needs while its copy is made (each copier thread has a source
/// and a destination open; at most 8 copiers).
pub(crate) const FDS_PER_COPY: u64 = 16;
/// Processes (threads count too) one agent session may add: the agent with its threads, and
/// a command it runs.
pub(crate) const PROCS_PER_SESSION: u64 = 8;
/// How often a waiting task measures again when nothing told it that something was freed
/// (descriptors also close elsewhere: a front's connection, another task's copy).
pub(crate) const POLL: Duration = Duration::from_millis(250);
/// How many times a start that failed for want of descriptors or processes is tried again.
pub(crate) const START_RETRIES: u32 = 3;

/// What a task is short of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shortage {
    /// `file descriptors` or `processes`.
    pub what: &'static str,
    /// In use now, with what is promised to starting tasks.
    pub used: u64,
    /// The soft limit.
    pub limit: u64,
    /// What the task needs.
    pub needed: u64,
    /// What is kept free for everything else.
    pub reserve: u64,
}

impl fmt::Display for Shortage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "waiting for {what}: {used} of {limit} in use, a new agent needs {needed} and {reserve} stay in reserve",
            what = self.what,
            used = self.used,
            limit = self.limit,
            needed = self.needed,
            reserve = self.reserve,
        )
    }
}

/// What a starting task needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Need {
    pub fds: u64,
    pub procs: u64,
}

impl Need {
    /// A task that opens a new session (and makes a copy, for a copy task), or continues one.
    pub(crate) fn for_task(new_session: bool, copy: bool) -> Need {
        let mut need = Need::default();
        if new_session {
            need.fds += FDS_PER_SESSION;
            need.procs += PROCS_PER_SESSION;
        }
        if copy {
            need.fds += FDS_PER_COPY;
        }
        need
    }
}

/// One reading of the limits and of what is in use. `None`: no limit (or none readable).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Reading {
    /// Open descriptors and the soft `RLIMIT_NOFILE`.
    pub fds: Option<(u64, u64)>,
    /// Threads of this user and the soft `RLIMIT_NPROC`.
    pub procs: Option<(u64, u64)>,
}

impl Reading {
    /// Reads the limits and the use now.
    pub(crate) fn now() -> Reading {
        use rustix::process::{Resource, getrlimit, getuid};
        let fds = getrlimit(Resource::Nofile)
            .current
            .map(|limit| (open_fds().unwrap_or(limit), limit));
        // The kernel does not hold root to RLIMIT_NPROC; counting every root process on the
        // machine would only hold tasks back for nothing.
        let procs = if getuid().is_root() {
            None
        } else {
            getrlimit(Resource::Nproc)
                .current
                .and_then(|limit| user_threads(getuid().as_raw()).map(|n| (n, limit)))
        };
        Reading { fds, procs }
    }

    /// What is short when `promised` is already counted against the limits and `need`
    /// comes on top; `None` when it fits. With `use_reserve`, the reserve counts as room.
    pub(crate) fn shortage(
        &self,
        promised: Need,
        need: Need,
        use_reserve: bool,
    ) -> Option<Shortage> {
        let check = |what: &'static str,
                     reading: Option<(u64, u64)>,
                     promised: u64,
                     needed: u64,
                     reserve: fn(u64) -> u64| {
            let (open, limit) = reading?;
            let reserve = if use_reserve { 0 } else { reserve(limit) };
            let used = open.saturating_add(promised);
            (used.saturating_add(needed).saturating_add(reserve) > limit).then_some(Shortage {
                what,
                used,
                limit,
                needed,
                reserve,
            })
        };
        check(
            "file descriptors",
            self.fds,
            promised.fds,
            need.fds,
            fd_reserve,
        )
        .or_else(|| {
            check(
                "processes",
                self.procs,
                promised.procs,
                need.procs,
                proc_reserve,
            )
        })
    }
}

/// Descriptors kept free for all but agent sessions: an eighth of the limit, 16 to 64.
pub(crate) fn fd_reserve(limit: u64) -> u64 {
    (limit / 8).clamp(16, 64)
}

/// Processes kept free: a sixteenth of the limit, 16 to 64.
pub(crate) fn proc_reserve(limit: u64) -> u64 {
    (limit / 16).clamp(16, 64)
}

/// How many descriptors this process has open, from `/proc/self/fd` (less the one reading
/// it). `None` when it cannot be read: with no descriptor left to read it with, the caller
/// counts the limit as reached.
fn open_fds() -> Option<u64> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    Some((dir.count() as u64).saturating_sub(1))
}

/// How many threads (what `RLIMIT_NPROC` counts) processes of real user `uid` have.
fn user_threads(uid: u32) -> Option<u64> {
    let mut total = 0u64;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        if !name
            .to_str()
            .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
        {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        if status_uid(&status) == Some(uid) {
            total += status_field(&status, "Threads:").unwrap_or(1);
        }
    }
    Some(total)
}

/// The real uid on a `/proc/<pid>/status` `Uid:` line.
fn status_uid(status: &str) -> Option<u32> {
    status_field(status, "Uid:").and_then(|v| u32::try_from(v).ok())
}

/// The first number after `key` at the start of a line of `status`.
fn status_field(status: &str, key: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Whether `e` says the process ran out of descriptors or processes (`EMFILE`, `ENFILE`,
/// `EAGAIN` from `fork`): a start that may work once something is freed. Legate's errors
/// carry the system's message (`… (os error 24)`), not the `io::Error`, so the message is
/// what tells. A hostile agent can put these words in its own stderr; the worst it gets is a
/// bounded number of retries of its own start.
pub(crate) fn is_exhaustion(e: &Error) -> bool {
    matches!(
        e.code,
        ErrorCode::AgentStartFailed
            | ErrorCode::Internal
            | ErrorCode::InvalidWorkspace
            | ErrorCode::StoreError
    ) && ["(os error 24)", "(os error 23)", "(os error 11)"]
        .iter()
        .any(|m| e.message.contains(m))
}

/// The promises made to starting tasks, and the signal that something was freed.
#[derive(Debug, Default)]
pub(crate) struct Budget {
    promised: Mutex<Need>,
    freed: Notify,
}

impl Budget {
    /// Promises `need` when it fits now, with what is already promised; the shortage
    /// otherwise. Measuring and promising are one step, so two starting tasks cannot both
    /// take the last room. `alone` says that the engine holds no session and nothing else is
    /// starting: nothing Legate could free would make room, so the reserve may be used (else
    /// a limit too low for the reserve would hold tasks forever).
    pub(crate) fn try_reserve(
        self: &std::sync::Arc<Self>,
        need: Need,
        alone: bool,
    ) -> Result<Reservation, Shortage> {
        let mut promised = self.lock();
        let reading = Reading::now();
        let nothing_promised = *promised == Need::default();
        if let Some(short) = reading.shortage(*promised, need, false)
            && !(alone && nothing_promised && reading.shortage(*promised, need, true).is_none())
        {
            return Err(short);
        }
        promised.fds += need.fds;
        promised.procs += need.procs;
        Ok(Reservation {
            budget: self.clone(),
            need,
        })
    }

    /// Something was freed (a session stopped, a task ended): waiting tasks measure again.
    pub(crate) fn freed(&self) {
        self.freed.notify_waiters();
    }

    /// Waits until something is freed, or [`POLL`] at most.
    pub(crate) async fn changed(&self) {
        let _ = tokio::time::timeout(POLL, self.freed.notified()).await;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Need> {
        // Two counters; a panic elsewhere leaves them consistent.
        self.promised.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Room promised to a starting task, given back when dropped (once its session is open, its
/// descriptors are counted in `/proc/self/fd` instead).
#[derive(Debug)]
pub(crate) struct Reservation {
    budget: std::sync::Arc<Budget>,
    need: Need,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut promised = self.budget.lock();
        promised.fds = promised.fds.saturating_sub(self.need.fds);
        promised.procs = promised.procs.saturating_sub(self.need.procs);
        drop(promised);
        self.budget.freed();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn room_is_what_is_left_after_use_promises_and_the_reserve() {
        let r = Reading {
            fds: Some((100, 256)),
            procs: None,
        };
        let need = Need::for_task(true, false);
        assert_eq!(r.shortage(Need::default(), need, false), None);
        // 100 open + 120 promised + 8 needed + 32 reserve = 260 > 256.
        let promised = Need { fds: 120, procs: 0 };
        let short = r.shortage(promised, need, false).unwrap();
        assert_eq!(
            (
                short.what,
                short.used,
                short.limit,
                short.needed,
                short.reserve
            ),
            ("file descriptors", 220, 256, 8, 32)
        );
        assert!(
            short
                .to_string()
                .starts_with("waiting for file descriptors")
        );
        // A continued session needs nothing new.
        assert_eq!(
            r.shortage(promised, Need::for_task(false, false), false),
            None
        );
        // The reserve, when nothing else could make room: 228 of 256 fits.
        assert_eq!(r.shortage(promised, need, true), None);
        let procs = Reading {
            fds: None,
            procs: Some((60, 64)),
        };
        assert_eq!(
            procs.shortage(Need::default(), need, false).unwrap().what,
            "processes"
        );
        let unlimited = Reading {
            fds: None,
            procs: None,
        };
        assert_eq!(unlimited.shortage(promised, need, false), None);
    }

    #[test]
    fn exhaustion_is_told_by_the_systems_message_and_the_code() {
        let emfile = Error::new(
            ErrorCode::AgentStartFailed,
            "could not start agent `a`: Too many open files (os error 24)",
        );
        assert!(is_exhaustion(&emfile));
        let eagain = Error::internal("fork: Resource temporarily unavailable (os error 11)");
        assert!(is_exhaustion(&eagain));
        assert!(!is_exhaustion(&Error::new(
            ErrorCode::AgentStartFailed,
            "No such file or directory (os error 2)"
        )));
        // Said by the agent mid-turn, it is the agent's failure, not Legate's budget.
        assert!(!is_exhaustion(&Error::new(
            ErrorCode::AgentExited,
            "Too many open files (os error 24)"
        )));
    }

    #[test]
    fn status_lines_are_read_by_their_key() {
        let status = "Name:\tx\nUid:\t1000\t1000\t1000\t1000\nThreads:\t7\n";
        assert_eq!(status_uid(status), Some(1000));
        assert_eq!(status_field(status, "Threads:"), Some(7));
        assert_eq!(status_field("Uid:\n", "Uid:"), None);
    }

    #[test]
    fn this_process_reads_its_own_descriptors() {
        let r = Reading::now();
        if let Some((open, limit)) = r.fds {
            assert!(open >= 3 && open <= limit, "{open} of {limit}");
        }
    }

    proptest! {
        #[test]
        fn a_fitting_need_never_exceeds_the_limit(
            open in 0u64..5000, limit in 1u64..5000, promised in 0u64..500, need in 0u64..64,
        ) {
            let r = Reading { fds: Some((open, limit)), procs: None };
            let fits = r.shortage(Need { fds: promised, procs: 0 }, Need { fds: need, procs: 0 }, false).is_none();
            prop_assert_eq!(fits, open + promised + need + fd_reserve(limit) <= limit);
        }

        #[test]
        fn status_parsing_never_panics(s in ".{0,200}") {
            let _ = status_uid(&s);
            let _ = status_field(&s, "Threads:");
        }
    }
}
