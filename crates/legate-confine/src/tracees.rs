//! Threads that made this process their tracer: a thread of a process Legate spawned
//! directly (outside a PID namespace of Legate's) that called `ptrace(PTRACE_TRACEME)`.
//! Its tracer is the thread of Legate's that spawned the process.
//!
//! Once such a thread exits, only this process can reap it, and until it does the kernel
//! never reports the exit of the process the thread belongs to: a parent waiting for that
//! process waits for ever, and both stay zombies for as long as Legate runs. This module
//! finds them and reaps them ([`reap_exited_threads`]), lets go of one stopped under the
//! calling thread's trace ([`let_go`]: Legate traces nothing, so such a process runs on as
//! it would untraced), does both for a leader's threads whenever it is asked
//! ([`tend_traced_threads`], for a waiting thread that is the tracer: the test runner's), and
//! reads the two facts that decide whether a tracer is this process ([`status_field`],
//! [`is_own_thread`]). The namespace's init lets go of its own tracees with [`let_go`] too.
//!
//! It must never wait for the process itself (its parent does), nor for any process or
//! thread this process does not trace, and never allocates in [`let_go`] (the init calls it
//! after `fork`).

use legate_core::proc_stat::ProcStat;
use rustix::process::{Pid, WaitId, WaitIdOptions, WaitOptions};
use std::path::Path;

/// The value of the first line of a `/proc/<pid>/status` text that starts with `name`. The
/// process's name, the one field its owner writes, comes first and has its line breaks
/// escaped by the kernel, so it cannot forge the lines read here.
pub fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .map(str::trim)
}

/// Whether `tid` (a `TracerPid`, which is a thread id) is a thread of this process.
pub fn is_own_thread(tid: i32) -> bool {
    Path::new(&format!("/proc/self/task/{tid}")).exists()
}

/// Reaps the threads of `leader` that have exited and that a thread of this process
/// traces, once `leader`'s own first thread has exited (its state `Z`; before that, a call
/// costs one read of its `stat`, which keeps it cheap to call often). Returns how many were
/// reaped. A traced thread that exits while its leader still runs is reaped by the first call
/// after the leader exits.
///
/// Only a thread of `leader` whose `TracerPid`, read first, is a thread of this process is
/// waited for, and only once it has exited (`WEXITED`: a stopped thread is not waited for). A traced thread's id
/// cannot be reused before it is reaped, so the one read from the listing is the one
/// reaped, unless the tracing thread ends between the two (the kernel then lets the zombie
/// go) and the id comes round again, as a child of this process, within that instant: not
/// guarded against. The leader's own id is never waited for. A leader whose first thread
/// exited while others run is looked through at every call; its threads are within its
/// process limit.
pub fn reap_exited_threads(leader: i32) -> usize {
    let Ok(stat) = std::fs::read(format!("/proc/{leader}/stat")) else {
        return 0;
    };
    if ProcStat::parse(&stat).is_none_or(|s| s.state != b'Z') {
        return 0;
    }
    let mut reaped = 0;
    for id in traced_threads(leader) {
        // A tracee is this process's to wait for, thread or not, and its stop is reported
        // too (`CLD_TRAPPED`), whatever the options: a stopped thread's report is taken
        // here and left alone (the run's kill ends it); `NOHANG` never blocks.
        let options = WaitIdOptions::EXITED | WaitIdOptions::NOHANG;
        if let Ok(Some(status)) = rustix::process::waitid(WaitId::Pid(id), options)
            && (status.exited() || status.killed() || status.dumped())
        {
            reaped += 1;
        }
    }
    reaped
}

/// Tends the threads of `leader` that a thread of this process traces, whatever `leader`'s
/// state: reaps those that exited, and lets go ([`let_go`]) of those stopped under the
/// calling thread's trace (one under another thread's trace stays stopped: only its tracer
/// may let it go). Returns how many were reaped or let go. Every call reads each thread's
/// status: callers pace it.
pub fn tend_traced_threads(leader: i32) -> usize {
    let mut tended = 0;
    for id in traced_threads(leader) {
        if let Ok(Some((_, status))) = rustix::process::waitpid(Some(id), WaitOptions::NOHANG) {
            tended += match status.stopping_signal() {
                Some(signal) => usize::from(let_go(id.as_raw_nonzero().get(), signal)),
                None => 1,
            };
        }
    }
    tended
}

