//! The official TypeScript Tasks requester (`@modelcontextprotocol/ext-tasks` 0.2.2 over
//! `@modelcontextprotocol/client` 2.4.0, MCP 2026-07-28) against `legate mcp` on stdio
//! (tests/mcp-ts/tasks.mjs): a delegation to revisor run as a task to its end, another
//! canceled, and the finished one read back from a new `legate mcp` process.
//!
//! The packages of tests/mcp-ts/package.json, pinned by its package-lock.json, are installed
//! by the test itself under the target directory (`legate_testkit::node_modules`, `npm ci`,
//! once). Without `node` or `npm` it is skipped, saying so, unless `LEGATE_REQUIRE_NODE` or
//! `CI` is set (`.ci/run` sets the former): then it fails.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use std::path::Path;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

#[test]
fn the_official_typescript_tasks_requester() {
    let package = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-ts");
    let Some(modules) = legate_testkit::node_modules(&package) else {
        return;
    };
    let env = CliHome::new(LEGATE).env("LEGATE_LOG", "warn");
    // ESM resolves bare imports from the script's directory: the script runs beside a link
    // to the installed node_modules.
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("tasks.mjs");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-ts/tasks.mjs"),
        &script,
    )
    .unwrap();
    std::os::unix::fs::symlink(&modules, dir.path().join("node_modules")).unwrap();
    let report = env.script_report("node", &script, &[LEGATE.as_ref()]);
    assert_eq!(report["run"]["state"], "completed", "{report}");
    assert_eq!(
        report["run"]["statuses"],
        serde_json::json!(["completed", "working"]),
        "{report}"
    );
    assert_eq!(report["canceled"], "cancelled", "{report}");
    assert_eq!(report["readBack"], "completed", "{report}");
    assert_eq!(report["canceledReadBack"], "cancelled", "{report}");
}
