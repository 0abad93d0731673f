//! The Legate process a restart test kills: the test binary itself, run again as a child that
//! runs one ignored test, read until it prints a ready line, then killed with SIGKILL.
//!
//! This module only starts and kills the child it made; it never signals another process (it
//! waits for the child's own to exit).

use std::io::BufRead;
use std::process::{Command, Stdio};

/// Runs this test binary again running only the ignored test `test` with `env` set, reads
/// its stdout until a line that starts with `ready`, kills it (SIGKILL) and reaps it, waits
/// until every process it had started by then (its agents, which die with it) has exited,
/// and returns the rest of that line, trimmed. The child's stderr goes to `stderr`.
///
/// Waiting for the agents matters: one still alive for a moment after its Legate died may
/// still write its own state (a session file the test then changes).
///
/// # Panics
/// When the child cannot start, ends without printing the ready line, or its processes do
/// not exit within 30 s.
#[must_use]
pub fn run_until_ready(test: &str, env: &[(&str, &str)], ready: &str, stderr: Stdio) -> String {
    let exe = std::env::current_exe().unwrap_or_else(|e| panic!("no test binary path: {e}"));
    let mut child = Command::new(exe)
        .args(["--exact", test, "--ignored", "--nocapture"])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("the child test {test} does not start: {e}"));
    let Some(stdout) = child.stdout.take() else {
        panic!("the child test {test} has no stdout");
    };
    let stdout = std::io::BufReader::new(stdout);
    let rest = stdout
        .lines()
        .map_while(Result::ok)
        .find_map(|line| line.strip_prefix(ready).map(|rest| rest.trim().to_string()));
    let started = crate::procs::descendants(child.id());
    // SIGKILL: nothing of that Legate runs after this.
    let _ = child.kill();
    let _ = child.wait();
    for pid in started {
        assert!(
            crate::procs::wait_exited(pid, std::time::Duration::from_secs(30)),
            "process {pid} of the killed child test {test} is still running"
        );
    }
    rest.unwrap_or_else(|| panic!("the child test {test} ended without printing {ready:?}"))
}

/// Waits until no process holds the lock of runner `runner` in `run_dir` any more (a blocking
/// `flock` on it returns), up to `limit`; true when it was released in time, or has no lock
/// file. For an engine dropped in this process: a child this process forked for another
/// agent (confinement's first process, before its agent has `exec`'d) still holds every
/// descriptor it inherited, that lock's too, for a moment.
#[must_use]
pub fn until_runner_released(
    run_dir: &std::path::Path,
    runner: &str,
    limit: std::time::Duration,
) -> bool {
    let Ok(file) = std::fs::File::open(run_dir.join(format!("{runner}.lock"))) else {
        return true;
    };
    let (tx, rx) = std::sync::mpsc::channel();
    // A blocking lock on a thread, waited for with a limit; on timeout the thread is left to
    // end with the test process.
    std::thread::spawn(move || {
        let _ = tx.send(file.lock().is_ok());
    });
    rx.recv_timeout(limit).unwrap_or(false)
}