/// The threads of `leader`, itself left out, whose `TracerPid`, read first, is a thread of
/// this process. A traced thread's id cannot be reused before it is reaped, so an id listed
/// here is the thread's until a wait reaps it, but for the window [`reap_exited_threads`]
/// names.
fn traced_threads(leader: i32) -> Vec<Pid> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{leader}/task")) else {
        return Vec::new();
    };
    let mut traced = Vec::new();
    for task in tasks.flatten() {
        let Some(tid) = task
            .file_name()
            .to_str()
            .and_then(|t| t.parse::<i32>().ok())
        else {
            continue;
        };
        if tid == leader {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(format!("/proc/{leader}/task/{tid}/status"))
        else {
            continue;
        };
        let traced_here = status_field(&status, "TracerPid:")
            .and_then(|t| t.parse::<i32>().ok())
            .is_some_and(|t| t > 0 && is_own_thread(t));
        if let Some(id) = Pid::from_raw(tid).filter(|_| traced_here) {
            traced.push(id);
        }
    }
    traced
}

/// Detaches `pid`, a process or thread stopped under the calling thread's trace by
/// `signal` (the stop a wait reported), and delivers that signal, except the `SIGTRAP` an
/// `exec` sends a tracee, which an untraced process never gets. That one is sent as by
/// `kill` (`SI_USER`), so a `SIGTRAP` another process sends with `kill` is dropped too; one
/// the process raises itself (`raise`, a breakpoint) is delivered. `false` when it cannot
/// be: `pid` is gone, not stopped, or not traced by the calling thread (only the tracing
/// thread may detach). System calls on the stack and nothing else: safe to call after
/// `fork`.
#[allow(unsafe_code)]
pub fn let_go(pid: i32, signal: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    let deliver = if signal == libc::SIGTRAP && sent_as_by_kill(pid) {
        0
    } else {
        signal
    };
    // SAFETY: `ptrace` has no memory-safety preconditions; `PTRACE_DETACH` reads no
    // address, and its data is the signal number, passed by value.
    unsafe {
        libc::ptrace(
            libc::PTRACE_DETACH,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            deliver as libc::c_long as *mut libc::c_void,
        ) == 0
    }
}

/// Whether the signal that stopped `pid` (under the calling thread's trace) was sent as by
/// `kill` (`SI_USER`): an `exec`'s `SIGTRAP` is. Also when its information cannot be read
/// (a group stop has none; detaching from one delivers nothing anyway).
#[allow(unsafe_code)]
fn sent_as_by_kill(pid: i32) -> bool {
    let mut info = std::mem::MaybeUninit::<libc::siginfo_t>::zeroed();
    // SAFETY: `PTRACE_GETSIGINFO` writes one `siginfo_t` to the address given, which is
    // `info`'s, on this stack and large enough.
    let read = unsafe {
        libc::ptrace(
            libc::PTRACE_GETSIGINFO,
            pid,
            std::ptr::null_mut::<libc::c_void>(),
            info.as_mut_ptr(),
        )
    };
    if read != 0 {
        return true;
    }
    // SAFETY: zeroed, then written whole by the kernel: every field is initialized.
    let info = unsafe { info.assume_init() };
    info.si_code == libc::SI_USER
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_first_line_of_a_field_is_read_and_a_name_cannot_forge_one() {
        let status = "Name:\tx\\nTracerPid:\t99\nState:\tZ (zombie)\nTgid:\t7\nTracerPid:\t0\n";
        assert_eq!(status_field(status, "TracerPid:"), Some("0"));
        assert_eq!(status_field(status, "State:"), Some("Z (zombie)"));
        assert_eq!(status_field(status, "Uid:"), None);
    }

    #[test]
    fn nothing_is_reaped_of_a_live_process_or_of_none() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert_eq!(reap_exited_threads(me), 0);
        assert_eq!(reap_exited_threads(i32::MAX), 0);
        assert_eq!(reap_exited_threads(0), 0);
    }

    #[test]
    fn nothing_untraced_is_let_go() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert!(!let_go(me, libc::SIGUSR1));
        assert!(!let_go(0, libc::SIGUSR1));
        assert!(!let_go(-1, libc::SIGUSR1));
    }

    #[test]
    fn this_process_s_own_threads_are_its_own() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert!(is_own_thread(me));
        assert!(!is_own_thread(i32::MAX));
    }
}
