//! The ways around Landlock's TCP rules, closed with a seccomp filter.
//!
//! Landlock's network rights check `connect` and `bind` on plain TCP sockets. Two other ways
//! open a TCP connection without that check (seen on Linux 6.18): a Multipath TCP socket
//! (`socket(…, IPPROTO_MPTCP)`, which falls back to ordinary TCP against a plain listener),
//! and TCP Fast Open (`sendto`/`sendmsg` with `MSG_FASTOPEN`, which connects inside the send).
//! A process that keeps the host's network (no network namespace) could use either to leave
//! `deny_network`; in its own network namespace there is nowhere to go either way. So every confined process also gets a small seccomp filter that refuses:
//!
//! - `socket` with protocol `IPPROTO_MPTCP` (`EPROTONOSUPPORT`), and with domain `AF_SMC`,
//!   another TCP-carrying family (`EAFNOSUPPORT`);
//! - `sendto`, `sendmsg`, `sendmmsg` whose flags hold `MSG_FASTOPEN` (`EOPNOTSUPP`);
//! - `io_uring_setup` (`ENOSYS`): an io_uring submits sends that no system call filter sees;
//!   programs that use one fall back to ordinary calls on `ENOSYS`;
//! - `ioctl` `BTRFS_IOC_SUBVOL_SETFLAGS`, `BTRFS_IOC_SNAP_CREATE_V2` and
//!   `BTRFS_IOC_SUBVOL_CREATE_V2` (`EPERM`): on btrfs a copy is a subvolume (a snapshot of its
//!   project's base), and its owner may make a subvolume read-only, or a read-only snapshot
//!   of it inside it (the v2 calls' flag lies behind a pointer no filter reads); a copy that
//!   holds one no longer takes an unlink, and could not be discarded or swept;
//! - `add_key`, `request_key` and `keyctl` (`EPERM`): the kernel's keyrings are not
//!   namespaced; a process could read or plant keys in its user's keyring (a Kerberos
//!   credential cache among them) or fill the user's key quota, as Docker's default profile
//!   also refuses;
//! - `ioctl` `TIOCSTI` and `TIOCLINUX` (`EPERM`): pushing bytes into a terminal's input, which
//!   the shell reading that terminal would run (a confined process has no controlling
//!   terminal and sees no terminal of the host's, `init`; this refuses it once more);
//! - every system call of a foreign ABI (32-bit `int 0x80`, x32; `ENOSYS`), whose numbers
//!   (and `socketcall`) this filter does not describe.
//!
//! A confinement that denies child processes ([`crate::Confinement::deny_children`]: a test
//! under a selection with `childProcesses: false`) gets the same filter with three more
//! refusals in front: `fork` and `vfork` (`EPERM`, where the architecture has them), `clone3`
//! (`ENOSYS`, so that libc falls back to `clone`, whose flags a filter can read), and `clone`
//! without `CLONE_THREAD` (`EPERM`). Threads stay allowed; a new process cannot be made.
//! Since the filter is installed last, after the isolation's init forked the process that
//! execs, only what the command itself tries is refused.
//!
//! Everything else is allowed. The programs are constants built at compile time; the child
//! makes two `prctl` calls (`PR_SET_NO_NEW_PRIVS`, which seccomp needs, then the filter).
//!
//! This module decides nothing else and never loosens what Landlock holds.
#![allow(unsafe_code)]

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
mod linux {
    use libc::sock_filter;

    #[cfg(target_arch = "x86_64")]
    const ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
    #[cfg(target_arch = "aarch64")]
    const ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

    /// x32 system calls share x86_64's arch and set this bit in the number.
    const X32_BIT: u32 = 0x4000_0000;
    const IPPROTO_MPTCP: u32 = 262;
    const CLONE_THREAD: u32 = libc::CLONE_THREAD as u32;
    const AF_SMC: u32 = 43;
    const MSG_FASTOPEN: u32 = 0x2000_0000;
    /// `_IOW(BTRFS_IOCTL_MAGIC, 26, __u64)`; the kernel reads an ioctl's request as 32 bits.
    const BTRFS_IOC_SUBVOL_SETFLAGS: u32 = 0x4008_941A;
    /// `_IOW(BTRFS_IOCTL_MAGIC, 23 and 24, struct btrfs_ioctl_vol_args_v2)`: a snapshot or a
    /// subvolume made read-only by a flag a filter cannot read (it is behind a pointer).
    const BTRFS_IOC_SNAP_CREATE_V2: u32 = 0x5000_9417;
    const BTRFS_IOC_SUBVOL_CREATE_V2: u32 = 0x5000_9418;

    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

