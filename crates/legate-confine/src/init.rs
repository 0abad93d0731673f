//! The child side of isolation: namespaces, the hidden home, the tiny init, the lifeline and
//! the capability drop. Everything here after `fork` is system calls on data prepared in the
//! parent (async-signal-safe: no allocation, no lock, no `std` I/O).
//!
//! The process Tokio knows is **C**. In the pre-exec hook, C unshares a mount, a PID and a
//! network namespace (inside a user namespace mapping only its own ids when it is not root,
//! `namespaces::Mode`; without the network namespace where the kernel refuses one), brings the new
//! namespace's `lo` up and, when asked, hands Legate a listener on its `127.0.0.1` (module
//! `network`; the listener and the socket pair are closed before anything forks), makes `/`
//! private, clones the trees to keep visible, covers each hidden path
//! (an empty read-only tmpfs, or `/dev/null` over a file), moves the kept trees back at their
//! paths and re-enters its working directory through the new tree. It then forks **G**, pid 1
//! of the new namespace, which mounts a fresh `/proc` and forks **A**, the agent: A drops
//! capabilities, returns to the hook's caller (Landlock, then `exec`).
//!
//! * C closes every fd it inherited (std's exec-error pipe, other agents' pipes, locks) once
//!   A has exec'd, ignores `SIGINT`/`SIGTERM`/`SIGHUP` (Legate's group signals reach A), waits
//!   for G and exits as A did (same code, or the same signal).
//! * G keeps only Legate's **lifeline** (a pipe whose write end only Legate holds) and a
//!   `signalfd`: it reaps every process of the namespace, exits when A exits, and exits at
//!   once when the lifeline reaches EOF (Legate died) or C dies (`PR_SET_PDEATHSIG`). When G
//!   exits, the kernel kills everything left in the namespace, whatever its process group.
//!   A process of the namespace that made G its tracer (`PTRACE_TRACEME`) is let go at its
//!   first stop (`tracees::let_go`): G traces nothing, and never takes a stop for an exit.
//! * C and G are non-dumpable: their memory (and `/proc/<pid>/environ`, Legate's environment)
//!   is unreadable to anything without `CAP_SYS_PTRACE`, which A drops.
//!
//! This module must never allocate after `fork`, never return from C or G on success, and
//! never leave A with a capability outside `caps::KEPT`.
#![allow(unsafe_code)]

use crate::isolation::{Op, Plan};
use crate::namespaces::{Mode, Namespaces, UserMaps, unshare};
use crate::network;
use libc::c_int;
use std::io;
use std::sync::OnceLock;

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
/// `mount_setattr`'s attributes (`linux/mount.h`).
const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NODEV: u64 = 0x4;

/// `struct mount_attr` (`MOUNT_ATTR_SIZE_VER0`: 32 bytes).
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub(crate) fn errno() -> io::Error {
    io::Error::last_os_error()
}

pub(crate) fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 { Err(errno()) } else { Ok(rc) }
}

/// Legate's lifeline: a pipe created once per process, both ends close-on-exec, both held by
/// Legate until it dies. Every init of a namespace polls the read end; EOF means Legate is gone.
pub(crate) fn lifeline() -> Option<(c_int, c_int)> {
    static PIPE: OnceLock<Option<(c_int, c_int)>> = OnceLock::new();
    *PIPE.get_or_init(|| {
        let mut fds = [0 as c_int; 2];
        // SAFETY: `pipe2` writes two fds into the two-element array it is given.
        let rc = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) };
        if rc != 0 {
            tracing::warn!(error = %errno(), "could not create Legate's lifeline pipe");
            return None;
        }
        // Held for the life of the process: never closed.
        Some((fds[0], fds[1]))
    })
}

/// What the child needs, prepared in the parent.
#[derive(Debug)]
pub(crate) struct Child {
    plan: Plan,
    /// One slot per clone of [`Plan::clones`], filled in the child.
    clone_fds: Vec<c_int>,
    /// One slot per writable tree and per device node of the seal, filled in the child.
    writable_fds: Vec<c_int>,
    device_fds: Vec<c_int>,
    /// The working directory, read in the child before anything moves.
    cwd: Vec<u8>,
    lifeline: (c_int, c_int),
    /// `Some` to enter a user namespace first ([`Mode::User`]).
    maps: Option<UserMaps>,
    /// Whether to enter a network namespace of its own too (its `lo` brought up).
    net: bool,
    /// The egress listener's handoff, with `net` only.
    egress: Option<network::Sender>,
}

