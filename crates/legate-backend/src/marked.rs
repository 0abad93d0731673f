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
//! thread's (`task/<tid>/environ`, every thread tried), again through the directory;
//! [`threads_run`] says whether any of those threads still runs, and errs towards "runs"
//! when a thread cannot be read. An agent cannot hide a process from cleanup that way.
//!
//! A process in the middle of `exec` reads an empty environment for a moment (its new
//! memory is there, its environment not yet), or a cut one (its old memory went during the
//! read). Such a read is taken again, up to ten times a millisecond apart, while it may be
//! one: it does not end with a NUL (every entry does), or the stat says so
//! ([`ProcStat::environment_unsettled`]: the environment not placed yet, empty without an
//! environment empty in place, or shorter than the environment the stat places). An
//! environment empty in place is read twice more all the same (`exec` places one for a
//! moment). A process that keeps calling `exec` is then not missed by one unlucky read; a
//! look's [`Patience`] bounds what all of its rereads may cost together.
//!
//! It must never signal a process whose environment it did not read and find marked, this
//! process, or a process id below 2. Where `pidfd_send_signal` cannot be used (a kernel
//! before 5.1, which Legate's confinement does not support anyway, or a seccomp profile that
//! refuses it: `acp::sys::pidfd_signals` asks once), it signals by number after the
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
pub fn signal_marked(pid: i32, entry: &[u8], signal: Signal, patience: &mut Patience) -> Marked {
    let Some(target) = target(pid) else {
        return Marked::Unreadable;
    };
    let Ok(dir) = process_dir(pid) else {
        return Marked::Unreadable;
    };
    match environment(&dir, patience) {
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
pub fn carries(pid: i32, entry: &[u8], patience: &mut Patience) -> bool {
    target(pid).is_some()
        && process_dir(pid)
            .ok()
            .and_then(|dir| environment(&dir, patience).ok())
            .is_some_and(|environ| holds(&environ, entry))
}

/// How long one look over `/proc` may spend reading environments again while an `exec` may
/// be under way (see the module doc): 200 ms by default, shared by every process of the
/// look, so that an agent with many processes that keep calling `exec` makes a look at most
/// that much longer. Spent, a look reads each environment once.
#[derive(Debug, Clone, Copy)]
pub struct Patience {
    left: std::time::Duration,
}

impl Default for Patience {
    fn default() -> Self {
        Self {
            left: std::time::Duration::from_millis(200),
        }
    }
}

impl Patience {
    /// Takes one pause from what is left; false when nothing is.
    fn take(&mut self) -> bool {
        let Some(left) = self.left.checked_sub(EXEC_PAUSE) else {
            return false;
        };
        self.left = left;
        true
    }
}

/// Whether a thread of the headless process `pid` still runs: one whose own state is not a
/// zombie's (a thread that exited under a tracer stays a zombie until the tracer reaps it,
/// and runs nothing). Every thread is looked at, however many zombies come first. False when
/// the process is gone; true when its threads cannot all be read (an error listing them, a
/// stat that does not read), so that nothing hides behind an unreadable thread.
pub fn threads_run(pid: i32) -> bool {
    let gone =
        |e: rustix::io::Errno| matches!(e, rustix::io::Errno::SRCH | rustix::io::Errno::NOENT);
    let task = match process_dir(pid).and_then(|dir| open_dir_at(&dir, "task")) {
        Ok(task) => task,
        Err(e) => return !gone(e),
    };
    let Ok(threads) = rustix::fs::Dir::read_from(&task) else {
        return true;
    };
    for entry in threads {
        let Ok(entry) = entry else {
            return true;
        };
        let Some(tid) = thread_id(&entry) else {
            continue;
        };
        match read_at(&task, &format!("{tid}/stat")) {
            Ok(line) => match ProcStat::parse(&line) {
                Some(stat) if !stat.runs() => {}
                _ => return true,
            },
            Err(e)
                if gone(rustix::io::Errno::from_io_error(&e).unwrap_or(rustix::io::Errno::IO)) => {}
            Err(_) => return true,
        }
    }
    false
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

/// How many times an environment is read again while the read may have met an `exec` under
/// way ([`ProcStat::environment_unsettled`]), and the pause between reads.
const EXEC_READS: usize = 10;
const EXEC_PAUSE: std::time::Duration = std::time::Duration::from_millis(1);
/// How many of those an environment empty in place (`env -i`, or `exec` placing it) gets.
const EMPTY_READS: usize = 2;

/// The environment of the process `dir` stands for: its own (read again, up to
/// [`EXEC_READS`] times and within `patience`, while the read may have met an `exec` under
/// way: see the module doc), or, when it is headless, the first of its threads' that reads
/// non-empty (empty when they all read empty). `Err` when nothing can be read.
fn environment(dir: &OwnedFd, patience: &mut Patience) -> Result<Vec<u8>, ()> {
    let read_stat = || {
        read_at(dir, "stat")
            .ok()
            .and_then(|line| ProcStat::parse(&line))
    };
    let mut stat = read_stat();
    if stat.is_some_and(|s| s.is_headless()) {
        return thread_environment(dir);
    }
    let mut environ = read_at(dir, "environ").map_err(|_| ())?;
    for attempt in 0..EXEC_READS {
        // Every entry ends with a NUL: one that does not was cut.
        let cut = environ.last().is_some_and(|b| *b != 0);
        // The stat read before this read judges it first (a read cut or emptied by an
        // `exec` is shorter than the span placed before it); each reread reads it again.
        let unsettled = stat.is_some_and(|s| {
            s.environment_unsettled(environ.len())
                // `exec` places the environment's start and end at one address before it
                // moves the end: an environment empty in place is looked at twice more.
                || (attempt < EMPTY_READS
                    && environ.is_empty()
                    && s.runs()
                    && !s.is_kernel_thread())
        });
        if (!cut && !unsettled) || !patience.take() {
            break;
        }
        std::thread::sleep(EXEC_PAUSE);
        stat = read_stat();
        environ = read_at(dir, "environ").map_err(|_| ())?;
    }
    Ok(environ)
}

/// A headless process's environment, from the first of its threads that reads one (every
/// thread is tried: zombie threads, which read nothing, may come first).
fn thread_environment(dir: &OwnedFd) -> Result<Vec<u8>, ()> {
    let task = open_dir_at(dir, "task").map_err(|_| ())?;
    let threads = rustix::fs::Dir::read_from(&task).map_err(|_| ())?;
    let mut read_any = false;
    for tid in threads.filter_map(Result::ok).filter_map(|e| thread_id(&e)) {
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

/// A `task` directory entry's thread id (not `.` or `..`).
fn thread_id(entry: &rustix::fs::DirEntry) -> Option<u32> {
    entry.file_name().to_str().ok()?.parse().ok()
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
