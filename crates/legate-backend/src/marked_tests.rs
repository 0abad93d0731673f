#![allow(clippy::unwrap_used, clippy::expect_used)]
#![allow(unsafe_code)]
use super::*;
use std::cell::RefCell;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

type Hook = Box<dyn FnMut(i32)>;

thread_local! {
    /// Run between the environment's read and the signal, as the scheduler may.
    pub(crate) static BEFORE_SIGNAL: RefCell<Option<Hook>> = const { RefCell::new(None) };
}

const MARK: &str = "LEGATE_TEST_MARK";

/// Waits (up to 10 s) until process `pid`'s environment reads as `marked` says: a process
/// just spawned may still be in `exec`, its environment empty.
fn until_marked(pid: i32, entry: &str) {
    let began = Instant::now();
    while !carries(pid, entry.as_bytes(), &mut Patience::default()) {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "{pid} never showed {entry}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// `sleep 100`, its own group, with `MARK=<marker>` when given (and then shown).
fn sleeper(marker: Option<&str>) -> Child {
    let mut cmd = Command::new("sleep");
    cmd.arg("100").process_group(0);
    if let Some(m) = marker {
        cmd.env(MARK, m);
    }
    let child = cmd.spawn().unwrap();
    if let Some(m) = marker {
        until_marked(i32::try_from(child.id()).unwrap(), &format!("{MARK}={m}"));
    }
    child
}

fn pid(c: &Child) -> i32 {
    i32::try_from(c.id()).unwrap()
}

fn alive(child: &mut Child) -> bool {
    child.try_wait().unwrap().is_none()
}

fn end(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

/// A child killed and reaped when the test ends, passed or failed.
pub(crate) struct Reaped(pub(crate) Option<Child>);

impl Drop for Reaped {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            end(c);
        }
    }
}

#[test]
fn only_a_marked_process_is_signalled() {
    let mark = uuid::Uuid::new_v4().simple().to_string();
    let entry = format!("{MARK}={mark}");
    let kill = |pid| {
        signal_marked(
            pid,
            entry.as_bytes(),
            Signal::KILL,
            &mut Patience::default(),
        )
    };
    let mut plain = Reaped(Some(sleeper(None)));
    let mut other = Reaped(Some(sleeper(Some("another"))));
    let mut marked = sleeper(Some(&mark));
    let (plain, other) = (plain.0.as_mut().unwrap(), other.0.as_mut().unwrap());
    // `plain` may still be in `exec` (empty) or past it (no marker): never signalled.
    assert!(matches!(kill(pid(plain)), Marked::Unmarked | Marked::Empty));
    assert_eq!(kill(pid(other)), Marked::Unmarked);
    assert_eq!(kill(pid(&marked)), Marked::Signalled);
    let status = marked.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    assert!(alive(plain) && alive(other));
    // Reaped: nothing there carries the marker (the number may be another process's now).
    assert_ne!(kill(pid(&marked)), Marked::Signalled);
    // Never this process, init, or a group.
    let me = i32::try_from(std::process::id()).unwrap();
    for pid in [me, 1, 0, -1] {
        assert_eq!(
            signal_marked(pid, b"PATH", Signal::KILL, &mut Patience::default()),
            Marked::Unreadable
        );
        assert!(!carries(pid, b"PATH", &mut Patience::default()));
    }
}

/// Whether a missing `python3` fails the test (`LEGATE_REQUIRE_PYTHON` or `CI` switched on,
/// as `legate_testkit::python` reads them).
pub(crate) fn python_required() -> bool {
    ["LEGATE_REQUIRE_PYTHON", "CI"].iter().any(|name| {
        std::env::var_os(name).is_some_and(|v| {
            let v = v.to_string_lossy().trim().to_ascii_lowercase();
            !v.is_empty() && v != "0" && v != "false"
        })
    })
}

/// `python3 -c script` in a group of its own, with `env` added; `None` without `python3`
/// (a failure where it is required, as in CI).
fn python(script: &str, env: &[(&str, &str)]) -> Option<Child> {
    match Command::new("python3")
        .args(["-c", script])
        .envs(env.iter().copied())
        .process_group(0)
        .spawn()
    {
        Ok(child) => Some(child),
        Err(e) if python_required() => panic!("python3 is required here: {e}"),
        Err(_) => None,
    }
}

/// `python3` on this process's `PATH`; without it, `None` and a line saying the test skips
/// (a failure where it is required, as in CI).
pub(crate) fn python3() -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("python3"))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        assert!(!python_required(), "python3 is required here");
        eprintln!("skipped: no python3");
    }
    found
}

