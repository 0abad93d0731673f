//! What a dead runner left running: every process whose environment carries its
//! `LEGATE_RUNNER=<id>` (a command an agent started, outside a PID namespace, may outlive its
//! Legate), found through `/proc` and killed.
//!
//! One look at `/proc` is not enough against processes that keep starting others: a process
//! killed may have forked first, and one in the middle of `exec` reads an empty environment
//! until its new image is set up. So it looks again at once after a look that signalled a
//! process, and after a 2 ms pause while a look meets a process that may be in `exec` (alive,
//! not a kernel thread, started within the last second, its environment empty), for up to
//! [`KILL_PATIENCE`]; at most [`KILL_LOOKS`] looks in all. "Started" is when it was forked:
//! a leftover forked longer ago that is in `exec` at the very moment of the look is not waited
//! for. No later recovery looks for the same runner once its tasks are ended (only one with
//! tasks spared for re-attachment is visited again), so such a process is missed for good; a
//! confined agent's PID namespace leaves nothing to miss.
//!
//! It must never signal this process, a process whose environment it could not read (another
//! user's, a non-dumpable one), one that does not carry the marker exactly, or one that took
//! the number of a marked process after its environment was read: each signal goes through a
//! handle opened before the last read ([`legate_backend::marked`]).

use crate::core::runner::RUNNER_ENV;
use legate_backend::marked::{Marked, Patience, signal_marked};
use legate_core::proc_stat::ProcStat;
use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

/// The most looks [`kill_leftovers`] takes.
pub const KILL_LOOKS: usize = 50;

/// How long [`kill_leftovers`] keeps looking for processes to finish their `exec`.
pub const KILL_PATIENCE: Duration = Duration::from_millis(100);

/// The pause before a look that waits for a process to finish its `exec`.
const KILL_PAUSE: Duration = Duration::from_millis(2);

/// How recently a process must have started for an empty environment to mean it may be in
/// `exec`: one started long ago with an empty environment (`env -i`) costs no waiting.
const RECENT_START: Duration = Duration::from_secs(1);

/// Kills every process whose environment carries `LEGATE_RUNNER=<runner>` (see the module
/// doc for how it looks). Returns how many processes were signalled.
pub fn kill_leftovers(runner: &str) -> usize {
    let marker = format!("{RUNNER_ENV}={runner}");
    let me = rustix::process::getpid();
    let patient_until = Instant::now() + KILL_PATIENCE;
    let mut signalled = BTreeSet::new();
    for _ in 0..KILL_LOOKS {
        let Some(look) = look(marker.as_bytes(), me, &mut signalled) else {
            break;
        };
        if look.signalled > 0 || look.vanished > 0 {
            continue;
        }
        if look.in_exec == 0 || Instant::now() >= patient_until {
            break;
        }
        std::thread::sleep(KILL_PAUSE);
    }
    signalled.len()
}

/// What one look at `/proc` did.
struct Look {
    /// Processes signalled in this look, none of them signalled before.
    signalled: usize,
    /// Processes that may be in the middle of `exec` ([`may_be_in_exec`]).
    in_exec: usize,
    /// Marked processes that exited between their environment's read and the signal: their
    /// numbers may be another's now, so a look again finds what is left.
    vanished: usize,
}

/// One look: `SIGKILL` to every process carrying `marker` that was not signalled already,
/// each through a handle opened before its environment was read again
/// ([`legate_backend::marked`]). `None` when `/proc` cannot be read.
fn look(marker: &[u8], me: rustix::process::Pid, signalled: &mut BTreeSet<i32>) -> Option<Look> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let recent_since = boot_ticks().saturating_sub(ticks(RECENT_START));
    let mut patience = Patience::default();
    let mut look = Look {
        signalled: 0,
        in_exec: 0,
        vanished: 0,
    };
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
            .filter(|pid| rustix::process::Pid::from_raw(*pid).is_some_and(|p| p != me))
        else {
            continue;
        };
        match signal_marked(pid, marker, rustix::process::Signal::KILL, &mut patience) {
            Marked::Signalled => {
                if signalled.insert(pid) {
                    look.signalled += 1;
                }
            }
            Marked::Vanished => look.vanished += 1,
            Marked::Empty => {
                if may_be_in_exec(&entry.path(), recent_since) {
                    look.in_exec += 1;
                }
            }
            Marked::Unmarked | Marked::Unreadable => {}
        }
    }
    Some(look)
}

/// Whether the process at `/proc/<pid>`, whose environment read empty, may be between
/// `exec`'s start and its new image: alive (not a zombie), not a kernel thread, and started
/// at or after `since` (clock ticks since boot).
fn may_be_in_exec(dir: &Path, since: u64) -> bool {
    std::fs::read(dir.join("stat"))
        .ok()
        .and_then(|line| ProcStat::parse(&line))
        .is_some_and(|stat| {
            stat.is_alive() && !stat.is_kernel_thread() && stat.start_ticks >= since
        })
}

