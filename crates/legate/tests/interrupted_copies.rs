//! Copies of interrupted tasks, from the binary: `kill -9` of a `legate run --copy` mid-task,
//! then the next command (`legate show`) recovers the task and removes its copy and baseline;
//! with `keep_interrupted_copies` they stay for inspection, unless the copy was half made.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, scripted_config, text};
use legate_frontkit::poll::until;
use serde_json::Value;
use std::process::Child;
use std::time::{Duration, Instant};

/// A home whose `legate.toml` adds the scripted agent and `extra`, and a git project.
fn fixture(extra: &str) -> CliHome {
    let env = CliHome::with_config(env!("CARGO_BIN_EXE_legate"), &scripted_config(extra))
        .env_remove("LEGATE_KEEP_INTERRUPTED_COPIES");
    env.make_project(&[("src/lib.txt", "hello\n")]);
    env
}

/// Starts a copy task that hangs in its turn, waits until it is `working` (its copy and
/// baseline made), and kills its `legate` with SIGKILL. Returns the task id.
fn kill_mid_task(env: &CliHome) -> String {
    let project = env.project().to_string_lossy().into_owned();
    let mut child: Child =
        env.spawn_silent(&["run", "--agent", "scripted", "--copy", &project, "!hang"]);
    let id = env.wait_for_state("working", Duration::from_secs(60));
    assert!(env.copy(&id).is_dir() && env.baseline(&id).is_dir());
    child.kill().unwrap(); // SIGKILL: nothing of legate runs after this.
    child.wait().unwrap();
    id
}

/// `legate show --json id` once the killed runner's last process is gone. The runner's
/// lock can outlive `kill -9` by a moment: a process it was forking for an agent's
/// confinement (which holds its descriptors until the agent execs) is still exiting.
/// Until then the task reads as `working`, rightly: its runner still looks alive.
fn settled(env: &CliHome, id: &str) -> Value {
    until(Duration::from_secs(30), "the task settled", || {
        let task = env.show(id);
        (task["state"] != "working").then_some(task)
    })
}

fn assert_interrupted(task: &Value) {
    assert_eq!(task["state"], "failed", "{task}");
    assert_eq!(task["error"]["code"], "SERVER_RESTARTED", "{task}");
}

#[test]
fn the_copy_of_a_killed_task_is_removed_by_the_next_command() {
    let env = fixture("");
    let id = kill_mid_task(&env);
    // The next command, whatever it is, recovers the task and removes its copy.
    assert_interrupted(&settled(&env, &id));
    assert!(!env.copy(&id).exists(), "the copy was kept");
    assert!(!env.baseline(&id).exists(), "the baseline was kept");
    let discarded = events_named(&env, &id, "copy.discarded");
    assert_eq!(discarded.len(), 1, "{discarded:?}");
    assert_eq!(discarded[0]["detail"]["reason"], "interrupted");
    // Nothing else was touched: the project is as it was.
    assert_eq!(
        std::fs::read_to_string(env.project().join("src/lib.txt")).unwrap(),
        "hello\n"
    );
    // A review of it says so.
    let out = env.run(&["diff", &id]);
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("discarded"),
        "{}",
        text(&out)
    );
}

#[test]
fn keep_interrupted_copies_keeps_it_for_inspection() {
    let env = fixture("[copies]\nkeep_interrupted_copies = true\n");
    let id = kill_mid_task(&env);
    assert_interrupted(&settled(&env, &id));
    assert!(
        env.copy(&id).join("src/lib.txt").is_file(),
        "the copy is gone"
    );
    assert!(env.baseline(&id).is_dir(), "the baseline is gone");
    assert!(events_named(&env, &id, "copy.discarded").is_empty());
    // Still there after more commands, until the retention sweep or a discard.
    env.run(&["tasks"]);
    assert!(env.copy(&id).is_dir());
    let out = env.run(&["discard", &id]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!env.copy(&id).exists());
}

#[test]
fn a_half_made_copy_is_removed_even_when_interrupted_copies_are_kept() {
    let env = fixture("[copies]\nkeep_interrupted_copies = true\n");
    let id = kill_mid_task(&env);
    // What a process killed while making the copy leaves: a copy without its baseline.
    std::fs::remove_dir_all(env.baseline(&id)).unwrap();
    assert_interrupted(&settled(&env, &id));
    assert!(!env.copy(&id).exists(), "the half-made copy was kept");
    let discarded = events_named(&env, &id, "copy.discarded");
    assert_eq!(discarded.len(), 1, "{discarded:?}");
    assert_eq!(discarded[0]["detail"]["reason"], "half-made");
}

/// Writes `len` bytes that do not compress (xorshift), so that hashing them takes a while.
fn write_noise(path: &std::path::Path, len: usize, seed: u64) {
    let mut x = seed | 1;
    let mut bytes = Vec::with_capacity(len);
    while bytes.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        bytes.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_copy_killed_while_it_is_made_is_removed_even_when_interrupted_copies_are_kept() {
    let env = fixture("[copies]\nkeep_interrupted_copies = true\n");
    // Untracked and incompressible: the baseline hashes them (`git hash-object -w`), which
    // takes seconds, so the copy is still being made when its legate is killed.
    for (i, name) in ["noise-a.bin", "noise-b.bin"].iter().enumerate() {
        write_noise(&env.project().join(name), 40 << 20, 0x9e37_79b9 + i as u64);
    }
    let project = env.project().to_string_lossy().into_owned();
    let mut child: Child =
        env.spawn_silent(&["run", "--agent", "scripted", "--copy", &project, "!hang"]);
    let copies = env.home().join("copies");
    let deadline = Instant::now() + Duration::from_secs(60);
    let id = loop {
        let first = std::fs::read_dir(&copies)
            .ok()
            .and_then(|mut d| d.next())
            .and_then(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned());
        if let Some(id) = first {
            break id;
        }
        assert!(Instant::now() < deadline, "the copy was never started");
        std::thread::sleep(Duration::from_millis(5));
    };
    child.kill().unwrap(); // SIGKILL while copying.
    child.wait().unwrap();
    assert!(
        env.copy(&id).is_dir(),
        "the half-made copy is there to be removed"
    );
    assert_interrupted(&settled(&env, &id));
    assert!(!env.copy(&id).exists(), "the half-made copy was kept");
    assert!(
        !env.baseline(&id).exists(),
        "the half-made baseline was kept"
    );
    let discarded = events_named(&env, &id, "copy.discarded");
    assert_eq!(discarded.len(), 1, "{discarded:?}");
    assert_eq!(discarded[0]["detail"]["reason"], "half-made");
    // It really was killed mid-copy: the copy was never reported ready.
    let out = env.run(&["events", &id]);
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("copy ready"),
        "{}",
        text(&out)
    );
}

