//! Delivery modes and artifacts over MCP, end to end, with the official Python `mcp` SDK
//! client (tests/mcp/delivery_flow.py) against `legate mcp` on stdio, all on revisor: an
//! artifact path leaving the workspace refused; a task in `messages` delivery whose waits
//! carry messages and never events, every answer validated against the tool's published
//! schema; its artifact listed by `result` and read in pieces bound to its sha256 (a stale
//! hash refused); a cursor of the other mode reset; and the mode switched during a wait,
//! which ends that wait before the task does.
//!
//! Needs only `python3` (the pinned `mcp` package is provisioned under the target directory,
//! see `legate_testkit::python`); without it the test says so and skips, except in CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use serde_json::json;
use std::path::Path;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

#[test]
fn messages_delivery_and_artifacts_over_mcp_with_the_python_sdk() {
    let Some(python) = legate_testkit::python("mcp") else {
        return;
    };
    let env = CliHome::new(LEGATE).env("LEGATE_LOG", "warn");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/delivery_flow.py");
    let out = env
        .program(python)
        .arg(script)
        .arg(LEGATE)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "delivery_flow.py failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("no report")).unwrap();
    assert_eq!(r["escaping"], "BLOCKED_ARTIFACT_PATH", "{r}");
    // Messages in place of events.
    assert_eq!(r["hasEvents"], false, "{r}");
    assert!(
        r["waitKeys"]
            .as_array()
            .unwrap()
            .contains(&json!("messages")),
        "{r}"
    );
    assert_eq!(r["kinds"], json!(["result"]), "{r}");
    let last = &r["last"];
    assert_eq!(last["origin"], "agent-reported", "{r}");
    assert_eq!(last["resultSha256"], r["answerSha256"], "{r}");
    assert!(
        last["text"].as_str().unwrap().contains("read_result"),
        "{r}"
    );
    assert!(
        last["text"].as_str().unwrap().chars().count() <= 2000,
        "{r}"
    );
    // The artifact, listed and read back whole in pieces.
    assert_eq!(r["artifact"]["name"], "out.txt", "{r}");
    assert_eq!(r["artifact"]["state"], "collected", "{r}");
    assert_eq!(r["read"], "hello artifact", "{r}");
    assert_eq!(r["encoding"], "utf-8", "{r}");
    assert_eq!(r["stale"], "CONTENT_CHANGED", "{r}");
    // A cursor of the other mode restarts at 0.
    assert_eq!(r["reset"]["cursorReset"], true, "{r}");
    assert_eq!(r["reset"]["deliveryMode"], "messages", "{r}");
    assert_eq!(r["resetMessages"], 1, "{r}");
    // Switched mid-wait: the wait ended before the task, saying the new mode.
    assert_eq!(r["switched"]["changed"], true, "{r}");
    assert_eq!(r["mid"]["deliveryMode"], "events", "{r}");
    assert_eq!(r["mid"]["ready"], false, "{r}");
    assert_eq!(r["afterSwitch"]["cursorReset"], true, "{r}");
    assert_eq!(r["afterSwitch"]["deliveryMode"], "events", "{r}");
    assert_eq!(r["afterSwitch"]["messages"], false, "{r}");
    assert!(r["afterSwitch"]["events"].as_u64().unwrap() > 0, "{r}");
}
