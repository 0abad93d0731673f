//! Signalling a process found by a marker in its environment, and only that process.
//!
//! Legate finds what a run or a dead runner left behind by reading `/proc/<pid>/environ` for
//! a `NAME=value` entry of its own ([`crate::cleanup`], the engine's recovery). A process id is
//! only a number: the process read may exit, and another take its number, before the signal
//! is sent. [`signal_marked`] therefore opens a process whose environment carried the marker
//! (`pidfd_open`), reads its environment **again** after that, and signals through the handle:
//! the handle never refers to a later process, so the signal reaches the process whose
//! environment carried the marker, or nobody. One handle is open at a time (an agent may leave
//! thousands of processes; a handle each at once would exhaust this process's descriptors).
//!
//! It must never signal a process whose environment it did not read and find marked, this
//! process, or a process id below 2. Where the kernel has no `pidfd_open` (before 5.3) or a
//! seccomp profile refuses it, it signals by process id after the same check, as before the
//! handle existed; that leaves the window between the read and the signal open.

use rustix::process::{Pid, PidfdFlags, Signal};
use std::fs;

/// What [`signal_marked`] found of one process and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Marked {
    /// It carried the marker and was signalled (or it carried the marker and may not be
    /// signalled by this user: it exists, `EPERM`).
    Signalled,
    /// It carried the marker, but it had exited by the time the signal was sent: the process
    /// id may already name another process, which was not signalled. Look again.
    Vanished,
    /// Its environment did not hold the marker.
    Unmarked,
    /// Its environment read empty: a kernel thread, a process that cleared it, or one in the
    /// middle of `exec` (whose new environment is not set up yet).
    Empty,
    /// It could not be read (gone, another user's, not dumpable).
    Unreadable,
}

/// Reads process `pid`'s environment and, when an entry is exactly `entry` (`NAME=value`),
/// opens the process, reads its environment again through that handle's process, and sends
/// `signal` through the handle (see the module doc). The first read keeps a look over every
/// process cheap: only a marked one is opened.
pub fn signal_marked(pid: i32, entry: &[u8], signal: Signal) -> Marked {
    if pid <= 1 {
        return Marked::Unreadable;
    }
    let Some(target) = Pid::from_raw(pid) else {
        return Marked::Unreadable;
    };
    if target == rustix::process::getpid() {
        return Marked::Unreadable;
    }
    if let Err(not) = carries(pid, entry) {
        return not;
    }
    let handle = match rustix::process::pidfd_open(target, PidfdFlags::empty()) {
        Ok(fd) => Some(fd),
        Err(rustix::io::Errno::SRCH) => return Marked::Vanished,
        // No pidfd here (an old kernel, a seccomp profile): by process id, as the module says.
        Err(_) => None,
    };
    // The handle names the process that had this number when it was opened; if that one is
    // alive now, this read is its environment (a number is not reused while its process
    // lives), and if it is not, the signal below reaches nobody.
    if let Err(not) = carries(pid, entry) {
        return not;
    }
    #[cfg(test)]
    tests::BEFORE_SIGNAL.with(|hook| {
        if let Some(hook) = hook.borrow_mut().as_mut() {
            hook(pid);
        }
    });
    let sent = match &handle {
        Some(fd) => rustix::process::pidfd_send_signal(fd, signal),
        None => rustix::process::kill_process(target, signal),
    };
    match sent {
        Ok(()) | Err(rustix::io::Errno::PERM) => Marked::Signalled,
        Err(_) => Marked::Vanished,
    }
}

