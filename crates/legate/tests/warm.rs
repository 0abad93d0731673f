//! Warm sessions through the binary: `legate serve` keeps the `[agents.NAME] warm` sessions
//! ready (each in its own `warm-<runner>-XXXXXX` sandbox, its agent process running before any
//! task) and stops them, sandboxes removed, on SIGTERM; a one-shot `legate run` keeps none and
//! its task opens its own session.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

fn warm_dirs(home: &Path) -> Vec<PathBuf> {
    legate_testkit::harness::warm_sandboxes(home)
}

/// Live processes whose working directory is `dir`.
fn running_in(dir: &Path) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| std::fs::read_link(e.path().join("cwd")).is_ok_and(|c| c == dir))
        .count()
}

#[test]
fn serve_keeps_warm_sessions_and_stops_them_and_a_one_shot_run_keeps_none() {
    let home = CliHome::with_config(LEGATE, "[agents.revisor]\nwarm = 2\n");

    // A one-shot run keeps no warm session: while its task runs (long enough for revisor to
    // start many times over), no warm sandbox is ever made; its task opens its own session.
    let mut child = home.spawn(&["run", "--sandbox", "run sleep 2"]);
    let status = loop {
        assert!(
            warm_dirs(&home.home()).is_empty(),
            "a one-shot run made a warm session"
        );
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status:?}");
    let tasks = home.tasks_json();
    let id = tasks[0]["id"].as_str().unwrap();
    let events = home.events(id);
    assert!(
        !events.iter().any(|e| e["detail"]["event"] == "agent.warm"),
        "{events:?}"
    );

    let mut served = home.serve(&["--mcp", "--port", "0"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    let dirs = loop {
        let dirs = warm_dirs(&home.home());
        if dirs.len() == 2 && dirs.iter().all(|d| running_in(d) > 0) {
            break dirs;
        }
        assert!(
            Instant::now() < deadline,
            "warm sessions never ready: {dirs:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    served.stop();
    for d in &dirs {
        assert!(!d.exists(), "{} left after SIGTERM", d.display());
        assert_eq!(running_in(d), 0);
    }
}
