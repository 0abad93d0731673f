//! `legate run --agent agy` end to end through the real binary, with the agent configured in
//! `legate.toml`: a run, a resumed run on another model, `legate usage`, `legate models`,
//! `legate model`, `--json-schema`, and a refused `NODE_OPTIONS` opt-in.
//!
//! The fake agy is this test binary itself. Cargo builds the `legate` binary fresh for this
//! crate's tests (`CARGO_BIN_EXE_legate`) but builds the test kit's `fake-agy` binary only
//! for the test kit's own tests; so this test runs without libtest's harness
//! (`harness = false`), and when started with `LEGATE_TEST_FAKE_AGY=1` in its environment
//! (set in the agent's `env`) it *is* `fake-agy` (`legate_testkit::fake_agy::main`). Nothing
//! is skipped: both binaries always exist when this runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::ExitCode;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");
/// In an agent's `env`: this binary is the fake agy.
const AS_FAKE: &str = "LEGATE_TEST_FAKE_AGY";

fn main() -> ExitCode {
    if std::env::var_os(AS_FAKE).is_some() {
        let code = legate_testkit::fake_agy::main(std::env::args().skip(1).collect());
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    // `cargo test -p legate -- FILTER`: run only when the filter names this test.
    let name = "legate_run_with_agy_configured_in_legate_toml agy_over_mcp_with_the_python_sdk agy_tool_controls_over_mcp";
    let filters: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    if !filters.is_empty() && !filters.iter().any(|f| name.contains(f.as_str())) {
        return ExitCode::SUCCESS;
    }
    if std::env::args().any(|a| a == "--list") {
        for test in name.split(' ') {
            println!("{test}: test");
        }
        return ExitCode::SUCCESS;
    }
    legate_run_with_agy_configured_in_legate_toml();
    println!("test legate_run_with_agy_configured_in_legate_toml ... ok");
    agy_over_mcp_with_the_python_sdk();
    println!("test agy_over_mcp_with_the_python_sdk ... ok");
    agy_tool_controls_over_mcp();
    println!("test agy_tool_controls_over_mcp ... ok");
    ExitCode::SUCCESS
}

/// agy over MCP with the official Python SDK (tests/mcp/agy_flow.py): health's login check,
/// AGY_MCP_PERMISSION_REQUIRED, CLI_INPUT_FAILED, the structured output through read_result,
/// TASK_CANCELED, and usage's quality flags and observedCumulative. Skips without `python3`
/// unless `LEGATE_REQUIRE_PYTHON` or `CI` is set.
fn agy_over_mcp_with_the_python_sdk() {
    let Some(python) = legate_testkit::python("mcp") else {
        return;
    };
    let fake = std::env::current_exe().unwrap();
    let fake = fake.display();
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let agy_home = dir.path().join("agy-home");
    let state = agy_home.join(".gemini/antigravity-cli/fake-state");
    let agent = |name: &str, extra: &str| {
        format!(
            "[agents.{name}]\nkind = \"agy\"\ncommand = \"{fake}\"\nenv = {{ HOME = \"{}\", FAKE_AGY_STATE_DIR = \"{}\", {AS_FAKE} = \"1\"{extra} }}\n",
            agy_home.display(),
            state.display()
        )
    };
    std::fs::write(
        home.join("legate.toml"),
        [
            // A prompt longer than a pipe holds (CLI_INPUT_FAILED) needs more than the default.
            "max_prompt_chars = 1000000\n".to_string(),
            agent("agy", ""),
            agent("agy-out", ", FAKE_AGY_AUTH = \"fail\""),
            agent("agy-deaf", ", FAKE_AGY_STDIN = \"ignore\""),
        ]
        .concat(),
    )
    .unwrap();
    let r = report(&python, "agy_flow.py", &[Path::new(LEGATE)], &home);

    // health: agy models lists models when logged in, a login phrase when not.
    assert_eq!(r["login"]["agy"], true, "{r}");
    assert_eq!(r["login"]["agy-out"], false, "{r}");
    assert!(
        r["loginDetail"]["agy-out"]
            .as_str()
            .unwrap()
            .contains("log in"),
        "{r}"
    );
    // agy's own refusal of an MCP call it could not ask about, though it said SUCCESS.
    assert_eq!(r["mcpDenied"]["code"], "AGY_MCP_PERMISSION_REQUIRED", "{r}");
    // A prompt agy never read: the stdin write failed, not the process.
    assert_eq!(r["inputFailed"]["code"], "CLI_INPUT_FAILED", "{r}");
    // The structured output, read in pieces like the answer.
    assert_eq!(r["structured"]["summary"], "fake agy: sum up", "{r}");
    assert_eq!(r["badPart"], "INVALID_INPUT", "{r}");
    assert_eq!(r["noStructured"], "INVALID_INPUT", "{r}");
    // Usage: the second turn is the difference (50 of a cumulative 170), said so.
    let by_task = r["usage"]["byTask"].as_array().unwrap();
    let line = |id: &serde_json::Value| by_task.iter().find(|t| t["taskId"] == *id).unwrap();
    let second = line(&r["secondTaskId"]);
    assert_eq!(second["totalTokens"], 50, "{r}");
    assert_eq!(second["source"], "session-delta", "{r}");
    assert_eq!(second["available"], true, "{r}");
    assert_eq!(line(&r["firstTaskId"])["source"], "session-total", "{r}");
    let session = second["sessionId"].as_str().unwrap();
    let observed = &r["usage"]["bySession"][session]["observedCumulative"];
    assert_eq!(observed["totalTokens"], 170, "{r}");
    assert_eq!(r["usage"]["bySession"][session]["totalTokens"], 170, "{r}");
    assert_eq!(r["secondUsage"]["thinkingTokens"], 0, "{r}");
    assert!(r["secondUsage"].get("thoughtTokens").is_none(), "{r}");
    // A canceled agy task carries TASK_CANCELED.
    assert_eq!(r["canceled"]["state"], "canceled", "{r}");
    assert_eq!(r["canceled"]["taskError"]["code"], "TASK_CANCELED", "{r}");
}

/// Runs tests/mcp/agy_tools_flow.py in `phase` against a home whose `legate.toml` is the agy
/// agent plus `extra`; its report and the home.
fn tools_flow(phase: &str, extra: &str, dir: &Path) -> (serde_json::Value, std::path::PathBuf) {
    let python = legate_testkit::python("mcp").unwrap();
    let fake = std::env::current_exe().unwrap();
    let home = dir.join(format!("home-{phase}"));
    std::fs::create_dir_all(&home).unwrap();
    let agy_home = dir.join("agy-home");
    let state = agy_home.join(".gemini/antigravity-cli/fake-state");
    std::fs::write(
        home.join("legate.toml"),
        format!(
            "{extra}\n[agents.agy]\nkind = \"agy\"\ncommand = \"{}\"\nenv = {{ HOME = \"{}\", FAKE_AGY_STATE_DIR = \"{}\", {AS_FAKE} = \"1\" }}\n",
            fake.display(),
            agy_home.display(),
            state.display()
        ),
    )
    .unwrap();
    let project = dir.join(format!("project-{phase}"));
    legate_testkit::harness::make_project(&project, &[("README.md", "# Demo\n")]);
    let policies = home.join("agents/agy/hooks");
    let args = [Path::new(LEGATE), &project, Path::new(phase), &policies];
    (report(&python, "agy_tools_flow.py", &args, &home), home)
}

/// What tests/mcp/`script` printed last (its JSON report), run with `args` against `home`.
fn report(python: &Path, script: &str, args: &[&Path], home: &Path) -> serde_json::Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/mcp")
        .join(script);
    let out = std::process::Command::new(python)
        .arg(&path)
        .args(args)
        .env("LEGATE_HOME", home)
        .env("LEGATE_LOG", "warn")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{script} {args:?} failed:\n{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap()).unwrap()
}

