//! Codex (`@openai/codex`, run headless as `codex exec --json`) as a real caller of
//! `legate mcp`, offline: Codex's model is a scripted OpenAI Responses server on 127.0.0.1
//! that makes it call Legate's tools, and Legate delegates to Claude through
//! `claude-agent-acp`, whose model is a scripted Anthropic server. Codex users lost
//! `codex mcp-server` as a delegation path; this is the one Legate offers them
//! (docs/callers/codex.md shows the configuration tested here).
//!
//! - `codex_delegates_to_claude_through_legate`: run (a copy of a git project) → wait until
//!   ready → result → preview → verify → integrate. Claude's model writes `NOTES.md` with its
//!   `Write` tool; the file lands in the project, Legate's store records the write and the
//!   integration, and Legate's answers reach Codex's model (its later requests carry them).
//!   A tap between Codex and `legate mcp` records the JSON-RPC both ways: the protocol
//!   revision negotiated and whether task calls (`tasks/*`) were used are read from it.
//! - in `registration`: `codex mcp add` for stdio and for Streamable HTTP, each then used by
//!   a `codex exec`; and Legate's approval mode `ask`, whose elicitation `codex exec` declines.
//!
//! Needs `@openai/codex` in `$LEGATE_CALLERS_DIR` (default `~/.cache/legate-callers`) and
//! `claude-agent-acp` in `$LEGATE_ADAPTERS_DIR/current` (default `~/.cache/legate-adapters`);
//! a missing one fails with a message naming the script that installs it.
//!
//! Owns Codex's side of the suite (its `CODEX_HOME`, flags and its model's script); Legate's
//! home, its serving and the tap are the shared harness's (`main.rs`). It never decides
//! anything about Legate: assertions read the disk, Legate's store, the model servers'
//! recorded requests and the tap.

use crate::{LEGATE, Legate, Transport, Variant, adapters_dir, callers_dir, require, run_logged};
use legate_testkit::model_server::{ModelServer, Recorded, Step};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

mod registration;

/// Whether Legate declares the MCP Tasks extension to Codex (`false`: it runs with
/// `--no-tasks`, the harness's [`Legate::mcp_args`]). Codex 0.171.0 declares no
/// `io.modelcontextprotocol/tasks` extension (its binary knows the name, its `initialize`
/// does not send it), so a Legate that offers tasks must still answer it plainly: that is
/// what this checks.
const TASKS: bool = true;

/// The MCP revision Codex 0.171.0 asks for and Legate answers with (observed 2026-12-05;
/// its feature `mcp_2026_07_28` does not change the stdio handshake).
const PROTOCOL: &str = "2025-06-18";

/// What Claude's model writes, through Legate, into the copy.
const NOTE: &str = "Delegated by Codex, written by Claude.\n";

/// Codex's model: one Codex has no metadata for (it says so, and goes on).
const MODEL: &str = "gpt-5.3-codex";

/// Codex's seconds for one Legate call: above the longest `wait` (60 s).
const TOOL_TIMEOUT_SECS: u64 = 120;

/// The longest a whole `codex` command may take before it is killed.
const LIMIT: Duration = Duration::from_secs(400);

/// `codex` of `@openai/codex`.
fn codex_bin() -> PathBuf {
    require(callers_dir().join("node_modules/.bin/codex"))
}

/// Legate's `legate.toml` whose `claude` agent is `claude-agent-acp` on the scripted
/// Anthropic server.
fn claude_config(anthropic: &ModelServer) -> String {
    let js =
        adapters_dir().join("node_modules/@agentclientprotocol/claude-agent-acp/dist/index.js");
    format!(
        "[agents.claude]\ncommand = \"node\"\nargs = [{:?}]\nenv = {{ ANTHROPIC_BASE_URL = {:?}, ANTHROPIC_API_KEY = \"sk-ant-legate-test\" }}\n",
        require(js).display().to_string(),
        anthropic.url(),
    )
}

