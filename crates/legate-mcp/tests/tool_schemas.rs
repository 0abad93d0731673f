//! The MCP tool schemas, pinned: for every profile the front offers, the tools listed over the
//! real MCP protocol (rmcp's client on an in-memory pipe) — name, title, description,
//! inputSchema, outputSchema, annotations — pretty-printed with sorted keys and compared with
//! `tests/snapshots/tools-<profile>.json`. A wire shape that changes fails here first.
//!
//! To accept a deliberate change, regenerate the files and review their diff:
//! `LEGATE_UPDATE_SNAPSHOTS=1 cargo test -p legate-mcp --test tool_schemas`.
//!
//! This suite only lists tools; it never starts a task or an agent.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_engine::ApprovalDesk;
use legate_mcp::{ApprovalsMcp, LegateMcp, McpOptions, Profile};
use legate_testkit::EngineHarness;
use rmcp::ServiceExt;
use rmcp::model::Tool;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// The tools a client sees on a server, listed over the protocol.
async fn listed<S>(server: S) -> Vec<Tool>
where
    S: rmcp::ServerHandler,
{
    let (server_io, client_io) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        if let Ok(running) = server.serve(server_io).await {
            let _ = running.waiting().await;
        }
    });
    let client = ().serve(client_io).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    let _ = client.cancel().await;
    tools
}

/// `value` with every object's keys in order, so the file does not depend on map order.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sorted(v)))
                    .collect::<Map<String, Value>>(),
            )
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

fn snapshot_path(profile: Profile) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("snapshots")
        .join(format!("tools-{}.json", profile.as_str()))
}

/// Compares `tools` with the committed snapshot, or writes it when `LEGATE_UPDATE_SNAPSHOTS=1`.
fn check(profile: Profile, tools: &[Tool]) {
    let value = sorted(serde_json::to_value(tools).unwrap());
    let mut text = serde_json::to_string_pretty(&value).unwrap();
    text.push('\n');
    let path = snapshot_path(profile);
    if std::env::var("LEGATE_UPDATE_SNAPSHOTS").as_deref() == Ok("1") {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &text).unwrap();
        return;
    }
    let pinned = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "no snapshot at {} ({e}); run with LEGATE_UPDATE_SNAPSHOTS=1 to write it",
            path.display()
        )
    });
    if pinned == text {
        return;
    }
    let (line, want, got) = pinned
        .lines()
        .zip(text.lines())
        .enumerate()
        .find(|(_, (a, b))| a != b)
        .map(|(i, (a, b))| (i + 1, a.to_string(), b.to_string()))
        .unwrap_or_else(|| {
            let n = pinned.lines().count().min(text.lines().count());
            let at = |s: &str| s.lines().nth(n).unwrap_or("<end of file>").to_string();
            (n + 1, at(&pinned), at(&text))
        });
    panic!(
        "the {profile} profile's tool schemas differ from {} at line {line}:\n  pinned: {want}\n  served: {got}\n\
         if the change is deliberate, rerun with LEGATE_UPDATE_SNAPSHOTS=1 and review the diff",
        path.display()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_profile_lists_the_pinned_tool_schemas() {
    let kit = EngineHarness::start();
    for &profile in Profile::ALL {
        let tools = if profile.is_supervisor() {
            // The supervisor profile is its own server, over the engine's approval queue.
            listed(ApprovalsMcp::new(ApprovalDesk::Engine(kit.engine.clone()))).await
        } else {
            let options = McpOptions {
                profile,
                ..McpOptions::default()
            };
            listed(LegateMcp::new(kit.engine.clone(), options)).await
        };
        assert!(!tools.is_empty(), "{profile} lists no tool");
        check(profile, &tools);
    }
}