    // `struct seccomp_data`: nr at 0, arch at 4, args at 16 (8 bytes each, low word first on
    // these little-endian targets).
    const NR: u32 = 0;
    const ARCH_OFF: u32 = 4;
    const fn arg_lo(i: u32) -> u32 {
        16 + 8 * i
    }

    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JGE_K: u16 = (libc::BPF_JMP | libc::BPF_JGE | libc::BPF_K) as u16;
    const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;

    const fn stmt(code: u16, k: u32) -> sock_filter {
        sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }
    }

    const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> sock_filter {
        sock_filter { code, jt, jf, k }
    }

    const fn errno(e: i32) -> u32 {
        SECCOMP_RET_ERRNO | (e as u32 & 0xffff)
    }

    /// Five instructions: if the call is `nr` and word `arg` of its arguments `test`s
    /// against `k`, fail with `e`; otherwise fall through to the next block.
    const fn refuse_arg(nr: i64, arg: u32, test: u16, k: u32, e: i32) -> [sock_filter; 5] {
        [
            stmt(LD_W_ABS, NR),
            jump(JEQ_K, nr as u32, 0, 3),
            stmt(LD_W_ABS, arg_lo(arg)),
            jump(test, k, 0, 1),
            stmt(RET_K, errno(e)),
        ]
    }

    /// Five instructions: if the call is `nr` and word `arg` of its arguments has none of the
    /// bits of `k`, fail with `e`; otherwise fall through to the next block.
    const fn refuse_unless_bits(nr: i64, arg: u32, k: u32, e: i32) -> [sock_filter; 5] {
        [
            stmt(LD_W_ABS, NR),
            jump(JEQ_K, nr as u32, 0, 3),
            stmt(LD_W_ABS, arg_lo(arg)),
            jump(JSET_K, k, 1, 0),
            stmt(RET_K, errno(e)),
        ]
    }

    /// Five instructions: the call `nr` fails with `e` (padded to a block's length).
    const fn refuse(nr: i64, e: i32) -> [sock_filter; 5] {
        [
            stmt(LD_W_ABS, NR),
            jump(JEQ_K, nr as u32, 0, 3),
            stmt(RET_K, errno(e)),
            stmt(RET_K, errno(e)),
            stmt(RET_K, errno(e)),
        ]
    }

    /// The refusals that make a new process impossible (threads stay allowed).
    #[cfg(target_arch = "x86_64")]
    const CHILDREN: [[sock_filter; 5]; 4] = [
        refuse(libc::SYS_fork, libc::EPERM),
        refuse(libc::SYS_vfork, libc::EPERM),
        refuse(libc::SYS_clone3, libc::ENOSYS),
        refuse_unless_bits(libc::SYS_clone, 0, CLONE_THREAD, libc::EPERM),
    ];
    /// The refusals that make a new process impossible (threads stay allowed); aarch64 has
    /// no `fork` or `vfork` system call.
    #[cfg(target_arch = "aarch64")]
    const CHILDREN: [[sock_filter; 5]; 2] = [
        refuse(libc::SYS_clone3, libc::ENOSYS),
        refuse_unless_bits(libc::SYS_clone, 0, CLONE_THREAD, libc::EPERM),
    ];

    const HEAD: [sock_filter; 8] = [
        stmt(LD_W_ABS, ARCH_OFF),
        jump(JEQ_K, ARCH, 1, 0),
        stmt(RET_K, errno(libc::ENOSYS)),
        stmt(LD_W_ABS, NR),
        jump(JGE_K, X32_BIT, 0, 1),
        stmt(RET_K, errno(libc::ENOSYS)),
        jump(JEQ_K, libc::SYS_io_uring_setup as u32, 0, 1),
        stmt(RET_K, errno(libc::ENOSYS)),
    ];

    /// `TIOCSTI` and `TIOCLINUX`, as the kernel reads an ioctl's request (32 bits).
    const TIOCSTI: u32 = 0x5412;
    const TIOCLINUX: u32 = 0x541C;

    const REFUSALS: [[sock_filter; 5]; 13] = [
        refuse_arg(
            libc::SYS_socket,
            2,
            JEQ_K,
            IPPROTO_MPTCP,
            libc::EPROTONOSUPPORT,
        ),
        refuse_arg(libc::SYS_socket, 0, JEQ_K, AF_SMC, libc::EAFNOSUPPORT),
        refuse_arg(libc::SYS_sendto, 3, JSET_K, MSG_FASTOPEN, libc::EOPNOTSUPP),
        refuse_arg(libc::SYS_sendmsg, 2, JSET_K, MSG_FASTOPEN, libc::EOPNOTSUPP),
        refuse_arg(
            libc::SYS_sendmmsg,
            3,
            JSET_K,
            MSG_FASTOPEN,
            libc::EOPNOTSUPP,
        ),
        refuse_arg(
            libc::SYS_ioctl,
            1,
            JEQ_K,
            BTRFS_IOC_SUBVOL_SETFLAGS,
            libc::EPERM,
        ),
        refuse_arg(
            libc::SYS_ioctl,
            1,
            JEQ_K,
            BTRFS_IOC_SNAP_CREATE_V2,
            libc::EPERM,
        ),
        refuse_arg(
            libc::SYS_ioctl,
            1,
            JEQ_K,
            BTRFS_IOC_SUBVOL_CREATE_V2,
            libc::EPERM,
        ),
        refuse(libc::SYS_add_key, libc::EPERM),
        refuse(libc::SYS_request_key, libc::EPERM),
        refuse(libc::SYS_keyctl, libc::EPERM),
        refuse_arg(libc::SYS_ioctl, 1, JEQ_K, TIOCSTI, libc::EPERM),
        refuse_arg(libc::SYS_ioctl, 1, JEQ_K, TIOCLINUX, libc::EPERM),
    ];

    const LEN: usize = HEAD.len() + 5 * REFUSALS.len() + 1;
    const LEN_NO_CHILDREN: usize = LEN + 5 * CHILDREN.len();

    /// One program: the ABI checks, the child refusals when `N` has room for them, the
    /// refusals, then allow.
    const fn program<const N: usize>() -> [sock_filter; N] {
        let mut out = [stmt(RET_K, SECCOMP_RET_ALLOW); N];
        let mut i = 0;
        while i < HEAD.len() {
            out[i] = HEAD[i];
            i += 1;
        }
        if N == LEN_NO_CHILDREN {
            let mut b = 0;
            while b < CHILDREN.len() {
                let mut j = 0;
                while j < 5 {
                    out[i] = CHILDREN[b][j];
                    i += 1;
                    j += 1;
                }
                b += 1;
            }
        }
        let mut b = 0;
        while b < REFUSALS.len() {
            let mut j = 0;
            while j < 5 {
                out[i] = REFUSALS[b][j];
                i += 1;
                j += 1;
            }
            b += 1;
        }
        out
    }

    /// The whole program: the ABI checks, the refusals, then allow.
    static PROGRAM: [sock_filter; LEN] = program::<LEN>();
    /// The same, refusing new processes too.
    static PROGRAM_NO_CHILDREN: [sock_filter; LEN_NO_CHILDREN] = program::<LEN_NO_CHILDREN>();

    /// Whether this build can refuse child processes (it can on these architectures).
    pub(crate) const CAN_DENY_CHILDREN: bool = true;

    /// Installs the filter on the calling thread (a forked child about to `exec`): two
    /// `prctl` calls on a static program, nothing allocated.
    pub(crate) fn install(deny_children: bool) -> std::io::Result<()> {
        let prog = if deny_children {
            libc::sock_fprog {
                // A small constant (94 on x86_64), well inside u16.
                len: LEN_NO_CHILDREN as u16,
                filter: PROGRAM_NO_CHILDREN.as_ptr().cast_mut(),
            }
        } else {
            libc::sock_fprog {
                // LEN is a small constant (74), well inside u16.
                len: LEN as u16,
                filter: PROGRAM.as_ptr().cast_mut(),
            }
        };
        // SAFETY: `prctl` with these options reads `prog` (a valid `sock_fprog` on this
        // stack frame pointing at a static program of `len` instructions) and nothing else.
        unsafe {
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &prog as *const libc::sock_fprog,
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    }
}

#[cfg(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
))]
pub(crate) use linux::{CAN_DENY_CHILDREN, install};

/// Elsewhere there is no filter to install (and no Landlock network rules to get around).
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(crate) fn install(_deny_children: bool) -> std::io::Result<()> {
    Ok(())
}

/// Without the filter, child processes cannot be refused.
#[cfg(not(all(
    target_os = "linux",
    any(target_arch = "x86_64", target_arch = "aarch64")
)))]
pub(crate) const CAN_DENY_CHILDREN: bool = false;
