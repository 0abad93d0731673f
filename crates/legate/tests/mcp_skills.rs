//! Client skills over MCP, end to end, with the official Python `mcp` SDK client
//! (tests/mcp/skills_flow.py) against `legate mcp` on stdio, on revisor: `run` lists the
//! staged skills by name, directory and hash (never their text); the agent quotes the skill;
//! its edit of the skill and a skill it plants never reach the preview or the patch; a
//! conflicting name and skills on a sandbox are refused.
//!
//! Needs only `python3` (the pinned `mcp` package is provisioned under the target directory,
//! see `legate_testkit::python`); without it the test says so and skips, except in CI.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use serde_json::json;
use std::path::Path;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

#[test]
fn run_stages_client_skills_that_the_agent_quotes_and_the_patch_never_carries() {
    let Some(python) = legate_testkit::python("mcp") else {
        return;
    };
    let env = CliHome::new(LEGATE).env("LEGATE_LOG", "warn");
    let project = env.make_project(&[("README.md", "# Demo\n")]);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/skills_flow.py");
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
        "skills_flow.py failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().expect("no report")).unwrap();
    let skills = report["skills"].as_array().unwrap();
    let names: Vec<(&str, &str, &str)> = skills
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap(),
                s["dir"].as_str().unwrap(),
                s["source"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            (
                "legate-code-care",
                ".agents/skills/legate-code-care",
                "bundled"
            ),
            (
                "legate-security-care",
                ".agents/skills/legate-security-care",
                "bundled"
            ),
            ("Review-Style", ".agents/skills/review-style", "client"),
        ],
        "{report}"
    );
    assert!(
        skills
            .iter()
            .all(|s| s["sha256"].as_str().unwrap().len() == 64)
    );
    assert_eq!(skills[2]["files"], 2, "{report}");
    assert_eq!(report["quoted"], true, "{report}");
    assert_eq!(report["changed"], json!(["one.txt"]), "{report}");
    assert_eq!(report["patchMentionsSkills"], false, "{report}");
    assert_eq!(report["plainPreviewHasPatch"], false, "{report}");
    assert_eq!(report["inlinePatchIsTheReadOne"], true, "{report}");
    assert_eq!(report["conflict"], "SKILL_CONFLICT", "{report}");
    assert_eq!(report["sandbox"], "INVALID_INPUT", "{report}");
}