/// A leader held by a tracer of its own, for `python3 -c TRACED_LEADER <file>`: it lets any
/// process of its user trace it (`PR_SET_PTRACER`, for Yama's default scope, where a child
/// may not trace its parent; elsewhere the call fails and nothing changes), forks the
/// tracer, which leaves the group (`setsid`) and drops the run's
/// marker with the rest of its environment (`execve` with none), so that cleanup finds it
/// neither way. The tracer seizes the leader with `ptrace` and never lets it go: it
/// continues no stop and waits for nothing. It ignores `SIGINT` and `SIGTERM`, keeps agy's
/// stdin, stdout and stderr, and writes `ok <pid>` (or `refused`, then exits, where it may
/// not trace) to the file named by the leader's first argument. The leader then sleeps and
/// reads nothing.
pub(crate) const TRACED_LEADER: &str = "import os, sys, time\n\
                      TRACER = '''\n\
                      import ctypes, os, signal, sys, time\n\
                      signal.signal(signal.SIGINT, signal.SIG_IGN)\n\
                      signal.signal(signal.SIGTERM, signal.SIG_IGN)\n\
                      libc = ctypes.CDLL(None, use_errno=True)\n\
                      seized = libc.ptrace(0x4206, int(sys.argv[1]), None, None) == 0\n\
                      with open(sys.argv[2] + '.tmp', 'w') as f:\n\
                      \x20   f.write('ok %d' % os.getpid() if seized else 'refused')\n\
                      os.rename(sys.argv[2] + '.tmp', sys.argv[2])\n\
                      if seized:\n\
                      \x20   time.sleep(600)\n\
                      '''\n\
                      import ctypes\n\
                      ctypes.CDLL(None).prctl(0x59616d61, ctypes.c_ulong(-1), 0, 0, 0)\n\
                      leader = os.getpid()\n\
                      if os.fork() == 0:\n\
                      \x20   os.setsid()\n\
                      \x20   os.execve(sys.executable, [sys.executable, '-c', TRACER, str(leader), sys.argv[1]], {})\n\
                      time.sleep(600)\n";

/// A leader one of whose threads asked to be traced by the leader's parent (the test's
/// process, as Legate is an unconfined agent's), for `python3 -c TRACED_THREAD <file>
/// [code [first]]`: it reads its stdin to the end, then a thread calls `PTRACE_TRACEME` and
/// writes `ok <the leader's pid>` (or `refused`, where it may not) to the file, then sleeps.
/// With `code`, the leader then exits with it (every thread dies; the traced one stays a
/// zombie for its tracer to reap); without, it sleeps too. With `first`, the traced thread
/// exits instead of sleeping, and the leader exits once that thread shows as a zombie in
/// `/proc/self/task` (where tracing was refused, the thread is gone at once).
pub(crate) const TRACED_THREAD: &str = "import ctypes, os, sys, threading, time\n\
                      sys.stdin.buffer.read()\n\
                      libc = ctypes.CDLL(None)\n\
                      traced_id = []\n\
                      def traced():\n\
                      \x20   ok = libc.ptrace(0, 0, None, None) == 0\n\
                      \x20   if ok:\n\
                      \x20       traced_id.append(threading.get_native_id())\n\
                      \x20   with open(sys.argv[1] + '.tmp', 'w') as f:\n\
                      \x20       f.write('ok %d' % os.getpid() if ok else 'refused')\n\
                      \x20   os.rename(sys.argv[1] + '.tmp', sys.argv[1])\n\
                      \x20   if len(sys.argv) < 4:\n\
                      \x20       time.sleep(600)\n\
                      def zombie(tid):\n\
                      \x20   try:\n\
                      \x20       stat = open('/proc/self/task/%d/stat' % tid).read()\n\
                      \x20   except OSError:\n\
                      \x20       return False\n\
                      \x20   return stat[stat.rindex(')') + 2] == 'Z'\n\
                      t = threading.Thread(target=traced, daemon=True)\n\
                      t.start()\n\
                      while not os.path.exists(sys.argv[1]):\n\
                      \x20   time.sleep(0.01)\n\
                      if len(sys.argv) > 3:\n\
                      \x20   t.join()\n\
                      \x20   while traced_id and not zombie(traced_id[0]):\n\
                      \x20       time.sleep(0.01)\n\
                      if len(sys.argv) > 2:\n\
                      \x20   os._exit(int(sys.argv[2]))\n\
                      time.sleep(600)\n";