#[test]
fn the_sweep_removes_a_kept_copy_at_once_when_it_is_half_made() {
    let env = fixture("[copies]\nkeep_interrupted_copies = true\n");
    let id = kill_mid_task(&env);
    assert_interrupted(&settled(&env, &id));
    assert!(env.copy(&id).is_dir());
    // Its baseline lost afterwards: nothing left to inspect, so no waiting for the retention.
    std::fs::remove_dir_all(env.baseline(&id)).unwrap();
    let out = env.run(&["cleanup"]);
    assert!(out.status.success(), "{}", text(&out));
    assert!(!env.copy(&id).exists(), "{}", text(&out));
}

#[test]
fn a_completed_copy_and_a_live_one_are_never_removed_by_recovery() {
    let env = fixture("");
    let project = env.project().to_string_lossy().into_owned();
    let out = env.run(&[
        "run",
        "--agent",
        "scripted",
        "--copy",
        &project,
        "write src/new.txt: x",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let done = env.json(&["tasks", "--json"]);
    let done_id = done["id"].as_str().unwrap().to_string();
    // A live copy task in another process, and a killed one: only the killed one goes.
    let killed = kill_mid_task(&env);
    let mut live: Child =
        env.spawn_silent(&["run", "--agent", "scripted", "--copy", &project, "!hang"]);
    let live_id = env.wait_for_state("working", Duration::from_secs(60));
    assert_interrupted(&settled(&env, &killed));
    assert!(!env.copy(&killed).exists());
    assert_eq!(env.json(&["show", "--json", &live_id])["state"], "working");
    assert!(env.copy(&live_id).is_dir() && env.baseline(&live_id).is_dir());
    assert!(env.copy(&done_id).join("src/new.txt").is_file());
    assert!(env.baseline(&done_id).is_dir());
    live.kill().unwrap();
    live.wait().unwrap();
}

/// The newest task.
fn newest(env: &CliHome) -> Value {
    env.tasks_json().into_iter().next().unwrap()
}

/// The `workspace` events of the task named `name`.
fn events_named(env: &CliHome, id: &str, name: &str) -> Vec<Value> {
    env.events(id)
        .into_iter()
        .filter(|v| v["detail"]["event"] == name)
        .collect()
}

#[test]
fn a_later_turn_killed_in_a_shared_copy_keeps_it_and_the_next_turn_continues() {
    // Not kept for inspection: a first turn's copy would go; a later turn's copy holds the
    // earlier turns' work and stays.
    let env = fixture("");
    let project = env.project().to_string_lossy().into_owned();
    let out = env.run(&[
        "run",
        "--agent",
        "scripted",
        "--copy",
        &project,
        "write src/one.txt: 1",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let first = newest(&env);
    let (first_id, context) = (
        first["id"].as_str().unwrap().to_string(),
        first["contextId"].as_str().unwrap().to_string(),
    );
    let mut child: Child =
        env.spawn_silent(&["run", "--agent", "scripted", "--context", &context, "!hang"]);
    let killed = env.wait_for_state("working", Duration::from_secs(60));
    assert_ne!(killed, first_id);
    child.kill().unwrap(); // SIGKILL mid-turn, holding the copy's lock.
    child.wait().unwrap();
    assert_interrupted(&settled(&env, &killed));
    // The copy (named after the turn that made it) and its baseline are kept, and say so.
    assert!(env.copy(&first_id).join("src/one.txt").is_file());
    assert!(env.baseline(&first_id).is_dir());
    assert!(events_named(&env, &killed, "copy.discarded").is_empty());
    assert!(events_named(&env, &first_id, "copy.discarded").is_empty());
    assert_eq!(events_named(&env, &killed, "copy.kept").len(), 1);
    // The interrupted turn is not integrable; neither is the turn it continued.
    for id in [&killed, &first_id] {
        let out = env.run(&["integrate", id]);
        assert!(!out.status.success(), "{}", text(&out));
    }
    // The next turn continues in the same copy; the patch holds both turns' files.
    let out = env.run(&[
        "run",
        "--agent",
        "scripted",
        "--context",
        &context,
        "write src/two.txt: 2",
    ]);
    assert!(out.status.success(), "{}", text(&out));
    let third = newest(&env);
    let third_id = third["id"].as_str().unwrap().to_string();
    assert_eq!(third["state"], "completed", "{third}");
    assert_eq!(events_named(&env, &third_id, "copy.continued").len(), 1);
    let preview = env.json(&["diff", "--json", &third_id]);
    let mut files: Vec<&str> = preview["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    files.sort_unstable();
    assert_eq!(files, ["src/one.txt", "src/two.txt"], "{preview}");
    // The project itself is untouched until integration.
    assert!(!env.project().join("src/one.txt").exists());
}
