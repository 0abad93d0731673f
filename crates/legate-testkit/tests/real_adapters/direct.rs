//! The real adapters spoken to directly over ACP, with no Legate in between: a raw JSON-RPC
//! client on the adapter's stdio, against the scripted model server. It records what the
//! adapter announces (`initialize`'s `agentInfo` and capabilities, `session/new`'s modes and
//! config options), every `session/update`, and every permission request with its options,
//! answering each with the first option of the kind the observation asks for. The transcript
//! is printed (`--nocapture`) and returned, so that `docs/backends/acp.md` can quote it.
//!
//! It never answers `fs/*` (it advertises no file system) and never decides anything about
//! Legate; it only observes.

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// What one direct conversation showed.
#[derive(Debug, Default)]
pub struct Observed {
    /// `initialize`'s result.
    pub initialize: Value,
    /// `session/new`'s result.
    pub session: Value,
    /// `session/set_mode`'s result (or error), when a mode was asked for.
    pub set_mode: Option<Value>,
    /// Each `session/update`'s `update`.
    pub updates: Vec<Value>,
    /// Each permission request's params, and the option id answered.
    pub permissions: Vec<(Value, Option<String>)>,
    /// `session/prompt`'s result (or error).
    pub prompt: Value,
}

impl Observed {
    /// The tool calls the adapter announced (`tool_call` updates).
    pub fn tool_calls(&self) -> Vec<&Value> {
        self.updates
            .iter()
            .filter(|u| u["sessionUpdate"] == "tool_call")
            .collect()
    }
}

/// Speaks ACP to `command args` in `cwd` with `env` (nothing inherited but `PATH`), sets
/// `mode` when given and the agent reports modes, sends `prompt`, and answers each
/// permission request with the first option whose kind is `answer_kind` (`allow_once`,
/// `reject_once`).
pub async fn observe(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
    mode: Option<&str>,
    prompt: &str,
    answer_kind: &str,
) -> Observed {
    let mut child = tokio::process::Command::new(command)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the adapter starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut next_id = 0u64;
    let mut observed = Observed::default();

    // Sends a request and reads until its answer, serving the agent's requests meanwhile.
    macro_rules! call {
        ($method:expr, $params:expr) => {{
            next_id += 1;
            let id = next_id;
            let line = json!({"jsonrpc": "2.0", "id": id, "method": $method, "params": $params});
            stdin.write_all(format!("{line}\n").as_bytes()).await.unwrap();
            loop {
                let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
                    .await
                    .expect("the adapter answers within 120 s")
                    .unwrap()
                    .expect("the adapter's stdout stays open");
                let Ok(msg) = serde_json::from_str::<Value>(&line) else {
                    eprintln!("direct: not JSON: {}", clip(&line));
                    continue;
                };
                if msg.get("method").is_none() && msg["id"] == json!(id) {
                    break msg.get("result").cloned().unwrap_or_else(|| json!({"error": msg["error"]}));
                }
                match msg["method"].as_str() {
                    Some("session/update") => {
                        eprintln!("direct: update {}", clip(&msg["params"]["update"].to_string()));
                        observed.updates.push(msg["params"]["update"].clone());
                    }
                    Some("session/request_permission") => {
                        let params = msg["params"].clone();
                        let option = params["options"].as_array().and_then(|o| {
                            o.iter().find(|o| o["kind"] == answer_kind).map(|o| o["optionId"].as_str().unwrap_or_default().to_string())
                        });
                        eprintln!("direct: permission {} -> {option:?}", clip(&params.to_string()));
                        let outcome = match &option {
                            Some(id) => json!({"outcome": {"outcome": "selected", "optionId": id}}),
                            None => json!({"outcome": {"outcome": "cancelled"}}),
                        };
                        let answer = json!({"jsonrpc": "2.0", "id": msg["id"], "result": outcome});
                        stdin.write_all(format!("{answer}\n").as_bytes()).await.unwrap();
                        observed.permissions.push((params, option));
                    }
                    Some(other) if msg.get("id").is_some() => {
                        eprintln!("direct: request {other} refused");
                        let answer = json!({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "not offered"}});
                        stdin.write_all(format!("{answer}\n").as_bytes()).await.unwrap();
                    }
                    _ => eprintln!("direct: other {}", clip(&line)),
                }
            }
        }};
    }

    observed.initialize = call!(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
               "clientInfo": {"name": "legate-direct", "version": "0"}})
    );
    eprintln!(
        "direct: initialize {}",
        clip(&observed.initialize.to_string())
    );
    observed.session = call!("session/new", json!({"cwd": cwd, "mcpServers": []}));
    eprintln!(
        "direct: session/new {}",
        clip(&observed.session.to_string())
    );
    let session = observed.session["sessionId"].clone();
    // As Legate does: a mode is set only when the agent reports modes (codex-acp 0.16.0 with
    // its approval policy set by `-c` reports none).
    let reports_modes = observed.session["modes"]["availableModes"]
        .as_array()
        .is_some_and(|m| !m.is_empty());
    if let Some(mode) = mode.filter(|_| reports_modes) {
        let r = call!(
            "session/set_mode",
            json!({"sessionId": session, "modeId": mode})
        );
        eprintln!("direct: set_mode {mode} {}", clip(&r.to_string()));
        observed.set_mode = Some(r);
    }
    observed.prompt = call!(
        "session/prompt",
        json!({"sessionId": session, "prompt": [{"type": "text", "text": prompt}]})
    );
    eprintln!("direct: prompt {}", clip(&observed.prompt.to_string()));
    drop(stdin);
    let _ = tokio::time::timeout(Duration::from_secs(5), child.wait()).await;
    observed
}

fn clip(s: &str) -> String {
    if s.len() <= 3000 {
        return s.to_string();
    }
    let mut end = 3000;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// Only `initialize`: what `command args` announces (its `agentInfo` and `agentCapabilities`,
/// among them the session lifecycle: `loadSession`, `sessionCapabilities.resume`, `.close`,
/// `.list`). The adapter is killed once it has answered.
pub async fn initialize(
    command: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    cwd: &Path,
) -> Value {
    let mut child = tokio::process::Command::new(command)
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the adapter starts");
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": 1,
        "clientCapabilities": {"fs": {"readTextFile": false, "writeTextFile": false}, "terminal": false},
        "clientInfo": {"name": "legate-direct", "version": "0"}}});
    stdin
        .write_all(format!("{line}\n").as_bytes())
        .await
        .unwrap();
    let result = loop {
        let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
            .await
            .expect("the adapter answers within 120 s")
            .unwrap()
            .expect("the adapter's stdout stays open");
        let Ok(msg) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        if msg.get("method").is_none() && msg["id"] == json!(1) {
            break msg["result"].clone();
        }
    };
    let _ = child.kill().await;
    result
}
