//! Tool controls, `get_agent_policy`, the model tools and the `health` additions (issue 17,
//! parts 4 and 6) through the official Python `mcp` SDK over stdio (tests/mcp/controls.py),
//! against a real `legate mcp` whose configuration holds a ceiling and a catalogue with
//! credentials in it: the policy shows ids and tools, never a command, an environment value
//! or a URL; a run above the ceiling, naming an unknown server or tool, or a write tool on a
//! read-only task is refused with its code; an edit outside `allowedTools` is refused in the
//! events; `set_model` follows the CLI's order of precedence and is a write tool; a handoff
//! carries its source's tool controls on (narrowed for a read-only role) unless it names its
//! own. The supervising agent (`[supervision] agent`) takes no `run` and no `set_model`
//! (`AGENT_RESERVED`) and `health` says so.
//!
//! Skips without `python3` unless `LEGATE_REQUIRE_PYTHON` or `CI` is set (see mcp.rs).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use serde_json::{Value, json};
use std::path::Path;
use std::process::Stdio;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

const ENV_SECRET: &str = "env-secret-5f4e3d2c1b0a";
const URL_SECRET: &str = "url-secret-a1b2c3d4";

fn interpreter() -> Option<std::path::PathBuf> {
    legate_testkit::python("mcp")
}

/// The suite's `legate.toml`: tool controls and two MCP servers holding secrets.
fn config() -> String {
    format!(
        r#"[controls]
allowed_tools = ["read", "search", "edit", "think", "other"]

[[mcp_servers]]
id = "docs"
command = "/usr/local/bin/docs-mcp-{ENV_SECRET}-path"
args = ["--token-arg"]
env = {{ DOCS_TOKEN = "{ENV_SECRET}" }}
tools = [{{ name = "search", read_only = true }}, {{ name = "publish", read_only = false }}]

[[mcp_servers]]
id = "web"
url = "http://127.0.0.1:9/{URL_SECRET}"
tools = [{{ name = "get", read_only = true }}]

[agents.judge]
command = {LEGATE:?}
args = ["agent", "revisor"]

[supervision]
agent = "judge"
"#
    )
}

