//! Groups over MCP, end to end, with the official Python `mcp` SDK client
//! (tests/mcp/group_flow.py) against `legate mcp` on stdio, all on revisor: a workflow
//! created (a cycle refused), started, waited for with progress, read back with its status,
//! listing, synthesis and the receipt of the peer message its implementer sent; then a peer
//! message conflict (the node held, a resume dropping it) and a flood of blockers
//! read through `group_wait`'s bounded pages (bad cursors and limits refused); workflow steps'
//! acceptance criteria (required, inside the copy, a failing check holding the step); and a
//! configured role's control defaults reaching its nodes, within the tool ceiling.
//!
//! Needs only `python3` (the pinned `mcp` package is provisioned under the target directory,
//! see `legate_testkit::python`); without it the test says so and skips, except in CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use std::path::Path;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// A tool ceiling, a role whose defaults name tools and artifacts within it, and one whose
/// default passes it.
const ROLES: &str = r#"
[controls]
allowed_tools = ["read", "edit", "search", "think", "other"]

[roles.scribe]
base = "implementer"
instructions = "Write what is asked."

[roles.scribe.defaults]
allowedTools = ["read"]
artifactPaths = ["b.txt"]

[roles.runner]
base = "implementer"
instructions = "Run what is asked."

[roles.runner.defaults]
allowedTools = ["execute"]
"#;

#[test]
fn a_workflow_over_mcp_with_the_python_sdk() {
    let Some(python) = legate_testkit::python("mcp") else {
        return;
    };
    let env = CliHome::with_config(LEGATE, ROLES).env("LEGATE_LOG", "warn");
    let project = env.make_project(&[(
        "README.md",
        "# Demo\n\nA project to plan, change and review.\n",
    )]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/group_flow.py");
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
        "group_flow.py failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("no report")).unwrap();
    assert_eq!(report["state"], "completed", "{report}");
    assert_eq!(report["receipts"], 1, "{report}");
    // The synthesis took the peer message as a second turn.
    assert_eq!(report["synthTasks"], 2, "{report}");
    assert!(report["progress"].as_u64().unwrap() >= 1, "{report}");
    // A conflicting peer message holds its node and pauses the group; a resume drops it, and
    // the group completes with the first message delivered.
    assert_eq!(report["conflictNode"], "held", "{report}");
    assert_eq!(report["conflictResumed"], "completed", "{report}");
    // A flood of blockers is read four at a time at most, one per task, every one once.
    assert!(report["floodMessages"].as_u64().unwrap() >= 10, "{report}");
    // A workflow step needs criteria, inside its copy; a failing check holds it.
    assert_eq!(
        report["criteriaRefusals"],
        serde_json::json!({"noCriteria": "WORKFLOW_INVALID", "outside": "INVALID_INPUT", "absolute": "INVALID_INPUT"}),
        "{report}"
    );
    assert_eq!(report["criteriaHeld"], "held", "{report}");
    // Role defaults reach a node's task; its own value wins; the ceiling still bounds them.
    assert_eq!(report["roleDefaults"], "applied", "{report}");
    assert_eq!(report["ceiling"], "TOOL_NOT_ALLOWED", "{report}");
}