/// agy's tool controls (issue 32, item 4) over MCP with the official Python SDK: hooks staged
/// in the copy refuse what `allowedTools`, `mcpServers` or the ceiling leave out, paths
/// outside the copy, `..` and writes to Legate's `.agents/` files; `mcp_config.json` carries
/// the selection with `disabledTools`; neither file reaches the patch; outside a copy the
/// task is refused. Skips without `python3` unless `LEGATE_REQUIRE_PYTHON` or `CI` is set.
fn agy_tool_controls_over_mcp() {
    if legate_testkit::python("mcp").is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let catalogue = "[[mcp_servers]]\nid = \"docs\"\ncommand = \"/usr/local/bin/docs-mcp\"\ntools = [{ name = \"search\", read_only = true }, { name = \"publish\", read_only = false }]\n\n[[mcp_servers]]\nid = \"web\"\nurl = \"http://127.0.0.1:9/\"\ntools = [{ name = \"get\", read_only = true }]\n";
    let (r, home) = tools_flow("select", catalogue, dir.path());
    let answer = |t: &str| r[t]["answer"].as_str().unwrap().to_string();
    let outcome = |t: &str, call: &str| {
        let a = answer(t);
        a.split("; ")
            .find(|o| o.starts_with(&format!("{call}:")))
            .unwrap_or_else(|| panic!("no {call} in {a}"))
            .to_string()
    };
    let done = |t: &str, call: &str| outcome(t, call).ends_with(": done");
    let denied = |t: &str, call: &str| outcome(t, call).contains("denied: TOOL_NOT_ALLOWED");
    // allowedTools ["read"]: reading runs, writing does not, nor anything outside the copy.
    assert_eq!(r["readOnly"]["state"], "completed", "{r}");
    assert!(done("readOnly", "view_file README.md"), "{r}");
    assert!(denied("readOnly", "write_to_file new.txt"), "{r}");
    assert!(denied("readOnly", "view_file /etc/hostname"), "{r}");
    assert!(denied("readOnly", "view_file sub/../README.md"), "{r}");
    assert!(
        denied("readOnly", "view_file .agents/mcp_config.json"),
        "{r}"
    );
    // mcpServers: the selected tool runs; an unselected one or server is refused.
    assert!(done("readOnly", "call_mcp_tool docs/search"), "{r}");
    assert!(denied("readOnly", "call_mcp_tool docs/publish"), "{r}");
    assert!(denied("readOnly", "call_mcp_tool web/get"), "{r}");
    assert_eq!(r["readOnly"]["changed"], serde_json::json!([]), "{r}");
    // The MCP configuration staged in the copy: the selected server, the rest disabled.
    let id = r["readOnly"]["taskId"].as_str().unwrap();
    let copy = home.join("copies").join(id);
    let config: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(copy.join(".agents/mcp_config.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        config["mcpServers"]["docs"]["disabledTools"],
        serde_json::json!(["publish"]),
        "{config}"
    );
    assert!(config["mcpServers"].get("web").is_none(), "{config}");
    let hooks = std::fs::read_to_string(copy.join(".agents/hooks.json")).unwrap();
    assert!(
        hooks.contains("agy-hook") && hooks.contains("PreToolUse"),
        "{hooks}"
    );
    // Attacks on the staged files and the policy: refused; only ok.txt reaches the patch.
    for call in [
        "write_to_file .agents/hooks.json",
        "write_to_file .agents/mcp_config.json",
        "write_to_file ../escape.txt",
        "write_to_file .AGENTS/hooks.json",
    ] {
        assert!(denied("writer", call), "{call}: {r}");
    }
    let forged = answer("writer");
    assert!(
        forged.contains("forged.json: denied: TOOL_NOT_ALLOWED"),
        "{forged}"
    );
    assert!(done("writer", "write_to_file ok.txt"), "{r}");
    assert_eq!(r["writer"]["changed"], serde_json::json!(["ok.txt"]), "{r}");
    let patch = r["writer"]["patch"].as_str().unwrap();
    assert!(
        patch.contains("ok.txt") && !patch.contains(".agents"),
        "{patch}"
    );
    assert!(!home.join("copies/escape.txt").exists());
    // Staged files changed behind the hook's back fail the turn.
    assert_eq!(r["tampered"]["state"], "failed", "{r}");
    assert_eq!(
        r["tampered"]["taskError"]["code"], "TOOL_NOT_ALLOWED",
        "{r}"
    );
    // Outside a copy, the hooks cannot be staged: refused.
    assert_eq!(r["sandbox"]["code"], "TOOL_NOT_ALLOWED", "{r}");
    assert!(
        r["sandbox"]["message"].as_str().unwrap().contains("copy"),
        "{r}"
    );

    // A ceiling with no selection: applied to a copy task, refused outside a copy.
    let (r, _) = tools_flow(
        "ceiling",
        "[controls]\nallowed_tools = [\"read\", \"think\"]\n",
        dir.path(),
    );
    let a = r["underCeiling"]["answer"].as_str().unwrap();
    assert!(a.contains("view_file README.md: done"), "{r}");
    assert!(
        a.contains("write_to_file new.txt: denied: TOOL_NOT_ALLOWED"),
        "{r}"
    );
    assert_eq!(r["underCeiling"]["changed"], serde_json::json!([]), "{r}");
    assert_eq!(r["sandbox"], "TOOL_NOT_ALLOWED", "{r}");
}

fn legate_run_with_agy_configured_in_legate_toml() {
    let fake = std::env::current_exe().unwrap();
    let fake = fake.display();
    let legate = Path::new(LEGATE);
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    let agy_home = dir.path().join("agy-home");
    let state = agy_home.join(".gemini/antigravity-cli/fake-state");
    std::fs::write(
        home.join("legate.toml"),
        format!(
            "[agents.agy]\nkind = \"agy\"\ncommand = \"{fake}\"\nenv = {{ HOME = \"{}\", FAKE_AGY_STATE_DIR = \"{}\", {AS_FAKE} = \"1\" }}\n",
            agy_home.display(),
            state.display()
        ),
    )
    .unwrap();
    let legate_cmd = |args: &[&str]| {
        std::process::Command::new(legate)
            .args(args)
            .env("LEGATE_HOME", &home)
            .output()
            .unwrap()
    };
    let out = legate_cmd(&["run", "--agent", "agy", "--context", "e2e", "tokens: 120"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("counted 120 tokens"), "{stdout}");
    let out = legate_cmd(&[
        "run",
        "--agent",
        "agy",
        "--context",
        "e2e",
        "--model",
        "mock-flash",
        "--tap",
        "tokens: 50",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Tapped (issue 34): the prompt line Legate wrote and the stream-json lines agy wrote.
    let stderr = String::from_utf8_lossy(&out.stderr);
    let id = stderr
        .lines()
        .find_map(|l| l.strip_prefix("task "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap();
    let out = legate_cmd(&["tap", id, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frames: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(frames.iter().all(|f| f["protocol"] == "agy"), "{frames:?}");
    assert!(
        frames.iter().any(|f| f["direction"] == "to-agent"
            && f["frame"].as_str().unwrap().contains("\"event\":\"user\"")
            && f["frame"].as_str().unwrap().contains("tokens: 50")),
        "{frames:?}"
    );
    assert!(
        frames.iter().any(|f| f["direction"] == "from-agent"),
        "{frames:?}"
    );
    let out = legate_cmd(&["usage", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["total"]["totalTokens"], 170);
    assert_eq!(report["byModel"]["mock-flash"]["totalTokens"], 50);
    assert_eq!(report["byTask"][0]["totalTokens"], 50);

    // The models agy lists; a saved preference applies to a task that names none.
    let out = legate_cmd(&["models", "agy"]);
    let listed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{listed}");
    assert!(
        listed.contains("mock-pro") && listed.contains("Mock Flash"),
        "{listed}"
    );
    let out = legate_cmd(&["model", "agy", "mock-flash"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = legate_cmd(&["run", "--agent", "agy", "tokens: 7"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = legate_cmd(&["usage", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["byModel"]["mock-flash"]["totalTokens"], 57);

    // Structured output: a JSON Schema file; a file that is not JSON is refused.
    let schema = dir.path().join("schema.json");
    std::fs::write(
        &schema,
        r#"{"type": "object", "properties": {"summary": {"type": "string"}}}"#,
    )
    .unwrap();
    let schema = schema.to_str().unwrap();
    let out = legate_cmd(&["run", "--agent", "agy", "--json-schema", schema, "sum up"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let id = err
        .lines()
        .find_map(|l| l.strip_prefix("task "))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_string();
    let out = legate_cmd(&["show", "--json", &id]);
    let task: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let attachment = &task["result"]["attachments"][0];
    assert_eq!(attachment["name"], "structured_output.json", "{task}");
    let value: serde_json::Value =
        serde_json::from_str(attachment["text"].as_str().unwrap()).unwrap();
    assert_eq!(value["summary"], "fake agy: sum up");
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{not json").unwrap();
    let out = legate_cmd(&[
        "run",
        "--agent",
        "agy",
        "--json-schema",
        bad.to_str().unwrap(),
        "x",
    ]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("INVALID_INPUT"));

    std::fs::write(
        home.join("legate.toml"),
        format!("[agents.agy]\ncommand = \"{fake}\"\ninherit_env = [\"node_options\"]\n"),
    )
    .unwrap();
    let out = legate_cmd(&["run", "--agent", "agy", "hi"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("CONFIG_INVALID"), "{stderr}");
    assert!(stderr.contains("node_options"), "{stderr}");
}
