//! The hostile-agent suite of the network: a real `legate run --sandbox` whose built-in
//! `revisor` agent runs a Python probe that tries every way out of its network namespace,
//! while the test holds services on the host's loopback (TCP, UDP, IPv6, a plain HTTP
//! origin). Only the egress proxy leads out, only where a rule says so, and every attempt
//! through it is an event of the task.
//!
//! Every address used is on this machine: the host's loopback, or the namespace's own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write;
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use legate_frontkit::cli::{CliHome, task_id, text};
use legate_frontkit::served::origin;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// What the agent runs: `python3 probe.py <tcp> <udp> <tcp6> <origin> <host-ip>`, writing
/// one `name=outcome` line per attempt into `net.txt` in its workspace.
const PROBE: &str = r#"
import os, socket, sys, urllib.request
tcp, udp, tcp6, origin, host_ip = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
out = open("net.txt", "w")
def say(name, value):
    out.write(f"{name}={value}\n"); out.flush()
def attempt(name, fn):
    try:
        say(name, "ok:" + str(fn()))
    except Exception as e:
        say(name, "err:" + type(e).__name__ + ":" + str(getattr(e, "errno", "")))
def connect(host, port, family=socket.AF_INET):
    s = socket.socket(family, socket.SOCK_STREAM); s.settimeout(5)
    s.connect((host, port)); data = s.recv(64); s.close(); return data.decode(errors="replace")
def proxy(request):
    s = socket.create_connection(("127.0.0.1", 3128), timeout=20)
    s.sendall(request.encode()); data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk: break
        data += chunk
        if request.startswith("CONNECT") and b"\r\n\r\n" in data: break
    s.close(); return data.split(b"\r\n")[0].decode()
# /proc/net/dev is the namespace's own (sysfs is not remounted, and still names the host's).
interfaces = ",".join(sorted(l.split(":")[0].strip() for l in open("/proc/net/dev").read().splitlines()[2:]))
say("interfaces", interfaces)
if interfaces != "lo":
    # Not in a namespace of its own: never send anything toward another host from a test.
    say("done", "no-namespace"); sys.exit(0)
attempt("tcp_loopback", lambda: connect("127.0.0.1", tcp))
attempt("tcp6_loopback", lambda: connect("::1", tcp6, socket.AF_INET6))
attempt("tcp_host_ip", lambda: connect(host_ip, tcp))
attempt("metadata_direct", lambda: connect("169.254.169.254", 80))
def udp_send():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"leak", ("127.0.0.1", udp)); return "sent"
attempt("udp_loopback", udp_send)
def udp_host():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"leak", (host_ip, udp)); return "sent"
attempt("udp_host_ip", udp_host)
attempt("packet", lambda: socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3)).fileno())
attempt("raw", lambda: socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP).fileno())
attempt("dns", lambda: socket.getaddrinfo("example.com", 443))
attempt("no_proxy_origin", lambda: connect("127.0.0.1", origin))
attempt("proxy_denied", lambda: proxy("GET http://denied.example/ HTTP/1.1\r\nHost: denied.example\r\n\r\n"))
attempt("proxy_unknown", lambda: proxy("CONNECT unknown.example:443 HTTP/1.1\r\nHost: unknown.example:443\r\n\r\n"))
attempt("proxy_metadata", lambda: proxy("GET http://169.254.169.254/latest/meta-data/ HTTP/1.1\r\nHost: 169.254.169.254\r\n\r\n"))
attempt("proxy_rebound", lambda: proxy(f"CONNECT localhost:{tcp} HTTP/1.1\r\nHost: localhost\r\n\r\n"))
attempt("proxy_loopback_unnamed", lambda: proxy(f"CONNECT 127.0.0.1:{tcp} HTTP/1.1\r\nHost: x\r\n\r\n"))
attempt("urllib_origin", lambda: urllib.request.urlopen(f"http://127.0.0.1:{origin}/hello", timeout=20).read().decode())
say("env_proxy", os.environ.get("HTTPS_PROXY", "") + " no_proxy=" + os.environ.get("NO_PROXY", ""))
say("done", "yes")
"#;

/// A loopback TCP service that answers every connection with `HOST-SERVICE` and counts them.
fn tcp_service(addr: &str) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind(addr).unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counted.fetch_add(1, Ordering::SeqCst);
            let _ = stream.write_all(b"HOST-SERVICE");
        }
    });
    (port, hits)
}

/// The host's first address that is not loopback, if it has one.
fn host_ip() -> String {
    let out = Command::new("hostname").arg("-I").output();
    out.ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .find(|a| !a.contains(':'))
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "127.0.0.2".to_string())
}

