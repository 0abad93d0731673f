//! The official TypeScript Tasks requester (`@modelcontextprotocol/ext-tasks` 0.2.2 over
//! `@modelcontextprotocol/client` 2.4.0, MCP 2026-07-28) against `legate mcp` on stdio
//! (tests/mcp-ts/tasks.mjs): a delegation to revisor run as a task to its end, another
//! canceled, and the finished one read back from a new `legate mcp` process.
//!
//! The packages of tests/mcp-ts/package.json (pinned by its package-lock.json) are installed
//! outside the clone: `.ci/run` runs `npm ci` into a cache and names its `node_modules` in
//! `LEGATE_TS_MODULES`; without it the test looks in `~/.cache/legate-callers/node_modules`.
//! A missing install, or one of other versions, fails the test: it never skips.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use std::path::{Path, PathBuf};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// The installed `node_modules`, checked against the pins of package.json.
fn modules() -> PathBuf {
    let dir = std::env::var_os("LEGATE_TS_MODULES")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME")
                .map(|h| PathBuf::from(h).join(".cache/legate-callers/node_modules"))
        })
        .expect("neither LEGATE_TS_MODULES nor HOME is set");
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp-ts/package.json");
    let pins: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
    for (name, version) in pins["dependencies"].as_object().unwrap() {
        let installed = dir.join(name).join("package.json");
        let text = std::fs::read_to_string(&installed).unwrap_or_else(|e| {
            panic!(
                "{name} is not installed at {} ({e}): run `npm ci` in a copy of \
                 crates/legate/tests/mcp-ts outside the clone and set LEGATE_TS_MODULES \
                 to its node_modules (.ci/run does)",
                installed.display()
            )
        });
        let found: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(&found["version"], version, "{name} at {}", dir.display());
    }
    dir
}

#[test]
fn the_official_typescript_tasks_requester() {
    let modules = modules();
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
