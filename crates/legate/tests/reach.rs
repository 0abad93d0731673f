//! An agent cannot reach or read Legate: a real `legate serve --mcp`, then a real sandboxed
//! `legate run` whose built-in `revisor` agent runs a hostile bash script. Given the server's
//! port and pid, the script reads the token file, and tries to drive the server over
//! 127.0.0.1 (bash's `/dev/tcp`), to signal it, and to read its environment. It gets nothing
//! (its own network namespace has no route to the host's loopback); and what held is in the
//! task's confinement event.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, task_id, text};
use legate_frontkit::served::{Served, addr_of};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");
const USER_SECRET: &str = "user-secret-6f1c0b9e";
const A2A_SECRET: &str = "a2a-secret-0123456789abcdef0123456789abcdef";

/// What the agent runs: `probe.sh <home> <port> <pid>`, reporting into `reach.txt`.
const PROBE: &str = r#"#!/bin/bash
home=$1 port=$2 pid=$3
exec >reach.txt 2>&1
token=$(cat "$home/mcp-token" 2>/dev/null)
echo "token_read=${#token}"
body='{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}'
if exec 3<>/dev/tcp/127.0.0.1/$port; then
  printf 'POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %s\r\nConnection: close\r\n\r\n%s' "$token" "${#body}" "$body" >&3
  timeout 10 cat <&3
  echo
  echo "connect=ok"
else
  echo "connect=refused"
fi
if kill -0 "$pid" 2>/dev/null; then echo "signal=ok"; else echo "signal=refused"; fi
echo "environ=$(tr '\0' ' ' < /proc/$pid/environ 2>&1)"
echo done
"#;

#[test]
fn a_sandboxed_agent_cannot_drive_signal_or_read_a_running_serve() {
    let env = CliHome::new(LEGATE);
    let home = env.home();
    std::fs::create_dir_all(&home).unwrap();
    let script = env.write("probe.sh", PROBE);
    let server = Served::spawn(
        env.cmd(&["serve", "--mcp", "--port", "0"])
            .env("LEGATE_LOG", "warn")
            .env("USER_SECRET", USER_SECRET)
            .env("LEGATE_A2A_TOKEN", A2A_SECRET),
    );
    let port = addr_of(&server.url("Legate MCP server"))
        .rsplit(':')
        .next()
        .unwrap()
        .to_string();
    let pid = server.child.id();

    // The server's own view: the environment block is blank.
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let environ = String::from_utf8_lossy(&environ);
    assert!(!environ.contains(USER_SECRET), "{environ}");
    assert!(!environ.contains(A2A_SECRET), "{environ}");

    let out = env.run(&[
        "run",
        "--sandbox",
        &format!("run bash {script} {} {port} {pid}", home.display()),
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    let shown = env.run(&["show", "--json", &id]);
    let task: serde_json::Value = serde_json::from_slice(&shown.stdout).unwrap();
    let root = Path::new(task["root"].as_str().unwrap());
    let report = std::fs::read_to_string(root.join("reach.txt")).unwrap();
    eprintln!("{report}");
    assert!(report.contains("done"), "{report}");

    let events = env.run(&["events", &id]);
    let events = String::from_utf8_lossy(&events.stdout);
    let line = events
        .lines()
        .find(|l| l.contains("agent process confinement"))
        .unwrap_or_else(|| panic!("{events}"));
    let landlock = !line.contains("confinement: not enforced");
    let scoped = landlock && line.contains("signals: scoped");
    let isolated = line.contains("network isolated: yes");
    assert_eq!(
        isolated,
        line.contains("network: own namespace"),
        "the message and the report disagree: {line}"
    );
    if isolated {
        assert!(line.contains("Legate's ports: unreachable"), "{line}");
        assert!(line.contains("\"network\":\"namespace\""), "{line}");
        assert!(!line.contains("blockedPorts"), "{line}");
        assert!(report.contains("connect=refused"), "{report}");
        assert!(!report.contains("serverInfo"), "{report}");
    } else {
        assert!(line.contains("network: not confined"), "{line}");
        eprintln!("no network namespaces here: the port is reachable ({line})");
    }
    if scoped {
        assert!(report.contains("signal=refused"), "{report}");
    }
    // Whatever the kernel: nothing secret in the server's environment block.
    assert!(!report.contains(USER_SECRET), "{report}");
    assert!(!report.contains(A2A_SECRET), "{report}");
    drop(server);
}

#[test]
fn a_legate_inside_an_agent_keeps_its_cleanup_markers_visible_and_nothing_else() {
    let env = CliHome::new(LEGATE);
    std::fs::create_dir_all(env.home()).unwrap();
    let mut server = Served::spawn(
        env.cmd(&["serve", "--mcp", "--port", "0"])
            .env("LEGATE_LOG", "warn")
            .env("LEGATE_RUN", "marker-1234")
            .env("LEGATE_RUNNER", "runner-5678")
            .env("USER_SECRET", USER_SECRET),
    );
    let child = &mut server.child;
    let environ = std::fs::read(format!("/proc/{}/environ", child.id())).unwrap();
    let entries: Vec<&[u8]> = environ
        .split(|b| *b == 0)
        .filter(|e| !e.is_empty())
        .collect();
    let _ = child.kill();
    let _ = child.wait();
    assert_eq!(
        entries,
        [&b"LEGATE_RUN=marker-1234"[..], b"LEGATE_RUNNER=runner-5678"],
        "{}",
        String::from_utf8_lossy(&environ)
    );
}

/// `setpriv` arguments running a command as `nobody`, with no capabilities.
const NOBODY: &[&str] = &["--reuid=65534", "--regid=65534", "--clear-groups"];

/// Whether `nobody` can read `/proc/<pid>/maps`.
fn nobody_reads_maps(pid: u32) -> bool {
    let out = Command::new("setpriv")
        .args(NOBODY)
        .args(["cat", &format!("/proc/{pid}/maps")])
        .output()
        .unwrap();
    out.status.success() && !out.stdout.is_empty()
}

/// Non-dumpable, a process is unreadable even to its own user (both without capabilities):
/// a `legate serve` run as `nobody` against a `sleep` run as `nobody`, the control.
#[test]
fn legate_is_not_dumpable() {
    let is_root = std::fs::read_to_string("/proc/self/status")
        .unwrap()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if !is_root || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs root and setpriv to run both sides as nobody");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    for p in [dir.path(), home.as_path()] {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
    let mut sleeper = Command::new("setpriv")
        .args(NOBODY)
        .args(["sh", "-c", "echo up; exec sleep 30"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Once it speaks, it is `nobody`'s shell, past its exec.
    let mut up = String::new();
    BufReader::new(sleeper.stdout.take().unwrap())
        .read_line(&mut up)
        .unwrap();
    let ordinary = nobody_reads_maps(sleeper.id());
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(
        ordinary,
        "nobody could not read its own sleep's maps: the control failed"
    );

    let mut child = Command::new("setpriv")
        .args(NOBODY)
        .args([LEGATE, "serve", "--mcp", "--port", "0"])
        .env("LEGATE_HOME", &home)
        .env("HOME", &home)
        .env("LEGATE_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let started = lines.any(|l| l.is_ok_and(|l| l.starts_with("Ctrl-C stops")));
    let readable = nobody_reads_maps(child.id());
    let _ = child.kill();
    let _ = child.wait();
    assert!(started, "legate serve did not start as nobody");
    assert!(
        !readable,
        "legate serve is dumpable: its own user read its maps"
    );
}
