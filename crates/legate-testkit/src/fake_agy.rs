//! `fake-agy`: a stand-in for the Antigravity CLI's headless interface, for tests only.
//!
//! It reproduces what Legate's agy driver relies on (see `docs/backends/agy.md`):
//! `--version` (`1.2.11`), `--help` announcing every flag, `agy models` (`mock-pro`,
//! `mock-flash`), and a headless run: flags checked, one NDJSON user line read from stdin
//! until EOF, NDJSON events (`init`, `step_update`, `result`) on stdout, conversations that
//! can be resumed with `--conversation`, and usage counters **cumulative per conversation**,
//! kept in a state directory (`$FAKE_AGY_STATE_DIR`, else `.fake-agy/` in its cwd).
//!
//! It must never be shipped or pointed at a real project: `write:` writes files.
//!
//! # Conditions set by environment (give them through the agent's `env`)
//!
//! | variable | effect |
//! |---|---|
//! | `FAKE_AGY_AUTH=fail` | `models` and runs print a login phrase on stderr and exit 1 |
//! | `FAKE_AGY_PROBE=fail-version` | `--version` exits 3 |
//! | `FAKE_AGY_PROBE=hang-version` | `--version` sleeps 60 s |
//! | `FAKE_AGY_PROBE=incompatible` | `--help` announces neither `stream-json` nor `--sandbox` |
//! | `FAKE_AGY_PROBE=fail-help` | `--help` exits 4 |
//! | `FAKE_AGY_PROBE=empty-help` | `--help` exits 0 and prints nothing |
//! | `FAKE_AGY_PROBE=no-json-schema` | `--help` does not announce `--json-schema` |
//! | `FAKE_AGY_STATE_DIR=<dir>` | where conversations and their counters live |
//! | `FAKE_AGY_STDIN=ignore` | a run exits 1 at once without reading stdin (a prompt larger than a pipe's buffer then fails to be written) |
//!
//! # Scenarios: the prompt text before the first `:`
//!
//! | scenario | behaviour |
//! |---|---|
//! | none | answer `fake agy: <prompt>`; cumulative usage grows by 120 |
//! | `tokens: N` | answer; usage grows by N (input N − N/6, output N/6) |
//! | `write: <file> <text>` | a `write_file` tool step, the file written in cwd (not in `--mode plan`) |
//! | `write-outside: <absolute path>` | writes that path without asking, wherever it is; the tool step fails with the OS error (what Landlock stops) |
//! | `crash` | `init`, one text chunk, then exit 7 with no result; the conversation's counters still grow by 120 (tokens spent, never reported) |
//! | `timeout` | `init`, then sleep 600 s |
//! | `slow` | five text chunks 300 ms apart |
//! | `stderr` | a diagnostic line on stderr, then answer |
//! | `malformed` | one non-JSON line on stdout, then answer |
//! | `garbage` | only non-JSON lines, exit 1, no result |
//! | `split` | a UTF-8 answer written in pieces that split characters |
//! | `crlf` | every line ends with CRLF |
//! | `long` | one text chunk of 1 MiB then `END` |
//! | `failure` | `result` with `status:"ERROR"`, exit 1 |
//! | `reset` | cumulative counters go back to 10 |
//! | `nousage` | `result` without usage |
//! | `auth` | a login phrase on stderr, exit 1 |
//! | `stepusage` | usage only in `step_update` events, none in `result` |
//! | `stubborn` | becomes a shell ignoring `SIGINT` that prints `init`, then `sleep 600` (only `SIGKILL` stops it) |
//! | `mcp-denied` | agy's own line on stderr saying it denied an MCP call for want of its `"mcp"` permission in headless mode, then a `SUCCESS` result (what real agy does) |
//! | `tools: <call>; <call>…` | each call a tool step, asked of the PreToolUse hooks in `.agents/hooks.json` first (below): `view_file <path>`, `write_to_file <path> <text>`, `call_mcp_tool <server>/<tool>` (which also needs the server in `.agents/mcp_config.json` and the tool not in its `disabledTools`) |
//! | `orphan` | starts `sleep 600` in a new session (`setsid`) ignoring `SIGINT`, with its pid in `<state dir>/orphan.pid`, then answers and exits |
//!
//! # Hooks (`tools:`)
//!
//! Before each tool call of `tools:`, every PreToolUse hook of `.agents/hooks.json` (in cwd)
//! whose `matcher` is `*` or the tool's name runs as `sh -c <command>`, with
//! `{"hook_event_name":"PreToolUse","tool_name":…,"tool_input":…,"cwd":…}` on stdin; the call
//! runs only when each exits 0 without printing `"decision":"deny"`. A hooks file that is not
//! JSON denies every call. The answer lists each call's outcome, `; `-separated:
//! `<tool> <arg>: done`, `denied: <reason>` or `failed: <why>`.
//!
//! With `--json-schema <json or file>` (the schema must be JSON; a file is read), the
//! `result` carries `structured_output`: an object with each of the schema's `properties`
//! filled by type (`"fake"`, `0`, `true`, `[]`, `{}`), its `summary` (when asked for) the
//! answer. A schema that is not JSON fails the run.

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The binary's name.
pub const FAKE_AGY_BIN: &str = "fake-agy";
/// What `--version` prints.
pub const FAKE_AGY_VERSION: &str = "1.2.11";
/// The models it offers.
pub const FAKE_AGY_MODELS: &[(&str, &str)] =
    &[("mock-pro", "Mock Pro"), ("mock-flash", "Mock Flash")];

