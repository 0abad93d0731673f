//! The sealed namespace against the real kernel: a confined shell tries, as a hostile agent
//! would, what Landlock does not govern. It changes a host file's mode, times and set-id bits
//! outside its writable paths, opens a block device and another terminal of the host's, keeps
//! the controlling terminal of the user who started Legate, reads the host's System V shared
//! memory and the user's keyring, and uses a descriptor Legate inherited. Each test asserts
//! on what the shell printed and on the host afterwards, and is skipped (with a message)
//! where this process may not create namespaces.

#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

use legate_confine::{Confinement, Requirement, confine_command};
use std::ffi::CStr;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const MIDDLE: &str = "LEGATE_SEALED_TEST_MIDDLE";

fn available() -> bool {
    let ok = Confinement::probe_namespaces();
    if !ok {
        eprintln!("skipped: this process may not create mount and PID namespaces");
    }
    ok
}

fn python() -> bool {
    let ok = Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: no python3");
    }
    ok
}

/// A confined `sh -c script` in `root` (its one writable path).
fn sh(root: &Path, script: &str) -> Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script])
        .current_dir(root)
        .stdin(Stdio::null());
    let prepared = Confinement::new()
        .allow_write(root)
        .prepare(Requirement::Required)
        .unwrap();
    assert!(prepared.isolation().processes_hidden);
    confine_command(&mut cmd, prepared);
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n--stderr--\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A scratch directory with `root` (writable) and `outside` (not) in it.
fn scratch() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let (root, outside) = (base.join("root"), base.join("outside"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    (dir, root, outside)
}

/// Landlock refuses writes outside the writable paths, not `chmod`, `chown`, `utimensat` or
/// `setxattr`: a root agent could make a host program set-user-id, and any agent could loosen
/// the modes of the user's files. Every mount but the writable trees is read-only, and
/// the writable ones still take all of it.
#[test]
fn a_host_file_outside_the_writable_paths_keeps_its_mode_and_times() {
    if !available() {
        return;
    }
    let (_dir, root, outside) = scratch();
    let victim = outside.join("victim");
    std::fs::write(&victim, "x").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(root.join("mine"), "m").unwrap();
    let before = std::fs::metadata(&victim).unwrap();
    let script = format!(
        "chmod 4777 {v}; echo chmod=$?; touch -d 1999-01-01 {v}; echo touch=$?; \
         chown 65534 {v}; echo chown=$?; chmod 600 mine; echo mine=$?; touch -d 1999-01-01 mine",
        v = victim.display()
    );
    let out = sh(&root, &script);
    let all = text(&out);
    let after = std::fs::metadata(&victim).unwrap();
    assert_eq!(after.permissions().mode() & 0o7777, 0o644, "{all}");
    assert_eq!(after.mtime(), before.mtime(), "{all}");
    assert_eq!(after.uid(), before.uid(), "{all}");
    assert!(all.contains("chmod=1") && all.contains("touch=1"), "{all}");
    // The writable tree keeps every right.
    let mine = std::fs::metadata(root.join("mine")).unwrap();
    assert!(all.contains("mine=0"), "{all}");
    assert_eq!(mine.permissions().mode() & 0o777, 0o600);
    assert!(mine.mtime() < 1_000_000_000, "{all}");
}

/// The first block device of the host's `/dev`, if any.
fn a_block_device() -> Option<PathBuf> {
    std::fs::read_dir("/dev")
        .ok()?
        .flatten()
        .find(|e| e.file_type().is_ok_and(|t| t.is_block_device()))
        .map(|e| e.path())
}

/// A pseudo-terminal of the host's (the master stays open while the test runs): its
/// terminal's path.
fn a_host_terminal() -> Option<(libc::c_int, PathBuf)> {
    // SAFETY: `posix_openpt` and friends on a fd this test owns; `ptsname` returns a static
    // buffer, copied at once (the test's other threads do not call it).
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC);
        if master < 0 || libc::grantpt(master) != 0 || libc::unlockpt(master) != 0 {
            return None;
        }
        let name = libc::ptsname(master);
        if name.is_null() {
            return None;
        }
        let path = PathBuf::from(CStr::from_ptr(name).to_str().ok()?);
        Some((master, path))
    }
}