/// A Legate home (served as `transport` says) whose `legate.toml` is `config`, with a git
/// project beside it.
fn legate_home(transport: Transport, config: &str) -> Legate {
    let variant = Variant {
        transport,
        tasks: TASKS,
    };
    Legate::new(
        variant,
        |_| config.to_string(),
        &[("README.md", "# Demo\n")],
    )
}

/// Codex in homes of its own beside Legate's: its `CODEX_HOME` (`<dir>/codex-home`) and a
/// `HOME` (`<dir>/user`) in which nothing of the user's own Codex, skills or agents is read.
struct Codex<'a> {
    legate: &'a Legate,
    codex_home: PathBuf,
    user_home: PathBuf,
}

impl<'a> Codex<'a> {
    fn new(legate: &'a Legate) -> Self {
        let base = legate.cli.base();
        let (codex_home, user_home) = (base.join("codex-home"), base.join("user"));
        std::fs::create_dir_all(&codex_home).unwrap();
        std::fs::create_dir_all(&user_home).unwrap();
        Self {
            legate,
            codex_home,
            user_home,
        }
    }

    /// Writes Codex's `config.toml`.
    fn configure(&self, config: &str) {
        std::fs::write(self.codex_home.join("config.toml"), config).unwrap();
    }

    /// Codex's `[mcp_servers.legate]` for the harness's stdio `legate` (the tap), as the
    /// docs show it.
    fn stdio_table(&self) -> String {
        let tap = self.legate.bin_dir().join("legate");
        legate_table(&tap, &self.legate.mcp_args(), &self.legate.cli.home())
    }

    /// `codex <args>` in the project, on Codex's homes, with no key or log level of the
    /// user's.
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(codex_bin());
        c.args(args)
            .current_dir(self.legate.project())
            .env("CODEX_HOME", &self.codex_home)
            .env("HOME", &self.user_home)
            .env("LEGATE_TEST_OPENAI_KEY", "sk-legate-test")
            .env_remove("OPENAI_API_KEY")
            .env_remove("CODEX_API_KEY")
            .env_remove("OPENAI_BASE_URL")
            .env_remove("RUST_LOG")
            .env_remove("LEGATE_LOG");
        c
    }

    /// `codex mcp add legate <args>`, which must succeed; the `config.toml` it leaves.
    fn mcp_add(&self, args: &[&str]) -> String {
        let add = self.command(&[&["mcp", "add", "legate"], args].concat());
        run_logged(add, self.legate.cli.base(), "codex-mcp-add", LIMIT);
        std::fs::read_to_string(self.codex_home.join("config.toml")).unwrap()
    }

    /// `codex exec --json` with `prompt`, with `env` added, which must succeed; its output
    /// (for a failure's message) and the JSON events it printed.
    fn exec(&self, prompt: &str, env: &[(&str, &str)]) -> (String, Vec<Value>) {
        let flags = ["exec", "--json", "--strict-config", "--skip-git-repo-check"];
        let mut exec = self.command(&[&flags[..], &[prompt]].concat());
        exec.envs(env.iter().copied());
        let (_, out, err) = run_logged(exec, self.legate.cli.base(), "codex-exec", LIMIT);
        let events = out
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect();
        (format!("stdout:\n{out}\nstderr:\n{err}"), events)
    }
}

/// Codex's `config.toml` without its MCP servers: the scripted model as its provider, and
/// nothing that reaches the network (without the update check, analytics, plugins and apps
/// turned off, Codex 0.171 looks up `api.github.com` and `chatgpt.com`).
fn codex_base(openai: &ModelServer) -> String {
    format!(
        r#"model = "{MODEL}"
model_provider = "legate-test"
check_for_update_on_startup = false

[analytics]
enabled = false

[features]
plugins = false
apps = false
remote_plugin = false

[model_providers.legate-test]
name = "legate-test"
base_url = "{}/v1"
env_key = "LEGATE_TEST_OPENAI_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
"#,
        openai.url()
    )
}

