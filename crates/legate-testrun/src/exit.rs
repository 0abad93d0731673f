//! Waiting for a test command's leader to end, within bounds, whatever it asked of Legate.
//!
//! Outside a PID namespace of Legate's, the leader is this process's child, and the thread
//! that spawned it (the one that waits here) is its tracer if it, or one of its threads,
//! calls `ptrace(PTRACE_TRACEME)` (anti-debugging code does):
//! - a traced thread that exits is this process's to reap, and until it is, the leader's
//!   own exit is never reported; a traced thread that stops (at a signal) would stay stopped
//!   for a tracer that never looks: each look through the leader's threads reaps the first
//!   and lets go of the second (`legate_confine::tracees::tend_traced_threads`);
//! - a traced leader's stops are reported to its tracer: each is let go (detached, with the
//!   signal that stopped it delivered; not the `SIGTRAP` an `exec` sends a tracee), so the
//!   command runs on as it would untraced. The leader is waited for by its pid here, not
//!   through the standard library, which takes a stop for the end and never waits again;
//! - the leader's exit is seen before it is reaped (`WNOWAIT`), and its group is killed
//!   then, while its zombie keeps its number (the group's) from being anyone else's; the
//!   leader itself is killed by its pid too, in case it moved to another group;
//! - once the group is killed, the leader is waited for [`REAP`] at most: something that
//!   traces it from outside (a process Legate cannot find) could hold it for ever. It is
//!   then left unreaped (a zombie once that tracer lets it go), and a leader held so before
//!   its deadline counts as timed out.
//!
//! It owns these waits only, and must never wait for a process other than the leader or its
//! threads, nor without a bound once the group was killed, nor signal the leader's number
//! once it was reaped. The `Child` of a leader waited for here must never be waited for
//! through the standard library: its number may be another process's by then.

use rustix::process::{Pid, WaitIdOptions, WaitOptions};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// How long the leader is waited for once its group was killed.
pub(crate) const REAP: Duration = Duration::from_secs(2);

/// How often the leader is looked at.
const LOOK: Duration = Duration::from_millis(5);

/// How often its threads are looked through for traced ones that exited or stopped (each
/// look reads every thread's status).
const LOOK_THREADS: Duration = Duration::from_millis(100);

