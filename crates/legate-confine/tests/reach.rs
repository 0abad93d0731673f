//! What a confined process can reach of Legate, against the real kernel: a real `bash`,
//! forked and confined through `confine_command`, tries TCP connections to a registered and an
//! unregistered listener on 127.0.0.1, signals its parent (this test, standing for Legate)
//! and reads its environment. The registry's liveness is checked across real processes.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_confine::{Confinement, Enforcement, LegatePorts, Requirement, Signals, ports};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};

const REGISTER_CHILD: &str = "LEGATE_REACH_TEST_REGISTER";

/// The script the confined shell runs: one `name=ok|err` line per attempt.
const PROBE: &str = r#"
try() { if (eval "$2") >/dev/null 2>&1; then echo "$1=ok"; else echo "$1=err"; fi; }
try registered 'exec 3<>/dev/tcp/127.0.0.1/$REGISTERED'
try free 'exec 3<>/dev/tcp/127.0.0.1/$FREE'
try kill_parent 'kill -0 $PPID'
try environ_parent 'cat /proc/$PPID/environ'
try maps_parent 'cat /proc/$PPID/maps'
try mem_parent 'exec 3</proc/$PPID/mem'
sleep 30 & own=$!
try kill_own 'kill -0 $own'
kill $own
"#;

fn confined_probe(registered: u16, free: u16) -> String {
    let dir = tempfile::tempdir().unwrap();
    let prepared = Confinement::new()
        .allow_write(dir.path())
        .prepare(Requirement::BestEffort)
        .unwrap();
    let mut cmd = Command::new("bash");
    cmd.args(["-c", PROBE])
        .env("REGISTERED", registered.to_string())
        .env("FREE", free.to_string())
        .env("SECRET_OF_LEGATE", "hunter2");
    legate_confine::confine_command(&mut cmd, prepared);
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn legate_ports_are_unreachable_and_signals_stay_in_the_domain() {
    let registered = TcpListener::bind("127.0.0.1:0").unwrap();
    let free = TcpListener::bind("127.0.0.1:0").unwrap();
    let (reg_port, free_port) = (
        registered.local_addr().unwrap().port(),
        free.local_addr().unwrap().port(),
    );
    let held = ports::register(&[reg_port]).unwrap();
    assert!(ports::legate_ports().contains(&reg_port));

    let prepared = Confinement::new().prepare(Requirement::BestEffort).unwrap();
    let abi4 = Confinement::probe_network() == legate_confine::Network::Denied
        && Confinement::probe() != Enforcement::None;
    if abi4 {
        assert_eq!(prepared.legate_ports(), LegatePorts::Unreachable);
        assert!(prepared.blocked_ports().contains(&reg_port));
        assert!(!prepared.blocked_ports().contains(&free_port));
    } else {
        assert_eq!(prepared.legate_ports(), LegatePorts::NotEnforced);
    }
    let scoped = prepared.signals() == Signals::Scoped;
    drop(prepared);

    // Twice: the second child gets the cached layer.
    for round in 0..2 {
        let out = confined_probe(reg_port, free_port);
        eprintln!("round {round}:\n{out}");
        assert!(out.contains("free=ok"), "{out}");
        assert!(out.contains("kill_own=ok"), "{out}");
        if abi4 {
            assert!(out.contains("registered=err"), "{out}");
        } else {
            eprintln!("no Landlock network rules here: Legate's ports are reachable");
        }
        if scoped {
            assert!(out.contains("kill_parent=err"), "{out}");
        } else {
            eprintln!("no Landlock scopes here: the parent can be signaled");
        }
        // Landlock refuses ptrace-attach-mode access (`/proc/<pid>/mem`) outside the domain;
        // read mode (`environ`, `maps`) it does not: that is the binary's own hardening.
        if Confinement::probe() != Enforcement::None {
            assert!(out.contains("mem_parent=err"), "{out}");
        }
    }

    // Unregistered, the port is reachable again (for processes confined from now on).
    drop(held);
    if !ports::legate_ports().contains(&reg_port) {
        let out = confined_probe(reg_port, free_port);
        assert!(out.contains("registered=ok"), "{out}");
    }
}

#[test]
fn legate_still_kills_a_scoped_child() {
    let prepared = Confinement::new().prepare(Requirement::BestEffort).unwrap();
    let mut cmd = Command::new("bash");
    cmd.args(["-c", "echo up; exec sleep 60"])
        .stdout(Stdio::piped());
    legate_confine::confine_command(&mut cmd, prepared);
    let mut child = cmd.spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "up");
    child.kill().unwrap();
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(9), "{status:?}");
}

#[test]
fn net_port_layer_leaves_deny_network_whole() {
    let free = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    let prepared = Confinement::new()
        .deny_network()
        .prepare(Requirement::BestEffort)
        .unwrap();
    let denied = prepared.network() == legate_confine::Network::Denied;
    if denied {
        assert_eq!(prepared.legate_ports(), LegatePorts::Unreachable);
        assert!(prepared.blocked_ports().is_empty(), "no layer needed");
    }
    let mut cmd = Command::new("bash");
    cmd.args([
        "-c",
        &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo free=ok || echo free=err"),
    ]);
    legate_confine::confine_command(&mut cmd, prepared);
    let out = String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned();
    if denied {
        assert!(out.contains("free=err"), "{out}");
    }
}

/// The registering side of the liveness test: registers a port in the registry named by
/// [`REGISTER_CHILD`], says so, and waits to be killed.
#[test]
fn registering_child() {
    let Ok(spec) = std::env::var(REGISTER_CHILD) else {
        return;
    };
    let (dir, port) = spec.rsplit_once(':').unwrap();
    ports::use_registry(dir);
    let _held = ports::register(&[port.parse().unwrap()]).unwrap();
    println!("registered");
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line);
}

#[test]
fn another_process_sees_the_ports_until_it_dies() {
    if std::env::var(REGISTER_CHILD).is_ok() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "registering_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(REGISTER_CHILD, format!("{}:4711", dir.path().display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("registered") {
        line.clear();
        assert_ne!(stdout.read_line(&mut line).unwrap(), 0, "child ended");
    }
    assert_eq!(ports::live_ports(dir.path()), [4711].into());
    let file = dir.path().join(format!("{}.json", child.id()));
    assert!(file.exists());
    // Killed, it leaves its file behind, and the file no longer counts.
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(file.exists());
    assert!(ports::live_ports(dir.path()).is_empty());
}