/// Codex's `[mcp_servers.legate]` table: `command` with `args`, Legate's home, a tool timeout
/// above the longest `wait`, and `integrate` approved (Codex asks before any tool Legate marks
/// destructive: `integrate`, `discard`, `cleanup`, `memory_remove`; `codex exec` has nobody
/// to ask and refuses).
fn legate_table(command: &Path, args: &[&str], home: &Path) -> String {
    format!(
        r#"
[mcp_servers.legate]
command = {:?}
args = {}
startup_timeout_sec = 30
tool_timeout_sec = {TOOL_TIMEOUT_SECS}
env = {{ LEGATE_HOME = {:?} }}

[mcp_servers.legate.tools.integrate]
approval_mode = "approve"
"#,
        command.display().to_string(),
        json!(args),
        home.display().to_string(),
    )
}

/// Codex's finished MCP calls to Legate, by tool name, in order: (tool, status, result text).
fn legate_calls(events: &[Value]) -> Vec<(String, String, String)> {
    events
        .iter()
        .filter(|e| e["type"] == "item.completed" && e["item"]["type"] == "mcp_tool_call")
        .map(|e| {
            let item = &e["item"];
            assert_eq!(item["server"], "legate", "{item}");
            let text = item["result"]["content"][0]["text"]
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| item["error"].to_string());
            (
                item["tool"].as_str().unwrap_or_default().to_string(),
                item["status"].as_str().unwrap_or_default().to_string(),
                text,
            )
        })
        .collect()
}

/// The tools each Responses request offered inside the `mcp__legate` namespace.
fn namespace_tools(request: &Recorded) -> Vec<String> {
    request.body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| t["type"] == "namespace" && t["name"] == "mcp__legate")
        .flat_map(|t| t["tools"].as_array().cloned().unwrap_or_default())
        .filter_map(|t| t["name"].as_str().map(str::to_string))
        .collect()
}

