//! Isolation against the real kernel: a confined `sh` tries, as a hostile agent would, to
//! read a hidden home and a hidden token file, to climb out of its working directory, to
//! read the environment of the processes above it, to signal its spawner, and to keep a
//! grandchild alive after its spawner is `kill -9`ed. Each test asserts on what the shell
//! printed, and each is skipped (with a message) where this process may not create
//! namespaces.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_confine::{Confinement, Requirement, confine_command};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const CANARY: &str = "LEGATE_TEST_SECRET";
const MIDDLE: &str = "LEGATE_SANDBOX_TEST_MIDDLE";

fn available() -> bool {
    let ok = Confinement::probe_namespaces();
    if !ok {
        eprintln!("skipped: this process may not create mount and PID namespaces");
    }
    ok
}

fn sh(confinement: Confinement, cwd: &Path, script: &str) -> Output {
    let mut cmd = Command::new("/bin/sh");
    cmd.args(["-c", script])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .env(CANARY, "nothing-here");
    let prepared = confinement.prepare(Requirement::Required).unwrap();
    assert!(prepared.isolation().home_hidden || prepared.isolation().processes_hidden);
    confine_command(&mut cmd, prepared);
    cmd.output().unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}\n--stderr--\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

struct Home {
    _dir: tempfile::TempDir,
    home: PathBuf,
    root: PathBuf,
    token: PathBuf,
}

fn home() -> Home {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let home = base.join("home");
    let root = home.join("sandboxes/mine");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(home.join("sandboxes/other")).unwrap();
    std::fs::create_dir_all(home.join("copies/t2")).unwrap();
    std::fs::write(home.join("legate.db"), "DBSECRET").unwrap();
    std::fs::write(home.join("mcp-token"), "TOKSECRET").unwrap();
    std::fs::write(home.join("sandboxes/other/f"), "OTHERSECRET").unwrap();
    std::fs::write(home.join("copies/t2/f"), "COPYSECRET").unwrap();
    std::fs::write(root.join("mine.txt"), "MINE").unwrap();
    let token = base.join("a2a-token");
    std::fs::write(&token, "A2ASECRET").unwrap();
    Home {
        _dir: dir,
        home,
        root,
        token,
    }
}

#[test]
fn the_home_and_token_files_are_hidden_and_the_workspace_is_not() {
    if !available() {
        return;
    }
    let h = home();
    let script = format!(
        "cat mine.txt; echo; echo new > made.txt && echo wrote-ok; \
         cat {home}/legate.db {home}/mcp-token {home}/sandboxes/other/f {home}/copies/t2/f {token}; \
         ls -a {home} {home}/sandboxes; cat ../other/f; cd .. && ls -a && cat other/f; \
         find {home} 2>&1 | head -20; true",
        home = h.home.display(),
        token = h.token.display()
    );
    let c = Confinement::new()
        .allow_write(&h.root)
        .hide(&h.home)
        .hide(&h.token);
    let out = sh(c, &h.root, &script);
    let all = text(&out);
    assert!(all.contains("MINE"), "{all}");
    assert!(all.contains("wrote-ok"), "{all}");
    assert_eq!(
        std::fs::read_to_string(h.root.join("made.txt")).unwrap(),
        "new\n"
    );
    for secret in [
        "DBSECRET",
        "TOKSECRET",
        "OTHERSECRET",
        "COPYSECRET",
        "A2ASECRET",
    ] {
        assert!(!all.contains(secret), "{secret} leaked:\n{all}");
    }
    let listed = String::from_utf8_lossy(&out.stdout);
    for name in ["legate.db", "mcp-token", "other", "copies"] {
        assert!(
            !listed.lines().any(|l| l.contains(name)),
            "{name} listed:\n{all}"
        );
    }
    // Outside, nothing moved.
    assert_eq!(
        std::fs::read_to_string(h.home.join("mcp-token")).unwrap(),
        "TOKSECRET"
    );
}

#[test]
fn legates_processes_and_environment_cannot_be_seen_or_signalled() {
    if std::env::var(MIDDLE).is_ok() || !available() {
        return;
    }
    let h = home();
    let me = std::process::id();
    // Every environment the shell can read, and every pid it can see; then the spawner.
    let script = format!(
        "for f in /proc/[0-9]*/environ; do cat $f 2>/dev/null | tr '\\0' '\\n' | grep {CANARY}=; done; \
         echo pids: $(ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '); \
         kill -0 {me} && echo signalled || echo no-such-process; \
         grep -E '^Cap(Eff|Bnd)' /proc/self/status"
    );
    // The canary is in this test process's own environment when re-run below.
    if std::env::var(CANARY).is_err() {
        let out = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "legates_processes_and_environment_cannot_be_seen_or_signalled",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CANARY, "PARENTSECRET")
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out));
        return;
    }
    let out = sh(
        Confinement::new().allow_write(&h.root).hide(&h.home),
        &h.root,
        &script,
    );
    let all = text(&out);
    assert!(
        !all.contains("PARENTSECRET"),
        "the spawner's environment leaked:\n{all}"
    );
    assert!(all.contains("no-such-process"), "{all}");
    let pids = all.lines().find(|l| l.starts_with("pids:")).unwrap();
    // Only the namespace's own: its init (1), the shell and its pipelines.
    let pids: Vec<u32> = pids
        .split_whitespace()
        .skip(1)
        .map(|p| p.parse().unwrap())
        .collect();
    assert!(
        pids.contains(&1) && pids.iter().all(|p| *p < 100),
        "{pids:?}"
    );
    let bnd = all.lines().find(|l| l.starts_with("CapBnd:")).unwrap();
    let mask = u64::from_str_radix(bnd.split_whitespace().nth(1).unwrap(), 16).unwrap();
    for cap in [2u32, 8, 12, 16, 17, 18, 19, 21, 22, 24, 27, 39] {
        assert_eq!(mask & (1 << cap), 0, "capability {cap} kept: {bnd}");
    }
}

