//! Signalling a process found by a marker in its environment, and only that process.
//!
//! Legate finds what a run or a dead runner left behind by reading a process's environment for
//! a `NAME=value` entry of its own ([`crate::cleanup`], the engine's recovery). A process id is
//! only a number: the process read may exit, and another take its number, before the signal
//! is sent. [`signal_marked`] therefore opens the process's `/proc/<pid>` directory first,
//! reads the environment **through that directory**, and signals through it
//! (`pidfd_send_signal` takes such a directory as a process handle): the directory never
//! stands for a later process, so what is read and what is signalled are one process, or the
//! read fails and nothing is sent. One directory is open at a time (an agent may leave
//! thousands of processes; a handle each at once would exhaust this process's descriptors).
//!
//! A process whose main thread has exited while other threads run shows as a zombie (`Z`,
//! with more than one thread) and its own environment cannot be read; its threads share the
//! environment, so it is read from a live thread's (`task/<tid>/environ`), again through the
//! directory. An agent cannot hide a process from cleanup that way.
//!
//! It must never signal a process whose environment it did not read and find marked, this
//! process, or a process id below 2. On a kernel without `pidfd_send_signal` (before 5.1;
//! Landlock, which Legate's confinement uses, needs 5.13) it signals by number after the same
//! check, which leaves the window between the read and the signal open.

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
    /// Its environment read empty: a kernel thread, a process that cleared it, or one in the
    /// middle of `exec` (whose new environment is not set up yet).
    Empty,
    /// It could not be read: gone (a reaped process; a zombie with no thread left), another
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
    match environment(&dir, pid) {
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
    let sent = match rustix::process::pidfd_send_signal(&dir, signal) {
        // A kernel before 5.1: by number, as the module says.
        Err(rustix::io::Errno::NOSYS) => rustix::process::kill_process(target, signal),
        sent => sent,
    };
    match sent {
        Ok(()) | Err(rustix::io::Errno::PERM) => Marked::Signalled,
        Err(_) => Marked::Vanished,
    }
}

/// Whether process `pid`'s environment holds `entry` (`NAME=value`) now, read as
/// [`signal_marked`] reads it (a live thread's when its main thread has exited).
pub fn carries(pid: i32, entry: &[u8]) -> bool {
    target(pid).is_some()
        && process_dir(pid)
            .ok()
            .and_then(|dir| environment(&dir, pid).ok())
            .is_some_and(|environ| holds(&environ, entry))
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

/// The environment of the process `dir` stands for: its own, else (its main thread gone)
/// the first live thread's. `Err` when none can be read.
fn environment(dir: &OwnedFd, pid: i32) -> Result<Vec<u8>, ()> {
    if let Ok(environ) = read_at(dir, "environ") {
        return Ok(environ);
    }
    // Thread ids are listed by path; each read goes through `dir`, so a thread of a later
    // process of the same number is never read.
    let threads = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|_| ())?;
    threads
        .flatten()
        .filter_map(|t| t.file_name().to_str().map(str::to_owned))
        .filter(|tid| tid.bytes().all(|b| b.is_ascii_digit()) && *tid != pid.to_string())
        .find_map(|tid| read_at(dir, &format!("task/{tid}/environ")).ok())
        .ok_or(())
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