/// A raw disk shows every file of it, Legate's hidden home included, to a process that can
/// open it; a terminal of the host's (the user's) takes escape sequences. `/dev` is `nodev`
/// but for the few devices a program needs, and the terminals are a devpts of its own.
#[test]
fn no_block_device_or_host_terminal_opens_and_own_terminals_work() {
    if !available() {
        return;
    }
    let (_dir, root, _outside) = scratch();
    let block = a_block_device();
    let host_tty = a_host_terminal();
    let mut script = String::from(
        "head -c 4 /dev/zero | od -An -tx1; echo zero=$?; echo x > /dev/null; echo null=$?; \
         head -c 4 /dev/urandom > /dev/null; echo urandom=$?; ls /dev/pts; ",
    );
    if let Some(b) = &block {
        script.push_str(&format!(
            "head -c 1 {} > /dev/null 2>&1; echo block=$?; ",
            b.display()
        ));
    }
    // A root process keeps `CAP_CHOWN` and `CAP_FOWNER`: the kept devices are read-only
    // mounts, so the host's `/dev/full` keeps its mode (the same mode asked: nothing would
    // change if it went through).
    script.push_str(
        "chmod 666 /dev/full; echo devchmod=$?; \
         find /run/dbus /run/systemd /run/user -mindepth 1 2>/dev/null; echo run-listed; ",
    );
    if let Some((_, t)) = &host_tty {
        script.push_str(&format!(
            "if [ -e {t} ]; then echo HOST-TTY-VISIBLE; printf x > {t} && echo HOST-TTY-WRITTEN; fi; ",
            t = t.display()
        ));
    }
    script.push_str(
        "command -v python3 >/dev/null && python3 -c 'import os; m, s = os.openpty(); os.write(m, b\"hi\\n\"); print(\"own-pty\", os.read(s, 3))'; true",
    );
    let out = sh(&root, &script);
    let all = text(&out);
    if let Some((master, _)) = host_tty {
        // SAFETY: closing the master this test opened.
        unsafe { libc::close(master) };
    }
    for ok in ["zero=0", "null=0", "urandom=0", "00 00 00 00"] {
        assert!(all.contains(ok), "{ok}:\n{all}");
    }
    if block.is_some() {
        assert!(all.contains("block=1"), "{all}");
    } else {
        eprintln!("no block device on this host: that part is not checked");
    }
    assert!(!all.contains("HOST-TTY"), "{all}");
    // SAFETY: `geteuid` has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        assert!(
            all.contains("devchmod=1"),
            "a kept device's mode could change:\n{all}"
        );
    }
    // The session's and the daemons' sockets (D-Bus, systemd, the users' buses) are not in
    // sight: their directories are empty where the host has them.
    let run = all.split("run-listed").next().unwrap_or_default();
    let listed = run.rsplit("devchmod=").next().unwrap_or_default();
    assert_eq!(
        listed
            .lines()
            .skip(1)
            .filter(|l| !l.trim().is_empty())
            .count(),
        0,
        "a daemon's or a session's socket directory is not empty:\n{all}"
    );
    if python() {
        assert!(all.contains("own-pty b'hi\\n'"), "{all}");
    }
}

/// The middle process ("Legate" in a user's terminal): a session leader whose controlling
/// terminal is a pseudo-terminal (python's `pty.fork`), it spawns a confined shell that prints
/// its own controlling terminal's device number (`/proc/self/stat`, field 7: 0 for none)
/// and its own too.
#[test]
fn middle() {
    if std::env::var(MIDDLE).is_err() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    let own = std::fs::read_to_string("/proc/self/stat").unwrap();
    let tty_nr = |stat: &str| -> String {
        let after = stat.rsplit_once(')').unwrap().1;
        after.split_whitespace().nth(4).unwrap().to_string()
    };
    println!("middle-tty={}", tty_nr(&own));
    let out = sh(&root, "cat /proc/self/stat");
    println!(
        "confined-tty={}",
        tty_nr(&String::from_utf8_lossy(&out.stdout))
    );
}

/// A process that keeps the user's terminal as its controlling terminal can push input into
/// it (`TIOCSTI`, where `dev.tty.legacy_tiocsti` allows it) that the user's shell runs once
/// Legate exits. A confined process has none.
#[test]
fn a_confined_process_has_no_controlling_terminal() {
    if std::env::var(MIDDLE).is_ok() || !available() || !python() {
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let script = "import os, pty, sys\n\
        pid, fd = pty.fork()\n\
        if pid == 0:\n\
        \x20   os.execv(sys.argv[1], [sys.argv[1], '--exact', 'middle', '--nocapture', '--test-threads=1'])\n\
        out = b''\n\
        while True:\n\
        \x20   try:\n\
        \x20       b = os.read(fd, 4096)\n\
        \x20   except OSError:\n\
        \x20       break\n\
        \x20   if not b:\n\
        \x20       break\n\
        \x20   out += b\n\
        os.waitpid(pid, 0)\n\
        sys.stdout.write(out.decode(errors='replace'))\n";
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&exe)
        .env(MIDDLE, "1")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let all = text(&out);
    let field = |name: &str| -> String {
        all.lines()
            .find_map(|l| l.split_once(name))
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("{name} missing:\n{all}"))
            .to_string()
    };
    assert_ne!(
        field("middle-tty="),
        "0",
        "the middle has a terminal:\n{all}"
    );
    assert_eq!(field("confined-tty="), "0", "{all}");
}

