//! `legate mcp` on stdio driven with raw JSON-RPC lines: [`McpStdio`] starts it, initializes
//! a session and makes the calls the suites make (`request`, `call`, `wait_for_tool_call`),
//! checking that every line on stdout is JSON-RPC; `close` leaves as a client does (EOF) and
//! waits for the exit. It owns the pipe and the message framing; it never judges a result.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

/// `legate mcp` driven with raw JSON-RPC lines; every stdout line must be JSON-RPC.
#[derive(Debug)]
pub struct McpStdio {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: std::io::Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl McpStdio {
    /// Starts `command` (a `legate mcp`, its stderr discarded) and initializes a session
    /// (MCP 2025-06-18); the server and `initialize`'s result.
    pub fn start(command: &mut Command) -> (McpStdio, Value) {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut mcp = McpStdio {
            child,
            stdin,
            lines,
            next_id: 1,
        };
        let init = mcp.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "raw", "version": "1"}}),
        );
        mcp.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        (mcp, init)
    }

    /// Writes one JSON-RPC message as a line.
    pub fn send(&mut self, message: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin is closed");
        writeln!(stdin, "{message}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request and reads stdout until its answer; the answer's `result`.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        loop {
            let line = self.lines.next().expect("stdout closed early").unwrap();
            let v: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}"));
            assert_eq!(v["jsonrpc"], "2.0", "{line}");
            if v["id"].as_u64() == Some(id) {
                return v["result"].clone();
            }
        }
    }

    /// `tools/call`: the tool's result (`structuredContent`, `isError`, …).
    pub fn call(&mut self, tool: &str, arguments: Value) -> Value {
        self.request("tools/call", json!({"name": tool, "arguments": arguments}))
    }

    /// Waits until one of the task's events is a tool call, and no longer: one event per
    /// `wait` (`maxEvents: 1`), since a wait otherwise returns only when the task ends.
    pub fn wait_for_tool_call(&mut self, task_id: &str) {
        let mut after = 0;
        for _ in 0..100 {
            let w = self.call(
                "wait",
                json!({"taskId": task_id, "after": after, "timeoutSeconds": 10, "maxEvents": 1}),
            );
            let w = &w["structuredContent"];
            let events = w["events"].as_array().unwrap();
            if events.iter().any(|e| e["type"] == "tool_call") {
                return;
            }
            assert_eq!(w["ready"], false, "the task ended first: {w}");
            after = w["nextCursor"].as_u64().unwrap();
        }
        panic!("no tool call in task {task_id}");
    }

    /// Closes stdin (the client leaves) and waits up to `limit` for the process to exit;
    /// every line it printed meanwhile must be JSON-RPC too.
    pub fn close(mut self, limit: Duration) -> std::process::ExitStatus {
        drop(self.stdin.take());
        let reader = std::thread::spawn(move || {
            for line in self.lines {
                let line = line.unwrap();
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}"));
                assert_eq!(v["jsonrpc"], "2.0", "{line}");
            }
        });
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("legate mcp did not exit within {limit:?} of EOF");
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        reader.join().unwrap();
        status
    }
}
