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
//! It must never name this process as a holder: Legate is the tracer of a leader that asked
//! to be traced by its parent (`PTRACE_TRACEME`), and reaps such a leader itself.

/// The process tracing `pid`, when `pid` is a zombie that a process other than this one
/// traces; `None` otherwise, or when its status cannot be read.
pub(crate) fn holder(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let tracer = zombie_tracer(&status)?;
    let me = i32::try_from(std::process::id()).ok()?;
    (tracer != me).then_some(tracer)
}

/// The tracer named by a `/proc/<pid>/status` text whose process is a zombie. The process's
/// name, the one field its owner writes, comes first and has its line breaks escaped by the
/// kernel, so it cannot forge the lines read here.
fn zombie_tracer(status: &str) -> Option<i32> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    if !field("State:")?.starts_with('Z') {
        return None;
    }
    field("TracerPid:")?.parse().ok().filter(|t| *t > 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn only_a_traced_zombie_has_a_holder() {
        let status = |state: &str, tracer: &str| {
            format!(
                "Name:\tsleep\nUmask:\t0022\nState:\t{state}\nTgid:\t7\nPid:\t7\nPPid:\t1\nTracerPid:\t{tracer}\nUid:\t0\t0\t0\t0\n"
            )
        };
        assert_eq!(zombie_tracer(&status("Z (zombie)", "4242")), Some(4242));
        assert_eq!(zombie_tracer(&status("Z (zombie)", "0")), None);
        assert_eq!(zombie_tracer(&status("S (sleeping)", "4242")), None);
        assert_eq!(zombie_tracer(&status("t (tracing stop)", "4242")), None);
        assert_eq!(zombie_tracer("Name:\tx\n"), None);
        // A name cannot forge a line: the kernel escapes its line breaks.
        assert_eq!(
            zombie_tracer("Name:\tx\\nTracerPid:\t99\nState:\tZ (zombie)\nTracerPid:\t0\n"),
            None
        );
    }

    #[test]
    fn this_process_is_never_a_holder_and_a_live_one_has_none() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert_eq!(holder(me), None);
        assert_eq!(holder(i32::MAX), None);
    }
}
