//! Waiting for a test command's leader to end, within bounds, whatever it asked of Legate.
//!
//! Outside a PID namespace of Legate's, the leader is this process's child, and the thread
//! that spawned it (the one that waits here) is its tracer if it, or one of its threads,
//! calls `ptrace(PTRACE_TRACEME)`:
//! - a traced thread that exits is this process's to reap, and until it is, the leader's
//!   own exit is never reported: each look reaps such threads
//!   (`legate_confine::tracees::reap_exited_threads`);
//! - a traced leader's stop is reported to its tracer, and the standard library takes it for
//!   the leader's end (and never waits again): the stop ends the test (its group killed), and
//!   the leader's real end is reaped here;
//! - once the group is killed, the leader is waited for [`REAP`] at most: something that
//!   traces it from outside (a process Legate cannot find) could hold it for ever. It is
//!   then left unreaped (a zombie once that tracer lets it go), and a leader held so before
//!   its deadline counts as timed out.
//!
//! It owns these waits only, and must never wait for a process other than the leader or its
//! threads, nor without a bound once the group was killed.

use std::os::unix::process::ExitStatusExt;
use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How long the leader is waited for once its group was killed.
pub(crate) const REAP: Duration = Duration::from_secs(2);

/// How often the leader is looked at.
const LOOK: Duration = Duration::from_millis(5);

/// How often its threads are looked through for traced ones that exited (a leader whose
/// first thread exited while others run has them all read at each look).
const LOOK_THREADS: Duration = Duration::from_millis(100);

/// `reap_exited_threads` of `leader`, at most once per [`LOOK_THREADS`] since `last`.
fn reap_threads_now_and_then(leader: i32, last: &mut Option<Instant>) {
    if last.is_none_or(|at| at.elapsed() >= LOOK_THREADS) {
        legate_confine::tracees::reap_exited_threads(leader);
        *last = Some(Instant::now());
    }
}

/// How a test's leader ended.
#[derive(Debug)]
pub(crate) struct Ended {
    /// Its status; `None` when it was not reaped within [`REAP`] of its group's kill.
    pub(crate) status: Option<ExitStatus>,
    /// The deadline came first: its group was killed.
    pub(crate) timed_out: bool,
}

/// Waits for `child`, the leader of group `pgid`, to end, until `deadline`; then kills the
/// group and waits up to [`REAP`]. A stop under this process's trace ends it the same way,
/// not timed out. `Err` when the leader cannot be waited for (its group is killed, and
/// nothing more is waited for).
pub(crate) fn await_exit(
    child: &mut Child,
    pgid: i32,
    deadline: Instant,
) -> std::io::Result<Ended> {
    let mut looked = None;
    loop {
        reap_threads_now_and_then(pgid, &mut looked);
        match child.try_wait() {
            Ok(Some(status)) if status.stopped_signal().is_some() => {
                tracing::warn!(
                    pgid,
                    "a test's leader asked Legate to trace it and stopped: the test is ended"
                );
                crate::sys::kill_group(pgid);
                return Ok(Ended {
                    status: reap_stopped(pgid),
                    timed_out: false,
                });
            }
            Ok(Some(status)) => {
                return Ok(Ended {
                    status: Some(status),
                    timed_out: false,
                });
            }
            Ok(None) if Instant::now() >= deadline => {
                crate::sys::kill_group(pgid);
                return Ok(Ended {
                    status: killed(child, pgid),
                    timed_out: true,
                });
            }
            Ok(None) => std::thread::sleep(LOOK),
            Err(e) => {
                // It cannot be waited for (another reaped it): nothing more to wait on.
                crate::sys::kill_group(pgid);
                return Err(e);
            }
        }
    }
}

/// The status of `child`, the leader of group `pgid`, once the group was killed: within
/// [`REAP`], or `None` (logged) when something holds it. Such a leader is left unreaped: once
/// its tracer lets it go, it stays a zombie for as long as Legate runs.
pub(crate) fn killed(child: &mut Child, pgid: i32) -> Option<ExitStatus> {
    let until = Instant::now() + REAP;
    let mut looked = None;
    loop {
        reap_threads_now_and_then(pgid, &mut looked);
        match child.try_wait() {
            Ok(Some(status)) if status.stopped_signal().is_some() => return reap_stopped(pgid),
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < until => std::thread::sleep(LOOK),
            Ok(None) => {
                tracing::warn!(
                    pgid,
                    "a killed test's leader could not be reaped: something traces it"
                );
                return None;
            }
            Err(e) => {
                tracing::warn!(pgid, error = %e, "a killed test's leader could not be waited for");
                return None;
            }
        }
    }
}