impl Child {
    /// The child's data for `plan`, with Legate's `lifeline`, entering the namespaces as
    /// `ns` says, and handing an egress listener over through `egress` (network namespace
    /// only: ignored without one).
    pub(crate) fn new(
        plan: Plan,
        lifeline: (c_int, c_int),
        ns: Namespaces,
        egress: Option<network::Sender>,
    ) -> Self {
        Self {
            clone_fds: vec![-1; plan.clones.len()],
            writable_fds: vec![-1; plan.seal.writable.len()],
            device_fds: vec![-1; plan.seal.devices.len()],
            plan,
            cwd: vec![0; libc::PATH_MAX as usize + 1],
            lifeline,
            maps: (ns.mode == Mode::User).then(UserMaps::own),
            net: ns.net,
            egress: egress.filter(|_| ns.net),
        }
    }

    /// Whether the namespace gets a devpts of its own (its terminals need their Landlock
    /// rights given again, `kernel::Ruleset::allow_own_terminals`).
    pub(crate) fn own_terminals(&self) -> bool {
        self.plan.seal.pts
    }

    /// Runs in C. Returns in A only (with `Ok`), or in C with the error that stopped the
    /// setup (std turns it into a spawn error). C and G never return on success.
    pub(crate) fn enter(&mut self) -> io::Result<()> {
        // SAFETY (whole function): system calls on memory prepared in the parent; the
        // buffers are written in place (no allocation); C is single-threaded after `fork`.
        unsafe {
            if libc::getcwd(self.cwd.as_mut_ptr().cast(), self.cwd.len()).is_null() {
                return Err(errno());
            }
            unshare(self.maps.as_ref(), self.net)?;
            if self.net {
                network::loopback_up()?;
                // Before anything forks: neither G nor A ever holds the listener or the pair.
                if let Some(egress) = &self.egress {
                    egress.hand_over()?;
                }
            }
            check(
                libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_PRIVATE,
                    std::ptr::null(),
                )
                .into(),
            )?;
            self.hide()?;
            self.seal()?;
            check(libc::chdir(self.cwd.as_ptr().cast()).into())?;
            let mut setup = [0 as c_int; 2];
            let mut status = [0 as c_int; 2];
            check(libc::pipe2(setup.as_mut_ptr(), libc::O_CLOEXEC).into())?;
            check(libc::pipe2(status.as_mut_ptr(), libc::O_CLOEXEC).into())?;
            let g = libc::fork();
            if g < 0 {
                return Err(errno());
            }
            if g == 0 {
                libc::close(setup[0]);
                libc::close(status[0]);
                return self.init(setup[1], status[1]);
            }
            libc::close(setup[1]);
            libc::close(status[1]);
            supervise(g, setup[0], status[0])
        }
    }

    /// C's mount work: clone what stays visible, cover what is hidden, put the clones back.
    unsafe fn hide(&mut self) -> io::Result<()> {
        // SAFETY: see `enter`.
        unsafe {
            for (i, path) in self.plan.clones.iter().enumerate() {
                let fd = check(libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    OPEN_TREE_CLONE
                        | libc::AT_RECURSIVE as libc::c_uint
                        | libc::O_CLOEXEC as libc::c_uint,
                ))?;
                if let Some(slot) = self.clone_fds.get_mut(i) {
                    *slot = fd as c_int;
                }
            }
            let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
            for op in &self.plan.ops {
                match op {
                    Op::Tmpfs(p) => check(
                        libc::mount(
                            c"tmpfs".as_ptr(),
                            p.as_ptr(),
                            c"tmpfs".as_ptr(),
                            flags,
                            c"mode=0711,size=64k,nr_inodes=1024".as_ptr().cast(),
                        )
                        .into(),
                    )?,
                    Op::NullFile(p) => check(
                        libc::mount(
                            c"/dev/null".as_ptr(),
                            p.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND,
                            std::ptr::null(),
                        )
                        .into(),
                    )?,
                    Op::MkDir(p) => {
                        if libc::mkdir(p.as_ptr(), 0o711) != 0
                            && *libc::__errno_location() != libc::EEXIST
                        {
                            return Err(errno());
                        }
                        0
                    }
                    Op::MkFile(p) => {
                        let fd = libc::open(
                            p.as_ptr(),
                            libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC,
                            0o600,
                        );
                        if fd < 0 {
                            return Err(errno());
                        }
                        libc::close(fd);
                        0
                    }
                    Op::Move(i, p) => {
                        let fd = self.clone_fds.get(*i).copied().unwrap_or(-1);
                        check(libc::syscall(
                            libc::SYS_move_mount,
                            fd,
                            c"".as_ptr(),
                            libc::AT_FDCWD,
                            p.as_ptr(),
                            MOVE_MOUNT_F_EMPTY_PATH,
                        ))?;
                        libc::close(fd);
                        0
                    }
                };
            }
            for p in &self.plan.read_only {
                check(
                    libc::mount(
                        std::ptr::null(),
                        p.as_ptr(),
                        std::ptr::null(),
                        libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | flags,
                        std::ptr::null(),
                    )
                    .into(),
                )?;
            }
            Ok(())
        }
    }

    /// C's sealing of the namespace, after `hide` ([`crate::isolation::Seal`] says what and
    /// why): everything read-only but the writable trees, `/dev` `nodev` but for the kept
    /// devices, a devpts of its own, an empty `/dev/shm`.
    unsafe fn seal(&mut self) -> io::Result<()> {
        // SAFETY: see `enter`; every pointer is a `CString` of the plan, a static C string
        // or a `MountAttr` on this stack frame.
        unsafe {
            let seal = &self.plan.seal;
            let clone = |path: &std::ffi::CStr, recursive: bool| -> io::Result<c_int> {
                let flags = OPEN_TREE_CLONE
                    | libc::O_CLOEXEC as libc::c_uint
                    | if recursive {
                        libc::AT_RECURSIVE as libc::c_uint
                    } else {
                        0
                    };
                check(libc::syscall(
                    libc::SYS_open_tree,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    flags,
                ))
                .map(|fd| fd as c_int)
            };
            let put_back = |fd: c_int, path: &std::ffi::CStr| -> io::Result<()> {
                let moved = check(libc::syscall(
                    libc::SYS_move_mount,
                    fd,
                    c"".as_ptr(),
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    MOVE_MOUNT_F_EMPTY_PATH,
                ));
                libc::close(fd);
                moved.map(|_| ())
            };
            // A kernel without `mount_setattr` (before 5.12) keeps its mounts as they are.
            let set = |path: &std::ffi::CStr, recursive: bool, attr: u64| -> io::Result<()> {
                let attr = MountAttr {
                    attr_set: attr,
                    attr_clr: 0,
                    propagation: 0,
                    userns_fd: 0,
                };
                check(libc::syscall(
                    libc::SYS_mount_setattr,
                    libc::AT_FDCWD,
                    path.as_ptr(),
                    if recursive { libc::AT_RECURSIVE } else { 0 } as libc::c_uint,
                    &raw const attr,
                    size_of::<MountAttr>(),
                ))
                .map(|_| ())
                .or_else(|e| match e.raw_os_error() {
                    Some(libc::ENOSYS) => Ok(()),
                    _ => Err(e),
                })
            };
            let dev = !seal.devices.is_empty() || seal.pts;
            if dev && !seal.dev_mount {
                // `/dev` a plain directory of `/`: a mount of its own first, so that it alone
                // turns `nodev`.
                check(
                    libc::mount(
                        c"/dev".as_ptr(),
                        c"/dev".as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    )
                    .into(),
                )?;
            }
            if seal.read_only {
                for (i, path) in seal.writable.iter().enumerate() {
                    let fd = clone(path, true)?;
                    if let Some(slot) = self.writable_fds.get_mut(i) {
                        *slot = fd;
                    }
                }
                set(c"/", true, MOUNT_ATTR_RDONLY)?;
            }
            // The kept devices are cloned read-only (no `chmod` of the host's `/dev/null`; a
            // write to a device is not a write to its mount) and before `nodev`.
            for (i, path) in seal.devices.iter().enumerate() {
                let fd = clone(path, false)?;
                if let Some(slot) = self.device_fds.get_mut(i) {
                    *slot = fd;
                }
            }
            if dev {
                set(c"/dev", true, MOUNT_ATTR_NODEV)?;
            }
            for (fd, path) in self.device_fds.iter().zip(&seal.devices) {
                put_back(*fd, path)?;
            }
            let flags = libc::MS_NOSUID | libc::MS_NOEXEC;
            if seal.pts {
                check(
                    libc::mount(
                        c"devpts".as_ptr(),
                        c"/dev/pts".as_ptr(),
                        c"devpts".as_ptr(),
                        flags,
                        c"newinstance,ptmxmode=0666,mode=0620".as_ptr().cast(),
                    )
                    .into(),
                )?;
                check(
                    libc::mount(
                        c"/dev/pts/ptmx".as_ptr(),
                        c"/dev/ptmx".as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND,
                        std::ptr::null(),
                    )
                    .into(),
                )?;
            }
            if seal.shm {
                check(
                    libc::mount(
                        c"tmpfs".as_ptr(),
                        c"/dev/shm".as_ptr(),
                        c"tmpfs".as_ptr(),
                        flags | libc::MS_NODEV,
                        c"mode=1777,size=64k,nr_inodes=64".as_ptr().cast(),
                    )
                    .into(),
                )?;
            }
            if seal.mqueue {
                // The IPC namespace's own queues, not the host's.
                check(
                    libc::mount(
                        c"mqueue".as_ptr(),
                        c"/dev/mqueue".as_ptr(),
                        c"mqueue".as_ptr(),
                        flags | libc::MS_NODEV,
                        std::ptr::null(),
                    )
                    .into(),
                )?;
            }
            if seal.read_only {
                for (fd, path) in self.writable_fds.iter().zip(&seal.writable) {
                    put_back(*fd, path)?;
                }
            }
            Ok(())
        }
    }

    /// G: pid 1 of the namespace. Returns only in A.
    unsafe fn init(&mut self, setup: c_int, status: c_int) -> io::Result<()> {
        // SAFETY: see `enter`. G is single-threaded; its setup errors go to C through `setup`.
        unsafe {
            let fail = |e: c_int| -> ! {
                let b = e.to_ne_bytes();
                libc::write(setup, b.as_ptr().cast(), b.len());
                libc::_exit(127)
            };
            libc::prctl(libc::PR_SET_NAME, c"legate-init".as_ptr(), 0, 0, 0);
            libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                fail(*libc::__errno_location());
            }
            if libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            ) != 0
            {
                fail(*libc::__errno_location());
            }
            let mut chld: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut chld);
            libc::sigaddset(&mut chld, libc::SIGCHLD);
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigprocmask(libc::SIG_BLOCK, &chld, &mut old);
            let sfd = libc::signalfd(-1, &chld, libc::SFD_CLOEXEC | libc::SFD_NONBLOCK);
            if sfd < 0 {
                fail(*libc::__errno_location());
            }
            let a = libc::fork();
            if a < 0 {
                fail(*libc::__errno_location());
            }
            if a == 0 {
                // A: the agent-to-be. Its signal mask as it was; the rest is CLOEXEC.
                libc::sigprocmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
                return Ok(());
            }
            let (lifeline, _) = self.lifeline;
            close_all_except(&mut [lifeline, sfd, status]);
            reap(a, lifeline, sfd, status)
        }
    }
}

