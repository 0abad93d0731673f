//! An agent that makes the namespace's init its tracer, against the real kernel: a confined
//! `python3`, as a hostile (or anti-debugging) agent would, calls `ptrace(PTRACE_TRACEME)` in
//! its leader or in one of its threads, so that the init Legate put at pid 1 of its PID
//! namespace becomes the tracer, then takes a signal, `exec`s, or exits. Each must run on and
//! end with its own status, as it would untraced: the init's stop reports are not the agent's
//! exit, and nothing is left stopped for a tracer that never looks. Each test skips (with a
//! message) where this process may not create namespaces, or where the kernel refuses the
//! tracing (exit 77); without `python3` it skips, or fails where CI requires it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_confine::{Confinement, Requirement, confine_command};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// What each script imports, and `trace_me()`: `PTRACE_TRACEME` from the calling thread, or
/// exit 77 where it is refused.
const PRELUDE: &str = "import ctypes, os, signal, sys, threading, time\n\
                       libc = ctypes.CDLL(None, use_errno=True)\n\
                       def trace_me():\n\
                       \x20   if libc.ptrace(0, 0, None, None) != 0:\n\
                       \x20       print('refused', ctypes.get_errno(), flush=True)\n\
                       \x20       os._exit(77)\n";

/// Runs `script` (after [`PRELUDE`]) as a confined `python3`; `None` where the test skips.
/// A run still going after 30 s is killed and fails the test: each script ends in well
/// under a second when its traced part runs on.
fn confined_python(script: &str) -> Option<ExitStatus> {
    if !Confinement::probe_namespaces() {
        eprintln!("skipped: this process may not create mount and PID namespaces");
        return None;
    }
    // As `legate_testkit::python_required` decides (not a dependency of this crate).
    let required = ["LEGATE_REQUIRE_PYTHON", "CI"]
        .iter()
        .any(|n| std::env::var(n).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false")));
    if Command::new("python3").arg("-V").output().is_err() {
        assert!(!required, "python3 is required (LEGATE_REQUIRE_PYTHON)");
        eprintln!("skipped: no python3");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new("python3");
    cmd.args(["-c", &format!("{PRELUDE}{script}")])
        .current_dir(dir.path())
        .stdin(Stdio::null());
    let prepared = Confinement::new()
        .allow_write(dir.path())
        .prepare(Requirement::Required)
        .unwrap();
    assert!(prepared.isolation().processes_hidden);
    confine_command(&mut cmd, prepared);
    let mut child = cmd.spawn().unwrap();
    let began = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            if status.code() == Some(77) {
                eprintln!("skipped: PTRACE_TRACEME is refused here");
                return None;
            }
            return Some(status);
        }
        if began.elapsed() > Duration::from_secs(30) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("the confined agent was still running after 30 s");
        }
        // The child is a plain process of this test: its exit is polled, 10 ms apart.
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The leader asks to be traced and takes a signal it sends itself, then asks again and
/// takes its child's `SIGCHLD`: each stops it for the tracer, which must let it go on with
/// the signal delivered. Before, the init took the first stop for the agent's exit (127).
#[test]
fn a_leader_that_asks_to_be_traced_runs_on_through_its_signals() {
    let script = "trace_me()\n\
                  got = []\n\
                  signal.signal(signal.SIGUSR1, lambda *a: got.append(1))\n\
                  os.kill(os.getpid(), signal.SIGUSR1)\n\
                  trace_me()\n\
                  pid = os.fork()\n\
                  if pid == 0:\n\
                  \x20   os._exit(0)\n\
                  os.waitpid(pid, 0)\n\
                  sys.exit(5 if got else 6)\n";
    let Some(status) = confined_python(script) else {
        return;
    };
    assert_eq!(status.code(), Some(5), "{status:?}");
}

/// The leader asks to be traced, then `exec`s: the `SIGTRAP` that `exec` sends a tracee
/// stops it for the tracer, which lets it go on without the trap. Before, 127.
#[test]
fn a_leader_that_asks_to_be_traced_then_execs_ends_with_the_new_programs_code() {
    let script = "trace_me()\n\
                  os.execv('/bin/sh', ['sh', '-c', 'exit 4'])\n";
    let Some(status) = confined_python(script) else {
        return;
    };
    assert_eq!(status.code(), Some(4), "{status:?}");
}

/// The leader asks to be traced, then raises a `SIGTRAP` it handles (not an `exec`'s): the
/// tracer delivers it, as the kernel would untraced.
#[test]
fn a_trap_a_traced_leader_raises_itself_is_delivered() {
    let script = "trace_me()\n\
                  got = []\n\
                  signal.signal(signal.SIGTRAP, lambda *a: got.append(1))\n\
                  signal.raise_signal(signal.SIGTRAP)\n\
                  sys.exit(5 if got else 6)\n";
    let Some(status) = confined_python(script) else {
        return;
    };
    assert_eq!(status.code(), Some(5), "{status:?}");
}

/// A thread of the leader asks to be traced, takes a signal sent to it alone, and carries
/// on: the tracer must let it go on, or the leader's `join` waits for ever.
#[test]
fn a_traced_thread_that_takes_a_signal_runs_on() {
    let script = "signal.signal(signal.SIGUSR1, lambda *a: None)\n\
                  done = []\n\
                  def traced():\n\
                  \x20   trace_me()\n\
                  \x20   signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)\n\
                  \x20   done.append(1)\n\
                  t = threading.Thread(target=traced)\n\
                  t.start()\n\
                  t.join()\n\
                  sys.exit(3 if done else 8)\n";
    let Some(status) = confined_python(script) else {
        return;
    };
    assert_eq!(status.code(), Some(3), "{status:?}");
}

/// A thread of the leader asks to be traced and exits, then the leader exits: the traced
/// thread's zombie is the tracer's to reap, and until it is, the kernel holds back the
/// leader's exit. The run ends with the leader's code.
#[test]
fn a_leader_whose_traced_thread_exited_ends_with_its_own_code() {
    let script = "t = threading.Thread(target=trace_me)\n\
                  t.start()\n\
                  t.join()\n\
                  os._exit(9)\n";
    let Some(status) = confined_python(script) else {
        return;
    };
    assert_eq!(status.code(), Some(9), "{status:?}");
}
