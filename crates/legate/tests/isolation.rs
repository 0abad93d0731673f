//! Attacks on Legate itself from inside an ordinary sandbox task, through the real `legate`
//! binary and the real revisor agent: its shell command tries to read `$LEGATE_HOME`'s
//! database, tokens, another task's sandbox, copy and baseline, Legate's environment, and to
//! signal Legate; and a grandchild that ignores `SIGTERM` must not outlive a `kill -9` of
//! `legate run`. Skipped where this process may not create namespaces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, task_id, text};
use legate_frontkit::poll::until;
use legate_testkit::procs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

fn available() -> bool {
    let ok = legate_confine::Confinement::probe_namespaces();
    if !ok {
        eprintln!("skipped: this process may not create mount and PID namespaces");
    }
    ok
}

/// A home whose commands run with a canary in their environment.
fn canary_home() -> CliHome {
    CliHome::new(env!("CARGO_BIN_EXE_legate")).env("LEGATE_TEST_SECRET", "ENVCANARY-3f9a")
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
    let h = canary_home();
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
    let id = task_id(&out);
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
    procs::with_env(mark)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

#[test]
fn a_grandchild_that_ignores_sigterm_dies_with_a_killed_legate() {
    if !available() {
        return;
    }
    let h = canary_home();
    let mark = format!("LEGATE_TEST_MARK=orphan-{}", std::process::id());
    let mut child = h.spawn(&[
        "run",
        &format!("run trap '' TERM; exec env {mark} sleep 600"),
    ]);
    until(Duration::from_secs(30), "the grandchild run", || {
        (!marked(&mark).is_empty()).then_some(())
    });
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

/// The control groups named `legate-<pid>-…` that a Legate of process `pid` made, under the
/// test's own v1 `pids` and `memory` groups or its v2 group (standard mount points).
fn groups_of(pid: u32) -> Vec<PathBuf> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let mut dirs = Vec::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next(), parts.next().unwrap_or(""), parts.next());
        let path = path.unwrap_or("/").trim_start_matches('/');
        for c in controllers.split(',') {
            if c == "pids" || c == "memory" {
                dirs.push(Path::new("/sys/fs/cgroup").join(c).join(path));
            }
        }
        if controllers.is_empty() {
            dirs.push(Path::new("/sys/fs/cgroup").join(path));
            dirs.push(Path::new("/sys/fs/cgroup/unified").join(path));
        }
    }
    let prefix = format!("legate-{pid}-");
    dirs.iter()
        .filter_map(|d| std::fs::read_dir(d).ok())
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect()
}

/// The task's confinement notice, and whether it says the limits hold.
fn limits_held(h: &CliHome, id: &str) -> (String, bool) {
    let events = h.run(&["events", id]);
    let events = String::from_utf8_lossy(&events.stdout).into_owned();
    let line = events
        .lines()
        .find(|l| l.contains("agent process confinement"))
        .unwrap_or_else(|| panic!("no confinement event:\n{events}"))
        .to_string();
    let held = !line.contains("not limited");
    if !held {
        assert!(
            std::env::var_os("LEGATE_REQUIRE_LIMITS").is_none(),
            "LEGATE_REQUIRE_LIMITS is set, but the limits do not hold: {line}"
        );
        eprintln!("skipped: Legate may not make control groups here: {line}");
    }
    (line, held)
}

