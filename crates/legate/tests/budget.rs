//! Sessions within a budget, from the binary: `legate serve --a2a` under a low descriptor
//! limit (`ulimit -n`), with the idle-session cap out of the way, runs many one-shot tasks
//! (each a new context, so each a new agent) and every one completes: tasks wait for room,
//! and idle sessions are stopped to make it, instead of failing with `INTERNAL` or
//! `AGENT_START_FAILED` ("Too many open files").

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use legate_frontkit::served::{addr_of, raw};
use serde_json::{Value, json};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

const TASKS: usize = 120;
const CLIENTS: usize = 6;
const FD_LIMIT: u32 = 256;

/// The soft descriptor limit of process `pid`.
fn fd_limit_of(pid: u32) -> u64 {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .unwrap();
    line.split_whitespace().nth(3).unwrap().parse().unwrap()
}

#[test]
fn many_one_shot_tasks_under_a_low_descriptor_limit_all_complete() {
    // No cap to speak of: only admission against the limit keeps legate within it.
    let home = CliHome::new(LEGATE)
        .env("LEGATE_MAX_IDLE_SESSIONS", "4096")
        .env("LEGATE_MAX_QUEUED", "1000")
        .env("LEGATE_MAX_RUNNING", "4");
    // At most `FD_LIMIT` descriptors, set before the process becomes legate.
    let served = home.serve_limited(&["--a2a", "--a2a-port", "0"], FD_LIMIT);
    assert_eq!(fd_limit_of(served.child.id()), u64::from(FD_LIMIT));
    let a2a = addr_of(&served.url("Legate A2A server"));
    let token = std::fs::read_to_string(home.home().join("a2a-token")).unwrap();
    let bearer = format!("Bearer {}", token.trim());

    let states: Vec<(String, Value)> = std::thread::scope(|s| {
        let clients: Vec<_> = (0..CLIENTS)
            .map(|c| {
                let (a2a, bearer) = (a2a.clone(), bearer.clone());
                s.spawn(move || {
                    let headers = [
                        ("Content-Type", "application/json"),
                        ("A2A-Version", "1.0"),
                        ("Authorization", bearer.as_str()),
                    ];
                    (c..TASKS)
                        .step_by(CLIENTS)
                        .map(|i| {
                            let body = json!({"jsonrpc": "2.0", "id": i, "method": "SendMessage",
                                "params": {"message": {"messageId": format!("m-{i}"),
                                "role": "ROLE_USER", "parts": [{"text": format!("write n.txt: {i}")}]}}});
                            let sent = raw(&a2a, "POST", "/", &a2a, &headers, &body.to_string());
                            assert_eq!(sent.status, 200, "task {i}: {sent:?}");
                            let v: Value = serde_json::from_str(&sent.body).unwrap();
                            let state = v["result"]["task"]["status"]["state"]
                                .as_str()
                                .unwrap_or_default()
                                .to_string();
                            (state, v)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        clients
            .into_iter()
            .flat_map(|c| c.join().unwrap())
            .collect()
    });
    assert_eq!(states.len(), TASKS);
    let failed: Vec<&Value> = states
        .iter()
        .filter(|(state, _)| state != "TASK_STATE_COMPLETED")
        .map(|(_, v)| v)
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {TASKS} did not complete, e.g. {}",
        failed.len(),
        failed[0]
    );

    // The store agrees: every task completed, none failed with INTERNAL or AGENT_START_FAILED.
    drop(served);
    let tasks = home.json_lines(&["tasks", "--json", "--limit", "1000"]);
    assert_eq!(tasks.len(), TASKS);
    for t in &tasks {
        assert_eq!(t["state"], "completed", "{t}");
    }
}
