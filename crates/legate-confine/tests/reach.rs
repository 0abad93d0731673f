//! What a confined process can reach of Legate, against the real kernel: a real `bash`,
//! forked and confined through `confine_command`, tries a TCP connection to a listener on the
//! host's 127.0.0.1 (standing for Legate's ports), signals its parent (this test, standing for
//! Legate) and reads its environment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_confine::{Confinement, Enforcement, LegatePorts, Requirement, Signals};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Command, Stdio};

/// The script the confined shell runs: one `name=ok|err` line per attempt.
const PROBE: &str = r#"
try() { if (eval "$2") >/dev/null 2>&1; then echo "$1=ok"; else echo "$1=err"; fi; }
try host 'exec 3<>/dev/tcp/127.0.0.1/$PORT'
try kill_parent 'kill -0 $PPID'
try environ_parent 'cat /proc/$PPID/environ'
try maps_parent 'cat /proc/$PPID/maps'
try mem_parent 'exec 3</proc/$PPID/mem'
sleep 30 & own=$!
try kill_own 'kill -0 $own'
kill $own
"#;

fn confined_probe(confinement: Confinement, port: u16) -> String {
    let dir = tempfile::tempdir().unwrap();
    let prepared = confinement
        .allow_write(dir.path())
        .prepare(Requirement::BestEffort)
        .unwrap();
    let mut cmd = Command::new("bash");
    cmd.args(["-c", PROBE])
        .env("PORT", port.to_string())
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
    let host = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = host.local_addr().unwrap().port();
    let prepared = Confinement::new().prepare(Requirement::BestEffort).unwrap();
    let isolated = Confinement::probe_network_namespace();
    assert_eq!(prepared.isolation().network_isolated, isolated);
    assert_eq!(
        prepared.legate_ports(),
        if isolated {
            LegatePorts::Unreachable
        } else {
            LegatePorts::NotEnforced
        }
    );
    assert_eq!(Confinement::probe_reach().0, prepared.legate_ports());
    let scoped = prepared.signals() == Signals::Scoped;
    drop(prepared);

    let out = confined_probe(Confinement::new(), port);
    eprintln!("{out}");
    assert!(out.contains("kill_own=ok"), "{out}");
    if isolated {
        assert!(out.contains("host=err"), "{out}");
    } else {
        eprintln!("no network namespaces here: the host's ports are reachable");
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

    // The control: under Landlock only, the host's port is reachable (the namespace holds it).
    let out = confined_probe(Confinement::new().landlock_only(), port);
    assert!(out.contains("host=ok"), "{out}");
    let prepared = Confinement::new()
        .landlock_only()
        .prepare(Requirement::Required)
        .unwrap();
    assert!(!prepared.isolation().network_isolated);
    assert_eq!(prepared.legate_ports(), LegatePorts::NotEnforced);
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
fn deny_network_holds_with_and_without_a_namespace() {
    let free = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = free.local_addr().unwrap().port();
    for landlock_only in [false, true] {
        let mut c = Confinement::new().deny_network();
        if landlock_only {
            c = c.landlock_only();
        }
        let prepared = c.prepare(Requirement::BestEffort).unwrap();
        let denied = prepared.network() == legate_confine::Network::Denied;
        let isolated = prepared.isolation().network_isolated;
        if denied || isolated {
            assert_eq!(prepared.legate_ports(), LegatePorts::Unreachable);
        }
        let mut cmd = Command::new("bash");
        cmd.args([
            "-c",
            &format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo free=ok || echo free=err"),
        ]);
        legate_confine::confine_command(&mut cmd, prepared);
        let out = String::from_utf8_lossy(&cmd.output().unwrap().stdout).into_owned();
        if denied || isolated {
            assert!(out.contains("free=err"), "{out}");
        }
    }
}
