//! Claude Code (`@anthropic-ai/claude-code`, its native `claude`) as Legate's caller: run
//! headless (`claude -p … --output-format stream-json --verbose`) in a temporary `HOME` and
//! `CLAUDE_CONFIG_DIR`, with Legate registered by the exact `claude mcp add …` commands of
//! docs/callers/claude-code.md, against a scripted Anthropic model that makes it call
//! Legate's tools (`mcp__legate__<tool>`).
//!
//! Scenarios: a copy task delegated to revisor (stdio and HTTP) and to Codex through
//! codex-acp (stdio), each followed to its end, previewed, verified and integrated; each
//! asserts on the project's disk, on Legate's store and on what reached the model. `claude_bench`
//! prints the time from Claude Code's `run` call to the delegated task's first event, beside a
//! plain tool call's round trip (docs/BENCHMARKS.md).
//!
//! This file owns Claude Code's environment, its registration of Legate and the scenarios'
//! scripts; it never lets Claude Code read the user's own configuration or send anything
//! beyond 127.0.0.1 (its proxy is [`crate::Outside`]).

use crate::{
    Legate, Outside, Transport, Variant, adapters_dir, callers_dir, median, millis_between,
    require, run_logged, tool_results,
};
use legate_testkit::model_server::{ModelServer, Recorded, Step};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// How long one `claude -p` may take.
const LIMIT: Duration = Duration::from_secs(300);

/// Whether Claude Code follows a delegation as an MCP task when Legate offers the Tasks
/// extension. Observed of 2.1.332 (docs/callers/claude-code.md): no. It adds the extension to
/// its client capabilities only when signed in to a claude.ai account (never with an API
/// key, as here), and `-p` (a non-interactive session) calls with tasks disallowed unless the
/// call was moved to a background task, which again needs that sign-in. It then answers
/// plainly through the same server: `run`, `wait`, `result`.
const FOLLOWS_TASKS: bool = false;

/// The stdio registration, as the docs print it.
const ADD_STDIO: &str = "claude mcp add legate -- legate";

/// The native binary the npm package installs.
fn claude_exe() -> PathBuf {
    require(callers_dir().join("node_modules/@anthropic-ai/claude-code/bin/claude.exe"))
}

/// Claude Code in a home of its own (beside Legate's), talking to `model`.
struct ClaudeCode<'a> {
    legate: &'a Legate,
    home: PathBuf,
    model_url: String,
    outside: Outside,
}

impl<'a> ClaudeCode<'a> {
    fn new(legate: &'a Legate, model: &ModelServer) -> Self {
        let home = legate.cli.base().join("claude-home");
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        legate.link_bin("claude", &claude_exe());
        Self {
            legate,
            home,
            model_url: model.url(),
            outside: Outside::start(),
        }
    }