/// `tend_traced_threads` of `leader`, at most once per [`LOOK_THREADS`] since `last`.
fn tend_threads_now_and_then(leader: i32, last: &mut Option<Instant>) {
    if last.is_none_or(|at| at.elapsed() >= LOOK_THREADS) {
        legate_confine::tracees::tend_traced_threads(leader);
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

/// What one look at the leader found.
enum Look {
    Running,
    /// Stopped under this thread's trace, by this signal.
    Stopped(i32),
    /// Exited or killed, and not reaped yet (its number is still its own).
    Exited,
}

/// One look at `pid` that never blocks and reaps nothing. Without `WSTOPPED` a stop is
/// reported only for a tracee (`CLD_TRAPPED`), and this thread spawned the leader: a stop
/// reported here is under its trace.
fn look(pid: Pid) -> std::io::Result<Look> {
    let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG | WaitIdOptions::NOWAIT;
    let Some(status) = rustix::process::waitid(rustix::process::WaitId::Pid(pid), options)? else {
        return Ok(Look::Running);
    };
    Ok(if status.exited() || status.killed() || status.dumped() {
        Look::Exited
    } else {
        match status.trapping_signal().or(status.stopping_signal()) {
            Some(signal) => Look::Stopped(signal),
            None => Look::Running,
        }
    })
}

/// Kills the leader `pid` and its group `pgid` (the same number), then reaps the leader:
/// called only while it is unreaped, so the number is still its own. Waits [`REAP`] at most
/// for the leader to end (`None`, logged, when something holds it).
fn end(pid: Pid, pgid: i32) -> Option<ExitStatus> {
    crate::sys::kill_group(pgid);
    crate::sys::kill_leader(pgid);
    let until = Instant::now() + REAP;
    let mut looked = None;
    loop {
        tend_threads_now_and_then(pgid, &mut looked);
        match rustix::process::waitpid(Some(pid), WaitOptions::NOHANG) {
            // A stop reported before the kill's: the kill ends it.
            Ok(Some((_, status))) if status.stopped() => {}
            Ok(Some((_, status))) => return Some(ExitStatus::from_raw(status.as_raw())),
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

/// Waits for the leader of group `pgid` (its pid too), a child this thread spawned, to end,
/// until `deadline`; then, or when it ends, kills its group and reaps it (`end`). A stop
/// under this thread's trace is let go (`let_go`); one that cannot be ends the test as the
/// deadline would, not timed out. `Err` when the leader cannot be waited for (its group is
/// killed, and nothing more is waited for).
pub(crate) fn await_exit(pgid: i32, deadline: Instant) -> std::io::Result<Ended> {
    let pid = Pid::from_raw(pgid).ok_or_else(|| std::io::Error::other("no leader to wait for"))?;
    let mut looked = None;
    loop {
        tend_threads_now_and_then(pgid, &mut looked);
        let seen = look(pid);
        if matches!(seen, Ok(Look::Running | Look::Stopped(_))) && Instant::now() >= deadline {
            return Ok(Ended {
                status: end(pid, pgid),
                timed_out: true,
            });
        }
        match seen {
            Ok(Look::Stopped(signal)) => {
                if !let_go(pgid, signal) {
                    return Ok(Ended {
                        status: end(pid, pgid),
                        timed_out: false,
                    });
                }
            }
            Ok(Look::Exited) => {
                return Ok(Ended {
                    status: end(pid, pgid),
                    timed_out: false,
                });
            }
            Ok(Look::Running) => std::thread::sleep(LOOK),
            Err(e) => {
                // It cannot be waited for (another reaped it): nothing more to wait on, and
                // its number is not signalled (it may be another process's).
                crate::sys::kill_group(pgid);
                return Err(e);
            }
        }
    }
}

/// Lets go of the leader `pid`, stopped under this thread's trace by `signal`
/// (`legate_confine::tracees::let_go`: detached, the signal delivered but for an `exec`'s
/// `SIGTRAP`). `false` (logged) when it cannot be: the caller then ends the test.
fn let_go(pid: i32, signal: i32) -> bool {
    if legate_confine::tracees::let_go(pid, signal) {
        tracing::debug!(
            pid,
            signal,
            "a test's leader that asked to be traced was let go"
        );
        return true;
    }
    tracing::warn!(
        pid,
        signal,
        "a test's leader stopped under Legate's trace and could not be let go: the test is ended"
    );
    false
}

/// Kills the unreaped leader of group `pgid` (its pid too) and its group, and reaps it
/// within [`REAP`] (`None`, logged, when something holds it): for a caller that gives up on
/// a test before waiting for it. Such a leader is left unreaped: once its tracer lets it
/// go, it stays a zombie for as long as Legate runs.
pub(crate) fn killed(pgid: i32) -> Option<ExitStatus> {
    end(Pid::from_raw(pgid)?, pgid)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::process::CommandExt;

    /// For `python3 -c SCRIPT mode`. Exits 77 where tracing is refused.
    /// - `leader`, `exec`, `stop`, `trap`: it asks to be traced by its parent, then:
    ///   `leader` takes a `SIGUSR1` it handles, asks again and takes its child's `SIGCHLD`,
    ///   and exits 5 if the handler ran; `exec` runs `sh -c 'exit 4'`; `stop` prints `asked`
    ///   and stops itself with `SIGSTOP`; `trap` raises a `SIGTRAP` it handles and exits 5 if
    ///   the handler ran.
    /// - `thread`, `exit`: one of its threads asks so and sleeps, and the leader prints
    ///   `asked`, then sleeps (`thread`) or exits 3 (`exit`).
    /// - `tstop`: one of its threads asks so, takes a `SIGUSR1` sent to it alone, and ends;
    ///   the leader joins it and exits 3.
    /// - `escape`: it moves to its parent's process group, prints `asked` and sleeps.
    const SCRIPT: &str = "import ctypes, os, signal, sys, threading, time\n\
                          libc = ctypes.CDLL(None)\n\
                          mode = sys.argv[1]\n\
                          def trace_me():\n\
                          \x20   if libc.ptrace(0, 0, None, None) != 0:\n\
                          \x20       os._exit(77)\n\
                          got = []\n\
                          if mode == 'escape':\n\
                          \x20   os.setpgid(0, os.getpgid(os.getppid()))\n\
                          \x20   print('asked', flush=True)\n\
                          \x20   time.sleep(600)\n\
                          if mode in ('leader', 'exec', 'stop', 'trap'):\n\
                          \x20   trace_me()\n\
                          \x20   if mode == 'exec':\n\
                          \x20       os.execv('/bin/sh', ['sh', '-c', 'exit 4'])\n\
                          \x20   if mode == 'stop':\n\
                          \x20       print('asked', flush=True)\n\
                          \x20       os.kill(os.getpid(), signal.SIGSTOP)\n\
                          \x20       os._exit(0)\n\
                          \x20   if mode == 'trap':\n\
                          \x20       signal.signal(signal.SIGTRAP, lambda *a: got.append(1))\n\
                          \x20       signal.raise_signal(signal.SIGTRAP)\n\
                          \x20       os._exit(5 if got else 6)\n\
                          \x20   signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n\
                          \x20   os.kill(os.getpid(), signal.SIGUSR1)\n\
                          \x20   trace_me()\n\
                          \x20   child = os.fork()\n\
                          \x20   if child == 0:\n\
                          \x20       os._exit(0)\n\
                          \x20   os.waitpid(child, 0)\n\
                          \x20   os._exit(5 if got else 6)\n\
                          if mode == 'tstop':\n\
                          \x20   signal.signal(signal.SIGUSR1, lambda *a: None)\n\
                          \x20   def stopped():\n\
                          \x20       trace_me()\n\
                          \x20       signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)\n\
                          \x20       got.append(1)\n\
                          \x20   t = threading.Thread(target=stopped)\n\
                          \x20   t.start()\n\
                          \x20   t.join()\n\
                          \x20   os._exit(3 if got else 8)\n\
                          asked = threading.Event()\n\
                          def traced():\n\
                          \x20   trace_me()\n\
                          \x20   asked.set()\n\
                          \x20   time.sleep(600)\n\
                          threading.Thread(target=traced, daemon=True).start()\n\
                          asked.wait()\n\
                          print('asked', flush=True)\n\
                          if mode == 'exit':\n\
                          \x20   os._exit(3)\n\
                          time.sleep(600)\n";

    /// `SCRIPT` run with `mode`, in a group of its own, and its pid; `None` without python3.
    fn spawned(mode: &str) -> Option<(std::process::Child, i32)> {
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

    /// Kills a leader the wait left unreaped, when the test ends (a failed one included).
    struct KillAtEnd(i32, bool);

    impl Drop for KillAtEnd {
        fn drop(&mut self) {
            if self.1 {
                // The pid is this test's child, unreaped: its number is still its own.
                crate::sys::kill_leader(self.0);
            }
        }
    }

    /// How `SCRIPT` run with `mode` ended, given `secs` before its deadline, once it is gone
    /// from `/proc` (reaped); `None` when the test skips (no python3, or tracing refused: exit
    /// 77).
    fn ended(mode: &str, secs: u64) -> Option<Ended> {
        let (mut child, pid) = spawned(mode)?;
        let mut held = KillAtEnd(pid, true);
        if matches!(mode, "thread" | "stop" | "escape") {
            // The deadline counts from the asking (or the move), so that the kill comes after.
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
        let ended = await_exit(pid, deadline).unwrap();
        held.1 = ended.status.is_none();
        if ended.status.and_then(|s| s.code()) == Some(77) {
            eprintln!("skipped: PTRACE_TRACEME refused here");
            return None;
        }
        assert!(
            ended.status.is_some(),
            "the leader was not reaped: {ended:?}"
        );
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

    /// A traced thread that takes a signal is let go and runs on, so the leader's join
    /// returns and the test ends with its code. Before, the thread stayed stopped and the
    /// test ran to its deadline.
    #[test]
    fn a_traced_thread_that_takes_a_signal_runs_on() {
        let Some(ended) = ended("tstop", 60) else {
            return;
        };
        assert!(!ended.timed_out, "{ended:?}");
        assert_eq!(ended.status.and_then(|s| s.code()), Some(3), "{ended:?}");
    }

    /// A leader that asked to be traced runs on through its signals, each delivered (its
    /// own `SIGUSR1`, then, traced again, its child's `SIGCHLD`), and ends with its own code.
    /// Before, its first stop was taken for its end: the test was ended, the leader killed.
    #[test]
    fn a_leader_that_asks_to_be_traced_runs_on_through_its_signals() {
        let Some(ended) = ended("leader", 60) else {
            return;
        };
        assert!(!ended.timed_out, "{ended:?}");
        assert_eq!(ended.status.and_then(|s| s.code()), Some(5), "{ended:?}");
    }

    /// A leader that asked to be traced, then `exec`s: the trap is not delivered, and the
    /// test ends with the new program's code.
    #[test]
    fn a_leader_that_asks_to_be_traced_then_execs_ends_with_the_new_programs_code() {
        let Some(ended) = ended("exec", 60) else {
            return;
        };
        assert!(!ended.timed_out, "{ended:?}");
        assert_eq!(ended.status.and_then(|s| s.code()), Some(4), "{ended:?}");
    }

    /// A `SIGTRAP` a traced leader raises itself (not an `exec`'s) is delivered to its
    /// handler, as it would be untraced.
    #[test]
    fn a_trap_a_traced_leader_raises_itself_is_delivered() {
        let Some(ended) = ended("trap", 60) else {
            return;
        };
        assert!(!ended.timed_out, "{ended:?}");
        assert_eq!(ended.status.and_then(|s| s.code()), Some(5), "{ended:?}");
    }

    /// A leader that asked to be traced, then stops itself: let go with its `SIGSTOP`, it
    /// stops as an untraced command would, until the deadline's kill, and is reaped with it.
    #[test]
    fn a_leader_that_asks_to_be_traced_then_stops_is_killed_at_its_deadline() {
        let Some(ended) = ended("stop", 1) else {
            return;
        };
        assert!(ended.timed_out, "{ended:?}");
        assert_eq!(ended.status.and_then(|s| s.signal()), Some(libc::SIGKILL));
    }

    /// A leader that left its process group (for this test's) is killed at its deadline by
    /// its pid and reaped. Before, the group's kill missed it and it was left running.
    #[test]
    fn a_leader_that_left_its_group_is_killed_at_its_deadline() {
        let Some(ended) = ended("escape", 1) else {
            return;
        };
        assert!(ended.timed_out, "{ended:?}");
        assert_eq!(ended.status.and_then(|s| s.signal()), Some(libc::SIGKILL));
    }
}
