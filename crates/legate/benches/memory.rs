//! Resident memory of the real `legate` binary, each in a child process of its own:
//! `legate mcp` and `legate serve` idle, `legate run` with one task running, and what running
//! tasks add to a `legate mcp` process.
//!
//! A task is held running by revisor (`legate agent revisor`, the built-in agent) running
//! `sleep` in its sandbox; agent processes and their commands are not counted, only the
//! `legate` process's own `VmRSS` (`/proc/<pid>/status`), read after a second of quiet. The
//! per-task figure is measured from the idle process (the first wave of N tasks, allocator
//! growth included: that memory is real), and again for a second wave of N on top (the
//! marginal cost once the allocator has grown).
//!
//! Run: `cargo bench -p legate --bench memory` (env `MEMORY_TASKS`, default 8). Figures go in
//! `docs/BENCHMARKS.md`. `cargo test --benches` runs it with 2 tasks.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");
/// How long a process is left alone before its memory is read.
const SETTLE: Duration = Duration::from_secs(1);

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// `VmRSS` of `pid`, in KiB.
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .expect("VmRSS")
}

/// Reads `pid`'s memory after [`SETTLE`].
fn settled_rss(pid: u32) -> u64 {
    std::thread::sleep(SETTLE);
    rss_kib(pid)
}

fn legate(home: &Path) -> Command {
    let mut c = Command::new(LEGATE);
    c.env("LEGATE_HOME", home)
        .env("LEGATE_MAX_RUNNING", "64")
        .env_remove("LEGATE_LOG")
        .env_remove("RUST_LOG")
        .stderr(Stdio::null());
    c
}

/// Sends `signal` (`TERM`, `INT`) to `child` and waits for it.
fn stop(mut child: Child, signal: &str) {
    let sent = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(child.id().to_string())
        .status()
        .unwrap();
    assert!(sent.success());
    child.wait().unwrap();
}

/// Waits until `n` processes have exactly the command line `sleep <seconds>`.
fn until_sleeping(seconds: &str, n: usize) {
    let want = format!("sleep\0{seconds}\0");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let running = std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
            .filter(|c| c == want.as_bytes())
            .count();
        if running >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{running} of {n} tasks run");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `legate mcp` on its stdio, as an MCP client drives it.
struct Mcp {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    next_id: u64,
}

impl Mcp {
    fn start(home: &Path) -> Mcp {
        let mut child = legate(home)
            .arg("mcp")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap());
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let mut mcp = Mcp {
            child,
            stdin,
            lines,
            next_id: 1,
        };
        mcp.call(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "legate-memory-bench", "version": "0"}
            }),
        );
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        mcp
    }

    fn send(&mut self, message: &Value) {
        writeln!(self.stdin, "{message}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Sends a request and returns its result.
    fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self
                .lines
                .recv_timeout(Duration::from_secs(60))
                .expect("an answer");
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == id {
                assert!(message.get("error").is_none(), "{message}");
                return message["result"].clone();
            }
        }
    }

    /// Starts a task through the `run` tool.
    fn run(&mut self, prompt: &str) {
        let result = self.call(
            "tools/call",
            json!({"name": "run", "arguments": {"prompt": prompt}}),
        );
        assert_ne!(result["isError"], true, "{result}");
    }
}

struct Figures {
    mcp_idle: u64,
    first_wave: u64,
    second_wave: u64,
    serve_idle: u64,
    run_one_task: u64,
}

fn measure(n: usize) -> Figures {
    let base = tempfile::tempdir().unwrap();

    // `legate mcp`: idle, then N running tasks, then N more.
    let mut mcp = Mcp::start(&base.path().join("mcp"));
    let pid = mcp.child.id();
    let mcp_idle = settled_rss(pid);
    for _ in 0..n {
        mcp.run("run sleep 301");
    }
    until_sleeping("301", n);
    let first_wave = settled_rss(pid);
    for _ in 0..n {
        mcp.run("run sleep 302");
    }
    until_sleeping("302", n);
    let second_wave = settled_rss(pid);
    stop(mcp.child, "TERM");

    // `legate serve` (A2A), idle once it has printed its banner.
    let mut serve = legate(&base.path().join("serve"))
        .args(["serve", "--port", "0"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut banner = BufReader::new(serve.stdout.take().unwrap()).lines();
    assert!(
        banner
            .by_ref()
            .map_while(Result::ok)
            .any(|l| l.starts_with("Ctrl-C stops")),
        "legate serve did not start"
    );
    std::thread::spawn(move || for _ in banner {});
    let serve_idle = settled_rss(serve.id());
    stop(serve, "TERM");

    // `legate run` with its one task running.
    let run = legate(&base.path().join("run"))
        .args(["run", "run sleep 303"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    until_sleeping("303", 1);
    let run_one_task = settled_rss(run.id());
    stop(run, "INT");

    Figures {
        mcp_idle,
        first_wave,
        second_wave,
        serve_idle,
        run_one_task,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run small then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n: usize = std::env::var("MEMORY_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(if quick { 2 } else { 8 });
    let f = measure(n);
    let each = |from: u64, to: u64| mib(to.saturating_sub(from)) / n as f64;
    let row = |label: String, kib: u64, note: String| {
        println!("  {label:<34} {:>6.1} MiB{note}", mib(kib));
    };
    println!("memory: the legate binary's VmRSS, each in its own process ({LEGATE})");
    row("legate mcp, idle".into(), f.mcp_idle, String::new());
    row(
        format!("legate mcp, {n} running tasks"),
        f.first_wave,
        format!(
            "  (+{:.2} MiB each over idle)",
            each(f.mcp_idle, f.first_wave)
        ),
    );
    row(
        format!("legate mcp, {} running tasks", 2 * n),
        f.second_wave,
        format!(
            "  (+{:.2} MiB each for the second {n})",
            each(f.first_wave, f.second_wave)
        ),
    );
    row(
        "legate serve (A2A), idle".into(),
        f.serve_idle,
        String::new(),
    );
    row(
        "legate run, one task running".into(),
        f.run_one_task,
        String::new(),
    );
}