/// System V shared memory is not in any namespace Legate made before: a confined process
/// read and removed a host segment, and one it left behind pinned the host's memory after
/// its task. The user's keyring is not namespaced at all: a confined process could read or
/// plant keys in it.
#[test]
fn the_hosts_shared_memory_and_keyrings_are_out_of_reach() {
    if !available() || !python() {
        return;
    }
    let (_dir, root, _outside) = scratch();
    let key: libc::key_t = 0x4c47_0000 | (std::process::id() as libc::key_t & 0xffff);
    // A POSIX message queue of the host's too.
    let queue = format!("/legate-sealed-{}", std::process::id());
    let cqueue = std::ffi::CString::new(queue.clone()).unwrap();
    // SAFETY: a new queue with default attributes, closed and unlinked below.
    let mq = unsafe {
        libc::mq_open(
            cqueue.as_ptr(),
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR,
            0o600 as libc::mode_t,
            std::ptr::null_mut::<libc::mq_attr>(),
        )
    };
    assert!(mq >= 0, "{}", std::io::Error::last_os_error());
    // SAFETY: a new segment of one page this test removes below.
    let id = unsafe { libc::shmget(key, 4096, libc::IPC_CREAT | libc::IPC_EXCL | 0o600) };
    assert!(id >= 0, "{}", std::io::Error::last_os_error());
    let script = format!(
        "python3 -c '\
import ctypes, os\n\
libc = ctypes.CDLL(None, use_errno=True)\n\
print(\"shm\", libc.shmget({key}, 0, 0), ctypes.get_errno())\n\
libc.syscall.restype = ctypes.c_long\n\
r = libc.syscall({add_key}, b\"user\", b\"planted\", b\"v\", 1, -4)\n\
print(\"add_key\", r, ctypes.get_errno())\n\
r = libc.syscall({keyctl}, 0, -4, 0)\n\
print(\"keyctl\", r, ctypes.get_errno())\n\
r = libc.syscall({request_key}, b\"user\", b\"x\", None, 0)\n\
print(\"request_key\", r, ctypes.get_errno())\n\
libc.mq_open.restype = ctypes.c_int\n\
print(\"mq\", libc.mq_open(b\"{queue}\", os.O_RDONLY), ctypes.get_errno())\n\
'",
        add_key = libc::SYS_add_key,
        keyctl = libc::SYS_keyctl,
        request_key = libc::SYS_request_key,
    );
    let out = sh(&root, &script);
    // SAFETY: removing the segment and the queue made above.
    unsafe {
        libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut());
        libc::mq_close(mq);
        libc::mq_unlink(cqueue.as_ptr());
    }
    let all = text(&out);
    assert!(
        all.contains(&format!("shm -1 {}", libc::ENOENT)),
        "the host's segment is visible:\n{all}"
    );
    for call in ["add_key", "keyctl", "request_key"] {
        assert!(
            all.contains(&format!("{call} -1 {}", libc::EPERM)),
            "{call} was not refused:\n{all}"
        );
    }
    assert!(
        all.contains(&format!("mq -1 {}", libc::ENOENT)),
        "the host's message queue is visible:\n{all}"
    );
}

/// A descriptor Legate inherited without close-on-exec (a shell's redirection: `legate run
/// 7>>file`) reached the agent, which wrote through it past Landlock. Only stdio does now.
#[test]
fn descriptors_legate_inherited_are_not_passed_on() {
    if !available() {
        return;
    }
    let (_dir, root, outside) = scratch();
    let log = outside.join("outside.log");
    let file = std::fs::File::create(&log).unwrap();
    // A high number no other test uses; without close-on-exec, as a shell would leave it.
    const FD: libc::c_int = 487;
    // SAFETY: `dup2` onto a free number this test closes below; `dup2` clears close-on-exec.
    let fd = unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&file), FD) };
    assert_eq!(fd, FD);
    // (`sh` may take one digit only in a redirection: python writes through it, when here.)
    let out = sh(
        &root,
        &format!(
            "ls /proc/self/fd; command -v python3 >/dev/null && python3 -c 'import os; os.write({FD}, b\"through\")'; true"
        ),
    );
    // SAFETY: closing the number `dup2` made.
    unsafe { libc::close(FD) };
    let all = text(&out);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "", "{all}");
    assert!(!all.lines().any(|l| l.trim() == FD.to_string()), "{all}");
}
