//! The roles flow over MCP, end to end, with the official Python `mcp` SDK client
//! (tests/mcp/handoff_flow.py) against `legate mcp` on stdio, all on revisor: a planner on a
//! copy; a handoff to an implementer that writes two files over two turns in the same copy; a
//! handoff to a reviewer whose report's citations Legate checked; a stale context hash
//! refused; then verify, test and integrate of the accumulated patch, after which the
//! original project holds both files.
//!
//! Also `test` with `retries` (tests/mcp/handoff_flow.py retries): fix turns of revisor after a
//! failing command, followed to the passing, integrated patch.
//!
//! Needs only `python3` (the pinned `mcp` package is provisioned under the target directory,
//! see `legate_testkit::python`); without it the test says so and skips, except in CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use std::path::Path;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// Runs tests/mcp/handoff_flow.py (with `extra` arguments) against `legate mcp` on a fresh
/// project holding `readme`; the report it printed last, the home (which removes the project when dropped)
/// and the project. `None` without python.
fn flow(extra: &[&str], readme: &str) -> Option<(serde_json::Value, CliHome, std::path::PathBuf)> {
    let python = legate_testkit::python("mcp")?;
    let env = CliHome::new(LEGATE).env("LEGATE_LOG", "warn");
    let project = env.make_project(&[("README.md", readme)]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/handoff_flow.py");
    let out = env
        .program(python)
        .arg(script)
        .arg(LEGATE)
        .arg(&project)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "handoff_flow.py {extra:?} failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report = serde_json::from_str(stdout.lines().last().expect("no report")).unwrap();
    Some((report, env, project))
}

#[test]
fn plan_implement_review_integrate_over_mcp_with_the_python_sdk() {
    let Some((report, _home, project)) =
        flow(&[], "# Demo\n\nA project to plan, change and review.\n")
    else {
        return;
    };
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

/// `test` with `retries` (tests/mcp/handoff_flow.py retries): a failing command, a fix turn of
/// revisor in the same copy shown the failure as data, the command run again by the engine,
/// the loop seen `passed` in preview, and the fixed patch integrated.
#[test]
fn a_failing_test_gets_fix_turns_over_mcp() {
    let Some((report, _home, project)) = flow(&["retries"], "# Demo\n") else {
        return;
    };
    assert_eq!(report["attempts"], 2, "{report}");
    assert_eq!(
        report["integrated"],
        serde_json::json!(["fixed.txt", "one.txt"]),
        "{report}"
    );
    assert!(project.join("fixed.txt").is_file());
}
