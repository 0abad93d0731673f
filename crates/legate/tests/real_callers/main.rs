//! The real callers through Legate, offline: a coding agent's own CLI (Claude Code in
//! `claude.rs`, Codex in `codex.rs`) in the caller's seat, with Legate registered as its MCP server exactly as
//! the docs say, against the scripted model server of legate-testkit (127.0.0.1 only).
//!
//! Opt-in: `scripts/real-callers.sh [filter]` installs the callers from npm into
//! `LEGATE_CALLERS_DIR` (default `~/.cache/legate-callers`) and the adapters into
//! `LEGATE_ADAPTERS_DIR` (default `~/.cache/legate-adapters`, `current` set), then runs
//! `cargo test -p legate --features real-callers --test real_callers`. A caller or adapter
//! that is not installed fails its test with a message saying so, rather than passing.
//!
//! This file is the harness every caller shares and knows no caller: where the installs are,
//! a Legate home with its configuration and a git project, Legate served over stdio (a
//! `legate` on `PATH` that taps the JSON-RPC lines) or over Streamable HTTP (`legate serve
//! --mcp`, its debug log tapped), what the tap saw (the protocol revision, the methods, the
//! messages both ways, whether each side declared MCP tasks), and the store read back through
//! the CLI. It never decides what a scenario asserts.

#![cfg(feature = "real-callers")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, event_lines};
use legate_frontkit::served::Served;
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

mod claude;
mod codex;

/// The binary under test.
pub(crate) const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// `$LEGATE_CALLERS_DIR` (default `~/.cache/legate-callers`), holding the callers'
/// `node_modules`.
pub(crate) fn callers_dir() -> PathBuf {
    cache_dir("LEGATE_CALLERS_DIR", ".cache/legate-callers")
}

/// `$LEGATE_ADAPTERS_DIR/current` (default `~/.cache/legate-adapters/current`), holding the
/// ACP adapters' `node_modules`, as `scripts/real-adapters.sh` installs them.
pub(crate) fn adapters_dir() -> PathBuf {
    cache_dir("LEGATE_ADAPTERS_DIR", ".cache/legate-adapters").join("current")
}

fn cache_dir(var: &str, default: &str) -> PathBuf {
    std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(default)
    })
}

/// `path`, which must exist (else the test fails saying how to install it).
pub(crate) fn require(path: PathBuf) -> PathBuf {
    assert!(
        path.exists(),
        "{} is not installed: run scripts/real-callers.sh",
        path.display()
    );
    path
}

/// How the caller reaches Legate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transport {
    /// The caller starts `legate mcp` itself.
    Stdio,
    /// `legate serve --mcp`, with its bearer token.
    Http,
}

/// One way of running a scenario: the transport, and whether the caller follows a delegation
/// as an MCP task (`tasks/get`) or polls `wait`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Variant {
    pub transport: Transport,
    /// Legate declares the MCP Tasks extension (else it runs with `--no-tasks`), so a caller
    /// that declares it too may follow `run` as a task.
    pub tasks: bool,
}

impl Variant {
    pub(crate) fn name(&self) -> String {
        let t = match self.transport {
            Transport::Stdio => "stdio",
            Transport::Http => "http",
        };
        format!("{t}, {}", if self.tasks { "tasks" } else { "polling" })
    }
}

/// A Legate home (`legate.toml` as a scenario writes it), a git project beside it, a `bin/`
/// directory whose `legate` taps stdio, and, over HTTP, the running server.
pub(crate) struct Legate {
    pub cli: CliHome,
    pub variant: Variant,
    served: Option<Served>,
}