/// The outputs of tool calls a Responses request carries back to the model.
fn tool_outputs(request: &Recorded) -> Vec<String> {
    request.body["input"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|i| i["type"] == "function_call_output")
        .map(|i| match &i["output"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect()
}

/// A Legate tool of Codex's model: `mcp__legate.<tool>` (the model server sends it as the
/// tool `tool` of the Responses namespace `mcp__legate`).
fn legate(tool: &str, input: Value) -> Step {
    Step::tool(&format!("mcp__legate.{tool}"), input)
}

/// `run` of `prompt` on `agent` in a copy of `project`, with one criterion: `path` exists.
fn run_on_copy(prompt: &str, agent: &str, project: &Path, path: &str) -> Step {
    legate(
        "run",
        json!({"prompt": prompt, "agent": agent, "workingDirectory": project,
               "acceptanceCriteria": [{"id": "file", "description": format!("{path} exists"),
                                       "check": {"kind": "file-exists", "path": path}}]}),
    )
}

/// `wait` on the task `run` started, long enough for it to end.
fn wait_until_ready() -> Step {
    legate(
        "wait",
        json!({"taskId": "{{taskId}}", "timeoutSeconds": 55}),
    )
}

/// `integrate` of the task's patch, naming `sha256` (`{{sha256}}`: the one previewed).
fn integrate(sha256: &str) -> Step {
    legate(
        "integrate",
        json!({"taskId": "{{taskId}}", "expectedSha256": sha256}),
    )
}

/// `verify` of the previewed patch: the criterion of [`run_on_copy`] passed, citing `quote`
/// on line 1 of `path`.
fn verify_file(path: &str, quote: &str) -> Step {
    legate(
        "verify",
        json!({"taskId": "{{taskId}}", "expectedSha256": "{{sha256}}",
               "reviews": [{"criterionId": "file", "verdict": "passed", "path": path,
                            "line": 1, "quote": quote, "explanation": "written"}]}),
    )
}

#[test]
fn codex_delegates_to_claude_through_legate() {
    let started = Instant::now();
    let anthropic = ModelServer::start().unwrap();
    let openai = ModelServer::start().unwrap();
    let home = legate_home(Transport::Stdio, &claude_config(&anthropic));
    let project = home.project();
    let codex = Codex::new(&home);
    codex.configure(&(codex_base(&openai) + &codex.stdio_table()));

    // Claude, in the copy: tries to write into the original project (refused: outside its
    // root), finds its root (a shell command, allowed in a copy Legate owns), writes NOTES.md
    // there with its Write tool, and answers.
    let escape = project.join("ESCAPE.md");
    anthropic.script(vec![
        Step::tool(
            "Write",
            json!({"file_path": escape, "content": "not through the review"}),
        ),
        Step::tool(
            "Bash",
            json!({"command": "printf '{\"root\": \"%s\"}' \"$PWD\"", "description": "print the root"}),
        ),
        Step::tool(
            "Write",
            json!({"file_path": "{{root}}/NOTES.md", "content": NOTE}),
        ),
        Step::text("Wrote NOTES.md."),
    ]);
    // Codex: delegates to Claude on a copy of the project, follows the task to its end, reads
    // the answer, reviews the patch, tries to integrate a patch it never saw (refused), and
    // integrates the one it reviewed.
    let task = json!({"taskId": "{{taskId}}"});
    openai.script(vec![
        run_on_copy(
            "Write NOTES.md saying who wrote it.",
            "claude",
            &project,
            "NOTES.md",
        ),
        wait_until_ready(),
        legate("result", task.clone()),
        legate("preview", task),
        verify_file("NOTES.md", NOTE.trim_end()),
        integrate(&"0".repeat(64)),
        integrate("{{sha256}}"),
        Step::text("Claude wrote NOTES.md through Legate; it is integrated."),
    ]);

    let (out, events) = codex.exec(
        "Delegate writing NOTES.md to Claude through Legate, review it and integrate it.",
        &[],
    );

    // Codex called each tool in turn; the forged integration was refused, every other call
    // succeeded.
    let mut calls = legate_calls(&events);
    let names: Vec<&str> = calls.iter().map(|(n, _, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "run",
            "wait",
            "result",
            "preview",
            "verify",
            "integrate",
            "integrate"
        ],
        "{out}"
    );
    let (_, forged_status, forged) = calls.remove(5);
    eprintln!("codex: a forged integration: {forged_status}, {forged}");
    assert_eq!(forged_status, "failed", "{forged}");
    assert!(forged.contains("PATCH_CHANGED"), "{forged}");
    for (name, status, text) in &calls {
        assert_eq!(status, "completed", "{name}: {text}");
        assert!(!text.contains("\"error\""), "{name}: {text}");
    }
    let answer = |name: &str| -> Value {
        let (_, _, text) = calls.iter().find(|(n, _, _)| n == name).unwrap();
        serde_json::from_str(text).unwrap()
    };
    let task_id = answer("run")["taskId"].as_str().unwrap().to_string();
    assert_eq!(answer("run")["workspace"], "copy");
    assert_eq!(answer("wait")["ready"], true, "the one wait saw the end");
    assert_eq!(answer("wait")["state"], "completed");
    assert!(
        answer("result")["answer"]
            .as_str()
            .unwrap()
            .contains("Wrote NOTES.md."),
        "{}",
        answer("result")
    );
    assert_eq!(answer("verify")["passed"], true);
    assert_eq!(answer("integrate")["files"], json!(["NOTES.md"]));

    // On disk: Claude's file, in the project, and nothing written around the review.
    assert_eq!(
        std::fs::read_to_string(project.join("NOTES.md")).unwrap(),
        NOTE
    );
    assert!(
        !escape.exists(),
        "the agent wrote into the project directly"
    );

    // In Legate's store: Claude's task on a copy, its Write, and the integration.
    let shown = home.task(&task_id);
    assert_eq!(shown["agent"], "claude", "{shown}");
    assert_eq!(shown["state"], "completed", "{shown}");
    assert_eq!(shown["workspace"], "copy", "{shown}");
    let stored = home.cli.events(&task_id);
    let notes = format!("{}/NOTES.md", shown["root"].as_str().unwrap());
    let write = stored
        .iter()
        .find(|e| e["type"] == "tool_call_update" && e["locations"] == json!([notes]))
        .unwrap_or_else(|| panic!("no write of {notes} in {stored:#?}"));
    assert!(
        stored.iter().any(|e| e["type"] == "permission"
            && e["tool_call_id"] == write["id"]
            && e["tool_kind"] == "edit"
            && e["verdict"]["decision"] == "allow"),
        "the write was not supervised: {stored:#?}"
    );
    assert!(
        stored.iter().any(|e| e["type"] == "permission"
            && e["tool_kind"] == "edit"
            && e["verdict"]["decision"] == "deny"
            && e["title"].as_str().is_some_and(|t| t.contains("ESCAPE.md"))),
        "the write outside the copy was not refused: {stored:#?}"
    );
    assert!(
        stored.iter().any(|e| e["type"] == "notice"
            && e["detail"]["files"] == json!(["NOTES.md"])
            && e["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("integrated"))),
        "no integration in {stored:#?}"
    );

    // Claude's model was asked with its tools, and got Legate's prompt.
    let asked = anthropic.requests();
    assert!(
        asked.iter().any(|r| r
            .body
            .to_string()
            .contains("Write NOTES.md saying who wrote it.")),
        "Claude's model never saw the prompt"
    );

    // Codex's model: Legate's tools in the namespace `mcp__legate`, and Legate's answers in
    // its later requests.
    let requests = openai.requests();
    let offered = requests
        .iter()
        .map(namespace_tools)
        .find(|t| !t.is_empty())
        .expect("no request offered Legate's tools");
    eprintln!(
        "codex: Legate's tools as Codex offers them: namespace mcp__legate, {} tools: {offered:?}",
        offered.len()
    );
    for tool in ["run", "wait", "result", "preview", "verify", "integrate"] {
        assert!(offered.iter().any(|t| t == tool), "{tool} not offered");
    }
    let last = tool_outputs(requests.last().unwrap());
    assert!(
        last.iter().any(|o| o.contains("\"ready\":true")),
        "the wait's answer did not reach the model: {last:?}"
    );
    assert!(
        last.iter()
            .any(|o| o.contains("\"integratedAt\"") && o.contains("NOTES.md")),
        "integrate's answer did not reach the model: {last:?}"
    );

    // The wire, from the tap.
    let tap = home.tap();
    let initialize = tap
        .sent_request("initialize")
        .expect("Codex sent no initialize");
    let reply = tap
        .answer_to(initialize)
        .filter(|m| m.get("result").is_some())
        .expect("Legate answered no initialize");
    let methods: Vec<&str> = tap.methods.iter().map(String::as_str).collect();
    let declares_tasks = tap.caller_declares_tasks();
    let task_calls: Vec<&&str> = methods.iter().filter(|m| m.starts_with("tasks/")).collect();
    eprintln!(
        "codex: asked for MCP {}, Legate answered {}; capabilities {}; declares tasks: {declares_tasks}; Legate offers tasks: {:?}; methods {methods:?}; task calls {task_calls:?}",
        initialize["params"]["protocolVersion"],
        reply["result"]["protocolVersion"],
        initialize["params"]["capabilities"],
        tap.legate_offers_tasks(),
    );
    assert_eq!(initialize["params"]["protocolVersion"], PROTOCOL);
    assert_eq!(reply["result"]["protocolVersion"], PROTOCOL);
    assert!(methods.contains(&"tools/call"), "{methods:?}");
    assert_eq!(tap.legate_offers_tasks(), Some(TASKS), "{tap:?}");
    if TASKS {
        assert_eq!(declares_tasks, !task_calls.is_empty(), "{methods:?}");
    } else {
        assert!(!declares_tasks && task_calls.is_empty(), "{methods:?}");
    }
    eprintln!(
        "codex: Codex → Legate → claude-agent-acp, integrated, in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}
