//! The hook's decisions: tools, paths, `.agents/`, read-only, MCP selections.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use serde_json::json;

fn policy(dir: &Path, tools: &[&str], read_only: bool) -> Policy {
    Policy {
        root: std::fs::canonicalize(dir).unwrap(),
        read_only,
        tools: tools.iter().map(|t| t.to_string()).collect(),
        mcp: vec![legate_core::McpSelection {
            server_id: "docs".into(),
            tools: vec!["search".into()],
        }],
    }
}

fn denied(v: &Verdict) -> bool {
    matches!(v, Verdict::Deny(r) if r.starts_with("TOOL_NOT_ALLOWED"))
}

#[test]
fn file_tools_follow_the_policy_and_stay_in_the_copy() {
    let dir = tempfile::tempdir().unwrap();
    let p = policy(dir.path(), &["view_file"], false);
    let root = p.root.display().to_string();
    assert_eq!(
        decide(
            &p,
            "view_file",
            &json!({"AbsolutePath": format!("{root}/a.txt")})
        ),
        Verdict::Allow
    );
    assert_eq!(
        decide(&p, "read_file", &json!({"path": "a.txt"})),
        Verdict::Allow
    );
    assert_eq!(decide(&p, "finish", &json!({})), Verdict::Allow);
    assert!(denied(&decide(
        &p,
        "write_to_file",
        &json!({"TargetFile": "b.txt"})
    )));
    assert!(denied(&decide(&p, "edit_file", &json!({"path": "b.txt"}))));
    assert!(denied(&decide(
        &p,
        "run_command",
        &json!({"CommandLine": "ls"})
    )));
    assert!(denied(&decide(
        &p,
        "view_file",
        &json!({"path": "/etc/passwd"})
    )));
    assert!(denied(&decide(
        &p,
        "view_file",
        &json!({"path": "sub/../../x"})
    )));
    assert!(denied(&decide(
        &p,
        "view_file",
        &json!({"path": "a", "Path": "b"})
    )));
    assert!(denied(&decide(&p, "view_file", &json!({}))));
    assert!(denied(&decide(
        &p,
        "view_file",
        &json!({"path": ".agents/hooks.json"})
    )));
    assert_eq!(
        decide(
            &p,
            "view_file",
            &json!({"path": ".agents/skills/x/SKILL.md"})
        ),
        Verdict::Allow
    );
    std::os::unix::fs::symlink("/etc", dir.path().join("out")).unwrap();
    assert!(denied(&decide(
        &p,
        "view_file",
        &json!({"path": "out/passwd"})
    )));
}

#[test]
fn writes_need_the_tool_a_writable_task_and_a_path_outside_agents() {
    let dir = tempfile::tempdir().unwrap();
    let all = ["view_file", "write_to_file", "replace_file_content"];
    let p = policy(dir.path(), &all, false);
    assert_eq!(
        decide(&p, "write_file", &json!({"path": "b.txt"})),
        Verdict::Allow
    );
    assert_eq!(
        decide(&p, "edit_file", &json!({"path": "b.txt"})),
        Verdict::Allow
    );
    assert!(denied(&decide(
        &p,
        "multi_replace_file_content",
        &json!({"path": "b.txt"})
    )));
    assert!(denied(&decide(
        &p,
        "write_to_file",
        &json!({"path": ".AGENTS/hooks.json"})
    )));
    assert!(denied(&decide(
        &p,
        "write_to_file",
        &json!({"path": ".agents/skills/x/SKILL.md"})
    )));
    // A link inside the copy that leads to .agents/ is .agents/.
    std::fs::create_dir(dir.path().join(".agents")).unwrap();
    std::fs::write(dir.path().join(".agents/hooks.json"), "{}").unwrap();
    std::os::unix::fs::symlink(".agents", dir.path().join("cfg")).unwrap();
    assert!(denied(&decide(
        &p,
        "write_to_file",
        &json!({"path": "cfg/hooks.json"})
    )));
    assert!(denied(&decide(
        &p,
        "view_file",
        &json!({"path": "cfg/hooks.json"})
    )));
    std::os::unix::fs::symlink("/nonexistent-dir/new", dir.path().join("dangling")).unwrap();
    assert!(denied(&decide(
        &p,
        "write_to_file",
        &json!({"path": "dangling"})
    )));
    let ro = policy(dir.path(), &all, true);
    assert!(denied(&decide(
        &ro,
        "write_to_file",
        &json!({"path": "b.txt"})
    )));
}

#[test]
fn mcp_calls_need_a_selected_server_and_tool() {
    let dir = tempfile::tempdir().unwrap();
    let p = policy(dir.path(), &[], false);
    assert_eq!(
        decide(
            &p,
            "call_mcp_tool",
            &json!({"ServerName": "docs", "ToolName": "search"})
        ),
        Verdict::Allow
    );
    assert!(denied(&decide(
        &p,
        "call_mcp_tool",
        &json!({"ServerName": "docs", "ToolName": "delete"})
    )));
    assert!(denied(&decide(
        &p,
        "call_mcp_tool",
        &json!({"ServerName": "other", "ToolName": "search"})
    )));
    assert!(denied(&decide(&p, "call_mcp_tool", &json!({}))));
}

/// A call cannot show the hook one thing and agy another: every spelling of a path, server or
/// tool field (as a lenient decoder reads keys) must agree, and be text.
#[test]
fn decoy_fields_and_expandable_paths_are_denied() {
    let dir = tempfile::tempdir().unwrap();
    let p = policy(dir.path(), &["write_to_file"], false);
    let root = p.root.display().to_string();
    for input in [
        json!({"TargetFile": format!("{root}/ok.txt"), "targetfile": "/home/u/.bashrc"}),
        json!({"TargetFile": format!("{root}/ok.txt"), "Target-File": "../x"}),
        json!({"TargetFile": format!("{root}/ok.txt"), "target_file": ["/etc/passwd"]}),
        json!({"TargetFile": "~/.bashrc"}),
        json!({"TargetFile": "$HOME/.bashrc"}),
        json!({"TargetFile": "file:///etc/passwd"}),
    ] {
        assert!(denied(&decide(&p, "write_to_file", &input)), "{input}");
    }
    assert_eq!(
        decide(
            &p,
            "write_to_file",
            &json!({"TargetFile": "ok.txt", "target_file": "ok.txt"})
        ),
        Verdict::Allow
    );
    for input in [
        json!({"ServerName": "docs", "ToolName": "search", "server_name": "evil", "tool_name": "drop"}),
        json!({"ServerName": "docs", "ToolName": "search", "name": "drop"}),
        json!({"ServerName": "docs", "ToolName": 7}),
    ] {
        assert!(denied(&decide(&p, "call_mcp_tool", &input)), "{input}");
    }
    assert_eq!(
        decide(
            &p,
            "call_mcp_tool",
            &json!({"ServerName": "docs", "tool_name": "search"})
        ),
        Verdict::Allow
    );
}
