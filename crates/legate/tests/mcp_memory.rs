//! The private-memory tools over MCP, end to end, with the official Python `mcp` SDK client
//! (tests/mcp/memory_flow.py) against `legate mcp` on stdio, on revisor: compare-and-swap
//! writes and removals, pieces bound to the sha256, a credential refused without an echo, a
//! copy task with a selected entry, and a `query` server that may only list and read.
//!
//! Needs only `python3` (the pinned `mcp` package is provisioned under the target directory,
//! see `legate_testkit::python`); without it the test says so and skips, except in CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use std::path::Path;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

#[test]
fn the_four_memory_tools_over_mcp_with_the_python_sdk() {
    let Some(python) = legate_testkit::python("mcp") else {
        return;
    };
    let env = CliHome::new(LEGATE).env("LEGATE_LOG", "warn");
    let project = env.make_project(&[("README.md", "# Demo\n")]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/memory_flow.py");
    let out = env
        .program(python)
        .arg(script)
        .arg(LEGATE)
        .arg(&project)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "memory_flow.py failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("no report")).unwrap();
    assert_eq!(
        report["queryTools"],
        serde_json::json!(["memory_list", "memory_read"]),
        "{report}"
    );
    assert_eq!(report["sha256"].as_str().unwrap().len(), 64, "{report}");
}
