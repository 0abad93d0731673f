//! The only `unsafe` code of this crate: signalling a test's process group.
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
