//! What the admission tests under a lowered descriptor limit share: the limit itself (set
//! on this process with `prlimit`, as a real process would), counting open descriptors,
//! following a task, and an engine on the scripted agent.

use legate_core::{EventKind, Task};
use legate_engine::{Engine, SubmitRequest};
use legate_testkit::EngineHarness;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

pub fn open_fds() -> u64 {
    std::fs::read_dir("/proc/self/fd").unwrap().count() as u64 - 1
}

/// Sets this process's soft descriptor limit with `prlimit`, keeping the hard one.
pub fn set_soft_nofile(soft: u64) {
    let pid = std::process::id().to_string();
    let out = Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={soft}:")])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

pub fn soft_nofile() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

/// Follows `id` until an event satisfies `done`; returns everything up to it.
pub use legate_testkit::harness::until;

/// An engine in `dir/home` whose default agent, `agent`, is the scripted agent, with
/// `max_running` places and room for 64 idle sessions.
pub fn engine(dir: &Path, max_running: usize) -> Engine {
    EngineHarness::builder()
        .config(move |c| {
            c.max_running = max_running;
            c.max_idle_sessions = 64;
            c.cancel_grace = Duration::from_secs(1);
        })
        .engine_in(dir)
}

#[allow(dead_code)] // not every suite that includes this module starts busy agents
/// Starts two tasks that hang in their turns (busy agents: nothing idle to stop for room),
/// then lowers this process's soft descriptor limit so that only 20 more fit: less than a
/// new agent's 8 plus the reserve of 16. Returns the tasks and the limit to put back.
pub async fn two_busy_agents_and_no_room(engine: &Engine) -> (Vec<Task>, u64) {
    let mut hanging = Vec::new();
    for _ in 0..2 {
        let t = engine.submit(SubmitRequest::new("!hang")).unwrap();
        until(engine, &t.id, |e| {
            matches!(e.kind, EventKind::Session { .. })
        })
        .await;
        hanging.push(t);
    }
    let original = soft_nofile();
    set_soft_nofile(open_fds() + 20);
    (hanging, original)
}