#[test]
fn a_fork_bomb_stops_at_the_agents_process_limit_and_its_group_goes_with_legate() {
    if !available() {
        return;
    }
    let h = CliHome::with_config(
        env!("CARGO_BIN_EXE_legate"),
        "[agents.revisor]\nmax_processes = 64\n",
    );
    // A shell starts 300 background sleepers (dash gives up at the first refused fork); then
    // the task's shell counts what
    // runs in its namespace and ends its sleepers, with builtins only (no fork is left).
    let script = "run { sh -c 'i=0; while [ $i -lt 300 ]; do sleep 1000 >/dev/null 2>&1 & i=$((i+1)); done' 2> err.txt; \
        n=0; for p in /proc/[0-9]*; do n=$((n+1)); done; echo $n > count.txt; \
        for p in /proc/[0-9]*; do read -r c < $p/comm; [ \"$c\" = sleep ] && kill -9 ${p#/proc/}; done; true; } 2>/dev/null";
    let child = h.spawn(&["run", script]);
    let legate = child.id();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    let (line, held) = limits_held(&h, &id);
    if !held {
        return;
    }
    assert!(line.contains("processes: 64"), "{line}");
    assert!(line.contains("\"maxProcesses\":64"), "{line}");
    let root = PathBuf::from(h.show(&id)["root"].as_str().unwrap().to_string());
    let count: usize = std::fs::read_to_string(root.join("count.txt"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let refused = std::fs::read_to_string(root.join("err.txt")).unwrap();
    assert!(count < 64, "{count} processes ran under a limit of 64");
    assert!(!refused.is_empty(), "no fork was refused ({count} ran)");
    // A `legate` that ended leaves no group of its own behind once the next one started.
    let next = h.run(&["run", "write after.txt: ok"]);
    assert!(next.status.success(), "{}", text(&next));
    let left = groups_of(legate);
    assert!(left.is_empty(), "groups left behind: {left:?}");
}

#[test]
fn a_memory_bomb_is_killed_at_the_agents_memory_limit_and_the_task_goes_on() {
    if !available() {
        return;
    }
    let h = CliHome::with_config(
        env!("CARGO_BIN_EXE_legate"),
        "[agents.revisor]\nmax_memory_mb = 64\n",
    );
    // `tail` keeps a line whole; /dev/zero has no newline: 300 MB held unless killed.
    let script = "run head -c 300000000 /dev/zero | tail > /dev/null; echo \"tail: $?\" > mem.txt";
    let out = h.run(&["run", script]);
    assert!(out.status.success(), "{}", text(&out));
    let id = task_id(&out);
    let (line, held) = limits_held(&h, &id);
    if !held {
        return;
    }
    assert!(line.contains("memory: 64 MiB"), "{line}");
    let root = PathBuf::from(h.show(&id)["root"].as_str().unwrap().to_string());
    let said = std::fs::read_to_string(root.join("mem.txt")).unwrap();
    assert_eq!(said.trim(), "tail: 137", "the memory bomb was not killed");
}

/// A Legate that is not root isolates its agents too, in a user namespace of each agent's
/// own. It never did: Legate makes itself non-dumpable, and a non-dumpable child could not
/// write its own `/proc/self/setgroups` after `unshare`, so every probe failed and agents ran
/// with Landlock only, seeing the home. Run as `nobody` from a root test (skipped otherwise,
/// or without `setpriv`).
#[test]
fn a_legate_that_is_not_root_hides_its_home_too() {
    let root = rustix::process::geteuid().is_root();
    let setpriv = Command::new("setpriv").arg("--version").output().is_ok();
    if !root || !setpriv || !available() {
        eprintln!("skipped: needs root (to become nobody), setpriv and namespaces");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    std::fs::set_permissions(&base, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let as_nobody = |args: &[&str]| {
        Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(env!("CARGO_BIN_EXE_legate"))
            .args(args)
            .current_dir(&base)
            .env("LEGATE_HOME", base.join("home"))
            .env("HOME", &base)
            .output()
            .unwrap()
    };
    if !as_nobody(&["--version"]).status.success() {
        eprintln!("skipped: nobody cannot run the built binary here");
        return;
    }
    let doctor = as_nobody(&["doctor"]);
    let said = text(&doctor);
    assert!(
        said.lines().any(|l| l.contains("✔ namespaces")),
        "no namespaces for a Legate that is not root:\n{said}"
    );
    let run = as_nobody(&["run", "run echo done"]);
    let said = text(&run);
    assert!(said.contains("home hidden: yes"), "{said}");
    assert!(said.contains("processes hidden: yes"), "{said}");
}
