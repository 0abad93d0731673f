//! A confined process cannot make a btrfs subvolume read-only: on btrfs a copy is a subvolume
//! (a snapshot of its project's base), and a read-only one could no longer be discarded or
//! swept. The seccomp filter (`legate-confine/src/seccomp.rs`) refuses the one `ioctl` that
//! sets it, `BTRFS_IOC_SUBVOL_SETFLAGS`, with `EPERM`, whatever the descriptor.

#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

use legate_confine::{Confinement, Requirement};
use std::process::{Command, Stdio};

const CHILD: &str = "LEGATE_SUBVOL_FLAGS_CHILD";

/// `_IOW(0x94, 26, __u64)`.
const BTRFS_IOC_SUBVOL_SETFLAGS: libc::c_ulong = 0x4008_941A;

/// The errno of `BTRFS_IOC_SUBVOL_SETFLAGS` (read-only) on standard input (`/dev/null`).
fn try_set_read_only() -> i32 {
    let flags: u64 = 1 << 1; // BTRFS_SUBVOL_RDONLY
    // SAFETY: an ioctl on a descriptor this process holds, reading one u64 on the stack.
    let rc = unsafe { libc::ioctl(0, BTRFS_IOC_SUBVOL_SETFLAGS as _, &flags as *const u64) };
    if rc == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

/// The confined side: prints the errno.
#[test]
fn setflags_child() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    println!("errno={}", try_set_read_only());
}

#[test]
fn a_confined_process_cannot_make_a_subvolume_read_only() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    // Unconfined, the request reaches the kernel, which refuses it otherwise (not a btrfs
    // file: `ENOTTY`).
    assert_ne!(try_set_read_only(), libc::EPERM);
    let prepared = Confinement::new().prepare(Requirement::BestEffort).unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--exact",
        "setflags_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(CHILD, "1")
    .stdin(Stdio::null());
    legate_confine::confine_command(&mut cmd, prepared);
    let out = cmd.output().unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.contains(&format!("errno={}", libc::EPERM)), "{said}");
}
