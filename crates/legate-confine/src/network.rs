//! The network of an isolated process: a network namespace of its own, holding only a
//! loopback device, and, when asked ([`crate::Confinement::egress`]), one listening TCP
//! socket on that namespace's `127.0.0.1:<port>`, handed to Legate, which serves its egress
//! proxy on it. Nothing else leaves the namespace: it has no route to the host's loopback,
//! the LAN or the internet, so Legate's own listening ports are unreachable by construction.
//!
//! The child side runs in C (see `init`) right after `unshare(… | CLONE_NEWNET)`:
//! [`loopback_up`] brings `lo` up (an `ioctl` on a throwaway datagram socket), then
//! [`Sender::hand_over`] creates the listener (close-on-exec), sends it over the `AF_UNIX`
//! socket pair prepared in the parent (`SCM_RIGHTS`), and closes both the listener and its
//! end of the pair, all before C forks the namespace's init: neither the init nor the agent
//! ever holds them. Every buffer is on the stack or built at compile time: nothing allocates
//! after `fork`.
//!
//! The parent side is [`EgressHandoff`]: taken from the prepared confinement before spawning,
//! received after `spawn` returned. Since std's `spawn` returns only once the agent exec'd
//! (or failed), and C sends before it forks anything, the message is queued by then:
//! [`EgressHandoff::receive`] never waits, and checks that what it got is exactly one
//! listening TCP socket on `127.0.0.1`.
//!
//! This module decides nothing about what may go through the listener (the proxy does).
#![allow(unsafe_code)]

use libc::c_int;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Whether a confinement that denies the network is enforced by the kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Network {
    /// TCP `bind` and `connect` are refused (Landlock ABI 4 or newer).
    Denied,
    /// Not enforced: the confinement did not ask, or the kernel has no Landlock network rules.
    NotEnforced,
}

impl Network {
    /// The wire form: `denied`, `not-enforced`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Denied => "denied",
            Self::NotEnforced => "not-enforced",
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The request that names `lo` (`struct ifreq`: the name, then a union whose first member
/// this module uses is the flags), built at compile time. Sized and aligned at least as the
/// kernel's, which copies `sizeof(struct ifreq)` in and out.
#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _rest: [u8; 30],
}

const LO: IfReq = IfReq {
    name: *b"lo\0\0\0\0\0\0\0\0\0\0\0\0\0\0",
    flags: 0,
    _rest: [0; 30],
};

/// Room for one fd's control message (sending).
// SAFETY: `CMSG_SPACE` is arithmetic on its argument only.
const ONE_FD_SPACE: usize = unsafe { libc::CMSG_SPACE(size_of::<c_int>() as u32) } as usize;
/// Room for a few fds (receiving): more than one is refused, but each must be closed.
// SAFETY: as above.
const RECV_SPACE: usize = unsafe { libc::CMSG_SPACE(8 * size_of::<c_int>() as u32) } as usize;

/// A control-message buffer aligned for `cmsghdr`.
#[repr(C, align(8))]
struct Cmsg<const N: usize>([u8; N]);

fn errno() -> io::Error {
    io::Error::last_os_error()
}

/// Brings the namespace's `lo` up. Runs in C after `unshare(CLONE_NEWNET)` (and in the
/// probe's child): async-signal-safe, no allocation.
pub(crate) fn loopback_up() -> io::Result<()> {
    // SAFETY: `socket`, `ioctl` on a stack `ifreq` of the kernel's layout (and larger), and
    // `close`; the errno is read before `close` can change it.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(errno());
        }
        let mut req = LO;
        if libc::ioctl(fd, libc::SIOCGIFFLAGS as _, &raw mut req) != 0 {
            let e = errno();
            libc::close(fd);
            return Err(e);
        }
        req.flags |= libc::IFF_UP as libc::c_short;
        let rc = libc::ioctl(fd, libc::SIOCSIFFLAGS as _, &raw const req);
        let e = errno();
        libc::close(fd);
        if rc != 0 {
            return Err(e);
        }
        Ok(())
    }
}

/// The child's side of the egress handoff, prepared in the parent: its end of the socket
/// pair and the port to listen on.
#[derive(Debug)]
pub(crate) struct Sender {
    sock: OwnedFd,
    port: u16,
}