#[test]
fn the_policy_hides_transports_and_the_controls_and_model_tools_work_over_the_sdk() {
    let Some(python) = interpreter() else { return };
    let env = CliHome::with_config(LEGATE, &config()).env("LEGATE_LOG", "warn");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/controls.py");
    let project = env.make_project(&[("README.md", "# Demo\n")]);
    let out = env
        .program(python)
        .arg(&script)
        .arg(LEGATE)
        .arg(&project)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "controls.py failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();

    // get_agent_policy: ceilings, ids and tools; never a transport or a credential.
    let policy = &r["policy"];
    assert_eq!(
        policy["allowedTools"],
        json!(["read", "search", "edit", "think", "other"])
    );
    assert_eq!(policy["mcpServers"][0]["id"], "docs");
    assert_eq!(
        policy["mcpServers"][0]["tools"][1],
        json!({"name": "publish", "readOnly": false})
    );
    assert_eq!(policy["mcpServers"][1]["transport"], "http");
    let seen = r["policyText"].as_str().unwrap();
    for secret in [
        ENV_SECRET,
        URL_SECRET,
        "docs-mcp",
        "DOCS_TOKEN",
        "--token-arg",
        "127.0.0.1",
    ] {
        assert!(
            !seen.contains(secret),
            "get_agent_policy shows {secret}: {seen}"
        );
    }
    assert!(!r["statusText"].as_str().unwrap().contains(ENV_SECRET));

    // run's controls, refused with their codes.
    assert_eq!(r["unknownServer"], "MCP_SERVER_NOT_FOUND", "{r}");
    assert_eq!(r["unknownTool"], "TOOL_NOT_ALLOWED", "{r}");
    assert_eq!(r["writeToolReadOnly"], "TOOL_NOT_ALLOWED", "{r}");
    assert_eq!(r["aboveCeiling"], "TOOL_NOT_ALLOWED", "{r}");

    // A handoff carries the source's tool controls on, a read-only role without the MCP
    // tool that writes; one naming its own gets those; above the ceiling is refused.
    assert_eq!(
        r["handoffReviewer"]["allowedTools"],
        json!(["read", "edit"]),
        "{r}"
    );
    assert_eq!(
        r["handoffReviewer"]["mcpServers"],
        json!([{"serverId": "docs", "tools": ["search"]}]),
        "{r}"
    );
    assert_eq!(r["handoffOwn"]["allowedTools"], json!(["read"]), "{r}");
    assert!(r["handoffOwn"].get("mcpServers").is_none(), "{r}");
    assert_eq!(r["handoffAboveCeiling"], "TOOL_NOT_ALLOWED", "{r}");
    assert_eq!(r["final"], "completed", "{r}");
    let events: Vec<Value> = serde_json::from_str(r["eventsText"].as_str().unwrap()).unwrap();
    let verdict = &events
        .iter()
        .find(|e| e["type"] == "permission")
        .expect("the edit was asked about")["verdict"];
    assert_eq!(verdict["ruleId"], "TOOL_NOT_ALLOWED", "{verdict}");
    assert_eq!(verdict["decider"], "controls", "{verdict}");
    assert_eq!(verdict["decision"], "deny", "{verdict}");

    // Models: the CLI's precedence, null is the agent's own default, reset removes it.
    assert!(!r["models"].as_array().unwrap().is_empty(), "{r}");
    assert_eq!(r["before"]["source"], "agent", "{r}");
    assert_eq!(r["before"]["saved"], Value::Null);
    let chosen = r["models"].as_array().unwrap().last().unwrap();
    assert_eq!(r["saved"]["saved"], *chosen);
    assert_eq!(r["saved"]["effective"], *chosen);
    assert_eq!(r["saved"]["source"], "saved");
    assert_eq!(r["auto"]["saved"], "auto");
    assert_eq!(r["auto"]["effective"], Value::Null);
    assert_eq!(r["reset"]["saved"], Value::Null);
    assert_eq!(r["unknownAgent"], "AGENT_NOT_FOUND", "{r}");

    // The supervising agent (issue 29, finding 1): no task on it, no choice of its model;
    // health lists it as reserved. Before: the run started and set_model saved.
    assert_eq!(r["judgeRun"], "AGENT_RESERVED", "{r}");
    assert_eq!(r["judgeSetModel"], "AGENT_RESERVED", "{r}");
    assert!(
        r["judgeRunText"]
            .as_str()
            .unwrap()
            .contains("supervising agent"),
        "{r}"
    );
    let judge = r["limitations"]["judge"].as_array().unwrap();
    assert!(judge.contains(&json!("supervisingAgent")), "{r}");
    assert!(
        !r["limitations"]["revisor"]
            .as_array()
            .unwrap()
            .contains(&json!("supervisingAgent")),
        "{r}"
    );

    // health: the approval mode, how integration is approved, each backend's limitations.
    assert_eq!(r["approvalMode"], "auto");
    assert_eq!(
        r["integrationApproval"],
        json!({"mode": "auto", "method": "automatic"})
    );
    let revisor = r["limitations"]["revisor"].as_array().unwrap();
    assert!(revisor.contains(&json!("preflightTokenCount")), "{r}");
    assert!(!revisor.contains(&json!("toolControls")), "{r}");

    // Profiles: the reading tools in query, set_model only where writes are.
    assert_eq!(
        r["queryHas"],
        json!(["get_agent_policy", "get_model", "list_models"])
    );
    assert_eq!(r["querySetModel"], "TOOL_NOT_AVAILABLE", "{r}");
}

#[test]
fn health_says_what_agy_cannot_do_and_ask_mode_uses_the_form() {
    let env = CliHome::with_config(
        LEGATE,
        "[copies]\napproval_mode = \"ask\"\n[agents.g]\nkind = \"agy\"\ncommand = \"/bin/true\"\n",
    )
    .env("LEGATE_LOG", "warn");
    // A raw JSON-RPC exchange on stdio is enough here: no SDK needed.
    let mut child = env
        .cmd(&["mcp"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    use std::io::{BufRead, BufReader, Write};
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let send = |stdin: &mut std::process::ChildStdin, v: Value| {
        writeln!(stdin, "{v}").unwrap();
        stdin.flush().unwrap();
    };
    send(
        &mut stdin,
        json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}),
    );
    lines.next().unwrap().unwrap();
    send(
        &mut stdin,
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    );
    send(
        &mut stdin,
        json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"health","arguments":{"probe":false}}}),
    );
    let answer: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    drop(stdin);
    let _ = child.wait();
    let health = &answer["result"]["structuredContent"];
    assert_eq!(health["approvalMode"], "ask", "{answer}");
    assert_eq!(
        health["integrationApproval"],
        json!({"mode": "ask", "method": "mcp-form-elicitation"})
    );
    let agy = health["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "g")
        .unwrap();
    let names: Vec<&str> = agy["limitations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["interactiveReplies", "preflightTokenCount", "toolControls"],
        "{agy}"
    );
}
