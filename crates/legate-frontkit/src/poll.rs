//! Waiting on a process's outside: [`until`] re-checks a condition another process changes
//! (a task's state as `legate` reports it, a file it makes) until it holds, and
//! [`exit_within`] waits for a child to exit. Owns only the deadline and the pace of the
//! checks; it never decides what a test waits for, and fails the test when the deadline passes.

use std::process::{Child, Output};
use std::time::{Duration, Instant};

/// How long between two checks.
const PACE: Duration = Duration::from_millis(50);

/// Checks `check` until it gives a value (at most `limit`, else fails saying it never saw
/// `what`); that value.
pub fn until<T>(limit: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(Instant::now() < deadline, "never saw {what}");
        std::thread::sleep(PACE);
    }
}

/// Waits for `child` to exit (at most `limit`, else kills it and fails saying `what` did not
/// exit); its output.
pub fn exit_within(mut child: Child, limit: Duration, what: &str) -> Output {
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            let out = child.wait_with_output().unwrap();
            panic!("{what} did not exit: {}", crate::cli::text(&out));
        }
        std::thread::sleep(PACE);
    }
    child.wait_with_output().unwrap()
}

/// Waits (at most 20 s) until a process with exactly this command line runs (`running`), or
/// until none does; fails with `what` otherwise.
pub fn until_cmdline(cmdline: &str, running: bool, what: &str) {
    until(Duration::from_secs(20), what, || {
        ((legate_testkit::procs::with_cmdline(cmdline) > 0) == running).then_some(())
    });
}