impl Legate {
    /// A fresh home whose `legate.toml` is what `config` makes of the directory (the home's
    /// parent, where a scenario may keep an agent's state), and a project holding `files`.
    pub(crate) fn new(
        variant: Variant,
        config: impl FnOnce(&Path) -> String,
        files: &[(&str, &str)],
    ) -> Self {
        let cli = CliHome::new(LEGATE);
        cli.configure(&config(cli.base()));
        cli.make_project(files);
        std::fs::create_dir_all(cli.base().join("bin")).unwrap();
        std::fs::create_dir_all(cli.base().join("tap")).unwrap();
        let shim = cli.base().join("bin/legate");
        // The caller runs `legate mcp` as the docs say; this `legate` is the binary under
        // test with its home set, its JSON-RPC lines copied on both sides.
        let tap = cli.base().join("tap");
        std::fs::write(
            &shim,
            format!(
                "#!/bin/sh\nunset HTTPS_PROXY HTTP_PROXY ALL_PROXY NO_PROXY https_proxy http_proxy all_proxy no_proxy\n\
                 export LEGATE_HOME='{home}'\nexport LEGATE_LOG=debug\n\
                 tee -a '{tap}/in.jsonl' | '{bin}' \"$@\" 2>>'{tap}/stderr.log' | tee -a '{tap}/out.jsonl'\n",
                home = cli.home().display(),
                tap = tap.display(),
                bin = LEGATE,
            ),
        )
        .unwrap();
        make_executable(&shim);
        let mut legate = Self {
            cli,
            variant,
            served: None,
        };
        if variant.transport == Transport::Http {
            legate.serve();
        }
        legate
    }

    /// The project, resolved.
    pub(crate) fn project(&self) -> PathBuf {
        self.cli.project()
    }

    /// The directory to put first on the caller's `PATH` (its `legate` is the tap).
    pub(crate) fn bin_dir(&self) -> PathBuf {
        self.cli.base().join("bin")
    }

    /// Puts `target` on the caller's `PATH` as `name`.
    pub(crate) fn link_bin(&self, name: &str, target: &Path) {
        let link = self.bin_dir().join(name);
        let _ = std::fs::remove_file(&link);
        std::os::unix::fs::symlink(target, link).unwrap();
    }

    /// `legate mcp`'s arguments after the binary's name, as the registration names them.
    pub(crate) fn mcp_args(&self) -> Vec<&'static str> {
        let mut args = vec!["mcp"];
        args.extend(self.no_tasks());
        args
    }

    /// `--no-tasks` unless the variant has Legate declare the Tasks extension.
    fn no_tasks(&self) -> Option<&'static str> {
        (!self.variant.tasks).then_some("--no-tasks")
    }

    fn serve(&mut self) {
        let log = self.cli.base().join("tap/stderr.log");
        let mut command = self.cli.program("sh");
        command
            .arg("-c")
            .arg(format!(
                "exec \"$0\" serve --mcp --port 0 {} 2>>'{}'",
                self.no_tasks().unwrap_or_default(),
                log.display()
            ))
            .arg(LEGATE)
            .env("LEGATE_LOG", "debug");
        self.served = Some(Served::spawn(&mut command));
    }

    /// What `legate serve --mcp` printed at start (its ready-to-paste registrations).
    pub(crate) fn banner(&self) -> &[String] {
        &self.served.as_ref().expect("served over HTTP").printed
    }

    /// The URL `legate serve --mcp` serves MCP at.
    pub(crate) fn mcp_url(&self) -> String {
        self.served
            .as_ref()
            .expect("served over HTTP")
            .url("Legate MCP server")
    }

    /// The banner's line that starts with `prefix` (trimmed).
    pub(crate) fn banner_line(&self, prefix: &str) -> String {
        self.banner()
            .iter()
            .map(|l| l.trim())
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in {:?}", self.banner()))
            .to_string()
    }

    /// What the tap saw so far.
    pub(crate) fn tap(&self) -> Tap {
        let dir = self.cli.base().join("tap");
        let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap_or_default();
        let messages = |f: &str| -> Vec<Value> {
            read(f)
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()
        };
        let mut tap = Tap {
            sent: messages("in.jsonl"),
            answered: messages("out.jsonl"),
            ..Tap::default()
        };
        // Stdio: the client's JSON-RPC lines.
        for v in &tap.sent {
            if let Some(m) = v["method"].as_str() {
                tap.methods.push(m.to_string());
            }
            let meta = &v["params"]["_meta"]["io.modelcontextprotocol/protocolVersion"];
            if let Some(r) = meta.as_str().or(v["params"]["protocolVersion"].as_str()) {
                tap.revisions.insert(r.to_string());
            }
        }
        // HTTP (and stdio too): rmcp's debug log of what it received.
        for line in read("stderr.log").lines() {
            let line = strip_ansi(line);
            if let Some(r) = between(&line, "protocol_version: ProtocolVersion(\"", "\")") {
                tap.revisions.insert(r.to_string());
                if line.contains("Service initialized as server") {
                    let tasks = line.contains(TASKS_EXTENSION);
                    tap.sessions.push((r.to_string(), tasks));
                }
            }
            if self.variant.transport == Transport::Http
                && let Some(kind) = between(&line, "received request id=", "(")
                && let Some(kind) = kind.split("request=").nth(1)
            {
                tap.methods.push(method_of(kind).to_string());
            }
        }
        tap
    }

    /// The bearer token `legate serve --mcp` wrote into the home.
    pub(crate) fn token(&self) -> String {
        let token = std::fs::read_to_string(self.cli.home().join("mcp-token")).unwrap();
        token.trim().to_string()
    }

    /// `legate show --json id`.
    pub(crate) fn task(&self, id: &str) -> Value {
        self.cli.show(id)
    }

    /// `legate show id`: the task as a person reads it (for a copy, its integration).
    pub(crate) fn show(&self, id: &str) -> String {
        let out = self.cli.run(&["show", id]);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The task's events, each with `seq` and `at` (when it was stored).
    pub(crate) fn events(&self, id: &str) -> Vec<(SystemTime, Value)> {
        let out = self.cli.run(&["events", id]);
        assert!(out.status.success(), "{out:?}");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let times = text.lines().map(|l| {
            let ts = l.split_whitespace().nth(1).unwrap();
            humantime::parse_rfc3339(ts).unwrap()
        });
        times.zip(event_lines(&out)).collect()
    }
}

