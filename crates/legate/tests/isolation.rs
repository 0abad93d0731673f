//! Attacks on Legate itself from inside an ordinary sandbox task, through the real `legate`
//! binary and the real revisor agent: its shell command tries to read `$LEGATE_HOME`'s
//! database, tokens, another task's sandbox, copy and baseline, Legate's environment, and to
//! signal Legate; and a grandchild that ignores `SIGTERM` must not outlive a `kill -9` of
//! `legate run`. Skipped where this process may not create namespaces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn available() -> bool {
    let ok = legate_confine::Confinement::probe_namespaces();
    if !ok {
        eprintln!("skipped: this process may not create mount and PID namespaces");
    }
    ok
}

struct Home {
    dir: tempfile::TempDir,
}

impl Home {
    fn new() -> Self {
        Self {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_legate"));
        c.args(args)
            .env("LEGATE_HOME", self.home())
            .env("LEGATE_TEST_SECRET", "ENVCANARY-3f9a")
            .env_remove("LEGATE_LOG")
            .env_remove("RUST_LOG")
            .stdin(Stdio::null());
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.cmd(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn show(&self, id: &str) -> serde_json::Value {
        let out = self.run(&["show", "--json", id]);
        assert!(out.status.success(), "{}", text(&out));
        serde_json::from_slice(&out.stdout).unwrap()
    }
}

fn text(out: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn task_id(stderr: &str) -> String {
    let line = stderr.lines().find(|l| l.starts_with("task ")).unwrap();
    line.split_whitespace().nth(1).unwrap().to_string()
}

fn plant(path: &Path, canary: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, canary).unwrap();
}

#[test]
fn a_sandboxed_shell_gets_nothing_of_legates_home_environment_or_process() {
    if !available() {
        return;
    }
    let h = Home::new();
    // A first task puts a canary into the database.
    let out = h.run(&["run", "write note.txt: DBCANARY-77c1"]);
    assert!(out.status.success(), "{}", text(&out));
    let home = h.home().canonicalize().unwrap();
    assert!(std::fs::read(home.join("legate.db")).is_ok());
    plant(&home.join("mcp-token"), "MCPCANARY-1b2c");
    plant(&home.join("a2a-token"), "A2ACANARY-9d8e");
    plant(
        &home.join("copies/t-other/src/secret.rs"),
        "COPYCANARY-5a5a",
    );
    plant(
        &home.join("baselines/t-other/tree/secret.rs"),
        "BASECANARY-6b6b",
    );
    plant(
        &home.join("sandboxes/other-task/secret.txt"),
        "SANDCANARY-7c7c",
    );
    // The shell learns Legate's real pid from a file the test writes once Legate runs.
    let rendezvous = tempfile::tempdir().unwrap();
    let pid_file = rendezvous.path().join("pid");
    let h_ = home.display();
    let script = format!(
        "run {{ cat {h_}/legate.db {h_}/legate.db-wal {h_}/mcp-token {h_}/a2a-token; \
         cat {h_}/copies/*/src/* {h_}/baselines/*/tree/* {h_}/sandboxes/*/secret.txt; \
         ls -laR {h_}; cat ../*/secret.txt; \
         grep -a -h ENVCANARY /proc/[0-9]*/environ; \
         for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ; done | grep CANARY; \
         while [ ! -s {pid} ]; do sleep 0.05; done; P=$(cat {pid}); \
         kill -0 $P && echo KILL0-REACHED || echo KILL0-DENIED; \
         tr '\\0' '\\n' < /proc/$P/environ; echo END; }} > out.txt 2>&1",
        pid = pid_file.display()
    );
    let child = h.spawn(&["run", &script]);
    std::fs::write(&pid_file, child.id().to_string()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&String::from_utf8_lossy(&out.stderr));
    let task = h.show(&id);
    let root = PathBuf::from(task["root"].as_str().unwrap());
    let printed =
        String::from_utf8_lossy(&std::fs::read(root.join("out.txt")).unwrap()).into_owned();
    assert!(
        printed.contains("KILL0-DENIED") && printed.contains("END"),
        "{printed}"
    );
    for canary in [
        "DBCANARY",
        "MCPCANARY",
        "A2ACANARY",
        "COPYCANARY",
        "BASECANARY",
        "SANDCANARY",
        "ENVCANARY",
    ] {
        assert!(
            !printed.contains(canary),
            "{canary} reached the agent:\n{printed}"
        );
    }
    // The shell saw its own sandbox and nothing else of the home.
    assert!(
        !printed.contains("other-task") && !printed.contains("t-other"),
        "{printed}"
    );
    // The task's record says what held.
    let events = h.run(&["events", &id]);
    let events = String::from_utf8_lossy(&events.stdout);
    let line = events
        .lines()
        .find(|l| l.contains("agent process confinement"))
        .unwrap_or_else(|| panic!("no confinement event:\n{events}"));
    for part in [
        "home hidden: yes",
        "processes hidden: yes",
        "dies with Legate: yes",
        "capabilities dropped: yes",
    ] {
        assert!(line.contains(part), "{part}: {line}");
    }
    assert!(line.contains("\"homeHidden\":true"), "{line}");
}

/// Live processes (not zombies) whose environment holds `mark`.
fn marked(mark: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let stat = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if stat
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        {
            continue;
        }
        if let Ok(env) = std::fs::read(e.path().join("environ"))
            && env.split(|b| *b == 0).any(|kv| kv == mark.as_bytes())
        {
            found.push(pid);
        }
    }
    found
}

#[test]
fn a_grandchild_that_ignores_sigterm_dies_with_a_killed_legate() {
    if !available() {
        return;
    }
    let h = Home::new();
    let mark = format!("LEGATE_TEST_MARK=orphan-{}", std::process::id());
    let mut child = h.spawn(&[
        "run",
        &format!("run trap '' TERM; exec env {mark} sleep 600"),
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while marked(&mark).is_empty() {
        assert!(Instant::now() < deadline, "the grandchild never ran");
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // No other legate command runs. Bounded wait, not a timing assertion.
    let deadline = Instant::now() + Duration::from_secs(10);
    let left = loop {
        let left = marked(&mark);
        if left.is_empty() || Instant::now() >= deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for pid in &left {
        let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
    }
    assert!(left.is_empty(), "outlived legate: {left:?}");
}