impl Sender {
    /// In C, after `lo` is up: listens on `127.0.0.1:<port>` (close-on-exec), sends the
    /// listener to Legate, then closes it and this end of the pair, success or not. No
    /// allocation; errors carry raw OS codes.
    pub(crate) fn hand_over(&self) -> io::Result<()> {
        let sock = self.sock.as_raw_fd();
        // SAFETY: system calls on stack structures of the kernel's layout (the listener is
        // sent by `send_fd`).
        unsafe {
            let l = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
            if l < 0 {
                let e = errno();
                libc::close(sock);
                return Err(e);
            }
            let one: c_int = 1;
            let mut addr: libc::sockaddr_in = std::mem::zeroed();
            addr.sin_family = libc::AF_INET as libc::sa_family_t;
            addr.sin_port = self.port.to_be();
            addr.sin_addr.s_addr = u32::from(Ipv4Addr::LOCALHOST).to_be();
            let listening = libc::setsockopt(
                l,
                libc::SOL_SOCKET,
                libc::SO_REUSEADDR,
                (&raw const one).cast(),
                size_of::<c_int>() as libc::socklen_t,
            ) == 0
                && libc::bind(
                    l,
                    (&raw const addr).cast(),
                    size_of::<libc::sockaddr_in>() as libc::socklen_t,
                ) == 0
                && libc::listen(l, 128) == 0;
            let sent = if listening {
                send_fd(sock, l)
            } else {
                Err(errno())
            };
            libc::close(l);
            libc::close(sock);
            sent
        }
    }
}

/// Sends the descriptor `fd` over the socket `sock` in one `SCM_RIGHTS` message with a
/// one-byte body. No allocation (it runs between `fork` and `exec`); errors carry raw OS
/// codes, `EINVAL` when the control message has no room.
fn send_fd(sock: c_int, fd: c_int) -> io::Result<()> {
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut control = Cmsg([0u8; ONE_FD_SPACE]);
    // SAFETY: a message header of the kernel's layout on the stack, pointing at `iov` and
    // `control`, which outlive the call; the control message is written within its aligned,
    // large-enough buffer (`ONE_FD_SPACE`), after checking the kernel found room for it.
    unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &raw mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.0.as_mut_ptr().cast();
        msg.msg_controllen = ONE_FD_SPACE as _;
        let cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
        if cmsg.is_null() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<c_int>(), fd);
        if libc::sendmsg(sock, &raw const msg, libc::MSG_NOSIGNAL) != 1 {
            return Err(errno());
        }
    }
    Ok(())
}

/// Legate's side of the egress handoff: its end of the socket pair, from
/// [`crate::Prepared::take_egress`].
#[derive(Debug)]
pub struct EgressHandoff {
    sock: OwnedFd,
    port: u16,
}

/// A new socket pair for one handoff: Legate's side and the child's.
pub(crate) fn pair(port: u16) -> io::Result<(EgressHandoff, Sender)> {
    let mut fds = [0 as c_int; 2];
    // SAFETY: `socketpair` writes two fds into the two-element array it is given; each is
    // owned from here on.
    let (ours, theirs) = unsafe {
        if libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        ) != 0
        {
            return Err(errno());
        }
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    };
    Ok((
        EgressHandoff { sock: ours, port },
        Sender { sock: theirs, port },
    ))
}

fn invalid(why: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the egress listener handed over by the confined process {why}"),
    )
}

/// An integer socket option of `fd`.
fn sockopt(fd: &OwnedFd, level: c_int, name: c_int) -> io::Result<c_int> {
    let mut v: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: `getsockopt` writes at most `len` bytes into `v`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&raw mut v).cast(),
            &raw mut len,
        )
    };
    if rc != 0 {
        return Err(errno());
    }
    Ok(v)
}