    /// `claude` (through `sh -c`, so a command line runs exactly as a user types it) in the
    /// project, with nothing of the user's environment but `PATH`'s tools: its home and
    /// configuration are temporary, its model is the scripted server, and everything that is
    /// not the model (telemetry, updates, error reports) is off.
    fn shell(&self, line: &str) -> Command {
        let path = format!(
            "{}:{}",
            self.legate.bin_dir().display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(line)
            .env_clear()
            .env("PATH", path)
            .env("HOME", &self.home)
            .env("CLAUDE_CONFIG_DIR", self.home.join(".claude"))
            .env("ANTHROPIC_BASE_URL", &self.model_url)
            .env("ANTHROPIC_API_KEY", "sk-ant-legate-test")
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_BUG_COMMAND", "1")
            .env("HTTPS_PROXY", self.outside.url())
            .env("HTTP_PROXY", self.outside.url())
            .env("NO_PROXY", "127.0.0.1,localhost")
            .current_dir(self.legate.project());
        c
    }

    /// Registers Legate as the docs say: `claude mcp add legate -- legate mcp` over stdio;
    /// over HTTP `claude mcp add --transport http legate <url> --header "Authorization:
    /// Bearer $(cat <home>/mcp-token)"`, which is also what `legate serve --mcp` printed.
    fn register(&self) {
        let line = match self.legate.variant.transport {
            Transport::Stdio => format!("{ADD_STDIO} {}", self.legate.mcp_args().join(" ")),
            Transport::Http => {
                let token_file = self.legate.cli.home().join("mcp-token");
                let line = format!(
                    "claude mcp add --transport http legate {} \
                     --header \"Authorization: Bearer $(cat {})\"",
                    self.legate.mcp_url(),
                    token_file.display()
                );
                let printed = line.replace(
                    &format!("$(cat {})", token_file.display()),
                    &self.legate.token(),
                );
                assert_eq!(
                    self.legate
                        .banner_line("claude mcp add --transport http legate"),
                    printed
                );
                line
            }
        };
        let dir = self.legate.cli.base();
        run_logged(self.shell(&line), dir, "claude-mcp-add", LIMIT);
        let config: Value = serde_json::from_str(
            &std::fs::read_to_string(self.home.join(".claude/.claude.json")).unwrap(),
        )
        .unwrap();
        let project = self.legate.project().display().to_string();
        let server = &config["projects"][&project]["mcpServers"]["legate"];
        assert!(server.is_object(), "not registered: {config}");
    }

    /// `claude -p prompt` headless, allowed to call Legate's tools without asking; the
    /// stream-json lines it printed. Nothing it sent left 127.0.0.1.
    fn run_print(&self, prompt: &str) -> Vec<Value> {
        let line = format!(
            "exec claude -p '{prompt}' --output-format stream-json --verbose \
             --allowedTools 'mcp__legate__*'"
        );
        let dir = self.legate.cli.base();
        let (_, out, _) = run_logged(self.shell(&line), dir, "claude-p", LIMIT);
        // Without CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC it tries api.anthropic.com.
        assert_eq!(
            self.outside.seen(),
            Vec::<String>::new(),
            "traffic for outside"
        );
        out.lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// [`ClaudeCode::run_print`], which must find Legate connected and end in success.
    fn ask(&self, prompt: &str) -> Vec<Value> {
        let lines = self.run_print(prompt);
        let init = lines.iter().find(|l| l["subtype"] == "init").unwrap();
        assert_eq!(
            init["mcp_servers"],
            json!([{"name": "legate", "status": "connected", "source": "local"}]),
            "{init}"
        );
        let result = lines.iter().find(|l| l["type"] == "result").unwrap();
        assert_eq!(result["subtype"], "success", "{result}");
        lines
    }
}

/// The model's steps for a copy task of `agent` doing `prompt`, followed to its end
/// (polling `wait`, or the task path: `run` answers at the end) and integrated.
fn delegation(agent: &str, prompt: &str, project: &Path, tasks: bool) -> Vec<Step> {
    let id = json!({"taskId": "{{taskId}}"});
    let mut steps = vec![Step::tool(
        "mcp__legate__run",
        json!({"prompt": prompt, "agent": agent,
               "workspace": {"kind": "copy", "path": project}}),
    )];
    if !tasks {
        steps.push(Step::tool(
            "mcp__legate__wait",
            json!({"taskId": "{{taskId}}", "timeoutSeconds": 60}),
        ));
        steps.push(Step::tool("mcp__legate__result", id.clone()));
    }
    let bound = json!({"taskId": "{{taskId}}", "expectedSha256": "{{sha256}}"});
    let mut verify = bound.clone();
    verify["reviews"] = json!([]);
    steps.extend([
        Step::tool("mcp__legate__preview", id),
        Step::tool("mcp__legate__verify", verify),
        Step::tool("mcp__legate__integrate", bound),
        Step::text("Integrated."),
    ]);
    steps
}

/// The main loop's requests (those that took a step of the script), in order.
fn main_loop(model: &ModelServer) -> Vec<Recorded> {
    model
        .requests()
        .into_iter()
        .filter(|r| r.step.is_some())
        .collect()
}

/// The task id Legate's `run` answered, read from the model's requests.
fn task_id_of(model: &ModelServer) -> String {
    for r in main_loop(model) {
        for text in tool_results(&r.body) {
            if let Ok(v) = serde_json::from_str::<Value>(&text)
                && let Some(id) = v["taskId"].as_str()
            {
                return id.to_string();
            }
        }
    }
    panic!("no taskId reached the model")
}

/// Claude Code delegates a copy task to `agent`; asserts that it ended integrated: the file
/// is in the project, the store says so, and the integration's answer reached the model.
fn copy_task_ends_integrated(
    legate: &Legate,
    model: &ModelServer,
    agent: &str,
    prompt: &str,
    file: (&str, &str),
) {
    let claude = ClaudeCode::new(legate, model);
    claude.register();
    let tasks = legate.variant.tasks && FOLLOWS_TASKS;
    model.script(delegation(agent, prompt, &legate.project(), tasks));
    claude.ask("Delegate the change to Legate on a copy, review it and integrate it.");

    let id = task_id_of(model);
    if tasks {
        // The task path: `run`'s answer, the task's final result, says how it ended.
        let first = main_loop(model)[1].clone();
        assert!(
            tool_results(&first.body)
                .iter()
                .any(|t| t.contains("\"outcome\"")),
            "{:?}",
            tool_results(&first.body)
        );
    }
    let landed = std::fs::read_to_string(legate.project().join(file.0)).unwrap_or_default();
    assert_eq!(landed.trim_end(), file.1, "{} in the project", file.0);
    let task = legate.task(&id);
    assert_eq!(task["state"], "completed", "{task}");
    assert_eq!(task["agent"], agent, "{task}");
    // The integration's answer is in the last request Claude Code made of its model.
    let last = main_loop(model).pop().unwrap();
    let results = tool_results(&last.body);
    let integrated = results
        .iter()
        .filter_map(|t| serde_json::from_str::<Value>(t).ok())
        .find(|v| v.get("integratedAt").is_some())
        .unwrap_or_else(|| panic!("no integrate answer reached the model: {results:?}"));
    assert_eq!(integrated["files"], json!([file.0]), "{integrated}");
    // The store recorded the integration, of the patch the model verified.
    let sha = integrated["sha256"].as_str().unwrap();
    let shown = legate.show(&id);
    assert!(
        shown
            .lines()
            .any(|l| l.contains("integrated 1 files") && l.contains(sha)),
        "{shown}"
    );

    let tap = legate.tap();
    eprintln!(
        "claude ({}) → {agent}: {}",
        legate.variant.name(),
        tap.describe()
    );
    assert!(tap.revisions.contains("2026-07-28"), "{tap:?}");
    assert!(tap.saw("tools/call"), "{tap:?}");
    assert_eq!(tap.saw("tasks/get"), tasks, "{tap:?}");
    // What each side declared: Legate offers the extension unless `--no-tasks`; Claude Code
    // declares it only when it follows tasks.
    if legate.variant.transport == Transport::Stdio {
        assert_eq!(
            tap.legate_offers_tasks(),
            Some(legate.variant.tasks),
            "{tap:?}"
        );
        assert_eq!(tap.caller_declares_tasks(), FOLLOWS_TASKS, "{tap:?}");
    } else {
        // Over HTTP, Legate's log of each session the caller opened (its peer's capabilities).
        assert!(!tap.sessions.is_empty(), "{tap:?}");
        assert!(
            tap.sessions.iter().all(|(_, t)| *t == FOLLOWS_TASKS),
            "{tap:?}"
        );
    }
}

fn revisor(variant: Variant) {
    let model = ModelServer::start().unwrap();
    let legate = Legate::new(variant, |_| String::new(), &[("README.md", "hello\n")]);
    copy_task_ends_integrated(
        &legate,
        &model,
        "revisor",
        "write hello.txt: hello from revisor",
        ("hello.txt", "hello from revisor"),
    );
}

#[test]
fn claude_revisor_stdio() {
    revisor(Variant {
        transport: Transport::Stdio,
        tasks: false,
    });
}

#[test]
fn claude_revisor_http() {
    revisor(Variant {
        transport: Transport::Http,
        tasks: false,
    });
}

#[test]
fn claude_revisor_stdio_tasks() {
    revisor(Variant {
        transport: Transport::Stdio,
        tasks: true,
    });
}

#[test]
fn claude_revisor_http_tasks() {
    revisor(Variant {
        transport: Transport::Http,
        tasks: true,
    });
}

/// A caller holding a wrong token (the printed line with another token) gets no tool of
/// Legate's: Claude Code reports the server failed, the model's `run` is "no such tool",
/// and no task exists.
#[test]
fn claude_http_wrong_token_gets_nothing() {
    let model = ModelServer::start().unwrap();
    let variant = Variant {
        transport: Transport::Http,
        tasks: false,
    };
    let legate = Legate::new(variant, |_| String::new(), &[("README.md", "hello\n")]);
    let claude = ClaudeCode::new(&legate, &model);
    let line = legate.banner_line("claude mcp add --transport http legate");
    let forged = line.replace(&legate.token(), &"0".repeat(64));
    assert_ne!(forged, line);
    run_logged(
        claude.shell(&forged),
        legate.cli.base(),
        "claude-mcp-add",
        LIMIT,
    );
    model.script(vec![Step::tool(
        "mcp__legate__run",
        json!({"prompt": "write owned.txt: x", "agent": "revisor",
               "workspace": {"kind": "copy", "path": legate.project()}}),
    )]);
    let lines = claude.run_print("Delegate.");
    let init = lines.iter().find(|l| l["subtype"] == "init").unwrap();
    let status = &init["mcp_servers"][0]["status"];
    eprintln!("claude with a wrong token: legate {status}");
    assert_ne!(status, "connected", "{init}");
    let results: Vec<String> = main_loop(&model)
        .iter()
        .flat_map(|r| tool_results(&r.body))
        .collect();
    assert!(
        results.iter().any(|t| t.contains("No such tool available")),
        "{results:?}"
    );
    assert!(legate.cli.tasks_json().is_empty());
    assert!(!legate.project().join("owned.txt").exists());
    assert!(!legate.tap().saw("tools/call"));
}

/// Legate's `codex` agent: codex-acp from the adapters' install, its Codex configured (in
/// its state directory, its private HOME) with the scripted OpenAI server as its provider.
fn codex_config(base: &Path, openai: &str) -> String {
    let js =
        require(adapters_dir().join("node_modules/@agentclientprotocol/codex-acp/dist/index.js"));
    let state = base.join("codex-state");
    std::fs::create_dir_all(state.join(".codex")).unwrap();
    std::fs::write(
        state.join(".codex/config.toml"),
        format!(
            "model = \"gpt-5.3-codex\"\nmodel_provider = \"fake\"\n\n\
             [model_providers.fake]\nname = \"fake\"\nbase_url = \"{openai}/v1\"\n\
             env_key = \"LEGATE_FAKE_OPENAI_KEY\"\nwire_api = \"responses\"\n"
        ),
    )
    .unwrap();
    format!(
        "[agents.codex]\ncommand = \"node\"\nargs = [{js:?}]\nstate_dir = {state:?}\n\
         env = {{ LEGATE_FAKE_OPENAI_KEY = \"sk-legate-test\", OPENAI_BASE_URL = \"{openai}/v1\" }}\n",
        js = js.display().to_string(),
        state = state.display().to_string(),
    )
}

#[test]
fn claude_codex_stdio() {
    let model = ModelServer::start().unwrap();
    let openai = ModelServer::start().unwrap();
    // Codex writes through `exec_command`, which it recognises as a patch (see
    // crates/legate-testkit/tests/real_adapters/main.rs), relative to its copy.
    openai.script(vec![
        Step::tool(
            "exec_command",
            json!({"cmd": "apply_patch <<'EOF'\n*** Begin Patch\n*** Add File: codex.txt\n+hello from codex\n*** End Patch\nEOF\n"}),
        ),
        Step::text("Added codex.txt."),
    ]);
    let url = openai.url();
    let legate = Legate::new(
        Variant {
            transport: Transport::Stdio,
            tasks: false,
        },
        |base| codex_config(base, &url),
        &[("README.md", "hello\n")],
    );
    copy_task_ends_integrated(
        &legate,
        &model,
        "codex",
        "Add codex.txt saying hello from codex.",
        ("codex.txt", "hello from codex"),
    );
    assert!(
        openai.requests().iter().any(|r| r.step.is_some()),
        "codex-acp never asked its model"
    );
}

/// How many `health` + `run` pairs `claude_bench` times.
const REPETITIONS: usize = 7;

/// Prints, per repetition and as medians: Claude Code's `run` call (the model server sending
/// its tool_use) → the delegated task's first stored event, and a plain `health` call's round
/// trip (its tool_use sent → the next model request, which carries its result); and `run`'s
/// own round trip the same way.
#[test]
fn claude_bench() {
    let model = ModelServer::start().unwrap();
    let variant = Variant {
        transport: Transport::Stdio,
        tasks: false,
    };
    let legate = Legate::new(variant, |_| String::new(), &[("README.md", "hello\n")]);
    let claude = ClaudeCode::new(&legate, &model);
    claude.register();
    let mut steps = Vec::new();
    for _ in 0..REPETITIONS {
        steps.push(Step::tool("mcp__legate__health", json!({})));
        steps.push(Step::tool(
            "mcp__legate__run",
            json!({"prompt": "What is in README.md?", "agent": "revisor"}),
        ));
        steps.push(Step::tool(
            "mcp__legate__wait",
            json!({"taskId": "{{taskId}}", "timeoutSeconds": 60}),
        ));
    }
    steps.push(Step::text("Measured."));
    model.script(steps);
    claude.ask("Measure Legate.");

    let requests = main_loop(&model);
    let (mut to_event, mut health_trip, mut run_trip) = (Vec::new(), Vec::new(), Vec::new());
    for (i, r) in requests.iter().enumerate() {
        let Some(Step::Tool { name, .. }) = &r.step else {
            continue;
        };
        let next = requests.get(i + 1).expect("a request after each tool call");
        match name.as_str() {
            "mcp__legate__health" => health_trip.push(millis_between(r.at, next.at)),
            "mcp__legate__run" => {
                // The last tool result in the request is run's answer.
                let id = tool_results(&next.body)
                    .iter()
                    .rev()
                    .filter_map(|t| serde_json::from_str::<Value>(t).ok())
                    .find_map(|v| v["taskId"].as_str().map(str::to_string))
                    .expect("run's answer carries its taskId");
                let (first, _) = legate.events(&id).into_iter().next().unwrap();
                to_event.push(millis_between(r.at, first));
                run_trip.push(millis_between(r.at, next.at));
            }
            _ => {}
        }
    }
    assert_eq!(to_event.len(), REPETITIONS);
    assert_eq!(health_trip.len(), REPETITIONS);
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    eprintln!("claude_bench ({}, {build} build), ms:", variant.name());
    for (what, values) in [
        ("run tool_use → first event", to_event),
        ("health round trip", health_trip),
        ("run round trip", run_trip),
    ] {
        let each: Vec<String> = values.iter().map(|x| format!("{x:.0}")).collect();
        eprintln!(
            "  {what:<27} median {:>5.0}  [{}]",
            median(values.clone()),
            each.join(" ")
        );
    }
    eprintln!("claude_bench tap: {}", legate.tap().describe());
}