/// Leaves the controlling terminal the process inherited from Legate (the user's, when
/// Legate runs in one), unless it leads its own session: a process without one cannot push
/// input into a terminal (`TIOCSTI` needs it, or `CAP_SYS_ADMIN`), `/dev/tty` names none, and
/// its children get none. Nothing when there is no terminal.
pub(crate) fn leave_terminal() {
    // SAFETY: system calls on a static C string and a local fd; no allocation (runs between
    // `fork` and `exec`).
    unsafe {
        if libc::getsid(0) == libc::getpid() {
            return;
        }
        let fd = libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC,
        );
        if fd >= 0 {
            libc::ioctl(fd, libc::TIOCNOTTY);
            libc::close(fd);
        }
    }
}

/// Marks every fd above 2 close-on-exec: a descriptor Legate inherited from whatever started
/// it (a file open for writing, a directory of Legate's home, another program's pipe) never
/// reaches the program, whose stdio alone is its own. Std's own pipe to report an `exec`
/// failure is close-on-exec already. Without `close_range` (Linux 5.11), nothing is marked.
pub(crate) fn close_on_exec_above_stdio() {
    // SAFETY: `close_range` with `CLOSE_RANGE_CLOEXEC` only sets flags on fds.
    unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        );
    }
}

/// Closes 0, 1, 2 and every fd above them except `keep`.
unsafe fn close_all_except(keep: &mut [c_int]) {
    keep.sort_unstable();
    // SAFETY: closing fds has no memory-safety preconditions; the caller keeps what it uses.
    unsafe {
        for fd in 0..3 {
            if !keep.contains(&fd) {
                libc::close(fd);
            }
        }
        let mut from: libc::c_uint = 3;
        for &k in keep.iter() {
            let Ok(k) = libc::c_uint::try_from(k) else {
                continue;
            };
            if k > from {
                libc::syscall(libc::SYS_close_range, from, k - 1, 0);
            }
            if k + 1 > from {
                from = k + 1;
            }
        }
        libc::syscall(libc::SYS_close_range, from, libc::c_uint::MAX, 0);
    }
}