/// Clock ticks since boot, on the clock `/proc/<pid>/stat`'s start times count on
/// (`CLOCK_BOOTTIME`, in this process's time namespace as they are; not `/proc/uptime`, which
/// some containers replace with their own age).
fn boot_ticks() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Boottime);
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(now.tv_nsec).unwrap_or(0).min(999_999_999);
    ticks(Duration::new(seconds, nanos))
}

/// `d` in the clock ticks `/proc/<pid>/stat` counts in.
fn ticks(d: Duration) -> u64 {
    let per_second = rustix::param::clock_ticks_per_second();
    let ticks = d.as_millis().saturating_mul(u128::from(per_second)) / 1000;
    u64::try_from(ticks).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// The two tests below run one at a time: the first loads the machine with processes, and
    /// the second needs each `exec` to end within the patience.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

    /// Live processes carrying `marker` in their environment.
    fn marked(marker: &str) -> usize {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("environ")).ok())
            .filter(|env| env.split(|b| *b == 0).any(|kv| kv == marker.as_bytes()))
            .count()
    }

    /// Kills the test's process group if the test failed before it was gone.
    struct Group(rustix::process::Pid, bool);
    impl Drop for Group {
        fn drop(&mut self) {
            if self.1 {
                let _ = rustix::process::kill_process_group(self.0, rustix::process::Signal::KILL);
            }
        }
    }

    #[test]
    fn a_dead_runners_process_that_keeps_starting_others_leaves_none_behind() {
        use std::os::unix::process::CommandExt;
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let runner = uuid::Uuid::new_v4().simple().to_string();
        let marker = format!("{RUNNER_ENV}={runner}");
        // A leftover that starts processes as fast as it can (at most 2,000): one of them is
        // often in the middle of `exec`, where its environment reads empty.
        let mut shell = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 2000 ]; do sleep 100 & i=$((i+1)); done; wait",
            ])
            .env(RUNNER_ENV, &runner)
            .process_group(0)
            .spawn()
            .unwrap();
        let mut group = Group(
            rustix::process::Pid::from_raw(i32::try_from(shell.id()).unwrap()).unwrap(),
            true,
        );
        let began = Instant::now();
        while marked(&marker) < 30 {
            assert!(began.elapsed() < Duration::from_secs(30));
            std::thread::yield_now();
        }
        assert!(kill_leftovers(&runner) >= 30);
        assert!(!shell.wait().unwrap().success());
        // Signalled processes go when they next run, which on a busy machine may take a
        // while; one missed (in the middle of `exec`) would sleep on, carrying the marker.
        let began = Instant::now();
        while marked(&marker) > 0 {
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "a leftover survived"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // Nothing of the group is left: its id may be another group's soon.
        group.1 = false;
    }

    #[test]
    fn a_leftover_caught_in_the_middle_of_exec_is_killed_all_the_same() {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        // Right after `spawn` returns, the child is often still in `exec` and its environment
        // reads empty for a moment (a quarter of the time on a 2-core machine).
        let runner = uuid::Uuid::new_v4().simple().to_string();
        for _ in 0..40 {
            let mut child = std::process::Command::new("sleep")
                .arg("100")
                .env(RUNNER_ENV, &runner)
                .spawn()
                .unwrap();
            let killed = kill_leftovers(&runner);
            let _ = child.kill();
            let status = child.wait().unwrap();
            assert_eq!(killed, 1, "{status:?}");
        }
    }

    #[test]
    fn only_a_process_started_within_the_last_second_may_be_waited_for() {
        // The threshold a look uses: a process started just now is within it; the machine's
        // first process, started long before this test (the build alone takes minutes), and
        // this process's zombie child are not.
        let fresh = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        let mut fresh = fresh;
        let since = boot_ticks().saturating_sub(ticks(RECENT_START));
        let at = |pid: u32| std::path::PathBuf::from(format!("/proc/{pid}"));
        assert!(may_be_in_exec(&at(fresh.id()), since));
        assert!(!may_be_in_exec(Path::new("/proc/1"), since));
        fresh.kill().unwrap();
        // Killed, not yet reaped: a zombie is never in `exec`.
        assert!(until_zombie(fresh.id()));
        assert!(!may_be_in_exec(&at(fresh.id()), 0));
        fresh.wait().unwrap();
        // A kernel thread (kthreadd, pid 2 where the machine shows it) never is.
        let kthreadd = Path::new("/proc/2");
        if std::fs::read_to_string(kthreadd.join("comm")).is_ok_and(|c| c.trim() == "kthreadd") {
            assert!(!may_be_in_exec(kthreadd, 0));
        }
    }

    /// Waits (up to 10 s) until process `pid` is a zombie; true when it became one.
    fn until_zombie(pid: u32) -> bool {
        let began = Instant::now();
        while began.elapsed() < Duration::from_secs(10) {
            let stat = std::fs::read(format!("/proc/{pid}/stat")).unwrap_or_default();
            if ProcStat::parse(&stat).is_some_and(|s| !s.is_alive()) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    }
}
