//! The only `unsafe` code of the ACP driver: the pre-exec hook that makes the agent die with
//! Legate, process-group signals, and the check that `pidfd_send_signal` works. Confining it
//! (Landlock) goes through `legate_confine::confine_command`, which owns that hook.
#![allow(unsafe_code)]

use tokio::process::Command;

/// Arranges for the child to receive `SIGKILL` when the thread that spawned it dies
/// (`PR_SET_PDEATHSIG`). Linux only; elsewhere this does nothing.
///
/// The signal follows the spawning *thread*, so spawn from a long-lived thread (a Tokio worker
/// or the main thread), never from a `spawn_blocking` thread that may be retired.
pub(crate) fn die_with_parent(cmd: &mut Command) {
    #[cfg(target_os = "linux")]
    {
        let parent = libc::pid_t::try_from(std::process::id()).unwrap_or(0);
        // SAFETY: the closure runs in the forked child before `exec`. It calls only
        // async-signal-safe functions (`prctl`, `getppid`), allocates nothing, takes no
        // locks, and builds its errors from raw OS codes, which does not allocate either.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
                // Legate died between fork and prctl: the signal will never come.
                if parent != 0 && libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = cmd;
    }
}

/// Sends `signal` to every process of the group `pgid`. Returns `false` when the group no
/// longer exists. A `pgid` of 0 or less is refused (it would name our own group, or all).
pub(crate) fn signal_group(pgid: i32, signal: i32) -> bool {
    if pgid <= 0 {
        return false;
    }
    // SAFETY: `killpg` has no memory-safety preconditions; `pgid` is positive, so it names
    // exactly one process group and never our own group or every process.
    let rc = unsafe { libc::killpg(pgid, signal) };
    if rc == 0 {
        return true;
    }
    // EPERM: the group exists but holds a process we may not signal.
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether `pidfd_send_signal` works here, asked once: signal 0 (a check, nothing sent) to this
/// process through its own `/proc/self` directory. A kernel before 5.1 answers `ENOSYS`; a
/// seccomp profile that refuses the call, `EPERM` or `ENOSYS` ([`crate::marked`] then signals
/// by number).
pub(crate) fn pidfd_signals() -> bool {
    use std::os::fd::AsRawFd;
    static WORKS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if let Some(works) = WORKS.get() {
        return *works;
    }
    // Not kept when the directory does not open (out of descriptors): asked again next time.
    let Ok(dir) = std::fs::File::open("/proc/self") else {
        return false;
    };
    // SAFETY: `pidfd_send_signal` on a descriptor this function owns, signal 0 (only the
    // checks), no `siginfo`, no flags: it reads and writes no memory of ours.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            dir.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    let errno = std::io::Error::last_os_error().raw_os_error();
    let works = match (rc, errno) {
        (0, _) => true,
        (_, Some(libc::ENOSYS | libc::EPERM)) => false,
        // Anything else says nothing of the call: by number this time, asked again next.
        _ => return false,
    };
    *WORKS.get_or_init(|| works)
}

/// Whether the process group `pgid` still has members (zombies included).
pub(crate) fn group_exists(pgid: i32) -> bool {
    signal_group(pgid, 0)
}

/// `SIGINT`.
pub(crate) const SIGINT: i32 = libc::SIGINT;
/// `SIGKILL`.
pub(crate) const SIGKILL: i32 = libc::SIGKILL;

/// Confines the child with `prepared` between `fork` and `exec`. Register it after
/// [`die_with_parent`]: hooks run in the order they were added. Once the hook ran, the agent
/// and everything it starts can write only where the confinement allows. The hook itself is
/// registered by `legate-confine` (`confine_command`), which owns that `unsafe`.
pub(crate) fn confine(cmd: &mut Command, prepared: legate_confine::Prepared) {
    legate_confine::confine_command(cmd.as_std_mut(), prepared);
}

/// Whether Legate runs with effective user id 0.
pub(crate) fn running_as_root() -> bool {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}
