//! Which namespaces this process may create, and how ([`probe`], tried once in throwaway
//! children): mount and PID namespaces, directly (root) or inside a user namespace of the
//! child's own ([`Mode`]), and, preferably, a network namespace whose `lo` it can bring up;
//! then the `unshare` (and the user namespace's maps) that the child side (`init`) and the
//! probe both run after `fork`, without allocating.
#![allow(unsafe_code)]

use crate::init::{check, errno};
use crate::network;
use std::io;
use std::sync::OnceLock;

const OPEN_TREE_CLONE: libc::c_uint = 1;

/// How this process may create the namespaces: directly (root, or `CAP_SYS_ADMIN`), or
/// inside a user namespace of its own that maps only its own uid and gid (a process that is
/// not root, where unprivileged user namespaces are allowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Plain,
    User,
}

/// The user namespace's maps, prepared in the parent: this process's own ids, to themselves.
#[derive(Debug)]
pub(crate) struct UserMaps {
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

impl UserMaps {
    pub(crate) fn own() -> Self {
        // SAFETY: `getuid`/`getgid` have no preconditions and cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Self {
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
        }
    }

    /// In the child, right after `unshare(CLONE_NEWUSER | …)`: `setgroups` denied, then the
    /// maps. Async-signal-safe.
    ///
    /// Legate makes itself non-dumpable (`legate`'s `harden`), and a non-dumpable process's
    /// `/proc/self` files belong to root of the first user namespace: after `unshare` the
    /// child could not open its own `setgroups` (`EACCES`), so a Legate that is not root never
    /// had namespaces at all. The child is dumpable for the three writes only, as runc does,
    /// and non-dumpable again before anything runs in the namespace. In that window a process
    /// of the same user outside any confinement could attach where Yama allows it
    /// (`ptrace_scope` 0); no agent can: Landlock refuses ptrace from its domain, and Legate's
    /// processes are not in its PID namespace.
    fn write(&self) -> io::Result<()> {
        // SAFETY: `prctl` with these options changes a flag of this process only.
        let was = unsafe { libc::prctl(libc::PR_GET_DUMPABLE, 0, 0, 0, 0) };
        if was == 0 {
            // SAFETY: as above.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 1, 0, 0, 0) };
        }
        let written = write_file(c"/proc/self/setgroups", b"deny")
            .and_then(|()| write_file(c"/proc/self/uid_map", &self.uid_map))
            .and_then(|()| write_file(c"/proc/self/gid_map", &self.gid_map));
        if was == 0 {
            // SAFETY: as above.
            unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) };
        }
        written
    }
}

fn write_file(path: &std::ffi::CStr, data: &[u8]) -> io::Result<()> {
    // SAFETY: `open`/`write`/`close` on a valid C string and a slice's own pointer and length.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(errno());
        }
        let n = libc::write(fd, data.as_ptr().cast(), data.len());
        let e = errno();
        libc::close(fd);
        if n != data.len() as isize {
            return Err(e);
        }
        Ok(())
    }
}

/// What this process may create, as probed: how ([`Mode`]), and whether a network namespace
/// too (with its `lo` brought up).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Namespaces {
    pub(crate) mode: Mode,
    pub(crate) net: bool,
}

/// Whether (and how) this process may create mount and PID namespaces (and, preferably, a
/// network namespace whose `lo` it can bring up) and mount a `/proc` in them, tried in
/// throwaway children. Cheap after the first call.
pub(crate) fn probe() -> Option<Namespaces> {
    static PROBED: OnceLock<Option<Namespaces>> = OnceLock::new();
    *PROBED.get_or_init(|| {
        // SAFETY: `geteuid` has no preconditions and cannot fail.
        let root = unsafe { libc::geteuid() } == 0;
        let maps = UserMaps::own();
        let mut found = None;
        'probe: for net in [true, false] {
            if probe_once(None, net) {
                found = Some(Namespaces {
                    mode: Mode::Plain,
                    net,
                });
                break 'probe;
            }
            if !root && probe_once(Some(&maps), net) {
                found = Some(Namespaces {
                    mode: Mode::User,
                    net,
                });
                break 'probe;
            }
        }
        tracing::debug!(namespaces = ?found, "namespaces probed");
        if found.is_some_and(|n| !n.net) {
            tracing::warn!(
                "network namespaces unavailable: confined processes keep the host's network"
            );
        }
        found
    })
}

pub(crate) fn unshare(maps: Option<&UserMaps>, net: bool) -> io::Result<()> {
    let user = if maps.is_some() {
        libc::CLONE_NEWUSER
    } else {
        0
    };
    let net = if net { libc::CLONE_NEWNET } else { 0 };
    // SAFETY: `unshare` has no memory-safety preconditions.
    // An IPC namespace of its own too: the host's System V objects and POSIX message queues
    // are out of sight, and what the process makes goes with the namespace (a segment it
    // left behind pinned the host's memory after its task ended). A UTS namespace keeps a
    // `sethostname` (root in the namespace) from renaming the host.
    let own = libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    check(unsafe { libc::unshare(user | net | own) }.into())?;
    match maps {
        Some(m) => m.write(),
        None => Ok(()),
    }
}

fn probe_once(maps: Option<&UserMaps>, net: bool) -> bool {
    let proc_ = c"/proc";
    // SAFETY: after `fork`, the child (single-threaded) makes only system calls on static
    // strings and on `maps`, prepared before the fork, and `_exit`s; the parent only waits.
    unsafe {
        let pid = libc::fork();
        if pid < 0 {
            return false;
        }
        if pid == 0 {
            if unshare(maps, net).is_err() {
                libc::_exit(1);
            }
            if net && network::loopback_up().is_err() {
                libc::_exit(7);
            }
            if libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ) != 0
            {
                libc::_exit(1);
            }
            let t = libc::syscall(
                libc::SYS_open_tree,
                libc::AT_FDCWD,
                c"/".as_ptr(),
                OPEN_TREE_CLONE
                    | libc::AT_RECURSIVE as libc::c_uint
                    | libc::O_CLOEXEC as libc::c_uint,
            );
            if t < 0 {
                libc::_exit(2);
            }
            let g = libc::fork();
            if g < 0 {
                libc::_exit(3);
            }
            if g == 0 {
                let rc = libc::mount(
                    c"proc".as_ptr(),
                    proc_.as_ptr(),
                    c"proc".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                    std::ptr::null(),
                );
                libc::_exit(if rc == 0 { 0 } else { 4 });
            }
            let mut st = 0;
            if libc::waitpid(g, &mut st, 0) != g {
                libc::_exit(5);
            }
            libc::_exit(if libc::WIFEXITED(st) {
                libc::WEXITSTATUS(st)
            } else {
                6
            });
        }
        let mut st = 0;
        loop {
            let r = libc::waitpid(pid, &mut st, 0);
            if r == pid {
                break;
            }
            if r < 0 && *libc::__errno_location() != libc::EINTR {
                return false;
            }
        }
        libc::WIFEXITED(st) && libc::WEXITSTATUS(st) == 0
    }
}
