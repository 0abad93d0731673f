//! The Legate process a restart test kills: the test binary itself, run again as a child that
//! runs one ignored test, read until it prints a ready line, then killed with SIGKILL.
//!
//! This module only starts and kills the child it made, then waits a bounded time for what
//! that child had started to exit; it never signals another process.

use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::Duration;

/// How long [`run_until_ready`] waits, in all, for the killed child's processes to exit.
pub const DESCENDANTS_WAIT: Duration = Duration::from_secs(10);

/// Runs this test binary again running only the ignored test `test` with `env` set, reads
/// its stdout until a line that starts with `ready`, kills it (SIGKILL) and reaps it, waits
/// up to [`DESCENDANTS_WAIT`] for the processes it had started by then to exit, and returns
/// the rest of that line, trimmed. The child's stderr goes to `stderr`.
///
/// Waiting matters: an agent, which dies with its Legate, is still alive for a moment after
/// it and may still write its own state (a session file the test then changes). The wait is
/// bounded and not an error: a command an agent started outside a PID namespace outlives its
/// Legate by design, until the next Legate's recovery kills it.
///
/// # Panics
/// When the child cannot start or ends without printing the ready line.
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
    for pid in crate::procs::until_exited(&started, DESCENDANTS_WAIT) {
        eprintln!("process {pid} of the killed child test {test} outlived it");
    }
    rest.unwrap_or_else(|| panic!("the child test {test} ended without printing {ready:?}"))
}
