//! A zombie that a tracer holds: whether a process that has exited is kept from being
//! reaped by a process tracing it (`ptrace`), and by which.
//!
//! A traced process's exit is told to its tracer first; its parent can reap it only once
//! the tracer lets it go, which a hostile one never does. An agent can keep its own leader
//! unreaped that way from a process that cleanup does not otherwise find (out of the group,
//! its marker dropped with its environment). Cleanup ([`crate::cleanup`]) counts a member of
//! the run's group held so as alive, so that the tracer keeps the workspace blocked while it
//! lives, and names the tracer to the person who must stop it.
//!
//! It must never name this process as a holder. A leader that asked to be traced by its
//! parent (`PTRACE_TRACEME`) is traced by the thread of Legate's that spawned it: the
//! status's `TracerPid` is a thread id, so a tracer is this process when it is one of this
//! process's threads. Such a zombie counts as gone, as any zombie.

use std::path::Path;

/// The process tracing `pid`, when `pid` is a zombie that a thread of another process
/// traces: that process's id (its thread group's). `None` otherwise, or when its status
/// cannot be read.
pub(crate) fn holder(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let tracer = field(&status, "State:")?
        .starts_with('Z')
        .then(|| field(&status, "TracerPid:")?.parse::<i32>().ok())
        .flatten()
        .filter(|t| *t > 0)?;
    if Path::new(&format!("/proc/self/task/{tracer}")).exists() {
        return None;
    }
    // A thread's `/proc/<tid>` is there though not listed; its `Tgid` is its process.
    let of_tracer = std::fs::read_to_string(format!("/proc/{tracer}/status")).ok();
    Some(
        of_tracer
            .as_deref()
            .and_then(|s| field(s, "Tgid:")?.parse().ok())
            .unwrap_or(tracer),
    )
}

/// The value of the first line of a `/proc/<pid>/status` text that starts with `name`. The
/// process's name, the one field its owner writes, comes first and has its line breaks
/// escaped by the kernel, so it cannot forge the lines read here.
fn field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_first_line_of_a_field_is_read_and_a_name_cannot_forge_one() {
        let status = "Name:\tx\\nTracerPid:\t99\nState:\tZ (zombie)\nTgid:\t7\nTracerPid:\t0\n";
        assert_eq!(field(status, "TracerPid:"), Some("0"));
        assert_eq!(field(status, "State:"), Some("Z (zombie)"));
        assert_eq!(field(status, "Uid:"), None);
    }

    #[test]
    fn this_process_is_never_a_holder_and_a_live_one_has_none() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert_eq!(holder(me), None);
        assert_eq!(holder(i32::MAX), None);
    }

    /// A child that asked to be traced by its parent (this test's process, through the
    /// thread that forked it) and exited is a zombie traced by one of this process's
    /// threads, not by this process's id: it has no holder.
    #[test]
    fn a_zombie_traced_by_a_thread_of_this_process_has_no_holder() {
        use std::sync::mpsc;
        // Forked on a thread of its own, kept until the end (a tracer thread's exit lets its
        // tracees go), so that the tracer's id is not this process's.
        let (tx, rx) = mpsc::channel();
        let (done, end) = mpsc::channel::<()>();
        let forker = std::thread::spawn(move || {
            let child = std::process::Command::new("python3")
                .args([
                    "-c",
                    "import ctypes, os\n\
                     if ctypes.CDLL(None).ptrace(0, 0, None, None) != 0:\n\
                     \x20   os._exit(77)\n",
                ])
                .spawn();
            tx.send(child).unwrap();
            let _ = end.recv();
        });
        let Ok(mut child) = rx.recv().unwrap() else {
            assert!(
                !crate::marked::tests::python_required(),
                "python3 is required here"
            );
            return;
        };
        let pid = i32::try_from(child.id()).unwrap();
        let began = std::time::Instant::now();
        let status = loop {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            if field(&status, "State:").unwrap().starts_with('Z') {
                break status;
            }
            assert!(began.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let tracer: i32 = field(&status, "TracerPid:").unwrap().parse().unwrap();
        if tracer == 0 {
            eprintln!("skipped: PTRACE_TRACEME refused here (the child exited 77 untraced)");
        } else {
            assert_ne!(tracer, i32::try_from(std::process::id()).unwrap());
            assert_eq!(holder(pid), None);
        }
        let _ = child.wait();
        done.send(()).unwrap();
        forker.join().unwrap();
    }
}