impl Drop for Legate {
    fn drop(&mut self) {
        if let Some(mut served) = self.served.take() {
            served.stop();
        }
    }
}

/// A proxy on 127.0.0.1 that lets nothing through: a caller's traffic for anywhere but
/// 127.0.0.1 (its vendor's API, telemetry, updates) is sent here (`HTTPS_PROXY`), recorded
/// (its first line: `CONNECT host:443 …`) and refused at once, so that nothing leaves the
/// machine and nothing waits on it.
pub(crate) struct Outside {
    addr: std::net::SocketAddr,
    seen: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Outside {
    pub(crate) fn start() -> Self {
        let listener = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
                let mut line = String::new();
                let _ = BufReader::new(&conn).read_line(&mut line);
                s.lock().unwrap().push(line.trim().to_string());
                let _ = conn.write_all(
                    b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
                );
            }
        });
        Self { addr, seen, stop }
    }

    /// `http://127.0.0.1:<port>`, for `HTTPS_PROXY` and `HTTP_PROXY`.
    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The first line of every connection so far.
    pub(crate) fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Outside {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = std::net::TcpStream::connect_timeout(&self.addr, Duration::from_millis(200));
    }
}

/// The MCP Tasks extension's name, as a client or server declares it.
const TASKS_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// Whether `capabilities` declare the Tasks extension (2026-07-28) or the 2025-11-25 `tasks`.
fn declares_tasks(capabilities: &Value) -> bool {
    capabilities["extensions"].get(TASKS_EXTENSION).is_some() || capabilities.get("tasks").is_some()
}

/// What passed between a caller and Legate, as the tap saw it.
#[derive(Debug, Default)]
pub(crate) struct Tap {
    /// The MCP protocol revisions the caller named.
    pub revisions: BTreeSet<String>,
    /// The JSON-RPC methods the caller sent, in order (`tools/call`, `tasks/get`, …).
    pub methods: Vec<String>,
    /// Stdio: every JSON-RPC message the caller sent, in order.
    pub sent: Vec<Value>,
    /// Stdio: every JSON-RPC message Legate sent back (answers and its own requests).
    pub answered: Vec<Value>,
    /// Each MCP session Legate's debug log shows starting, in order: its revision, and
    /// whether the client declared the tasks extension.
    pub sessions: Vec<(String, bool)>,
}

impl Tap {
    /// Whether the caller sent `method`.
    pub(crate) fn saw(&self, method: &str) -> bool {
        self.methods.iter().any(|m| m == method)
    }

    /// The first request for `method` the caller sent.
    pub(crate) fn sent_request(&self, method: &str) -> Option<&Value> {
        self.sent.iter().find(|m| m["method"] == method)
    }

    /// The first request for `method` Legate sent the caller.
    pub(crate) fn legate_request(&self, method: &str) -> Option<&Value> {
        self.answered.iter().find(|m| m["method"] == method)
    }

    /// The answer to `request` (one of [`Tap::sent`] or [`Tap::answered`]), from the other side.
    pub(crate) fn answer_to(&self, request: &Value) -> Option<&Value> {
        let mine = self.sent.iter().any(|m| std::ptr::eq(m, request));
        let other = if mine { &self.answered } else { &self.sent };
        other
            .iter()
            .find(|m| m["id"] == request["id"] && m.get("method").is_none())
    }

