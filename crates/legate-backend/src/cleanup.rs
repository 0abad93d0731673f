//! An agent run's processes: stopping them, showing they are gone, and blocking a workspace
//! when that cannot be shown.
//!
//! Both drivers use this one mechanism, after every `agy` run and every ACP session shutdown.
//! A run's processes are ([`Processes`]):
//!
//! * its **process group** (the agent was spawned as a group leader), and
//! * every process carrying its **marker**, `LEGATE_RUN=<marker>` ([`RUN_ENV`], a fresh value
//!   per run, [`new_marker`]) in its environment. The agent inherits it and passes it on, so
//!   a descendant that left the group (`setsid`, a daemon's double fork) is still found, by
//!   reading `/proc/<pid>/environ` (readable for processes of the same user).
//!
//! Stopping ([`Processes::stop`]) sends `SIGINT` to all of them, waits up to a grace period
//! (3 s) for them to go, and sends `SIGKILL` to what is left; it returns the signals it
//! actually sent. Observing ([`Processes::verify`]) then checks, for up to 1 s, that nothing
//! of the run is left but zombies (none of them held by a tracer, below). The outcome is reported as a `workspace` event whose detail
//! is [`Cleanup::event`]'s `processCleanup`.
//!
//! When it cannot be shown gone, the workspace root is marked in **one place shared by every
//! agent**, `$LEGATE_HOME/blocked/<hash of the root>-<hash of the run>.json` (holding the
//! root, the group and the marker; agents cannot write there): one mark per run, so runs
//! sharing a root each keep their own. Every backend checks the root's marks ([`check`])
//! before it opens a session or runs a turn in that root, and the engine before it verifies,
//! tests or integrates a copy: all fail with `PROCESS_CLEANUP_UNVERIFIED` while any marking
//! run's processes are there; an observation that finds one run's processes gone lifts that
//! run's mark only.
//!
//! Limits: a descendant that cleared or replaced its environment on `exec` (or in memory), that
//! runs as another user, or that made itself not dumpable while Legate is not root, is not
//! found by its marker; only its group would show it. A process caught in the middle of
//! `exec` reads an empty environment for a moment; its environment is read again while that
//! may be so, and a process whose main thread has exited is found as long as another thread
//! of it runs ([`crate::marked`]). One such unseen process still shows: one that traces a
//! member of the group and keeps it, exited, from being reaped; that member counts as alive
//! while it is held, and a blocked workspace names the tracer (`held`).

use crate::acp::sys;
use crate::held;
use crate::marked::{self, Marked};
use legate_core::proc_stat::ProcStat;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

mod blocked;

pub use blocked::{block, check, check_path, record};

/// The environment variable that tags every process of one run: `LEGATE_RUN=<marker>`.
pub const RUN_ENV: &str = "LEGATE_RUN";

/// How often the run's processes are looked at while waiting for them to go.
const POLL: Duration = Duration::from_millis(25);

/// A marker no other run of any `legate` process has: this process's id, the time, a counter.
pub fn new_marker() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{}-{nanos:x}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// What one look at `/proc` found of a run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Found {
    /// Whether the group has a member that is not a zombie.
    in_group: bool,
    /// Live processes outside the group that carry the marker.
    outside: Vec<i32>,
    /// A member of the group that has exited and that a tracer keeps from being reaped, and
    /// the tracer's process id (`held`).
    held: Option<(i32, i32)>,
}

impl Found {
    /// Whether anything of the run is alive.
    fn any(&self) -> bool {
        self.in_group || !self.outside.is_empty()
    }
}

/// One run's processes: its group and its marker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Processes {
    pgid: i32,
    marker: Option<String>,
}

/// What stopping and observing a run found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleanup {
    /// Whether nothing of the run (group or marked process) was left but zombies.
    pub verified: bool,
    /// The run's process group.
    pub pgid: i32,
    /// Whether the run was stopped (cancel, timeout, shutdown) rather than ending on its own.
    pub stopped: bool,
    /// The signals actually sent, in order (`SIGINT`, `SIGKILL`); empty when nothing was
    /// left to signal.
    pub signals: Vec<&'static str>,
    /// How many processes outside the group were found by the run's marker.
    pub outside_group: usize,
}

impl Cleanup {
    /// The `workspace` event that records this cleanup: its detail is
    /// `{"processCleanup": {"verified", "pgid", "stopped", "signals", "outsideGroup"}}`; `what`
    /// names the process for the message (`agy`, `agent`).
    pub fn event(&self, what: &str) -> legate_core::EventKind {
        legate_core::EventKind::Notice {
            message: if self.verified {
                format!("{what} process cleanup verified: its processes are gone")
            } else {
                format!(
                    "{what} process cleanup NOT verified: process group {} or a process carrying its marker is still there",
                    self.pgid
                )
            },
            detail: serde_json::json!({
                "processCleanup": {
                    "verified": self.verified,
                    "pgid": self.pgid,
                    "stopped": self.stopped,
                    "signals": self.signals,
                    "outsideGroup": self.outside_group,
                }
            }),
        }
    }
}