/// Whether `/proc/<pid>/environ` holds `entry` now; if not, why not.
fn carries(pid: i32, entry: &[u8]) -> Result<(), Marked> {
    match fs::read(format!("/proc/{pid}/environ")) {
        Err(_) => Err(Marked::Unreadable),
        Ok(environ) if environ.is_empty() => Err(Marked::Empty),
        Ok(environ) if environ.split(|b| *b == 0).any(|kv| kv == entry) => Ok(()),
        Ok(_) => Err(Marked::Unmarked),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    #![allow(unsafe_code)]
    use super::*;
    use std::cell::RefCell;
    use std::os::unix::process::CommandExt;
    use std::process::{Child, Command};

    type Hook = Box<dyn FnMut(i32)>;

    thread_local! {
        /// Run between the environment's read and the signal, as the scheduler may.
        pub(crate) static BEFORE_SIGNAL: RefCell<Option<Hook>> = const { RefCell::new(None) };
    }

    fn sleeper(marker: Option<&str>) -> Child {
        let mut cmd = Command::new("sleep");
        cmd.arg("100").process_group(0);
        if let Some(m) = marker {
            cmd.env("LEGATE_TEST_MARK", m);
        }
        cmd.spawn().unwrap()
    }

    fn alive(child: &mut Child) -> bool {
        child.try_wait().unwrap().is_none()
    }

    #[test]
    fn only_a_marked_process_is_signalled() {
        let mark = uuid::Uuid::new_v4().simple().to_string();
        let entry = format!("LEGATE_TEST_MARK={mark}");
        let mut plain = sleeper(None);
        let mut other = sleeper(Some("another"));
        let mut marked = sleeper(Some(&mark));
        let pid = |c: &Child| i32::try_from(c.id()).unwrap();
        assert_eq!(
            signal_marked(pid(&plain), entry.as_bytes(), Signal::KILL),
            Marked::Unmarked
        );
        assert_eq!(
            signal_marked(pid(&other), entry.as_bytes(), Signal::KILL),
            Marked::Unmarked
        );
        assert_eq!(
            signal_marked(pid(&marked), entry.as_bytes(), Signal::KILL),
            Marked::Signalled
        );
        marked.wait().unwrap();
        assert!(alive(&mut plain) && alive(&mut other));
        // Reaped: nothing there to read.
        assert_eq!(
            signal_marked(pid(&marked), entry.as_bytes(), Signal::KILL),
            Marked::Unreadable
        );
        // Never this process, init, or a group.
        let me = i32::try_from(std::process::id()).unwrap();
        for pid in [me, 1, 0, -1] {
            assert_eq!(
                signal_marked(pid, b"PATH", Signal::KILL),
                Marked::Unreadable
            );
        }
        for mut c in [plain, other] {
            c.kill().unwrap();
            c.wait().unwrap();
        }
    }

    /// Starts `/bin/sleep 100` (unmarked) as process `pid` with `clone3`'s `set_tid`, which
    /// needs `CAP_SYS_ADMIN`; `None` when it may not or the number is taken.
    fn sleeper_at(pid: i32) -> Option<i32> {
        let path = c"/bin/sleep";
        let argv = [c"sleep".as_ptr(), c"100".as_ptr(), std::ptr::null()];
        let envp = [std::ptr::null::<libc::c_char>()];
        let tid = [libc::pid_t::from(pid)];
        #[repr(C)]
        #[derive(Default)]
        struct CloneArgs {
            flags: u64,
            pidfd: u64,
            child_tid: u64,
            parent_tid: u64,
            exit_signal: u64,
            stack: u64,
            stack_size: u64,
            tls: u64,
            set_tid: u64,
            set_tid_size: u64,
            cgroup: u64,
        }
        let args = CloneArgs {
            exit_signal: libc::SIGCHLD as u64,
            set_tid: tid.as_ptr() as u64,
            set_tid_size: 1,
            ..CloneArgs::default()
        };
        // SAFETY: a fork-like `clone3` (no shared memory or stack: flags 0); in the child
        // only `execve` and `_exit` run, both async-signal-safe, on pointers prepared above.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_clone3,
                std::ptr::from_ref(&args),
                std::mem::size_of::<CloneArgs>(),
            )
        };
        match rc {
            0 => unsafe {
                libc::execve(path.as_ptr(), argv.as_ptr(), envp.as_ptr());
                libc::_exit(127)
            },
            rc if rc > 0 => Some(i32::try_from(rc).unwrap()),
            _ => None,
        }
    }

    /// The race the handle closes: the marked process exits after its environment was read
    /// and an unmarked one takes its number before the signal. The newcomer must live.
    #[test]
    fn a_process_that_takes_a_read_process_number_is_never_signalled() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("skipped: making a process of a chosen number (clone3 set_tid) needs root");
            return;
        }
        let mark = uuid::Uuid::new_v4().simple().to_string();
        let entry = format!("LEGATE_TEST_MARK={mark}");
        let mut tries = 0;
        loop {
            tries += 1;
            let mut marked = sleeper(Some(&mark));
            let number = i32::try_from(marked.id()).unwrap();
            let newcomer = std::rc::Rc::new(std::cell::Cell::new(None));
            let took = newcomer.clone();
            BEFORE_SIGNAL.with(|h| {
                *h.borrow_mut() = Some(Box::new(move |pid| {
                    marked.kill().unwrap();
                    marked.wait().unwrap();
                    took.set(sleeper_at(pid));
                }));
            });
            let outcome = signal_marked(number, entry.as_bytes(), Signal::KILL);
            BEFORE_SIGNAL.with(|h| h.borrow_mut().take());
            let Some(newcomer) = newcomer.get() else {
                // Another process of this machine took the number first: try another.
                assert!(tries < 20, "no process could be made at a freed number");
                continue;
            };
            assert_eq!(newcomer, number);
            let mut status = 0;
            // SAFETY: `waitpid` on our own child with a valid pointer.
            let waited = unsafe { libc::waitpid(newcomer, &raw mut status, libc::WNOHANG) };
            let lived = waited == 0;
            // SAFETY: `kill`/`waitpid` on our own child.
            unsafe {
                libc::kill(newcomer, libc::SIGKILL);
                libc::waitpid(newcomer, &raw mut status, 0);
            }
            assert!(lived, "the process that took the number was signalled");
            assert_eq!(outcome, Marked::Vanished);
            return;
        }
    }
}