/// The end of `pid`, a leader that stopped under this process's trace and whose group was
/// killed, reaped here (the standard library took the stop for its status), within
/// [`REAP`]. Its number stays its own until then: nothing else may reap it.
fn reap_stopped(pid: i32) -> Option<ExitStatus> {
    let until = Instant::now() + REAP;
    let id = rustix::process::Pid::from_raw(pid)?;
    let mut looked = None;
    loop {
        reap_threads_now_and_then(pid, &mut looked);
        match rustix::process::waitpid(Some(id), rustix::process::WaitOptions::NOHANG) {
            // Another stop, reported before the kill's: the kill ends it.
            Ok(Some((_, status))) if status.stopped() => {}
            Ok(Some((_, status))) => {
                return Some(ExitStatus::from_raw(status.as_raw()));
            }
            Ok(None) if Instant::now() < until => std::thread::sleep(LOOK),
            Ok(None) | Err(_) => {
                tracing::warn!(pid, "a stopped test's leader could not be reaped");
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::process::CommandExt;

    /// For `python3 -c SCRIPT mode`: with `leader`, it asks to be traced by its parent and
    /// stops itself; with `thread` or `exit`, one of its threads asks so and sleeps, and the
    /// leader sleeps (`thread`) or exits 3 (`exit`). Exits 77 where tracing is refused.
    const SCRIPT: &str = "import ctypes, os, signal, sys, threading, time\n\
                          libc = ctypes.CDLL(None)\n\
                          if sys.argv[1] == 'leader':\n\
                          \x20   if libc.ptrace(0, 0, None, None) != 0:\n\
                          \x20       os._exit(77)\n\
                          \x20   os.kill(os.getpid(), signal.SIGSTOP)\n\
                          \x20   os._exit(0)\n\
                          asked = threading.Event()\n\
                          def traced():\n\
                          \x20   if libc.ptrace(0, 0, None, None) != 0:\n\
                          \x20       os._exit(77)\n\
                          \x20   asked.set()\n\
                          \x20   time.sleep(600)\n\
                          threading.Thread(target=traced, daemon=True).start()\n\
                          asked.wait()\n\
                          print('asked', flush=True)\n\
                          if sys.argv[1] == 'exit':\n\
                          \x20   os._exit(3)\n\
                          time.sleep(600)\n";

    /// `SCRIPT` run with `mode`, in a group of its own, and its pid; `None` without python3.
    fn spawned(mode: &str) -> Option<(Child, i32)> {
        let child = std::process::Command::new("python3")
            .args(["-c", SCRIPT, mode])
            .stdout(std::process::Stdio::piped())
            .process_group(0)
            .spawn();
        let Ok(child) = child else {
            // As `legate_testkit::python_required` decides (not a dependency of this crate).
            let required = ["LEGATE_REQUIRE_PYTHON", "CI"]
                .iter()
                .any(|n| std::env::var(n).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false")));
            assert!(!required, "python3 is required here");
            eprintln!("skipped: no python3");
            return None;
        };
        let pid = i32::try_from(child.id()).unwrap();
        Some((child, pid))
    }

    /// How `SCRIPT` run with `mode` ended, given `secs` before its deadline, once it is gone
    /// from `/proc` (reaped); `None` when the test skips (no python3, or tracing refused: exit
    /// 77).
    fn ended(mode: &str, secs: u64) -> Option<Ended> {
        let (mut child, pid) = spawned(mode)?;
        if mode == "thread" {
            // The deadline counts from the thread's asking, so that the kill comes after it.
            let mut line = String::new();
            let out = child.stdout.take().unwrap();
            std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).unwrap();
            if line.is_empty() {
                // Exited before it asked: refused (77), which the wait below reads.
            } else {
                assert_eq!(line.trim(), "asked");
            }
        }
        let deadline = Instant::now() + Duration::from_secs(secs);
        let ended = await_exit(&mut child, pid, deadline).unwrap();
        if ended.status.and_then(|s| s.code()) == Some(77) {
            eprintln!("skipped: PTRACE_TRACEME refused here");
            return None;
        }
        assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists());
        Some(ended)
    }

    /// A leader with a traced thread that exits on its own is reaped, with its status, before
    /// the deadline. Before, the leader's exit never came: the test ran to its timeout, and
    /// the wait after the kill never returned.
    #[test]
    fn a_leader_with_a_traced_thread_that_exits_ends_the_test() {
        let Some(ended) = ended("exit", 60) else {
            return;
        };
        assert!(!ended.timed_out, "{ended:?}");
        assert_eq!(ended.status.and_then(|s| s.code()), Some(3), "{ended:?}");
    }

    /// The same leader that sleeps past the deadline: its group is killed, and it is reaped
    /// with the kill's status. Before, the wait after the kill never returned.
    #[test]
    fn a_leader_with_a_traced_thread_is_reaped_after_its_timeout() {
        let Some(ended) = ended("thread", 1) else {
            return;
        };
        assert!(ended.timed_out, "{ended:?}");
        assert_eq!(ended.status.and_then(|s| s.signal()), Some(libc::SIGKILL));
    }

    /// A leader that asked to be traced and stopped: the stop ends the test, the leader is
    /// killed, and its real end is reaped here. Before, the stop was taken for its end, and
    /// the leader stayed a zombie for as long as Legate ran.
    #[test]
    fn a_leader_that_stops_under_this_trace_is_killed_and_reaped() {
        let Some(ended) = ended("leader", 60) else {
            return;
        };
        assert!(!ended.timed_out, "{ended:?}");
        assert_eq!(ended.status.and_then(|s| s.signal()), Some(libc::SIGKILL));
    }
}
