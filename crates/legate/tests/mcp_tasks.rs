//! Long delegations as MCP tasks (issue 30), end to end against `legate mcp` on stdio, over raw
//! JSON-RPC (tests/mcp/tasks_flow.py with tests/mcp/raw.py: the official Python SDK does not
//! model the Tasks extension), all on revisor: a run followed to its end with `tasks/get`
//! (result = the direct answer + `outcome` = `result`'s answer, schema-valid), `group_start`
//! and `compare` the same way, a cancel, `test`
//! and `integrate` (approval mode ask: `input_required`) as ops, hostile ids and updates, a
//! new process reading the finished tasks, a killed process's op failed SERVER_RESTARTED, a
//! client without the extension, `--no-tasks`, and a query profile's reach.
//!
//! Needs only `python3` (jsonschema comes with the pinned `mcp` package under the target
//! directory, see `legate_testkit::python`); without it the test says so and skips, except in
//! CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use std::path::Path;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

#[test]
fn long_delegations_as_mcp_tasks() {
    let Some(python) = legate_testkit::python("mcp") else {
        return;
    };
    let env = CliHome::with_config(LEGATE, "[copies]\napproval_mode = \"ask\"\n")
        .env("LEGATE_LOG", "warn");
    let project = env.make_project(&[("README.md", "# Demo\n")]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/tasks_flow.py");
    let report = env.script_report(python, &script, &[LEGATE.as_ref(), project.as_os_str()]);
    assert_eq!(report["runOutcome"], "completed", "{report}");
    assert_eq!(report["canceled"], "cancelled", "{report}");
    assert_eq!(report["resumed"], "completed", "{report}");
    assert_eq!(report["group"], "completed", "{report}");
    assert_eq!(report["compared"], 2, "{report}");
    assert_eq!(report["testOp"], true, "{report}");
    assert_eq!(report["updateEnded"], "TASK_NOT_AWAITING_INPUT", "{report}");
    assert_eq!(report["restarted"], "SERVER_RESTARTED", "{report}");
    assert_eq!(report["queryOp"], "TASK_NOT_FOUND", "{report}");
    assert_eq!(report["noTasks"], -32601, "{report}");
    let hostile = &report["hostile"];
    for id in ["unknown", "forgedOp", "empty", "plainTask", "huge"] {
        assert_eq!(hostile[id], "TASK_NOT_FOUND", "{report}");
    }
    // Params that are no `tasks/get` are refused by rmcp before the handler (-32601 today).
    let malformed = hostile["malformed"].as_i64().unwrap();
    assert!([-32601, -32602].contains(&malformed), "{report}");
    assert_eq!(hostile["undeclared"], -32021, "{report}");
    assert_eq!(
        report["badUpdates"],
        serde_json::json!(["INVALID_INPUT"]),
        "{report}"
    );
}
