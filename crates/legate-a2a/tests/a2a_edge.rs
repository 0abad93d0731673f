//! The A2A front's HTTP edge under attack, over real sockets: `legate_a2a::boot` behind the
//! `Host`/`Origin` allowlist (as `legate serve` builds it), served by `serve_with` on 127.0.0.1
//! over a real engine driving the real scripted agent. Heads that never end and bodies
//! shorter than their length are closed; a flood of idle connections does not lock out the
//! token holder; two `Host` headers are 400. And an SSE stream outlives both read timeouts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use a2a::{Message, Part, Role, SendMessageRequest};
use legate_a2a::ServeOptions;
use legate_engine::TaskFilter;
use legate_frontkit::a2a::{A2aFront, A2aServe};
use legate_testkit::raw_http::{self, AUTH, BOUND, HOST, JSON, closed_within, read_until, request};
use legate_testkit::{EngineHarness, TestAgent};
use serde_json::json;
use std::time::Duration;
use tokio::io::AsyncWriteExt;

const VERSION: &str = "A2A-Version: 1.0";
const AGENT: &str = "/agents/revisor";
const LONG: Duration = Duration::from_secs(600);

async fn start(limits: ServeOptions) -> A2aFront {
    let kit = EngineHarness::builder()
        .agent(TestAgent::scripted("revisor"))
        .start();
    let server = A2aFront::serve_kit(kit, A2aServe::default().edge(limits)).await;
    assert_eq!(server.report.served.len(), 1, "{:?}", server.report.failed);
    server
}

/// The status of a task listing.
async fn list_tasks(server: &A2aFront) -> u16 {
    let r = raw_http::call(
        server.addr,
        &request(
            "GET",
            &format!("{AGENT}/tasks?pageSize=5"),
            &[HOST, AUTH, VERSION, "Connection: close"],
            "",
        ),
    )
    .await
    .unwrap();
    r.status
}

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

fn jsonrpc(id: u64, method: &str, params: serde_json::Value) -> String {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_host_headers_are_400() {
    let server = start(ServeOptions::default()).await;
    let r = raw_http::call(
        server.addr,
        &request(
            "GET",
            &format!("{AGENT}/tasks"),
            &[HOST, "Host: evil.example", AUTH, VERSION],
            "",
        ),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 400, "{}", r.body);
    assert!(r.body.contains("INVALID_REQUEST"), "{}", r.body);
    assert_eq!(list_tasks(&server).await, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_heads_and_short_bodies_are_closed_but_an_sse_stream_is_not_cut() {
    let short = Duration::from_secs(1);
    let server = start(limits(short, short, 64)).await;
    // A streaming task that never ends by itself.
    let send = SendMessageRequest {
        message: Message::new(Role::User, vec![Part::text("!hang")]),
        configuration: None,
        metadata: None,
        tenant: None,
    };
    let body = jsonrpc(
        1,
        "SendStreamingMessage",
        serde_json::to_value(send).unwrap(),
    );
    let mut stream = raw_http::connect(server.addr).await.unwrap();
    stream
        .write_all(
            request(
                "POST",
                AGENT,
                &[HOST, AUTH, JSON, VERSION, "Accept: text/event-stream"],
                &body,
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    read_until(&mut stream, "data:").await.unwrap();

    // A head that never ends, and a body that never arrives whole (with the token, too).
    let mut slow = raw_http::connect(server.addr).await.unwrap();
    slow.write_all(format!("POST {AGENT} HTTP/1.1\r\n{HOST}\r\n").as_bytes())
        .await
        .unwrap();
    let mut short_body = raw_http::connect(server.addr).await.unwrap();
    short_body
        .write_all(
            format!("POST {AGENT} HTTP/1.1\r\n{HOST}\r\n{AUTH}\r\n{JSON}\r\n{VERSION}\r\nContent-Length: 300\r\n\r\n{{\"jsonrpc\"")
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

    // Both timeouts have passed; the stream is still there and brings the cancel.
    let tasks = server.engine.tasks(&TaskFilter::default()).unwrap();
    let task_id = tasks[0].id.to_string();
    let canceled = raw_http::call(
        server.addr,
        &request(
            "POST",
            AGENT,
            &[HOST, AUTH, JSON, VERSION, "Connection: close"],
            &jsonrpc(2, "CancelTask", json!({"id": task_id})),
        ),
    )
    .await
    .unwrap();
    assert_eq!(canceled.status, 200, "{}", canceled.body);
    read_until(&mut stream, "TASK_STATE_CANCELED")
        .await
        .unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_at_the_cap_do_not_lock_out_the_token_holder() {
    let server = start(limits(LONG, LONG, 16)).await;
    // A token holder's keep-alive connection, older than every idle one.
    let list = request("GET", &format!("{AGENT}/tasks"), &[HOST, AUTH, VERSION], "");
    let mut held = raw_http::connect(server.addr).await.unwrap();
    held.write_all(list.as_bytes()).await.unwrap();
    assert_eq!(
        raw_http::read_response(&mut held).await.unwrap().status,
        200
    );
    let mut idle = Vec::new();
    for _ in 0..40 {
        idle.push(raw_http::connect(server.addr).await.unwrap());
    }
    assert_eq!(list_tasks(&server).await, 200);
    // At least 41 connections under a cap of 16 and the supervisor's reserve beyond it: the
    // oldest idle ones were closed for them.
    let closed = 41 - (16 + legate_token::serve::SUPERVISOR_RESERVE);
    for (i, s) in idle.iter_mut().take(closed).enumerate() {
        assert!(
            closed_within(s, BOUND).await,
            "idle connection {i} stayed open"
        );
    }
    // Token-less requests do not make a connection count as authenticated: another flood
    // closes one that was refused 401.
    let mut refused = raw_http::connect(server.addr).await.unwrap();
    refused
        .write_all(request("GET", &format!("{AGENT}/tasks"), &[HOST, VERSION], "").as_bytes())
        .await
        .unwrap();
    assert_eq!(
        raw_http::read_response(&mut refused).await.unwrap().status,
        401
    );
    let mut more = Vec::new();
    for _ in 0..40 {
        more.push(raw_http::connect(server.addr).await.unwrap());
    }
    assert!(
        closed_within(&mut refused, BOUND).await,
        "a connection refused 401 was kept over newer ones"
    );
    assert_eq!(list_tasks(&server).await, 200);
    // Through both floods, the token holder's connection was never the one closed.
    held.write_all(list.as_bytes()).await.unwrap();
    assert_eq!(
        raw_http::read_response(&mut held).await.unwrap().status,
        200
    );
    server.stop().await;
}
