//! The only `unsafe` code of this crate: signalling a test's process group, and letting go
//! of a leader stopped under this thread's trace.
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

/// Detaches `pid`, stopped under the calling thread's trace, delivering `signal` (0 for
/// none). `false` when it cannot be: `pid` is gone, not stopped, or not traced by the
/// calling thread (only the tracing thread may detach).
pub(crate) fn detach(pid: i32, signal: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: `ptrace` has no memory-safety preconditions; `PTRACE_DETACH` reads no
    // address, and its data is the signal number, passed by value.
    unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            signal as libc::c_long as *mut libc::c_void,
        ) == 0
    }
}