impl Processes {
    /// The processes of the run led by `pgid`, tagged with `marker` (`None`: the group only).
    pub fn new(pgid: i32, marker: Option<String>) -> Self {
        Self { pgid, marker }
    }

    /// The process group id.
    pub fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The marker, when the run has one.
    pub fn marker(&self) -> Option<&str> {
        self.marker.as_deref()
    }

    /// One look at `/proc`; `None` when it cannot be read.
    fn scan(&self) -> Option<Found> {
        let entries = std::fs::read_dir("/proc").ok()?;
        let me = i32::try_from(std::process::id()).unwrap_or(0);
        let mut found = Found::default();
        let mut patience = marked::Patience::default();
        let mut seen_any = false;
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<i32>().ok()) else {
                continue;
            };
            seen_any = true;
            if pid == me {
                continue;
            }
            let Some(stat) = std::fs::read(entry.path().join("stat"))
                .ok()
                .and_then(|line| ProcStat::parse(&line))
            else {
                continue;
            };
            let in_group = self.pgid > 0 && stat.pgrp == self.pgid;
            // A member of the group that a tracer keeps from being reaped is alive while the
            // tracer holds it (`held`).
            if in_group
                && stat.state == b'Z'
                && let Some(tracer) = held::holder(pid)
            {
                found.in_group = true;
                found.held.get_or_insert((pid, tracer));
                continue;
            }
            // A headless process (its main thread gone) is alive while one of its threads runs.
            let alive = stat.runs() || (stat.is_headless() && marked::threads_run(pid));
            if !alive {
                continue;
            }
            if in_group {
                found.in_group = true;
                continue;
            }
            if let Some(marker) = &self.marker
                && marked::carries(pid, format!("{RUN_ENV}={marker}").as_bytes(), &mut patience)
            {
                found.outside.push(pid);
            }
        }
        seen_any.then_some(found)
    }

    /// What is alive now. Where `/proc` cannot be read, the group counts when it exists
    /// (zombies included) and marked processes cannot be seen.
    fn look(&self) -> Found {
        self.scan().unwrap_or_else(|| Found {
            in_group: self.pgid > 0 && sys::group_exists(self.pgid),
            outside: Vec::new(),
            held: None,
        })
    }

    /// [`Processes::look`] on a blocking thread, so that reading `/proc` (a few thousand
    /// files) keeps off the async workers; on the caller's thread if that thread cannot run.
    async fn look_blocking(&self) -> Found {
        let this = self.clone();
        match tokio::task::spawn_blocking(move || this.look()).await {
            Ok(found) => found,
            Err(_) => self.look(),
        }
    }

    /// Whether anything of the run is alive (zombies count as gone: they hold no pipe and run
    /// nothing; some inits reap orphans only every second or two. Except a member of the
    /// group that a tracer holds: that tracer is alive and of the run).
    pub fn alive(&self) -> bool {
        self.look().any()
    }

    /// Sends `signal` to the group and to every live marked process outside it. Returns
    /// whether anything received it.
    fn signal(&self, found: &Found, signal: i32) -> bool {
        let mut any = false;
        if found.in_group || (self.pgid > 0 && sys::group_exists(self.pgid)) {
            any |= sys::signal_group(self.pgid, signal);
        }
        if let Some(marker) = &self.marker
            && let Some(signal) = rustix::process::Signal::from_named_raw(signal)
        {
            let entry = format!("{RUN_ENV}={marker}");
            let mut patience = marked::Patience::default();
            for pid in &found.outside {
                // Read again through a handle opened first: the process found may be gone
                // and its number another's (`marked`).
                any |= marked::signal_marked(*pid, entry.as_bytes(), signal, &mut patience)
                    == Marked::Signalled;
            }
        }
        any
    }

    /// Stops the run: `SIGINT` to everything alive, then, after up to `grace` for it all to
    /// go, `SIGKILL` to what is left. Returns the signals it sent and how many processes
    /// outside the group it found. Nothing alive: nothing sent.
    pub async fn stop(&self, grace: Duration) -> (Vec<&'static str>, usize) {
        let found = self.look_blocking().await;
        let mut outside = found.outside.len();
        let mut sent = Vec::new();
        if !found.any() {
            return (sent, outside);
        }
        // Nothing may have received it although something was alive (a marked process that
        // exited between the look and the signal): the looks below settle it.
        if self.signal(&found, sys::SIGINT) {
            sent.push("SIGINT");
        }
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            let now = self.look_blocking().await;
            outside = outside.max(now.outside.len());
            if !now.any() {
                return (sent, outside);
            }
            if tokio::time::Instant::now() >= deadline {
                // Look again: under load a look can outlast the grace, and one begun before
                // the SIGINT took effect would have a zombie (still a group member) "killed".
                let now = self.look_blocking().await;
                outside = outside.max(now.outside.len());
                if !now.any() {
                    return (sent, outside);
                }
                if self.signal(&now, sys::SIGKILL) {
                    sent.push("SIGKILL");
                    tracing::info!(
                        pgid = self.pgid,
                        outside = now.outside.len(),
                        "agent processes killed after the grace period"
                    );
                }
                return (sent, outside);
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// Sends `SIGKILL` to everything of the run that is alive, at once (for `Drop`). Returns
    /// whether anything received it.
    pub fn kill_now(&self) -> bool {
        let found = self.look();
        found.any() && self.signal(&found, sys::SIGKILL)
    }

    /// Whether the run is gone (nothing but zombies), observed for up to `within`.
    pub async fn verify(&self, within: Duration) -> bool {
        if self.pgid <= 0 && self.marker.is_none() {
            return false;
        }
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if !self.look_blocking().await.any() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Whether the process group `pgid` has a member that is not a zombie.
pub fn group_alive(pgid: i32) -> bool {
    pgid > 0 && Processes::new(pgid, None).alive()
}

/// Whether the process group `pgid` is gone (no member but zombies), observed for up to
/// `within`.
pub async fn verify_gone(pgid: i32, within: Duration) -> bool {
    pgid > 0 && Processes::new(pgid, None).verify(within).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::blocked::{mark_path, marks_of, root_prefix};
    use super::*;
    use legate_core::ErrorCode;
    use std::path::Path;

    #[tokio::test]
    async fn a_live_group_blocks_until_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new("/some/root");
        check(dir.path(), root).unwrap();
        let (child, pgid) = sleeper();
        assert!(!verify_gone(pgid, Duration::from_millis(100)).await);
        block(dir.path(), root, &Processes::new(pgid, None)).unwrap();
        let e = check(dir.path(), root).unwrap_err();
        assert_eq!(e.code, ErrorCode::ProcessCleanupUnverified);
        check(dir.path(), Path::new("/other")).unwrap();
        end(child, pgid).await;
        check(dir.path(), root).unwrap();
        assert!(marks_of(dir.path(), root).is_empty());
    }

    fn sleeper() -> (tokio::process::Child, i32) {
        let child = tokio::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pgid = i32::try_from(child.id().unwrap()).unwrap();
        (child, pgid)
    }

    /// Kills `child` (leading group `pgid`) and waits until the group is gone.
    async fn end(mut child: tokio::process::Child, pgid: i32) {
        child.kill().await.unwrap();
        child.wait().await.unwrap();
        assert!(verify_gone(pgid, Duration::from_secs(2)).await);
    }

    #[tokio::test]
    async fn the_scan_off_the_async_worker_finds_what_a_direct_scan_finds() {
        let (child, pgid) = sleeper();
        let run = Processes::new(pgid, None);
        assert_eq!(run.look_blocking().await, run.look());
        assert!(run.look_blocking().await.in_group);
        assert!(!run.verify(Duration::from_millis(60)).await);
        end(child, pgid).await;
        assert!(run.verify(Duration::from_secs(2)).await);
        assert!(!run.look_blocking().await.any());
    }

    #[tokio::test]
    async fn two_runs_in_one_root_each_keep_their_own_mark() {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new("/shared/root");
        let (first, first_pgid) = sleeper();
        let (second, second_pgid) = sleeper();
        let first_run = Processes::new(first_pgid, Some(new_marker()));
        let second_run = Processes::new(second_pgid, Some(new_marker()));
        block(dir.path(), root, &first_run).unwrap();
        block(dir.path(), root, &second_run).unwrap();
        assert_eq!(
            marks_of(dir.path(), root).len(),
            2,
            "the second keeps the first"
        );
        // The second run's processes die: its mark goes, the first's stays and blocks.
        end(second, second_pgid).await;
        let e = check(dir.path(), root).unwrap_err();
        assert_eq!(e.code, ErrorCode::ProcessCleanupUnverified);
        assert!(e.message.contains(&first_pgid.to_string()), "{}", e.message);
        assert_eq!(
            marks_of(dir.path(), root),
            [mark_path(dir.path(), root, &first_run)]
        );
        end(first, first_pgid).await;
        check(dir.path(), root).unwrap();
        assert!(marks_of(dir.path(), root).is_empty());
    }

    #[tokio::test]
    async fn a_mark_an_older_legate_wrote_is_still_checked() {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new("/old/root");
        let (child, pgid) = sleeper();
        let old = dir.path().join(format!("{}.json", root_prefix(root)));
        let body = serde_json::json!({ "root": root, "pgid": pgid, "marker": null });
        std::fs::write(&old, body.to_string()).unwrap();
        assert_eq!(
            check(dir.path(), root).unwrap_err().code,
            ErrorCode::ProcessCleanupUnverified
        );
        end(child, pgid).await;
        check(dir.path(), root).unwrap();
        assert!(!old.exists());
    }

    /// `program 30` in a group of its own, carrying a new run marker: not the run's group,
    /// found only by its marker. The run's processes, once its environment shows the marker
    /// (after its `exec`).
    async fn marked_sleeper(program: &std::path::Path) -> (tokio::process::Child, Processes) {
        let marker = new_marker();
        let child = tokio::process::Command::new(program)
            .arg("30")
            .env(RUN_ENV, &marker)
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let run = Processes::new(i32::MAX - 7, Some(marker));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !run.alive() {
            assert!(tokio::time::Instant::now() < deadline, "never seen");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        (child, run)
    }

    #[tokio::test]
    async fn a_marked_process_outside_the_group_is_found_and_stopped() {
        assert_ne!(new_marker(), new_marker());
        let (mut child, run) = marked_sleeper(std::path::Path::new("sleep")).await;
        let pid = i32::try_from(child.id().unwrap()).unwrap();
        let (signals, outside) = run.stop(Duration::from_secs(5)).await;
        assert_eq!(signals, ["SIGINT"], "sleep dies on SIGINT");
        assert_eq!(outside, 1);
        child.wait().await.unwrap();
        assert!(run.verify(Duration::from_secs(2)).await);
        assert!(!Processes::new(pid, None).alive());
        assert_eq!(run.stop(Duration::from_secs(1)).await, (Vec::new(), 0));
    }

    #[tokio::test]
    async fn a_process_whose_main_thread_exited_is_still_found_and_stopped() {
        // A zombie leader with a live thread: neither its group nor its marker may hide it.
        let marker = new_marker();
        let Some(child) = crate::marked::tests::headless(RUN_ENV, &marker) else {
            eprintln!("skipped: no python3");
            return;
        };
        let mut child = crate::marked::tests::Reaped(Some(child));
        let child = child.0.as_mut().unwrap();
        let pgid = i32::try_from(child.id()).unwrap();
        assert!(group_alive(pgid), "its group");
        let run = Processes::new(i32::MAX - 7, Some(marker));
        assert!(run.alive(), "its marker");
        // Python's SIGINT handler runs on the main thread, which is gone: SIGKILL ends it.
        let (signals, outside) = run.stop(Duration::from_millis(300)).await;
        assert_eq!(outside, 1);
        assert_eq!(signals, ["SIGINT", "SIGKILL"]);
        let status = child.wait().unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        assert!(run.verify(Duration::from_secs(2)).await);
        assert!(!group_alive(pgid));
    }

    #[test]
    fn a_process_whose_threads_are_all_zombies_is_gone_to_cleanup() {
        // Headless, and its one other thread a zombie its tracer (this process) has not
        // reaped: it runs nothing, and a `SIGKILL` could not change that. Counting it alive
        // would block its workspace for as long as this process lives.
        let Some((child, tid)) = crate::marked::tests::headless_with_zombie_threads() else {
            eprintln!("skipped: no python3");
            return;
        };
        let pgid = i32::try_from(child.id()).unwrap();
        assert!(!group_alive(pgid));
        crate::marked::tests::reap_zombie_threads(child, tid);
    }

    #[tokio::test]
    async fn a_marked_process_whose_name_is_not_utf8_is_found() {
        use std::os::unix::ffi::OsStrExt;
        // An agent names what it runs: `/proc/<pid>/stat`'s command name is then not UTF-8.
        let dir = tempfile::tempdir().unwrap();
        let name = dir
            .path()
            .join(std::ffi::OsStr::from_bytes(b"\xff\xfe(x) y"));
        std::os::unix::fs::symlink("/bin/sleep", &name).unwrap();
        let (mut child, run) = marked_sleeper(&name).await;
        assert!(!run.verify(Duration::from_millis(200)).await);
        child.kill().await.unwrap();
        assert!(run.verify(Duration::from_secs(5)).await);
    }
}