#[test]
fn an_agent_reaches_nothing_but_what_a_rule_allows_through_the_proxy() {
    let (tcp, tcp_hits) = tcp_service("0.0.0.0:0");
    let (tcp6, tcp6_hits) = match TcpListener::bind("[::1]:0") {
        Ok(l) => {
            drop(l);
            tcp_service("[::1]:0")
        }
        Err(_) => (9, Arc::new(AtomicUsize::new(0))),
    };
    let udp = UdpSocket::bind("0.0.0.0:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let udp_port = udp.local_addr().unwrap().port();
    let (origin, origin_hits) = origin();
    let home = CliHome::with_config(
        LEGATE,
        &format!(
            "[network]\nallow = [\"127.0.0.1:{origin}\", \"localhost\"]\ndeny = [\"denied.example\"]\n"
        ),
    );
    let script = home.write("probe.py", PROBE);

    let out = home.run(&[
        "run",
        "--sandbox",
        &format!(
            "run /usr/bin/python3 {script} {tcp} {udp_port} {tcp6} {origin} {}",
            host_ip()
        ),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    let shown = home.run(&["show", "--json", &id]);
    let task: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let root = Path::new(task["root"].as_str().unwrap());
    let report = std::fs::read_to_string(root.join("net.txt")).unwrap();
    eprintln!("{report}");
    let outcome = |name: &str| -> String {
        report
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}=")))
            .unwrap_or_else(|| panic!("{name} missing: {report}"))
            .to_string()
    };
    if outcome("done") == "no-namespace" {
        eprintln!("the agent has no network namespace here; nothing more to check");
        return;
    }
    assert_eq!(outcome("done"), "yes");

    let events = home.events(&id);
    let notice = events
        .iter()
        .find(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("agent process confinement"))
        })
        .unwrap_or_else(|| panic!("no confinement notice: {events:?}"));
    if notice["detail"]["network"] != "namespace" {
        eprintln!("no network namespace on this machine; nothing more to check: {notice}");
        return;
    }
    assert!(
        notice["message"].as_str().unwrap().contains("network:"),
        "{notice}"
    );

    // Only a loopback device, and nothing of the host reached directly.
    assert_eq!(outcome("interfaces"), "lo");
    for name in [
        "tcp_loopback",
        "tcp6_loopback",
        "tcp_host_ip",
        "metadata_direct",
        "dns",
        "no_proxy_origin",
    ] {
        assert!(outcome(name).starts_with("err:"), "{name}: {report}");
    }
    assert!(outcome("packet").starts_with("err:"), "{report}");
    assert!(outcome("raw").starts_with("err:"), "{report}");
    assert_eq!(tcp_hits.load(Ordering::SeqCst), 0, "{report}");
    assert_eq!(tcp6_hits.load(Ordering::SeqCst), 0, "{report}");
    // UDP: sending may "succeed" into the namespace's own loopback; nothing arrives here.
    let mut buf = [0u8; 16];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a datagram reached the host"
    );

    // Through the proxy: refused unless a rule allows, and special addresses only when a
    // rule names them exactly.
    for name in [
        "proxy_denied",
        "proxy_unknown",
        "proxy_metadata",
        "proxy_rebound",
        "proxy_loopback_unnamed",
    ] {
        assert!(
            outcome(name).contains(" 403"),
            "{name} was not refused: {report}"
        );
    }
    // The one allowed destination, reached through the proxy by an ordinary client that
    // honours the variables.
    assert_eq!(
        outcome("urllib_origin"),
        "ok:ORIGIN GET /hello HTTP/1.1",
        "{report}"
    );
    assert!(
        outcome("env_proxy").starts_with("http://127.0.0.1:3128"),
        "{report}"
    );
    assert_eq!(tcp_hits.load(Ordering::SeqCst), 0, "{report}");
    assert_eq!(
        origin_hits.load(Ordering::SeqCst),
        1,
        "only urllib's request: {report}"
    );

    // Every attempt through the proxy is an event of the task.
    let connections: Vec<&serde_json::Value> = events
        .iter()
        .filter(|e| e["type"] == "connection")
        .collect();
    let find = |destination: &str| {
        connections
            .iter()
            .find(|c| c["destination"] == destination)
            .unwrap_or_else(|| panic!("no connection event for {destination}: {connections:?}"))
    };
    let denied = find("denied.example:80");
    assert_eq!(denied["decision"], "deny");
    assert_eq!(denied["decider"], "policy");
    assert_eq!(denied["ruleId"], "network.deny[0]");
    // No rule names it: refused by the table, before any name is resolved (the test never
    // makes Legate ask a DNS server).
    let unknown = find("unknown.example:443");
    assert_eq!(unknown["decision"], "deny");
    assert_eq!(unknown["decider"], "table");
    assert_eq!(find("169.254.169.254:80")["decision"], "deny");
    assert_eq!(find(&format!("localhost:{tcp}"))["decision"], "deny");
    assert_eq!(find(&format!("127.0.0.1:{tcp}"))["decision"], "deny");
    let allowed = find(&format!("127.0.0.1:{origin}"));
    assert_eq!(allowed["decision"], "allow");
    assert_eq!(allowed["ruleId"], "network.allow[0]");
    assert_eq!(allowed["address"], format!("127.0.0.1:{origin}"));
    assert!(allowed["received"].as_u64().unwrap() > 0, "{allowed}");
    assert!(allowed["sent"].as_u64().unwrap() > 0, "{allowed}");
    // The refusals travel back in the task's result.
    let refusals = task["result"]["refusals"].to_string();
    assert!(refusals.contains("denied.example:80"), "{refusals}");
}