impl EgressHandoff {
    /// The port asked for inside the namespace (0: any).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The listener the confined process's namespace holds on `127.0.0.1:<port>`, once
    /// `spawn` returned successfully: non-blocking (ready for
    /// `tokio::net::TcpListener::from_std`) and close-on-exec. Never waits: if nothing was
    /// sent, or what was sent is not exactly one listening TCP socket on `127.0.0.1` (at the
    /// port asked, unless 0), it is an error, and every fd received is closed.
    pub fn receive(self) -> io::Result<TcpListener> {
        let mut byte = [0u8; 1];
        let mut iov = libc::iovec {
            iov_base: byte.as_mut_ptr().cast(),
            iov_len: 1,
        };
        let mut control = Cmsg([0u8; RECV_SPACE]);
        let mut fds: Vec<OwnedFd> = Vec::new();
        // SAFETY: `recvmsg` fills the stack buffers it is given, within their lengths; the
        // control messages are walked with the kernel's own macros, bounded by what it
        // reported; every fd received is owned at once, so it is closed on every path.
        let (n, flags) = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = &raw mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.0.as_mut_ptr().cast();
            msg.msg_controllen = RECV_SPACE as _;
            let n = libc::recvmsg(
                self.sock.as_raw_fd(),
                &raw mut msg,
                libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC,
            );
            if n < 0 {
                let e = errno();
                return Err(if e.kind() == io::ErrorKind::WouldBlock {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        "the confined process handed over no egress listener (it did not start, or the handoff was received already)",
                    )
                } else {
                    e
                });
            }
            let mut cmsg = libc::CMSG_FIRSTHDR(&raw const msg);
            while !cmsg.is_null() {
                if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                    let data = libc::CMSG_DATA(cmsg);
                    let header = data.offset_from(cmsg.cast::<u8>()) as usize;
                    let count =
                        ((*cmsg).cmsg_len as usize).saturating_sub(header) / size_of::<c_int>();
                    for i in 0..count {
                        let fd = std::ptr::read_unaligned(data.cast::<c_int>().add(i));
                        if fd >= 0 {
                            fds.push(OwnedFd::from_raw_fd(fd));
                        }
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&raw const msg, cmsg);
            }
            (n, msg.msg_flags)
        };
        if flags & libc::MSG_CTRUNC != 0 {
            return Err(invalid("came with more descriptors than one"));
        }
        if n == 0 && fds.is_empty() {
            return Err(invalid("was never sent (the process closed its end)"));
        }
        let fd = match (fds.pop(), fds.is_empty()) {
            (Some(fd), true) => fd,
            (None, _) => return Err(invalid("was missing")),
            (Some(_), false) => return Err(invalid("came with more descriptors than one")),
        };
        if sockopt(&fd, libc::SOL_SOCKET, libc::SO_DOMAIN)? != libc::AF_INET
            || sockopt(&fd, libc::SOL_SOCKET, libc::SO_TYPE)? != libc::SOCK_STREAM
            || sockopt(&fd, libc::SOL_SOCKET, libc::SO_PROTOCOL)? != libc::IPPROTO_TCP
        {
            return Err(invalid("is not a TCP/IPv4 socket"));
        }
        if sockopt(&fd, libc::SOL_SOCKET, libc::SO_ACCEPTCONN)? != 1 {
            return Err(invalid("is not listening"));
        }
        let listener = TcpListener::from(fd);
        match listener.local_addr()? {
            SocketAddr::V4(a)
                if *a.ip() == Ipv4Addr::LOCALHOST && (self.port == 0 || a.port() == self.port) => {}
            other => return Err(invalid(&format!("listens on {other}, not where asked"))),
        }
        listener.set_nonblocking(true)?;
        Ok(listener)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_request_is_at_least_the_kernels() {
        assert!(size_of::<IfReq>() >= 40);
        assert_eq!(&LO.name[..3], b"lo\0");
    }

    /// The handoff within one process: a listener sent by `hand_over` arrives whole, a
    /// second receive finds nothing and does not wait, and a plain socket is refused.
    #[test]
    fn a_handed_over_listener_arrives_and_nothing_else_passes() {
        let (ours, theirs) = pair(0).unwrap();
        theirs.hand_over().unwrap();
        std::mem::forget(theirs); // `hand_over` closed it
        let l = ours.receive().unwrap();
        assert!(l.local_addr().unwrap().ip().is_loopback());
        let addr = l.local_addr().unwrap();
        let _c = std::net::TcpStream::connect(addr).unwrap();

        let (ours, _theirs) = pair(0).unwrap();
        let e = ours.receive().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");

        // A bound-but-not-listening socket sent by hand is refused.
        let (ours, theirs) = pair(0).unwrap();
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        send_fd(theirs.sock.as_raw_fd(), udp.as_raw_fd()).unwrap();
        let e = ours.receive().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{e}");
    }
}
