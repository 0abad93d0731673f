//! A confined process cannot make a btrfs subvolume read-only: on btrfs a copy is a subvolume
//! (a snapshot of its project's base), and a read-only one, or a read-only snapshot made
//! inside it, could no longer be discarded or swept. The seccomp filter
//! (`legate-confine/src/seccomp.rs`) refuses the `ioctl`s that can (`SUBVOL_SETFLAGS`, and the
//! v2 snapshot and subvolume calls, whose flag it cannot read) with `EPERM`, whatever the
//! descriptor.

#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

use legate_confine::{Confinement, Requirement};
use std::process::{Command, Stdio};

const CHILD: &str = "LEGATE_SUBVOL_FLAGS_CHILD";

/// `BTRFS_IOC_SUBVOL_SETFLAGS`, `BTRFS_IOC_SNAP_CREATE_V2`, `BTRFS_IOC_SUBVOL_CREATE_V2`.
const REQUESTS: [libc::c_ulong; 3] = [0x4008_941A, 0x5000_9417, 0x5000_9418];

/// The errno of `request` on standard input (`/dev/null`), its argument a zeroed buffer of
/// 4,096 bytes (`struct btrfs_ioctl_vol_args_v2`'s size) asking for read-only.
fn try_request(request: libc::c_ulong) -> i32 {
    let mut args = [0u8; 4096];
    args[16] = 1 << 1; // flags: BTRFS_SUBVOL_RDONLY (and a read-only u64 for SETFLAGS)
    args[0] = 1 << 1;
    // SAFETY: an ioctl on a descriptor this process holds, on a stack buffer of the size the
    // request numbers encode.
    let rc = unsafe { libc::ioctl(0, request as _, args.as_mut_ptr()) };
    if rc == 0 {
        0
    } else {
        std::io::Error::last_os_error().raw_os_error().unwrap()
    }
}

/// The confined side: prints each request's errno.
#[test]
fn setflags_child() {
    if std::env::var(CHILD).is_err() {
        return;
    }
    for r in REQUESTS {
        println!("{r:#x}: errno={}", try_request(r));
    }
}

#[test]
fn a_confined_process_cannot_make_a_subvolume_read_only() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    // Unconfined, each request reaches the kernel, which refuses it otherwise (not a btrfs
    // file: `ENOTTY`).
    for r in REQUESTS {
        assert_ne!(try_request(r), libc::EPERM, "{r:#x}");
    }
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
    for r in REQUESTS {
        let refused = format!("{r:#x}: errno={}", libc::EPERM);
        assert!(said.contains(&refused), "{r:#x} was not refused: {said}");
    }
}
