//! `legate serve --a2a --mcp`: both fronts from one process over one engine, each behind the
//! `Host`/`Origin` allowlist before its token, and both stopped by one SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{Served, addr_of, raw};
use serde_json::{Value, json};

fn send_message(text: &str) -> String {
    json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": "m-1", "role": "ROLE_USER", "parts": [{"text": text}]}}})
    .to_string()
}

fn mcp_headers(auth: &str) -> [(&str, &str); 3] {
    [
        ("Content-Type", "application/json"),
        ("Accept", "application/json, text/event-stream"),
        ("Authorization", auth),
    ]
}

#[test]
fn both_fronts_serve_from_one_process_behind_their_allowlists() {
    let home = tempfile::tempdir().unwrap();
    let mut served = Served::start(
        home.path(),
        &["--a2a", "--mcp", "--port", "0", "--a2a-port", "0"],
    );
    let a2a = addr_of(&served.url("Legate A2A server"));
    let mcp = addr_of(&served.url("Legate MCP server"));
    assert_ne!(a2a, mcp);
    assert!(
        served
            .printed
            .iter()
            .any(|l| l.starts_with("answers to Host: localhost, 127.0.0.1, ::1")),
        "{:?}",
        served.printed
    );
    let a2a_token = std::fs::read_to_string(home.path().join("a2a-token")).unwrap();
    let a2a_bearer = format!("Bearer {}", a2a_token.trim());
    let mcp_token = std::fs::read_to_string(home.path().join("mcp-token")).unwrap();
    let mcp_bearer = format!("Bearer {}", mcp_token.trim());

    // A2A: the card for a loopback Host; 403 for a foreign Host or Origin, before the token.
    let card = raw(&a2a, "GET", "/.well-known/agent-card.json", &a2a, &[], "");
    assert_eq!(card.status, 200, "{card:?}");
    let foreign = raw(
        &a2a,
        "GET",
        "/.well-known/agent-card.json",
        "evil.example",
        &[],
        "",
    );
    assert_eq!(foreign.status, 403);
    assert!(foreign.body.contains("HOST_NOT_ALLOWED"), "{foreign:?}");
    assert!(foreign.body.contains("a2a.allowed_hosts"), "{foreign:?}");
    let headers = [
        ("Content-Type", "application/json"),
        ("A2A-Version", "1.0"),
        ("Origin", "http://evil.example"),
    ];
    let cross = raw(&a2a, "POST", "/", &a2a, &headers, &send_message("hi"));
    assert_eq!(cross.status, 403, "{cross:?}");
    assert!(cross.body.contains("ORIGIN_NOT_ALLOWED"), "{cross:?}");
    assert!(!cross.head.contains("www-authenticate"), "{cross:?}");

    // A2A with its token: a task runs to its end on the shared engine.
    let headers = [
        ("Content-Type", "application/json"),
        ("A2A-Version", "1.0"),
        ("Authorization", a2a_bearer.as_str()),
    ];
    let sent = raw(
        &a2a,
        "POST",
        "/",
        &format!("localhost:{}", a2a.rsplit(':').next().unwrap()),
        &headers,
        &send_message("summarize this workspace"),
    );
    assert_eq!(sent.status, 200, "{sent:?}");
    let body: Value = serde_json::from_str(&sent.body).unwrap();
    let task_id = body["result"]["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        body["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );

    // MCP: the same allowlist rules, then its own token (the A2A token is not MCP's).
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"}}})
    .to_string();
    let wrong = raw(&mcp, "POST", "/mcp", &mcp, &mcp_headers(&a2a_bearer), &init);
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let right = mcp_headers(&mcp_bearer);
    let foreign = raw(&mcp, "POST", "/mcp", "evil.example", &right, &init);
    assert_eq!(foreign.status, 403);
    let ok = raw(&mcp, "POST", "/mcp", &mcp, &right, &init);
    assert_eq!(ok.status, 200, "{ok:?}");

    // One SIGTERM stops both, cleanly; the task A2A ran is in the shared store.
    let status = served.stop().expect("serve did not stop on SIGTERM");
    assert!(status.success(), "{status:?}");
    let out = std::process::Command::new(common::LEGATE)
        .args(["show", &task_id])
        .env("LEGATE_HOME", home.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("completed"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn both_fronts_on_one_port_is_refused_before_anything_starts() {
    let home = tempfile::tempdir().unwrap();
    let out = std::process::Command::new(common::LEGATE)
        .args([
            "serve",
            "--a2a",
            "--mcp",
            "--port",
            "9999",
            "--a2a-port",
            "9999",
        ])
        .env("LEGATE_HOME", home.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("INVALID_INPUT"), "{err}");
    assert!(!home.path().join("a2a-token").exists());
}