#[test]
fn exit_statuses_are_mirrored_and_exec_errors_are_spawn_errors() {
    if !available() {
        return;
    }
    let h = home();
    let c = || Confinement::new().allow_write(&h.root).hide(&h.home);
    let out = sh(c(), &h.root, "echo out; exit 7");
    assert_eq!(out.status.code(), Some(7), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    let out = sh(c(), &h.root, "kill -TERM $$");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(15), "{}", text(&out));
    let mut cmd = Command::new("/nonexistent/agent");
    cmd.current_dir(&h.root);
    confine_command(&mut cmd, c().prepare(Requirement::Required).unwrap());
    let err = cmd.spawn().unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::NotFound, "{err}");
    // A working directory that is hidden and not kept cannot be entered: spawn fails.
    let mut cmd = Command::new("/bin/true");
    cmd.current_dir(h.home.join("sandboxes/other"));
    confine_command(&mut cmd, c().prepare(Requirement::Required).unwrap());
    assert!(cmd.spawn().is_err());
}

/// Processes whose environment holds `mark`, seen from here.
/// The environment of the process at `dir` (`/proc/<pid>`). A process in the middle of
/// `exec` reads an empty one for a moment: an empty read is taken again, up to ten times a
/// millisecond apart (a mark seen missing that way made the grandchild "never run").
fn environ(dir: &std::path::Path) -> Option<Vec<u8>> {
    for _ in 0..10 {
        let env = std::fs::read(dir.join("environ")).ok()?;
        if !env.is_empty() {
            return Some(env);
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    None
}

fn marked(mark: &str) -> Vec<u32> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let state = std::fs::read_to_string(e.path().join("stat")).unwrap_or_default();
        if state
            .rsplit_once(')')
            .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
        {
            continue;
        }
        if environ(&e.path())
            .is_some_and(|env| env.split(|b| *b == 0).any(|kv| kv == mark.as_bytes()))
        {
            found.push(pid);
        }
    }
    found
}

/// The middle process ("Legate"): spawns a confined shell whose grandchild ignores SIGTERM
/// and leaves the group, prints a line once it runs, then waits forever.
#[test]
fn middle() {
    let Ok(mark) = std::env::var(MIDDLE) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let landlock_only = std::env::var("LEGATE_TEST_LANDLOCK_ONLY").is_ok();
    let mut c = Confinement::new().allow_write(dir.path());
    if landlock_only {
        c = c.landlock_only();
    }
    let mut cmd = Command::new("/bin/sh");
    cmd.args([
        "-c",
        "trap '' TERM; setsid sh -c \"trap '' TERM; sleep 600\" & echo started; wait",
    ])
    .current_dir(dir.path())
    .env("MARK", mark.split_once('=').unwrap().1)
    .stdout(Stdio::inherit());
    confine_command(&mut cmd, c.prepare(Requirement::BestEffort).unwrap());
    // Waits for a shell that never ends: this process is killed from outside.
    let _ = cmd.spawn().unwrap().wait();
}

fn survivors_after_kill(landlock_only: bool) -> Vec<u32> {
    let mark = format!("MARK=grandchild-{}-{landlock_only}", std::process::id());
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "middle", "--nocapture", "--test-threads=1"])
        .env(MIDDLE, &mark)
        .stdout(Stdio::piped());
    if landlock_only {
        cmd.env("LEGATE_TEST_LANDLOCK_ONLY", "1");
    }
    let mut middle = cmd.spawn().unwrap();
    let mut out = std::io::BufReader::new(middle.stdout.take().unwrap());
    let mut line = String::new();
    while !line.contains("started") {
        line.clear();
        assert!(std::io::BufRead::read_line(&mut out, &mut line).unwrap() > 0);
    }
    // Both the shell and the sleep carry the mark; wait until the sleep is there.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut seen = marked(&mark).len();
    while seen < 2 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        seen = marked(&mark).len();
    }
    // The loop's own last look, not a new one: a new look could meet a process in `exec`.
    assert!(seen >= 2, "the grandchild never ran");
    middle.kill().unwrap();
    middle.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    // Gone when two looks in a row find nothing: one look can miss a process in `exec`.
    let mut empty_looks = 0;
    loop {
        let left = marked(&mark);
        empty_looks = if left.is_empty() { empty_looks + 1 } else { 0 };
        if empty_looks == 2 || Instant::now() >= deadline {
            for pid in &left {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
            return left;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_grandchild_that_ignores_sigterm_dies_with_its_spawner() {
    if std::env::var(MIDDLE).is_ok() || !available() {
        return;
    }
    let left = survivors_after_kill(false);
    assert!(
        left.is_empty(),
        "still running after its spawner died: {left:?}"
    );
}

/// The same attack under Landlock only: the grandchild survives (what isolation fixes).
#[test]
fn without_isolation_the_grandchild_survives() {
    if std::env::var(MIDDLE).is_ok() || !available() {
        return;
    }
    assert!(!survivors_after_kill(true).is_empty());
}
