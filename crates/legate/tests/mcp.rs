//! `legate mcp` and `legate serve --mcp` as real processes, driven by real clients: the
//! official Python `mcp` SDK (tests/mcp/client.py) over stdio and over HTTP with the token,
//! offering MCP 2025-06-18 and 2025-11-25; raw JSON-RPC lines on stdio; raw HTTP requests
//! without the token and with a foreign Host.
//!
//! The Python tests need `python3` with the `mcp` package (`.ci/run` installs it). Without
//! `python3` at all they say so and skip, except in CI (`LEGATE_REQUIRE_PYTHON` or `CI` set),
//! where they fail; with `python3` but without the package they always fail.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{LEGATE, Served, addr_of, raw};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
const PROTOCOLS: [&str; 2] = ["2025-06-18", "2025-11-25"];

fn client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py")
}

/// Whether python3 and its `mcp` package are there (see [`legate_testkit::python_ready`]:
/// a missing python3 skips, saying so, unless `LEGATE_REQUIRE_PYTHON` or `CI` is set; a
/// missing package always fails).
fn python_ready() -> bool {
    legate_testkit::python_ready("mcp", "mcp>=2.3,<3")
}

fn home() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// Runs the Python client; returns its report.
fn python(home: &Path, args: &[&str]) -> Value {
    let out = Command::new("python3")
        .arg(client_script())
        .args(args)
        .env("LEGATE_HOME", home)
        .env("LEGATE_LOG", "warn")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the Python client failed ({args:?}):\n{stderr}\n{stdout}"
    );
    let line = stdout.lines().last().expect("no report");
    serde_json::from_str(line).unwrap_or_else(|e| panic!("bad report {line:?}: {e}"))
}

fn check_report(report: &Value, protocol: &str) {
    assert_eq!(report["protocol"], protocol, "{report}");
    assert_eq!(report["tools"], 23, "{report}");
    assert!(report["progress"].as_u64().unwrap() >= 1, "{report}");
    assert!(report["pieces"].as_u64().unwrap() > 2, "{report}");
}

#[test]
fn python_sdk_over_stdio_delegates_waits_with_progress_and_reads_in_pieces() {
    if !python_ready() {
        return;
    }
    for protocol in PROTOCOLS {
        let home = home();
        let report = python(home.path(), &["stdio", protocol, LEGATE]);
        check_report(&report, protocol);
    }
}

/// A running `legate serve --mcp`.
struct Server {
    _served: Served,
    url: String,
    token: String,
    addr: String,
}

impl Server {
    fn start(home: &Path) -> Server {
        let served = Served::start(home, &["--mcp", "--port", "0"]);
        let url = served.url("Legate MCP server");
        assert!(
            served.printed.iter().any(|l| l.contains("Claude Code")),
            "{:?}",
            served.printed
        );
        let token = std::fs::read_to_string(home.join("mcp-token"))
            .unwrap()
            .trim()
            .to_string();
        let addr = addr_of(&url);
        Server {
            _served: served,
            url,
            token,
            addr,
        }
    }

    /// Sends one raw MCP `initialize`; returns the status and the head, lowercased.
    fn raw(&self, host: &str, extra: &[(&str, &str)]) -> (u16, String) {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}})
        .to_string();
        let mut headers = vec![
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
        ];
        headers.extend_from_slice(extra);
        let r = raw(&self.addr, "POST", "/mcp", host, &headers, &body);
        (r.status, r.head)
    }
}

#[test]
fn python_sdk_over_http_with_the_token() {
    if !python_ready() {
        return;
    }
    let home = home();
    let server = Server::start(home.path());
    for protocol in PROTOCOLS {
        let report = python(home.path(), &["http", protocol, &server.url, &server.token]);
        check_report(&report, protocol);
    }
}

#[test]
fn http_refuses_requests_without_the_token_or_from_a_foreign_host() {
    let home = home();
    let server = Server::start(home.path());
    let mode = {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(home.path().join("mcp-token"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode, 0o600);
    assert_eq!(server.token.len(), 64);
    let local = server.addr.clone();
    let bearer = format!("Bearer {}", server.token);

    let (status, head) = server.raw(&local, &[]);
    assert_eq!(status, 401, "{head}");
    assert!(head.contains("www-authenticate: bearer"), "{head}");
    let (status, head) = server.raw(&local, &[("Authorization", "Bearer nope")]);
    assert_eq!(status, 401);
    assert!(head.contains("error=\"invalid_token\""), "{head}");

    let (status, _) = server.raw("evil.example", &[("Authorization", &bearer)]);
    assert_eq!(status, 403);
    let (status, _) = server.raw("evil.example", &[]);
    assert_eq!(
        status, 403,
        "a foreign Host learns nothing, not even that a token is needed"
    );
    let (status, _) = server.raw(
        &local,
        &[
            ("Authorization", &bearer),
            ("Origin", "http://evil.example"),
        ],
    );
    assert_eq!(status, 403);

    let (status, head) = server.raw(
        &local,
        &[
            ("Authorization", &bearer),
            ("Origin", "http://localhost:6274"),
        ],
    );
    assert_eq!(status, 200, "{head}");
    let port = local.rsplit(':').next().unwrap();
    let (status, _) = server.raw(&format!("localhost:{port}"), &[("Authorization", &bearer)]);
    assert_eq!(status, 200);
}

#[test]
fn stdio_stdout_carries_only_json_rpc_and_offers_output_schemas() {
    let home = home();
    let mut child = Command::new(LEGATE)
        .arg("mcp")
        .env("LEGATE_HOME", home.path())
        .env("LEGATE_LOG", "debug")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let requests = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 3, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {
            "name": "result", "arguments": {"taskId": "nope-nope"}}}),
    ];
    for r in &requests {
        writeln!(stdin, "{r}").unwrap();
    }
    stdin.flush().unwrap();
    let mut answers = std::collections::HashMap::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while answers.len() < 4 {
        let line = lines.next().expect("stdout closed early").unwrap();
        let v: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("stdout carried a non-JSON line {line:?}: {e}"));
        assert_eq!(v["jsonrpc"], "2.0", "{line}");
        if let Some(id) = v["id"].as_u64() {
            answers.insert(id, v);
        }
    }
    assert_eq!(answers[&1]["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(answers[&1]["result"]["serverInfo"]["name"], "legate");
    assert!(answers[&2]["result"].is_object());
    let tools = answers[&3]["result"]["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 23);
    for t in tools {
        assert_eq!(t["outputSchema"]["type"], "object", "{t}");
    }
    let failed = &answers[&4]["result"];
    assert_eq!(failed["isError"], true);
    assert_eq!(
        failed["structuredContent"]["error"]["code"],
        "TASK_NOT_FOUND"
    );
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status}");
            break;
        }
        assert!(Instant::now() < deadline, "legate mcp did not exit at EOF");
        std::thread::sleep(Duration::from_millis(50));
    }
}
