//! Signalling a process found by a marker in its environment, and only that process.
//!
//! Legate finds what a run or a dead runner left behind by reading a process's environment for
//! a `NAME=value` entry of its own ([`crate::cleanup`], the engine's recovery). A process id is
//! only a number: the process read may exit, and another take its number, before the signal
//! is sent. [`signal_marked`] therefore opens the process's `/proc/<pid>` directory first,
//! reads **through that directory**, and signals through it (`pidfd_send_signal` takes such a
//! directory as a process handle): the directory never stands for a later process (reads
//! through it fail with `ESRCH` once its process is gone, and so does the signal), so what is
//! read and what is signalled are one process, or nothing is sent. One directory is open at a
//! time (an agent may leave thousands of processes; a handle each at once would exhaust this
//! process's descriptors).
//!
//! A process whose main thread has exited while other threads run is **headless**: its stat
//! shows `Z` with more than one thread, and its own environment reads empty or fails,
//! depending on the kernel. Its threads share its memory, so its environment is read from a
//! thread's (`task/<tid>/environ`), again through the directory; [`threads_run`] says whether
//! any of those threads still runs. An agent cannot hide a process from cleanup that way.
//!
//! It must never signal a process whose environment it did not read and find marked, this
//! process, or a process id below 2. Where `pidfd_send_signal` cannot be used (a kernel
//! before 5.1, which Legate's confinement does not support anyway, or a seccomp profile that
//! refuses it: [`crate::acp::sys::pidfd_signals`] asks once), it signals by number after the
//! same check, which leaves the window between the read and the signal open.
//!
//! Not found by a marker at all: a process that replaced its environment in memory without an
//! `exec`, and one that made itself not dumpable while Legate is not root (its environment
//! cannot be read); only its process group shows those ([`crate::cleanup`]).

use legate_core::proc_stat::ProcStat;
use rustix::fd::OwnedFd;
use rustix::fs::{Mode, OFlags};
use rustix::process::{Pid, Signal};
use std::io::Read;

/// What [`signal_marked`] found of one process and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// It carried the marker and was signalled (or it carried the marker and this user may
    /// not signal it: it exists, `EPERM`).
    Signalled,
    /// It carried the marker, but it had exited by the time the signal was sent (or the
    /// signal could not be sent for want of resources): nothing was signalled. Look again.
    Vanished,
    /// Its environment did not hold the marker.
    Unmarked,
    /// Its environment read empty: a kernel thread, a process that cleared it, one in the
    /// middle of `exec` (whose new environment is not set up yet), or a zombie on some kernels.
    Empty,
    /// It could not be read: gone (a reaped process; a zombie on other kernels), another
    /// user's, not dumpable.
    Unreadable,
}

/// Opens `/proc/<pid>`, reads the environment of the process it stands for and, when an
/// entry is exactly `entry` (`NAME=value`), sends it `signal` through the same directory (see
/// the module doc).
pub fn signal_marked(pid: i32, entry: &[u8], signal: Signal) -> Marked {
    let Some(target) = target(pid) else {
        return Marked::Unreadable;
    };
    let Ok(dir) = process_dir(pid) else {
        return Marked::Unreadable;
    };
    match environment(&dir) {
        Ok(environ) if holds(&environ, entry) => {}
        Ok(environ) if environ.is_empty() => return Marked::Empty,
        Ok(_) => return Marked::Unmarked,
        Err(()) => return Marked::Unreadable,
    }
    #[cfg(test)]
    tests::BEFORE_SIGNAL.with(|hook| {
        if let Some(hook) = hook.borrow_mut().as_mut() {
            hook(pid);
        }
    });
    let sent = if crate::acp::sys::pidfd_signals() {
        rustix::process::pidfd_send_signal(&dir, signal)
    } else {
        rustix::process::kill_process(target, signal)
    };
    match sent {
        Ok(()) | Err(rustix::io::Errno::PERM) => Marked::Signalled,
        Err(_) => Marked::Vanished,
    }
}

/// Whether process `pid`'s environment holds `entry` (`NAME=value`) now, read as
/// [`signal_marked`] reads it (a thread's when the process is headless).
pub fn carries(pid: i32, entry: &[u8]) -> bool {
    target(pid).is_some()
        && process_dir(pid)
            .ok()
            .and_then(|dir| environment(&dir).ok())
            .is_some_and(|environ| holds(&environ, entry))
}

/// Whether a thread of the headless process `pid` still runs: one whose own state is not a
/// zombie's (a thread that exited under a tracer stays a zombie until the tracer reaps it,
/// and runs nothing). False when none can be read.
pub fn threads_run(pid: i32) -> bool {
    let Some(task) = process_dir(pid)
        .ok()
        .and_then(|dir| open_dir_at(&dir, "task").ok())
    else {
        return false;
    };
    threads(&task).into_iter().any(|tid| {
        read_at(&task, &format!("{tid}/stat"))
            .ok()
            .and_then(|line| ProcStat::parse(&line))
            .is_some_and(|stat| stat.runs())
    })
}

/// `pid` as a process this module may look at: above 1, not this process.
fn target(pid: i32) -> Option<Pid> {
    if pid <= 1 {
        return None;
    }
    Pid::from_raw(pid).filter(|p| *p != rustix::process::getpid())
}

fn process_dir(pid: i32) -> rustix::io::Result<OwnedFd> {
    rustix::fs::open(
        format!("/proc/{pid}"),
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn open_dir_at(dir: &OwnedFd, path: &str) -> rustix::io::Result<OwnedFd> {
    rustix::fs::openat(
        dir,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The environment of the process `dir` stands for: its own, or, when it is headless, the
/// first of its threads' that reads non-empty (empty when they all read empty). `Err` when
/// nothing can be read.
fn environment(dir: &OwnedFd) -> Result<Vec<u8>, ()> {
    let headless = read_at(dir, "stat")
        .ok()
        .and_then(|line| ProcStat::parse(&line))
        .is_some_and(|stat| stat.is_headless());
    if !headless {
        return read_at(dir, "environ").map_err(|_| ());
    }
    let task = open_dir_at(dir, "task").map_err(|_| ())?;
    let mut read_any = false;
    for tid in threads(&task) {
        match read_at(&task, &format!("{tid}/environ")) {
            Ok(environ) if !environ.is_empty() => return Ok(environ),
            Ok(_) => read_any = true,
            // One address space: a thread this user may not read, it may read none of.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => break,
            Err(_) => {}
        }
    }
    read_any.then(Vec::new).ok_or(())
}

/// The thread ids in a process's `task` directory (at most 4,096: a process with more is
/// judged by those).
fn threads(task: &OwnedFd) -> Vec<String> {
    const MOST: usize = 4096;
    let Ok(dir) = rustix::fs::Dir::read_from(task) else {
        return Vec::new();
    };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str().ok().map(str::to_owned))
        .filter(|name| !name.is_empty() && name.bytes().all(|b| b.is_ascii_digit()))
        .take(MOST)
        .collect()
}

fn read_at(dir: &OwnedFd, path: &str) -> std::io::Result<Vec<u8>> {
    let fd = rustix::fs::openat(dir, path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())?;
    let mut out = Vec::new();
    std::fs::File::from(fd).read_to_end(&mut out)?;
    Ok(out)
}

/// Whether `environ` (NUL-separated entries) holds exactly `entry`.
fn holds(environ: &[u8], entry: &[u8]) -> bool {
    environ.split(|b| *b == 0).any(|kv| kv == entry)
}

#[cfg(test)]
#[path = "marked_tests.rs"]
pub(crate) mod tests;