/// The pid written to `state` once the tracing began (the tracer's for [`TRACED_LEADER`],
/// the leader's for [`TRACED_THREAD`]); `None` where tracing is refused (the test skips).
pub(crate) async fn tracer(state: &Path) -> Option<i32> {
    let began = Instant::now();
    loop {
        if let Ok(text) = std::fs::read_to_string(state) {
            return match text.strip_prefix("ok ") {
                Some(pid) => Some(pid.trim().parse().unwrap()),
                None => {
                    assert_eq!(text, "refused");
                    eprintln!("skipped: ptrace is refused here");
                    None
                }
            };
        }
        assert!(
            began.elapsed() < Duration::from_secs(20),
            "the tracer never wrote {}",
            state.display()
        );
        // The tracer is outside every event the run reports: its file is read until it is
        // there (it is renamed into place whole); the pause paces the reads.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Kills a process (a tracer, a holder) when the test ends, whatever its outcome (a leader
/// it held, still a zombie, is then reaped as any child).
pub(crate) struct KillAtEnd(pub(crate) i32);

impl Drop for KillAtEnd {
    fn drop(&mut self) {
        // SAFETY: `kill` has no memory-safety preconditions.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// A process whose main thread exited while another thread runs (for 100 s): a zombie
/// leader whose own environment cannot be read, in a group of its own, with `name=value` in
/// its environment. Python's `pthread_exit` through `ctypes` makes one. `None` without
/// `python3` (a failure where it is required, as in CI). Returns once its stat shows it
/// headless.
pub(crate) fn headless(name: &str, value: &str) -> Option<Child> {
    let script = "import ctypes, threading, time\n\
                  threading.Thread(target=lambda: time.sleep(100)).start()\n\
                  ctypes.CDLL(None).pthread_exit(None)\n";
    let child = python(script, &[(name, value)])?;
    let p = pid(&child);
    let began = Instant::now();
    loop {
        let stat = std::fs::read(format!("/proc/{p}/stat")).unwrap();
        let stat = legate_core::proc_stat::ProcStat::parse(&stat).unwrap();
        if stat.state == b'Z' {
            assert!(stat.is_headless(), "{stat:?}");
            return Some(child);
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "never headless: {stat:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A headless process none of whose threads runs: its second thread asked to be traced by
/// this process (`PTRACE_TRACEME`) and exited, so it stays a zombie until this process reaps
/// it, and then its main thread exited. Returns the child and that thread's id, once every
/// thread shows `Z` (reap the thread with `waitpid(tid, __WALL)`, then the child).
pub(crate) fn headless_with_zombie_threads() -> Option<(Child, i32)> {
    // Exit 77 where this process may not be a tracer (Yama, a sandbox): the test skips.
    let script = "import ctypes, os, threading\n\
                  libc = ctypes.CDLL(None)\n\
                  def traced():\n\
                  \x20   if libc.ptrace(0, 0, None, None) != 0:\n\
                  \x20       os._exit(77)\n\
                  t = threading.Thread(target=traced)\n\
                  t.start(); t.join()\n\
                  libc.pthread_exit(None)\n";
    let mut child = python(script, &[])?;
    let p = pid(&child);
    let began = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert_eq!(status.code(), Some(77), "{status:?}");
            eprintln!("PTRACE_TRACEME refused here");
            return None;
        }
        let stat = |path: String| {
            std::fs::read(path)
                .ok()
                .and_then(|l| legate_core::proc_stat::ProcStat::parse(&l))
        };
        let tids: Vec<i32> = std::fs::read_dir(format!("/proc/{p}/task"))
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        let all_zombies = tids
            .iter()
            .all(|t| stat(format!("/proc/{p}/task/{t}/stat")).is_some_and(|s| !s.runs()));
        let other = tids.iter().copied().find(|t| *t != p);
        if let (true, Some(tid)) = (all_zombies, other) {
            assert!(stat(format!("/proc/{p}/stat")).unwrap().is_headless());
            return Some((child, tid));
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "never all zombies: {tids:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Reaps the traced thread `tid`, then the child.
pub(crate) fn reap_zombie_threads(mut child: Child, tid: i32) {
    let mut status = 0;
    // SAFETY: `waitpid` on a thread this process traces, with a valid pointer.
    let reaped = unsafe { libc::waitpid(tid, &raw mut status, libc::__WALL) };
    assert_eq!(reaped, tid);
    child.wait().unwrap();
}

/// A process that calls `exec` on itself without end reads an empty environment now and then
/// (about one read in 25 on this machine); read as cleanup reads it, its marker is seen
/// every time.
#[test]
fn a_process_that_keeps_calling_exec_is_seen_at_every_read() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("again");
    std::fs::write(&script, "#!/bin/sh\nexec \"$0\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mark = uuid::Uuid::new_v4().simple().to_string();
    let entry = format!("{MARK}={mark}");
    let child = Command::new(&script)
        .env(MARK, &mark)
        .process_group(0)
        .spawn()
        .unwrap();
    let child = Reaped(Some(child));
    let p = pid(child.0.as_ref().unwrap());
    until_marked(p, &entry);
    let missed = (0..500)
        .filter(|_| !carries(p, entry.as_bytes(), &mut Patience::default()))
        .count();
    assert_eq!(missed, 0, "reads that did not see the marker");
}

#[test]
fn a_headless_process_whose_threads_are_zombies_runs_nothing() {
    let Some((child, tid)) = headless_with_zombie_threads() else {
        eprintln!("skipped: no python3");
        return;
    };
    let p = pid(&child);
    assert!(!threads_run(p));
    reap_zombie_threads(child, tid);
}

#[test]
fn a_process_whose_main_thread_exited_is_found_and_signalled() {
    let mark = uuid::Uuid::new_v4().simple().to_string();
    let entry = format!("{MARK}={mark}");
    let Some(child) = headless(MARK, &mark) else {
        eprintln!("skipped: no python3");
        return;
    };
    let mut child = Reaped(Some(child));
    let child = child.0.as_mut().unwrap();
    let p = pid(child);
    let stat = std::fs::read(format!("/proc/{p}/stat")).unwrap();
    assert!(
        legate_core::proc_stat::ProcStat::parse(&stat)
            .unwrap()
            .is_alive()
    );
    assert!(threads_run(p), "its second thread sleeps");
    // Its own environment shows nothing (the kernel refuses the read, or reads it empty).
    assert!(
        std::fs::read(format!("/proc/{p}/environ")).map_or(true, |e| e.is_empty()),
        "the leader's own environment read"
    );
    assert!(
        carries(p, entry.as_bytes(), &mut Patience::default()),
        "its marker is read from a live thread"
    );
    assert_eq!(
        signal_marked(p, entry.as_bytes(), Signal::KILL, &mut Patience::default()),
        Marked::Signalled
    );
    let status = child.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    assert!(!threads_run(p), "reaped");
}

/// Why [`sleeper_at`] made no process.
#[derive(Debug)]
enum NotMade {
    /// Another process has the number.
    Taken,
    /// This process may not choose numbers here (no `CAP_SYS_ADMIN` over the PID namespace,
    /// or a seccomp profile without `clone3`).
    NotAllowed(i32),
}

/// Starts `sleep 100` (unmarked, found on `PATH`) as process `pid` with `clone3`'s `set_tid`.
fn sleeper_at(pid: i32, sleep: &std::ffi::CStr) -> Result<i32, NotMade> {
    let argv = [c"sleep".as_ptr(), c"100".as_ptr(), std::ptr::null()];
    let envp = [std::ptr::null::<libc::c_char>()];
    let tid = [libc::pid_t::from(pid)];
    /// The kernel's `struct clone_args` (`linux/sched.h`), its size as of 5.7 (`cgroup`).
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
    // SAFETY: a fork-like `clone3` (flags 0: no shared memory, a copy of the stack); in the
    // child only `execve` and `_exit` run, both async-signal-safe, on pointers prepared above.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            std::ptr::from_ref(&args),
            std::mem::size_of::<CloneArgs>(),
        )
    };
    if rc == 0 {
        // SAFETY: see above.
        unsafe {
            libc::execve(sleep.as_ptr(), argv.as_ptr(), envp.as_ptr());
            libc::_exit(127)
        }
    }
    if rc > 0 {
        return Ok(i32::try_from(rc).unwrap());
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::EEXIST) => Err(NotMade::Taken),
        e => Err(NotMade::NotAllowed(e.unwrap_or(0))),
    }
}

/// `sleep` as a path, from `PATH`.
fn sleep_path() -> std::ffi::CString {
    let path = std::env::var_os("PATH").unwrap();
    let found = std::env::split_paths(&path)
        .map(|d| d.join("sleep"))
        .find(|p| p.is_file())
        .expect("sleep on PATH");
    std::ffi::CString::new(found.into_os_string().into_encoded_bytes()).unwrap()
}

/// The race the directory closes: the marked process exits after its environment was read
/// and an unmarked one takes its number before the signal. The newcomer must not be signalled.
#[test]
fn a_process_that_takes_a_read_process_number_is_never_signalled() {
    let mark = uuid::Uuid::new_v4().simple().to_string();
    let entry = format!("{MARK}={mark}");
    let sleep = sleep_path();
    for _ in 0..20 {
        let marked = sleeper(Some(&mark));
        let number = pid(&marked);
        let made = std::rc::Rc::new(std::cell::RefCell::new(None));
        let took = made.clone();
        let sleep = sleep.clone();
        let mut marked = Some(marked);
        BEFORE_SIGNAL.with(|h| {
            *h.borrow_mut() = Some(Box::new(move |pid| {
                if let Some(c) = marked.take() {
                    end(c);
                }
                *took.borrow_mut() = Some(sleeper_at(pid, &sleep));
            }));
        });
        let outcome = signal_marked(
            number,
            entry.as_bytes(),
            Signal::KILL,
            &mut Patience::default(),
        );
        BEFORE_SIGNAL.with(|h| h.borrow_mut().take());
        let made = made.borrow_mut().take().expect("the hook ran");
        let newcomer = match made {
            Ok(newcomer) => newcomer,
            // Another process of this machine took the number first: try another.
            Err(NotMade::Taken) => continue,
            Err(NotMade::NotAllowed(errno)) => {
                eprintln!("skipped: clone3 with set_tid is not allowed here (errno {errno})");
                return;
            }
        };
        assert_eq!(newcomer, number);
        // SIGTERM now: a SIGKILL sent by `signal_marked` would show instead.
        let mut status = 0;
        // SAFETY: `kill` and `waitpid` on our own child, with a valid pointer.
        let waited = unsafe {
            libc::kill(newcomer, libc::SIGTERM);
            libc::waitpid(newcomer, &raw mut status, 0)
        };
        assert_eq!(waited, newcomer);
        assert!(libc::WIFSIGNALED(status));
        assert_eq!(
            libc::WTERMSIG(status),
            libc::SIGTERM,
            "the process that took the number was signalled"
        );
        assert_eq!(outcome, Marked::Vanished);
        return;
    }
    panic!("no process could be made at a freed number in 20 tries");
}

#[test]
fn a_looks_patience_is_spent_a_pause_at_a_time() {
    let mut patience = Patience::default();
    let pauses = std::iter::from_fn(|| patience.take().then_some(())).count();
    assert_eq!(pauses, 200, "200 ms of 1 ms pauses");
    assert!(!patience.take(), "spent stays spent");
}
