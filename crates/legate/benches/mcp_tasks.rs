//! A task's `tasks/get` round trip (the MCP Tasks extension) against the plain tool calls that
//! read the same task (`status`, and `result`, whose answer the task's result carries as its
//! `outcome`), in one run, over a real `legate mcp` stdio child (raw JSON-RPC lines, one
//! request at a time: each sample is a write, the server's work and the answer read back).
//!
//! The task is a finished `run` of revisor answered as a task, so every `tasks/get` rebuilds
//! the completed result from the store: the recorded direct answer plus `result`'s answer.
//!
//! Run: `cargo bench -p legate --bench mcp_tasks`. Figures go in `docs/BENCHMARKS.md`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use legate_frontkit::stdio::McpStdio;
use serde_json::{Value, json};
use std::process::Command;
use std::time::Duration;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// The per-request `_meta` that declares the Tasks extension.
fn with_tasks(mut params: Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        }
    });
    params
}

fn bench(c: &mut Criterion) {
    let home = tempfile::tempdir().unwrap();
    let mut command = Command::new(LEGATE);
    command
        .arg("mcp")
        .env("LEGATE_HOME", home.path())
        .env_remove("LEGATE_LOG")
        .env_remove("RUST_LOG");
    let (mut mcp, _) = McpStdio::start(&mut command);
    let created = mcp.request(
        "tools/call",
        with_tasks(json!({"name": "run", "arguments": {
            "agent": "revisor", "prompt": "write a.txt: benchmark\nread a.txt"}})),
    );
    assert_eq!(created["resultType"], "task", "{created}");
    let task_id = created["taskId"].as_str().unwrap().to_string();
    let get = with_tasks(json!({"taskId": task_id}));
    // Follow it to its end the way a caller does.
    let mut done = mcp.request("tasks/get", get.clone());
    for _ in 0..600 {
        if done["status"] == "completed" {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
        done = mcp.request("tasks/get", get.clone());
    }
    assert_eq!(done["status"], "completed", "{done}");
    let args = json!({"taskId": task_id});

    let mut group = c.benchmark_group("mcp_task_read");
    group.bench_function("tasks/get (completed)", |b| {
        b.iter(|| mcp.request("tasks/get", get.clone()))
    });
    group.bench_function("status (plain tool call)", |b| {
        b.iter(|| mcp.call("status", args.clone()))
    });
    group.bench_function("result (plain tool call)", |b| {
        b.iter(|| mcp.call("result", args.clone()))
    });
    group.finish();
    mcp.close(Duration::from_secs(30));
}

criterion_group!(benches, bench);
criterion_main!(benches);
