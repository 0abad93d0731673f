//! The test sandbox policy through the official Python `mcp` SDK (tests/mcp/sandbox_policy.py)
//! against `legate mcp` over stdio: `get_sandbox_policy` returns the default ceiling and its
//! sha256; `set_sandbox_policy` refuses a stale sha256 and `$LEGATE_HOME` as a root, replaces
//! the policy in approval mode `auto`, and in `ask` only after the client's person accepts the
//! form (a declined form leaves it unchanged).
//!
//! Like tests/mcp.rs, it needs `python3` (the pinned `mcp` package is provisioned under the
//! target directory on first use) and skips without it unless `LEGATE_REQUIRE_PYTHON` or `CI`
//! is set.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

fn interpreter() -> Option<PathBuf> {
    legate_testkit::python("mcp")
}

fn scenario(python: &Path, env: &CliHome, mode: &str, root: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/sandbox_policy.py");
    let out = env
        .program(python)
        .arg(script)
        .args([LEGATE, mode, &root.display().to_string()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "sandbox_policy.py {mode} failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().expect("no report")).unwrap()
}

#[test]
fn python_sdk_reads_and_replaces_the_sandbox_policy_in_auto_and_ask_modes() {
    let Some(python) = interpreter() else {
        return;
    };
    for mode in ["auto", "ask"] {
        let env = CliHome::new(LEGATE).env("LEGATE_LOG", "warn");
        let root = env.base().join("out");
        std::fs::create_dir_all(env.home()).unwrap();
        std::fs::create_dir_all(&root).unwrap();
        let r = scenario(&python, &env, mode, &root);
        assert_eq!(
            r["tools"],
            json!(["get_sandbox_policy", "set_sandbox_policy"])
        );
        assert_eq!(
            r["default"],
            json!({"readRoots": [], "writeRoots": [], "network": false,
                   "childProcesses": true, "maxOutputChars": 4000})
        );
        assert_eq!(r["stale"], "SANDBOX_POLICY_CHANGED");
        assert_eq!(r["home"], "INVALID_INPUT");
        assert_eq!(
            r["set"]["policy"],
            json!({"readRoots": [], "writeRoots": [root.display().to_string()], "network": true,
                   "childProcesses": true, "maxOutputChars": 2000})
        );
        assert_ne!(r["set"]["sha256"], r["sha256"]);
        assert_eq!(r["again"], r["set"]);
        if mode == "ask" {
            assert_eq!(r["declined"], "SANDBOX_POLICY_DECLINED");
            assert_eq!(
                r["afterDecline"], r["sha256"],
                "a declined change was applied"
            );
            assert_eq!(r["asked"], 2);
            let message = r["message"].as_str().unwrap();
            assert!(message.contains(r["sha256"].as_str().unwrap()), "{message}");
        } else {
            assert_eq!(r["asked"], 0, "auto mode showed a form");
        }
    }
}
