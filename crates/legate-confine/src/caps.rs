//! The capability drop of a confined process, before `exec`: an allowlist ([`KEPT`]) of the
//! ordinary file and identity powers of root; everything else leaves every set, the bounding
//! set included, and `no_new_privs` is set. Async-signal-safe; never allocates.
#![allow(unsafe_code)]

use crate::init::{check, errno};
use libc::c_int;
use std::io;

const CAP_VERSION_3: u32 = 0x2008_0522;

/// Capabilities a process keeps: the ordinary file and identity powers of root that package
/// managers use. Every other capability (up to 63) is dropped from every set, the bounding
/// set included; see docs/permissions.md for the reasons.
pub(crate) const KEPT: &[u32] = &[
    0,  // CAP_CHOWN
    1,  // CAP_DAC_OVERRIDE
    3,  // CAP_FOWNER
    4,  // CAP_FSETID
    6,  // CAP_SETGID
    7,  // CAP_SETUID
    10, // CAP_NET_BIND_SERVICE
    11, // CAP_NET_BROADCAST
    14, // CAP_IPC_LOCK
    28, // CAP_LEASE
    29, // CAP_AUDIT_WRITE
    31, // CAP_SETFCAP
];
/// `CAP_SETPCAP`: needed to drop from the bounding set, so dropped last.
const CAP_SETPCAP: u32 = 8;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops every capability but [`KEPT`] from the bounding, ambient, effective, permitted and
/// inheritable sets, and sets `no_new_privs`. Async-signal-safe. A process without
/// `CAP_SETPCAP` (not root) cannot shrink its bounding set, and holds nothing to drop.
pub(crate) fn drop_caps() -> io::Result<()> {
    // SAFETY: `prctl` and `capget`/`capset` on stack structures of the kernel's layout.
    unsafe {
        let mut header = CapHeader {
            version: CAP_VERSION_3,
            pid: 0,
        };
        let mut data = [CapData {
            effective: 0,
            permitted: 0,
            inheritable: 0,
        }; 2];
        check(libc::syscall(
            libc::SYS_capget,
            &mut header,
            data.as_mut_ptr(),
        ))?;
        let has_setpcap = data[0].effective & (1 << CAP_SETPCAP) != 0;
        if has_setpcap {
            for cap in (0u32..64).filter(|c| !KEPT.contains(c) && *c != CAP_SETPCAP) {
                if libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) != 0
                    && *libc::__errno_location() != libc::EINVAL
                {
                    return Err(errno());
                }
            }
            check(
                libc::prctl(libc::PR_CAPBSET_DROP, CAP_SETPCAP as libc::c_ulong, 0, 0, 0).into(),
            )?;
        }
        // No ambient capabilities survive exec (EINVAL: a kernel without them).
        if libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
            && *libc::__errno_location() != libc::EINVAL
        {
            return Err(errno());
        }
        let keep = KEPT.iter().fold([0u32; 2], |mut m, c| {
            m[(c / 32) as usize] |= 1 << (c % 32);
            m
        });
        for (d, k) in data.iter_mut().zip(keep) {
            d.effective &= k;
            d.permitted &= k;
            d.inheritable &= k;
        }
        check(libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()))?;
        check(libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0).into())?;
        Ok(())
    }
}
