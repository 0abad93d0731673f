//! Landlock's TCP `connect` right does not hold every way of opening a TCP connection. Under
//! Landlock alone, a confined process reached a Legate port refused by the port layer of
//! then (and, under `deny_network`, any port) by
//!
//! * an MPTCP socket (`socket(AF_INET, SOCK_STREAM, IPPROTO_MPTCP)`): Landlock's net hooks
//!   apply to `sk_is_tcp()` sockets only, and MPTCP falls back to plain TCP against Legate's
//!   listener;
//! * TCP Fast Open (`sendto(…, MSG_FASTOPEN, addr)` on a fresh TCP socket): the kernel
//!   connects inside `tcp_sendmsg_fastopen`, without the `socket_connect` LSM hook.
//!
//! Both ways connected on Linux 6.18 (found attacking the port layer, since replaced by the
//! network namespace, which no socket type leaves). The confinement's seccomp filter
//! (`legate-confine/src/seccomp.rs`) refuses both, which `deny_network` under Landlock only
//! still needs: that test fails without it.

#![allow(clippy::unwrap_used, clippy::expect_used, unsafe_code)]

use legate_confine::{Confinement, Requirement};
use std::net::TcpListener;
use std::process::Command;

const CHILD: &str = "LEGATE_REACH_BYPASS_PORT";

/// Tries one connection to 127.0.0.1:`port` the way `how` says; `true` if it connected.
fn connect(how: &str, port: u16) -> bool {
    // SAFETY: plain socket system calls on stack memory.
    unsafe {
        let proto = if how == "mptcp" { 262 } else { 0 }; // IPPROTO_MPTCP
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM, proto);
        if fd < 0 {
            return false;
        }
        let mut addr: libc::sockaddr_in = std::mem::zeroed();
        addr.sin_family = libc::AF_INET as libc::sa_family_t;
        addr.sin_port = port.to_be();
        addr.sin_addr.s_addr = u32::from_be_bytes([127, 0, 0, 1]).to_be();
        let len = size_of::<libc::sockaddr_in>() as libc::socklen_t;
        let ok = if how == "tfo" {
            let msg = b"x";
            libc::sendto(
                fd,
                msg.as_ptr().cast(),
                msg.len(),
                libc::MSG_FASTOPEN,
                (&raw const addr).cast(),
                len,
            ) == 1
        } else {
            libc::connect(fd, (&raw const addr).cast(), len) == 0
        };
        libc::close(fd);
        ok
    }
}

/// The confined side: one `how=ok|err` line per way of connecting.
#[test]
fn bypass_child() {
    let Ok(port) = std::env::var(CHILD) else {
        return;
    };
    let port: u16 = port.parse().unwrap();
    for how in ["tcp", "mptcp", "tfo"] {
        let r = if connect(how, port) { "ok" } else { "err" };
        println!("{how}={r}");
    }
}

fn confined(prepared: legate_confine::Prepared, port: u16) -> String {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "bypass_child", "--nocapture", "--test-threads=1"])
        .env(CHILD, port.to_string());
    legate_confine::confine_command(&mut cmd, prepared);
    let out = cmd.output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn no_way_of_connecting_leaves_the_network_namespace() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let prepared = Confinement::new().prepare(Requirement::BestEffort).unwrap();
    if !prepared.isolation().network_isolated {
        eprintln!("no network namespaces here: nothing to test");
        return;
    }
    let out = confined(prepared, port);
    eprintln!("{out}");
    for how in ["tcp", "mptcp", "tfo"] {
        assert!(
            out.contains(&format!("{how}={}", "err")),
            "{how} left: {out}"
        );
    }
}

#[test]
fn deny_network_holds_for_every_way_of_connecting() {
    if std::env::var(CHILD).is_ok() {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    // Landlock only: the namespace would hold the connection whatever Landlock did.
    let prepared = Confinement::new()
        .deny_network()
        .landlock_only()
        .prepare(Requirement::BestEffort)
        .unwrap();
    if prepared.network() != legate_confine::Network::Denied {
        eprintln!("no Landlock network rules here: nothing to test");
        return;
    }
    let out = confined(prepared, port);
    eprintln!("{out}");
    assert!(out.contains("tcp=err"), "{out}");
    assert!(
        out.contains("mptcp=err"),
        "an MPTCP socket escaped deny_network: {out}"
    );
    assert!(
        out.contains("tfo=err"),
        "TCP Fast Open escaped deny_network: {out}"
    );
}