const HELP: &str = "agy - Antigravity CLI (fake, for Legate's tests)

Usage: agy [options]
       agy models                       List the models you can use

Options:
  --sandbox                            Run tools inside the sandbox
  --input-format <text|stream-json>    Input format
  --output-format <text|json|stream-json>  Output format
  --print-timeout <duration>           Stop a headless run after this long (e.g. 90s)
  --mode <default|plan|accept-edits>   Approval mode
  --model <id>                         Model to use (see `agy models`)
  --effort <low|medium|high|xhigh|max> Reasoning effort
  --conversation <id>                  Resume a conversation
  --add-dir <dir>                      Add a directory to the workspace
  --new-project                        Start a new project
  --json-schema <json|path>            Structured output schema
  --version                            Print the version
  --help                               Print this help
";

const INCOMPATIBLE_HELP: &str = "agy - Antigravity CLI (fake, old)

Usage: agy [options]
  --output-format <text|json>
  --version
  --help
";

/// Runs the fake with `args` (without the program name); returns the exit code.
pub fn main(args: Vec<String>) -> i32 {
    let probe = std::env::var("FAKE_AGY_PROBE").unwrap_or_default();
    let auth_fails = std::env::var("FAKE_AGY_AUTH").is_ok_and(|v| v == "fail");
    match args.first().map(String::as_str) {
        Some("--version") => match probe.as_str() {
            "fail-version" => {
                eprintln!("agy: internal error while reading the version");
                3
            }
            "hang-version" => {
                std::thread::sleep(Duration::from_secs(60));
                0
            }
            _ => {
                println!("{FAKE_AGY_VERSION}");
                0
            }
        },
        Some("--help") => match probe.as_str() {
            "incompatible" => {
                print!("{INCOMPATIBLE_HELP}");
                0
            }
            "fail-help" => {
                eprintln!("agy: could not load the help text");
                4
            }
            "empty-help" => 0,
            "no-json-schema" => {
                print!(
                    "{}",
                    HELP.lines()
                        .filter(|l| !l.contains("--json-schema"))
                        .map(|l| format!("{l}\n"))
                        .collect::<String>()
                );
                0
            }
            _ => {
                print!("{HELP}");
                0
            }
        },
        Some("models") => {
            if auth_fails {
                eprintln!("Error: authentication required. Please log in with `agy`.");
                return 1;
            }
            for (id, name) in FAKE_AGY_MODELS {
                println!("{id}  {name}");
            }
            0
        }
        _ => match Run::parse(&args) {
            Ok(run) => {
                if auth_fails {
                    eprintln!("Error: not logged in. Please log in with `agy`.");
                    return 1;
                }
                run.execute()
            }
            Err(e) => {
                eprintln!("agy: {e}");
                2
            }
        },
    }
}

#[derive(Debug, Default)]
struct Run {
    plan: bool,
    model: Option<String>,
    conversation: Option<String>,
    json_schema: Option<String>,
    crlf: bool,
}

#[derive(Debug, Default, Clone, Copy)]
struct Counters {
    input: u64,
    output: u64,
    total: u64,
}

