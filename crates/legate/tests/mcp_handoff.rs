//! The roles flow over MCP, end to end, with the official Python `mcp` SDK client
//! (tests/mcp/handoff_flow.py) against `legate mcp` on stdio, all on revisor: a planner on a
//! copy; a handoff to an implementer that writes two files over two turns in the same copy; a
//! handoff to a reviewer whose report's citations Legate checked; a stale context hash
//! refused; then verify, test and integrate of the accumulated patch, after which the
//! original project holds both files.
//!
//! Needs only `python3` (the pinned `mcp` package is provisioned under the target directory,
//! see `legate_testkit::python`); without it the test says so and skips, except in CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use std::path::Path;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

#[test]
fn plan_implement_review_integrate_over_mcp_with_the_python_sdk() {
    let Some(python) = legate_testkit::python("mcp") else {
        return;
    };
    let env = CliHome::new(LEGATE).env("LEGATE_LOG", "warn");
    let project = env.make_project(&[(
        "README.md",
        "# Demo\n\nA project to plan, change and review.\n",
    )]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/handoff_flow.py");
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
        "handoff_flow.py failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("no report")).unwrap();
    assert_eq!(report["citationsChecked"], true, "{report}");
    assert_eq!(
        report["integrated"],
        serde_json::json!(["one.txt", "two.txt"]),
        "{report}"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("one.txt")).unwrap(),
        "one\n"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("two.txt")).unwrap(),
        "two\n"
    );
}
