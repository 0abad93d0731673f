//! The network namespace against the real kernel: a confined `python3`, as a hostile agent
//! would, tries to reach listeners this test holds on the host's loopback (TCP, UDP, IPv6),
//! the cloud metadata address, and raw packets; then, with an egress listener, it connects to
//! the namespace's `127.0.0.1:<port>` and this test, holding the listener, answers. Each test
//! is skipped (with a message) where this process may not create a network namespace.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_confine::{Confinement, Requirement, confine_command};
use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

fn available() -> bool {
    let ok = Confinement::probe_network_namespace();
    if !ok {
        eprintln!("skipped: this process may not create a network namespace");
    }
    ok
}

fn text(o: &Output) -> String {
    format!(
        "{}\n--stderr--\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// What the confined process tries: one `name=result` line each (`ok`, or the errno's name).
const ESCAPE: &str = r#"
import errno, os, socket
def name(e):
    return errno.errorcode.get(e.errno, str(e)) if getattr(e, "errno", None) else type(e).__name__
def attempt(label, f):
    try:
        r = f()
        print(f"{label}={r if r else 'ok'}", flush=True)
    except OSError as e:
        print(f"{label}={name(e)}", flush=True)
def tcp(family, host, port):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.settimeout(5)
    s.connect((host, port))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.sendto(b"escaped", ("127.0.0.1", int(os.environ["UDP"])))
    return "sent"
def own_loopback():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    c = socket.create_connection(srv.getsockname(), timeout=5)
    a, _ = srv.accept()
    c.sendall(b"x")
    return "ok" if a.recv(1) == b"x" else "garbled"
def packet():
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    return "opened:" + ",".join(n for _, n in socket.if_nameindex())
attempt("tcp4", lambda: tcp(socket.AF_INET, "127.0.0.1", int(os.environ["TCP4"])))
attempt("udp4", udp)
if os.environ.get("TCP6"):
    attempt("tcp6", lambda: tcp(socket.AF_INET6, "::1", int(os.environ["TCP6"])))
attempt("metadata", lambda: tcp(socket.AF_INET, "169.254.169.254", 80))
attempt("loopback", own_loopback)
attempt("packet", packet)
with open("/proc/net/dev") as f:
    names = [l.split(":")[0].strip() for l in f.readlines()[2:]]
print("ifaces=" + ",".join(names), flush=True)
"#;

fn line<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in:\n{out}"))
}

#[test]
fn nothing_leaves_the_network_namespace() {
    if !available() {
        return;
    }
    let tcp4 = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp4.set_nonblocking(true).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let tcp6 = TcpListener::bind("[::1]:0").ok();
    let dir = tempfile::tempdir().unwrap();
    let prepared = Confinement::new()
        .allow_write(dir.path())
        .prepare(Requirement::Required)
        .unwrap();
    assert!(prepared.isolation().network_isolated);
    assert!(!prepared.egress_requested());
    let mut cmd = Command::new("python3");
    cmd.args(["-c", ESCAPE])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .env("TCP4", tcp4.local_addr().unwrap().port().to_string())
        .env("UDP", udp.local_addr().unwrap().port().to_string());
    if let Some(l) = &tcp6 {
        cmd.env("TCP6", l.local_addr().unwrap().port().to_string());
    } else {
        eprintln!("no IPv6 loopback on the host: that attempt is left out");
    }
    confine_command(&mut cmd, prepared);
    let out = cmd.output().unwrap();
    let all = text(&out);
    eprintln!("{all}");
    assert!(out.status.success(), "{all}");
    // Nothing arrived on the host's side: every attempt ended before the child exited, and
    // a connection or datagram on loopback is queued synchronously.
    assert_eq!(tcp4.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
    let mut buf = [0u8; 16];
    assert_eq!(
        udp.recv(&mut buf).unwrap_err().kind(),
        ErrorKind::WouldBlock
    );
    if let Some(l) = &tcp6 {
        l.set_nonblocking(true).unwrap();
        assert_eq!(l.accept().unwrap_err().kind(), ErrorKind::WouldBlock);
        assert_ne!(line(&all, "tcp6"), "ok", "{all}");
    }
    assert_eq!(line(&all, "tcp4"), "ECONNREFUSED", "{all}");
    // No route: it fails at once, without a timeout.
    assert_eq!(line(&all, "metadata"), "ENETUNREACH", "{all}");
    // Its own loopback works (`lo` is up), and it is the only device.
    assert_eq!(line(&all, "loopback"), "ok", "{all}");
    assert_eq!(line(&all, "ifaces"), "lo", "{all}");
    let packet = line(&all, "packet");
    assert!(packet == "EPERM" || packet == "opened:lo", "{all}");
}

/// What the confined process does with the egress listener: lists its own fds (no socket
/// may be there), then talks to `127.0.0.1:$PORT`.
const EGRESS: &str = r#"
import os, socket
fds = []
for fd in os.listdir("/proc/self/fd"):
    try:
        fds.append(fd + "->" + os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
print("fds=" + " ".join(fds), flush=True)
c = socket.create_connection(("127.0.0.1", int(os.environ["PORT"])), timeout=30)
c.sendall(b"ping")
got = b""
while len(got) < 4:
    chunk = c.recv(4 - len(got))
    if not chunk:
        break
    got += chunk
print("got=" + got.decode(), flush=True)
"#;

#[test]
fn the_egress_listener_is_the_one_way_out() {
    if !available() {
        return;
    }
    const PORT: u16 = 3128;
    let dir = tempfile::tempdir().unwrap();
    let mut prepared = Confinement::new()
        .allow_write(dir.path())
        .egress(PORT)
        .prepare(Requirement::Required)
        .unwrap();
    assert!(prepared.egress_requested());
    let handoff = prepared.take_egress().expect("an egress handoff");
    assert!(prepared.take_egress().is_none(), "taken once");
    assert!(prepared.egress_requested());
    let mut cmd = Command::new("python3");
    cmd.args(["-c", EGRESS])
        .current_dir(dir.path())
        .env("PORT", PORT.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    confine_command(&mut cmd, prepared);
    let child = cmd.spawn().unwrap();
    let listener = handoff.receive().unwrap();
    assert_eq!(
        listener.local_addr().unwrap(),
        ([127, 0, 0, 1], PORT).into()
    );
    // The listener lives in the child's namespace: the host's 127.0.0.1:PORT is not it.
    listener.set_nonblocking(false).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = listener.accept().map(|(mut s, _)| {
            let mut ping = [0u8; 4];
            s.read_exact(&mut ping)?;
            s.write_all(b"pong")?;
            Ok::<_, std::io::Error>(ping)
        });
        let _ = tx.send(r);
    });
    let out = child.wait_with_output().unwrap();
    let all = text(&out);
    eprintln!("{all}");
    let ping = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the child never connected")
        .unwrap()
        .unwrap();
    assert_eq!(&ping, b"ping");
    assert!(out.status.success(), "{all}");
    assert_eq!(line(&all, "got"), "pong", "{all}");
    let fds = line(&all, "fds");
    assert!(!fds.contains("socket:"), "the child holds a socket: {fds}");
}

#[test]
fn without_a_network_namespace_there_is_no_egress_listener() {
    let mut prepared = Confinement::new()
        .egress(3128)
        .landlock_only()
        .prepare(Requirement::Required)
        .unwrap();
    assert!(!prepared.egress_requested());
    assert!(prepared.take_egress().is_none());
    assert!(!prepared.isolation().network_isolated);
}

/// A handoff whose process never ran has nothing to receive, and says so at once.
#[test]
fn receiving_before_anything_was_sent_fails_at_once() {
    if !available() {
        return;
    }
    let mut prepared = Confinement::new()
        .egress(0)
        .prepare(Requirement::BestEffort)
        .unwrap();
    let handoff = prepared.take_egress().unwrap();
    let err = handoff.receive().unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NotFound, "{err}");
}
