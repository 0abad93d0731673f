//! The MCP front's HTTP edge under attack, over real sockets: `legate_mcp::http::router` served
//! by `serve_with` on 127.0.0.1 over a real engine, driving the real scripted agent. Heads that
//! never end and bodies shorter than their length are closed; a flood of idle connections
//! does not lock out the token holder; two `Host` headers are 400; a body that is not JSON is
//! 400 with JSON-RPC `-32700`. And a long `wait` outlives both read timeouts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::mcp::{ACCEPT, INITIALIZE, McpHttp, messages};
use legate_mcp::ServeOptions;
use legate_testkit::raw_http::{
    self, AUTH, BOUND, HOST, JSON, closed_within, read_response, request,
};
use serde_json::{Value, json};
use std::time::Duration;
use tokio::io::AsyncWriteExt;

const LONG: Duration = Duration::from_secs(600);

fn limits(header: Duration, body: Duration, max_connections: usize) -> ServeOptions {
    ServeOptions {
        header_timeout: header,
        body_timeout: body,
        max_connections,
        // The floods here open connections faster than any grace: these tests are about who
        // is closed, and `serve_attack.rs` about the grace a new connection gets.
        eviction_grace: Duration::ZERO,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_is_not_json_is_400_with_a_json_rpc_parse_error() {
    let server = McpHttp::start(ServeOptions::default()).await;
    let r = server
        .post(&[], r#"{"jsonrpc":"2.0","id":1,"method":"#)
        .await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(
        r.header("content-type")
            .unwrap()
            .starts_with("application/json")
    );
    let body: Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(body["jsonrpc"], "2.0");
    assert_eq!(body["id"], Value::Null);
    assert_eq!(body["error"]["code"], -32700, "{body}");
    // JSON that is no JSON-RPC message is an invalid request, with its id when it has one.
    for (text, id) in [
        (r#"{"hello":"world","id":7}"#, json!(7)),
        ("[1,2]", Value::Null),
    ] {
        let r = server.post(&[], text).await;
        assert_eq!(r.status, 400, "{text}: {}", r.body);
        let body: Value = serde_json::from_str(&r.body).unwrap();
        assert_eq!(body["error"]["code"], -32600, "{body}");
        assert_eq!(body["id"], id, "{body}");
    }
    // The token still comes first, and a real request still works.
    let anonymous = raw_http::call(
        server.addr,
        &request("POST", "/mcp", &[HOST, JSON, ACCEPT], "{"),
    )
    .await
    .unwrap();
    assert_eq!(anonymous.status, 401);
    let r = server.post(&[], INITIALIZE).await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        messages(&r)[0]["result"]["serverInfo"].is_object(),
        "{}",
        r.body
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_host_headers_are_400() {
    let server = McpHttp::start(ServeOptions::default()).await;
    let r = server.post(&["Host: evil.example"], INITIALIZE).await;
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("INVALID_REQUEST"), "{}", r.body);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_short_bodies_are_closed_but_a_long_wait_is_not_cut() {
    let short = Duration::from_secs(1);
    let server = McpHttp::start(limits(short, short, 64)).await;
    // A session, and a task that never ends by itself.
    let init = server.post(&[], INITIALIZE).await;
    assert_eq!(init.status, 200, "{}", init.body);
    let session = format!("Mcp-Session-Id: {}", init.header("mcp-session-id").unwrap());
    let done = server
        .post(
            &[&session],
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        )
        .await;
    assert_eq!(done.status, 202, "{}", done.body);
    let call = |id: u64, name: &str, args: Value| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
               "params": {"name": name, "arguments": args}})
        .to_string()
    };
    let run = server
        .post(&[&session], &call(2, "run", json!({"prompt": "!hang"})))
        .await;
    let run = messages(&run);
    let structured = &run[0]["result"]["structuredContent"];
    let task_id = structured["taskId"].as_str().unwrap().to_string();

    // A head that never ends, and a body that never arrives whole.
    let mut slow = raw_http::connect(server.addr).await.unwrap();
    slow.write_all(format!("POST /mcp HTTP/1.1\r\n{HOST}\r\n{AUTH}\r\n").as_bytes())
        .await
        .unwrap();
    let mut short_body = raw_http::connect(server.addr).await.unwrap();
    short_body
        .write_all(
            format!("POST /mcp HTTP/1.1\r\n{HOST}\r\n{AUTH}\r\n{JSON}\r\n{ACCEPT}\r\nContent-Length: 200\r\n\r\n{{\"jsonrpc\"")
                .as_bytes(),
        )
        .await
        .unwrap();
    // A wait three times as long as either timeout, on a connection of its own.
    let mut waiting = raw_http::connect(server.addr).await.unwrap();
    let body = call(3, "wait", json!({"taskId": task_id, "timeoutSeconds": 3}));
    waiting
        .write_all(
            request(
                "POST",
                "/mcp",
                &[HOST, AUTH, JSON, ACCEPT, &session, "Connection: close"],
                &body,
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    assert!(
        closed_within(&mut slow, BOUND).await,
        "a partial head stayed open"
    );
    assert!(
        closed_within(&mut short_body, BOUND).await,
        "a short body stayed open"
    );
    let waited = read_response(&mut waiting).await.unwrap();
    assert_eq!(waited.status, 200);
    let result = messages(&waited)
        .into_iter()
        .find(|m| m["id"] == 3)
        .unwrap_or_else(|| panic!("no wait result: {}", waited.body));
    let w = &result["result"]["structuredContent"];
    assert_eq!(w["timedOut"], true, "{result}");
    assert_eq!(w["ready"], false, "{result}");
    let canceled = server
        .post(&[&session], &call(4, "cancel", json!({"taskId": task_id})))
        .await;
    assert_eq!(canceled.status, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_at_the_cap_do_not_lock_out_the_token_holder() {
    let server = McpHttp::start(limits(LONG, LONG, 16)).await;
    // A token holder's keep-alive connection (a request refused 400 after the token check),
    // older than every idle one.
    let bad = request("POST", "/mcp", &[HOST, AUTH, JSON, ACCEPT], "{");
    let mut held = raw_http::connect(server.addr).await.unwrap();
    held.write_all(bad.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut held).await.unwrap().status, 400);
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(raw_http::connect(server.addr).await.unwrap());
    }
    let r = server.post(&[], INITIALIZE).await;
    assert_eq!(r.status, 200, "{}", r.body);
    // At least 41 connections under a cap of 16 and the supervisor's reserve beyond it: the
    // oldest idle ones were closed for them.
    let closed = 41 - (16 + legate_token::serve::SUPERVISOR_RESERVE);
    for (i, s) in idle.iter_mut().take(closed).enumerate() {
        assert!(
            closed_within(s, BOUND).await,
            "idle connection {i} stayed open"
        );
    }
    // The token holder's connection was never the one closed.
    held.write_all(bad.as_bytes()).await.unwrap();
    assert_eq!(read_response(&mut held).await.unwrap().status, 400);
    server.stop().await;
}
