//! What the admission tests under a lowered descriptor limit share: the limit itself (set
//! on this process with `prlimit`, as a real process would), counting open descriptors,
//! following a task, and an engine on the scripted agent.

use legate_backend::Backend;
use legate_backend::acp::AcpBackend;
use legate_core::{AgentKind, AgentSpec, Event, TaskId};
use legate_engine::{Engine, EngineConfig, Paths};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

const AGENT: &str = env!("CARGO_BIN_EXE_legate-scripted-agent");

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
pub async fn until(engine: &Engine, id: &TaskId, done: impl Fn(&Event) -> bool) -> Vec<Event> {
    let mut sub = engine.subscribe(id, 0);
    let mut seen = Vec::new();
    let waited = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(e) = sub.next().await.unwrap() {
            let stop = done(&e);
            seen.push(e);
            if stop {
                return;
            }
        }
    })
    .await;
    assert!(waited.is_ok(), "never came: {seen:?}");
    seen
}

/// An engine in `dir/home` whose default agent, `agent`, is the scripted agent, with
/// `max_running` places and room for 64 idle sessions.
pub fn engine(dir: &Path, max_running: usize) -> Engine {
    let mut config = EngineConfig::new(Paths::new(dir.join("home")));
    config.agents.insert(
        "agent".into(),
        AgentSpec {
            name: "agent".into(),
            kind: AgentKind::Acp,
            command: AGENT.into(),
            args: vec![],
            env: BTreeMap::new(),
            preset: None,
            allow_execute: false,
            terminal: false,
            description: None,
            model: None,
            inherit_env: Vec::new(),
        },
    );
    config.default_agent = "agent".into();
    config.max_running = max_running;
    config.max_idle_sessions = 64;
    config.cancel_grace = Duration::from_secs(1);
    let backend: Arc<dyn Backend> = Arc::new(AcpBackend::new());
    Engine::start(
        config,
        HashMap::from([(AgentKind::Acp, backend)]),
        Arc::new(legate_supervisor::Rules),
    )
    .unwrap()
}
