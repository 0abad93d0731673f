//! The only `unsafe` code of this crate: signalling a test's process group and its leader.
#![allow(unsafe_code)]

/// Sends `SIGKILL` to every process of the group `pgid`. Returns `false` when the group no
/// longer exists. A `pgid` of 0 or less is refused (it would name our own group, or all).
pub(crate) fn kill_group(pgid: i32) -> bool {
    if pgid <= 0 {
        return false;
    }
    // SAFETY: `killpg` has no memory-safety preconditions; `pgid` is positive, so it names
    // exactly one process group and never our own group or every process.
    unsafe { libc::killpg(pgid, libc::SIGKILL) == 0 }
}

/// Sends `SIGKILL` to the process `pid`, a test's leader, in case it left its group. Only
/// while it is this process's unreaped child: its number is then its own. A `pid` of 0 or
/// less is refused.
pub(crate) fn kill_leader(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: `kill` has no memory-safety preconditions; `pid` is positive, so it names one
    // process (the caller's unreaped child).
    unsafe { libc::kill(pid, libc::SIGKILL) == 0 }
}
