//! A comparison over MCP, end to end, with the official Python `mcp` SDK client
//! (tests/mcp/compare_flow.py) against `legate mcp` on stdio, on revisor: two targets review
//! one version; repeated, single and stale requests are refused; the comparison is complete
//! and groups revisor's deterministic findings as identical.
//!
//! Needs only `python3` (the pinned `mcp` package is provisioned under the target directory,
//! see `legate_testkit::python`); without it the test says so and skips, except in CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use std::path::Path;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

#[test]
fn compare_two_revisor_models_over_mcp_with_the_python_sdk() {
    let Some(python) = legate_testkit::python("mcp") else {
        return;
    };
    let env = CliHome::new(LEGATE).env("LEGATE_LOG", "warn");
    let project = env.make_project(&[
        ("README.md", "# Demo\n"),
        (
            "src/lib.rs",
            "pub fn f(x: Option<u8>) -> u8 {\n    x.unwrap()\n}\n",
        ),
    ]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/compare_flow.py");
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
        "compare_flow.py failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("no report")).unwrap();
    assert_eq!(report["complete"], true, "{report}");
    assert_eq!(
        report["agreements"],
        serde_json::json!(["identical"]),
        "{report}"
    );
    assert!(
        report["findings"]
            .as_array()
            .unwrap()
            .contains(&serde_json::json!(["src/lib.rs", 2])),
        "{report}"
    );
}