/// G's loop: reap every child and let go of every tracee that stops; when A
/// exits, hand its status to C and exit (the namespace dies with G); when the lifeline
/// reaches EOF, exit at once.
unsafe fn reap(a: libc::pid_t, lifeline: c_int, sfd: c_int, status: c_int) -> ! {
    // SAFETY: system calls on stack memory only.
    unsafe {
        let mut fds = [
            libc::pollfd {
                fd: lifeline,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: sfd,
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        loop {
            let mut st = 0;
            loop {
                // A tracee is waited for as a child of G's, even a thread (no `__WALL`).
                let pid = libc::waitpid(-1, &mut st, libc::WNOHANG);
                if pid > 0 && libc::WIFSTOPPED(st) {
                    // Only a tracee's stop is reported (no `WUNTRACED`): something in the
                    // namespace (A, a thread of A's, an orphan G adopted) called
                    // `PTRACE_TRACEME` with G as its parent. G traces nothing: the tracee
                    // goes on as it would untraced. Taken for A's exit, its stop used to end
                    // the run (127). A tracee killed meanwhile is reaped by this loop.
                    crate::tracees::let_go(pid, libc::WSTOPSIG(st));
                    continue;
                }
                if pid == a {
                    let b = st.to_ne_bytes();
                    libc::write(status, b.as_ptr().cast(), b.len());
                    libc::_exit(0);
                }
                if pid <= 0 {
                    break;
                }
            }
            let n = libc::poll(fds.as_mut_ptr(), 2, -1);
            if n < 0 {
                continue;
            }
            if fds[0].revents != 0 {
                libc::_exit(137); // Legate is gone: the namespace goes with it.
            }
            let mut info: libc::signalfd_siginfo = std::mem::zeroed();
            while libc::read(
                sfd,
                (&raw mut info).cast(),
                size_of::<libc::signalfd_siginfo>(),
            ) > 0
            {}
        }
    }
}

/// C after forking G: learn how the setup went, then mirror A.
unsafe fn supervise(g: libc::pid_t, setup: c_int, status: c_int) -> io::Result<()> {
    // SAFETY: system calls on stack memory only; C is single-threaded.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"legate-ns".as_ptr(), 0, 0, 0);
        libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0);
        for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(sig, libc::SIG_IGN);
        }
        let mut b = [0u8; 4];
        let n = read_full(setup, &mut b);
        libc::close(setup);
        if n == 4 {
            // G could not set up: nothing was exec'd; std reports the errno.
            let mut st = 0;
            libc::waitpid(g, &mut st, 0);
            for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
                libc::signal(sig, libc::SIG_DFL);
            }
            return Err(io::Error::from_raw_os_error(c_int::from_ne_bytes(b)));
        }
        // A exec'd (or failed and told std itself): drop everything Legate's fork left us.
        close_all_except(&mut [status]);
        let mut st = 0;
        while libc::waitpid(g, &mut st, 0) < 0 && *libc::__errno_location() == libc::EINTR {}
        let mut a = [0u8; 4];
        if read_full(status, &mut a) == 4 {
            st = c_int::from_ne_bytes(a);
        }
        if libc::WIFEXITED(st) {
            libc::_exit(libc::WEXITSTATUS(st));
        }
        if libc::WIFSIGNALED(st) {
            let sig = libc::WTERMSIG(st);
            let none = libc::rlimit {
                rlim_cur: 0,
                rlim_max: 0,
            };
            libc::setrlimit(libc::RLIMIT_CORE, &none);
            libc::signal(sig, libc::SIG_DFL);
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::kill(libc::getpid(), sig);
            libc::_exit(128 + sig);
        }
        libc::_exit(127)
    }
}

/// Reads up to `buf.len()` bytes, retrying on `EINTR`; the count read (0 at EOF).
unsafe fn read_full(fd: c_int, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        // SAFETY: the pointer and length stay within `buf`.
        let n = unsafe { libc::read(fd, buf[got..].as_mut_ptr().cast(), buf.len() - got) };
        if n > 0 {
            got += n as usize;
        } else if n == 0 || unsafe { *libc::__errno_location() } != libc::EINTR {
            break;
        }
    }
    got
}