    /// Stdio: whether the caller declared the Tasks extension, in `initialize` or in any
    /// request's `_meta` (`io.modelcontextprotocol/clientCapabilities`, per request in
    /// 2026-07-28).
    pub(crate) fn caller_declares_tasks(&self) -> bool {
        self.sent.iter().any(|m| {
            let per_request = &m["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"];
            declares_tasks(&m["params"]["capabilities"]) || declares_tasks(per_request)
        })
    }

    /// Stdio: whether Legate's answer to the caller's `server/discover` (or `initialize`)
    /// declared the Tasks extension; `None` when the tap saw neither.
    pub(crate) fn legate_offers_tasks(&self) -> Option<bool> {
        let asked = self
            .sent_request("server/discover")
            .or_else(|| self.sent_request("initialize"))?;
        let answer = self.answer_to(asked)?;
        Some(declares_tasks(&answer["result"]["capabilities"]))
    }

    /// One line for the suite's output: revisions, and each method with its count.
    pub(crate) fn describe(&self) -> String {
        let mut counts: Vec<(String, usize)> = Vec::new();
        for m in &self.methods {
            match counts.iter_mut().find(|(n, _)| n == m) {
                Some((_, c)) => *c += 1,
                None => counts.push((m.clone(), 1)),
            }
        }
        let methods: Vec<String> = counts.iter().map(|(m, c)| format!("{m}×{c}")).collect();
        format!(
            "revisions {:?}; methods {}; task calls {}; tasks declared by the caller {}, by Legate {:?}; sessions (revision, tasks) {:?}",
            self.revisions,
            methods.join(", "),
            if self.methods.iter().any(|m| m.starts_with("tasks/")) {
                "yes"
            } else {
                "none"
            },
            self.caller_declares_tasks(),
            self.legate_offers_tasks(),
            self.sessions,
        )
    }
}

/// The JSON-RPC method of an rmcp request type in its debug log.
fn method_of(kind: &str) -> &str {
    match kind {
        "DiscoverRequest" => "server/discover",
        "InitializeRequest" => "initialize",
        "ListToolsRequest" => "tools/list",
        "CallToolRequest" => "tools/call",
        "GetTaskRequest" => "tasks/get",
        "UpdateTaskRequest" => "tasks/update",
        "CancelTaskRequest" => "tasks/cancel",
        "PingRequest" => "ping",
        other => other,
    }
}

fn between<'a>(s: &'a str, start: &str, end: &str) -> Option<&'a str> {
    let from = s.find(start)? + start.len();
    let len = s[from..].find(end)?;
    Some(&s[from..from + len])
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

pub(crate) fn make_executable(path: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs `command` with stdout and stderr to files in `dir` (named `name.out`, `name.err`), at
/// most `limit` (else it is killed and the test fails); its status and both texts.
pub(crate) fn run_logged(
    mut command: Command,
    dir: &Path,
    name: &str,
    limit: Duration,
) -> (Output, String, String) {
    let (out, err) = (
        dir.join(format!("{name}.out")),
        dir.join(format!("{name}.err")),
    );
    let child = command
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let output = legate_frontkit::poll::exit_within(child, limit, name);
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let (o, e) = (read(&out), read(&err));
    assert!(
        output.status.success(),
        "{name} failed: {:?}\nstdout:\n{o}\nstderr:\n{e}",
        output.status
    );
    (output, o, e)
}

/// The text of every `tool_result` block in a model request's messages.
pub(crate) fn tool_results(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_result" {
                match &b["content"] {
                    Value::String(s) => out.push(s.clone()),
                    Value::Array(parts) => out.extend(
                        parts
                            .iter()
                            .filter_map(|p| p["text"].as_str().map(str::to_string)),
                    ),
                    _ => {}
                }
            }
        }
    }
    out
}

/// The median of `values` (milliseconds); 0 for none.
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return 0.0;
    }
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// `b - a` in milliseconds (negative when `b` is earlier).
pub(crate) fn millis_between(a: SystemTime, b: SystemTime) -> f64 {
    match b.duration_since(a) {
        Ok(d) => d.as_secs_f64() * 1000.0,
        Err(e) => -e.duration().as_secs_f64() * 1000.0,
    }
}