impl Run {
    fn parse(args: &[String]) -> Result<Self, String> {
        let mut run = Run::default();
        let (mut sandbox, mut input, mut output, mut timeout) = (false, false, false, false);
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut value = |name: &str| it.next().cloned().ok_or(format!("{name} needs a value"));
            match a.as_str() {
                "--sandbox" => sandbox = true,
                "--new-project" => {}
                "--input-format" => input = value(a)? == "stream-json",
                "--output-format" => output = value(a)? == "stream-json",
                "--print-timeout" => {
                    let v = value(a)?;
                    let secs = v.strip_suffix('s').unwrap_or("");
                    if secs.parse::<u64>().is_err() {
                        return Err(format!("invalid --print-timeout {v:?}"));
                    }
                    timeout = true;
                }
                "--mode" => match value(a)?.as_str() {
                    "plan" => run.plan = true,
                    "accept-edits" | "default" => {}
                    m => return Err(format!("unknown mode {m:?}")),
                },
                "--model" => run.model = Some(value(a)?),
                "--conversation" => run.conversation = Some(value(a)?),
                "--json-schema" => run.json_schema = Some(value(a)?),
                "--add-dir" | "--effort" => {
                    value(a)?;
                }
                "--dangerously-skip-permissions" => {
                    return Err("this fake refuses --dangerously-skip-permissions".into());
                }
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if !(sandbox && input && output && timeout) {
            return Err(
                "a headless run needs --sandbox, stream-json in and out, and --print-timeout"
                    .into(),
            );
        }
        Ok(run)
    }

    fn emit(&self, v: &Value) {
        let mut line = v.to_string();
        line.push_str(if self.crlf { "\r\n" } else { "\n" });
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(line.as_bytes());
        let _ = out.flush();
    }

    fn text(&self, t: &str) {
        self.emit(&json!({"event": "step_update", "step_update": {"step_type": "agent_response", "state": "RUNNING", "text_delta": t}}));
    }

    fn execute(mut self) -> i32 {
        if std::env::var("FAKE_AGY_STDIN").is_ok_and(|v| v == "ignore") {
            eprintln!("agy: not reading stdin");
            return 1;
        }
        let mut stdin = String::new();
        if std::io::stdin().read_to_string(&mut stdin).is_err() {
            eprintln!("agy: could not read stdin");
            return 2;
        }
        let lines: Vec<&str> = stdin.lines().filter(|l| !l.trim().is_empty()).collect();
        let prompt = match lines.as_slice() {
            [one] => serde_json::from_str::<Value>(one).ok().and_then(|v| {
                (v["event"] == "user")
                    .then(|| v["message"]["content"].as_str().map(str::to_owned))
                    .flatten()
            }),
            _ => None,
        };
        let Some(prompt) = prompt else {
            eprintln!("agy: stdin must be exactly one {{\"event\":\"user\",…}} line");
            return 2;
        };
        let (scenario, rest) = match prompt.split_once(':') {
            Some((s, r)) => (s.trim().to_ascii_lowercase(), r.trim().to_string()),
            None => (String::new(), prompt.clone()),
        };
        self.crlf = scenario == "crlf";
        let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
        let state_dir = std::env::var_os("FAKE_AGY_STATE_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| cwd.join(".fake-agy"));
        let model = self.model.clone().unwrap_or_else(|| "mock-pro".into());
        if !FAKE_AGY_MODELS.iter().any(|(id, _)| *id == model) {
            return self.fail(None, &format!("model {model} is not available"));
        }
        let schema = match self.json_schema.as_deref().map(read_schema).transpose() {
            Ok(s) => s,
            Err(e) => return self.fail(None, &e),
        };
        let (id, mut counters) = match &self.conversation {
            Some(id) => match load(&state_dir, id) {
                Some(c) => (id.clone(), c),
                None => return self.fail(None, &format!("conversation {id} not found")),
            },
            None => (new_id(), Counters::default()),
        };
        save(&state_dir, &id, &counters);
        let init = json!({"event": "init", "conversation_id": id, "init": {"cwd": cwd, "model": model, "args": []}});
        if scenario == "stubborn" {
            // Becomes a shell that ignores SIGINT before it says anything, then `sleep`, which
            // inherits that: only SIGKILL stops this group leader.
            let e = std::process::Command::new("sh")
                .args(["-c", "trap '' INT; printf '%s\\n' \"$0\"; exec sleep 600"])
                .arg(init.to_string())
                .exec();
            eprintln!("agy: could not exec sh: {e}");
            return 2;
        }
        self.emit(&init);
        let mut response = format!("fake agy: {prompt}");
        let mut grow = 120u64;
        let mut usage = true;
        match scenario.as_str() {
            "tokens" => {
                // The number is the first line: Legate frames the caller's prompt with lines
                // of its own after it (a role, skills, a context).
                grow = rest
                    .lines()
                    .next()
                    .unwrap_or("")
                    .trim()
                    .parse()
                    .unwrap_or(0);
                response = format!("counted {grow} tokens");
            }
            "crash" => {
                self.text("about to crash");
                counters.grow(grow);
                save(&state_dir, &id, &counters);
                return 7;
            }
            "orphan" => {
                let pid_file = state_dir.join("orphan.pid");
                let _ = std::fs::create_dir_all(&state_dir);
                let _ = std::fs::remove_file(&pid_file);
                let spawned = std::process::Command::new("setsid")
                    .args(["sh", "-c", "trap '' INT; echo $$ > \"$0\"; exec sleep 600"])
                    .arg(&pid_file)
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .spawn();
                if let Err(e) = spawned {
                    return self.fail(None, &format!("could not start the orphan: {e}"));
                }
                let mut waited = 0;
                while !std::fs::read_to_string(&pid_file).is_ok_and(|p| p.ends_with('\n')) {
                    if waited > 500 {
                        return self.fail(None, "the orphan never wrote its pid");
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    waited += 1;
                }
                response = "left an orphan behind".into();
            }
            "timeout" => {
                std::thread::sleep(Duration::from_secs(600));
                return 0;
            }
            "slow" => {
                for i in 1..=5 {
                    self.text(&format!("chunk {i} "));
                    std::thread::sleep(Duration::from_millis(300));
                }
                response = String::new();
            }
            "stepusage" => {
                counters.grow(grow);
                self.emit(&json!({"event": "step_update", "step_update": {"step_type": "agent_response", "state": "DONE", "text_delta": "", "usage": counters.json()}}));
                usage = false;
                grow = 0;
            }
            "stderr" => eprintln!("warning: a diagnostic from the fake agy on stderr"),
            "mcp-denied" => {
                eprintln!(
                    "jetski: no output produced — a tool required the \"mcp\" permission that headless mode cannot prompt for, so it was auto-denied."
                );
                response = String::new();
            }
            "malformed" => {
                let _ = std::io::stdout().write_all(b"this line is not JSON {\n");
            }
            "garbage" => {
                let _ = std::io::stdout().write_all(b"<<not json>>\nstill not json\n");
                let _ = std::io::stdout().flush();
                return 1;
            }
            "split" => {
                let line = json!({"event": "step_update", "step_update": {"step_type": "agent_response", "text_delta": "héllo wörld ✓ 日本語"}}).to_string() + "\n";
                let mut out = std::io::stdout().lock();
                for piece in line.as_bytes().chunks(3) {
                    let _ = out.write_all(piece);
                    let _ = out.flush();
                    std::thread::sleep(Duration::from_millis(2));
                }
                response = String::new();
            }
            "long" => {
                self.text(&"x".repeat(1024 * 1024));
                self.text("END");
                response = String::new();
            }
            "write" => {
                let (name, content) = rest.split_once(' ').unwrap_or((rest.as_str(), ""));
                self.emit(&json!({"event": "step_update", "step_update": {"step_type": "tool", "state": "RUNNING", "tool_name": "write_file", "tool_info": {"name": "write_file", "parameters": {"path": name}}}}));
                let ok = !self.plan
                    && !name.is_empty()
                    && !name.contains("..")
                    && !Path::new(name).is_absolute()
                    && std::fs::write(cwd.join(name), content).is_ok();
                self.emit(&json!({"event": "step_update", "step_update": {"step_type": "tool", "state": if ok { "DONE" } else { "ERROR" }, "tool_name": "write_file", "tool_info": {"name": "write_file", "output": if ok { "written" } else { "refused" }}}}));
                response = if ok {
                    format!("wrote {name}")
                } else {
                    format!("did not write {name}")
                };
            }
            "tools" => {
                let outcomes: Vec<String> = rest
                    .lines()
                    .next()
                    .unwrap_or("")
                    .split(';')
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .map(|call| self.tool_call(&cwd, call))
                    .collect();
                response = outcomes.join("; ");
            }
            "write-outside" => {
                // The path is the first line: Legate frames the prompt with lines of its own.
                let rest = rest.lines().next().unwrap_or("").trim().to_string();
                self.emit(&json!({"event": "step_update", "step_update": {"step_type": "tool", "state": "RUNNING", "tool_name": "write_file", "tool_info": {"name": "write_file", "parameters": {"path": rest}}}}));
                let written = std::fs::write(&rest, "written by fake-agy without asking\n");
                let output = match &written {
                    Ok(()) => "written".to_string(),
                    Err(e) => e.to_string(),
                };
                self.emit(&json!({"event": "step_update", "step_update": {"step_type": "tool", "state": if written.is_ok() { "DONE" } else { "ERROR" }, "tool_name": "write_file", "tool_info": {"name": "write_file", "output": output}}}));
                response = format!("write-outside {rest}: {output}");
            }
            "failure" => {
                counters.grow(40);
                save(&state_dir, &id, &counters);
                return self.fail(Some((&id, counters)), "the fake model refused the task");
            }
            "reset" => {
                counters = Counters {
                    input: 8,
                    output: 2,
                    total: 10,
                }
            }
            "nousage" => usage = false,
            "auth" => {
                eprintln!("Error: authentication required. Please log in.");
                return 1;
            }
            _ => {}
        }
        if !response.is_empty() {
            self.text(&response);
        }
        if scenario != "reset" {
            counters.grow(grow);
        }
        save(&state_dir, &id, &counters);
        let mut result = json!({"conversation_id": id, "status": "SUCCESS", "response": response});
        if usage {
            result["usage"] = counters.json();
        }
        if let Some(schema) = &schema {
            result["structured_output"] = fill(schema, &response);
        }
        self.emit(&json!({"event": "result", "result": result}));
        0
    }

    fn fail(&self, conv: Option<(&str, Counters)>, error: &str) -> i32 {
        let mut result = json!({"status": "ERROR", "error": error});
        if let Some((id, c)) = conv {
            result["conversation_id"] = json!(id);
            result["usage"] = c.json();
        }
        self.emit(&json!({"event": "result", "result": result}));
        1
    }
}

impl Run {
    /// One call of `tools:`: asked of the hooks, then run; its outcome.
    fn tool_call(&self, cwd: &Path, call: &str) -> String {
        let mut words = call.splitn(3, ' ');
        let tool = words.next().unwrap_or("");
        let arg = words.next().unwrap_or("");
        let text = words.next().unwrap_or("");
        let input = match tool {
            "view_file" => json!({"AbsolutePath": arg}),
            "write_to_file" => json!({"TargetFile": arg, "CodeContent": text}),
            "call_mcp_tool" => {
                let (server, name) = arg.split_once('/').unwrap_or((arg, ""));
                json!({"ServerName": server, "ToolName": name})
            }
            _ => json!({}),
        };
        self.emit(&json!({"event": "step_update", "step_update": {"step_type": "tool", "state": "RUNNING", "tool_name": tool, "tool_info": {"name": tool, "parameters": input}}}));
        let outcome = match ask_hooks(cwd, tool, &input) {
            Err(reason) => format!("denied: {reason}"),
            Ok(()) => match perform(cwd, tool, arg, text, self.plan) {
                Ok(()) => "done".to_string(),
                Err(e) => format!("failed: {e}"),
            },
        };
        let state = if outcome == "done" { "DONE" } else { "ERROR" };
        self.emit(&json!({"event": "step_update", "step_update": {"step_type": "tool", "state": state, "tool_name": tool, "tool_info": {"name": tool, "output": outcome}}}));
        format!("{tool} {arg}: {outcome}")
    }
}

/// The PreToolUse hooks of `cwd/.agents/hooks.json` asked about one call: `Err` with the
/// reason when one denies it (or the file is not JSON).
fn ask_hooks(cwd: &Path, tool: &str, input: &Value) -> Result<(), String> {
    let Ok(text) = std::fs::read_to_string(cwd.join(".agents/hooks.json")) else {
        return Ok(());
    };
    let hooks: Value =
        serde_json::from_str(&text).map_err(|_| "the hooks file is not JSON".to_string())?;
    let event = json!({"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": input, "cwd": cwd});
    for group in hooks["hooks"]["PreToolUse"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let matcher = group["matcher"].as_str().unwrap_or("*");
        if matcher != "*" && matcher != tool {
            continue;
        }
        for hook in group["hooks"].as_array().into_iter().flatten() {
            let Some(command) = hook["command"].as_str() else {
                continue;
            };
            let child = std::process::Command::new("sh")
                .args(["-c", command])
                .current_dir(cwd)
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn();
            let mut child = child.map_err(|e| format!("the hook could not start: {e}"))?;
            if let Some(mut stdin) = child.stdin.take() {
                let _ = stdin.write_all(event.to_string().as_bytes());
            }
            let out = child
                .wait_with_output()
                .map_err(|e| format!("the hook failed: {e}"))?;
            let answer: Value = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
            if !out.status.success() || answer["decision"] == "deny" {
                let reason = answer["reason"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| String::from_utf8_lossy(&out.stderr).trim().to_string());
                return Err(reason);
            }
        }
    }
    Ok(())
}

/// Runs one allowed call of `tools:`.
fn perform(cwd: &Path, tool: &str, arg: &str, text: &str, plan: bool) -> Result<(), String> {
    let path = cwd.join(arg);
    match tool {
        "view_file" => std::fs::read(&path).map(drop).map_err(|e| e.to_string()),
        "write_to_file" if plan => Err("plan mode writes nothing".into()),
        "write_to_file" => {
            if let Some(parent) = path.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            std::fs::write(&path, text).map_err(|e| e.to_string())
        }
        "call_mcp_tool" => {
            let (server, name) = arg.split_once('/').unwrap_or((arg, ""));
            let config: Value = std::fs::read_to_string(cwd.join(".agents/mcp_config.json"))
                .ok()
                .and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or(Value::Null);
            let entry = &config["mcpServers"][server];
            if entry.is_null() {
                return Err(format!("no MCP server {server} is configured"));
            }
            let disabled = entry["disabledTools"].as_array().into_iter().flatten();
            if disabled.into_iter().any(|t| t == name) {
                return Err(format!("{server}/{name} is disabled"));
            }
            Ok(())
        }
        _ => Err(format!("agy has no tool {tool}")),
    }
}

/// The schema given to `--json-schema`: inline JSON, or a file holding it.
fn read_schema(arg: &str) -> Result<Value, String> {
    let text = if arg.trim_start().starts_with('{') {
        arg.to_string()
    } else {
        std::fs::read_to_string(arg).map_err(|e| format!("could not read the schema {arg}: {e}"))?
    };
    serde_json::from_str(&text).map_err(|e| format!("the schema is not JSON: {e}"))
}

/// An object with every property of `schema` filled by its type.
fn fill(schema: &Value, response: &str) -> Value {
    let mut out = serde_json::Map::new();
    if let Some(props) = schema["properties"].as_object() {
        for (name, p) in props {
            let v = match p["type"].as_str().unwrap_or("string") {
                _ if name == "summary" => json!(response),
                "number" | "integer" => json!(0),
                "boolean" => json!(true),
                "array" => json!([]),
                "object" => json!({}),
                _ => json!("fake"),
            };
            out.insert(name.clone(), v);
        }
    }
    Value::Object(out)
}

impl Counters {
    fn grow(&mut self, n: u64) {
        self.output += n / 6;
        self.input += n - n / 6;
        self.total += n;
    }

    fn json(&self) -> Value {
        json!({"input_tokens": self.input, "output_tokens": self.output, "total_tokens": self.total, "thinking_tokens": 0, "cache_read_tokens": 0})
    }
}

fn new_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("conv-{:x}-{:x}", nanos, std::process::id())
}

fn file(dir: &Path, id: &str) -> PathBuf {
    dir.join("conversations").join(format!("{id}.json"))
}

fn load(dir: &Path, id: &str) -> Option<Counters> {
    if !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return None;
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(file(dir, id)).ok()?).ok()?;
    Some(Counters {
        input: v["input_tokens"].as_u64()?,
        output: v["output_tokens"].as_u64()?,
        total: v["total_tokens"].as_u64()?,
    })
}

fn save(dir: &Path, id: &str, c: &Counters) {
    let path = file(dir, id);
    if let Some(parent) = path.parent() {
        let _ = std::fs::create_dir_all(parent);
    }
    let _ = std::fs::write(path, c.json().to_string());
}
