//! What A2A asks of the front beyond the TCK's MUST level, over real HTTP on 127.0.0.1 with
//! the real scripted agent and store: the card's caching headers (a content `ETag`,
//! `Last-Modified`, `304` to conditional requests), the extensions every card declares, and
//! the HTTP+JSON statuses of A2A's mapping table (§5.4).
//!
//! The agent binary must be built first: `cargo build -p legate-testkit --bin
//! legate-scripted-agent` (a plain `cargo test --workspace` does it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_engine::TaskFilter;
use legate_frontkit::a2a::{A2aFront, A2aServe};
use legate_testkit::{EngineHarness, TestAgent};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::time::Duration;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

async fn start(base: &Path) -> A2aFront {
    let engine = EngineHarness::builder()
        .agent(TestAgent::scripted("revisor"))
        .engine_in(base);
    let server = A2aFront::serve(engine, A2aServe::default().agents(&["revisor"])).await;
    assert_eq!(server.report.served.len(), 1, "{:?}", server.report.failed);
    server
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

async fn get_card(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut r = reqwest::Client::new().get(format!("{url}/.well-known/agent-card.json"));
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.send().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cards_carry_a_content_etag_last_modified_and_answer_conditional_requests() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let agent = format!("{}/agents/revisor", server.url);

    let resp = get_card(&agent, &[]).await;
    assert_eq!(resp.status().as_u16(), 200);
    let etag = resp.headers()["etag"].to_str().unwrap().to_string();
    let modified = resp.headers()["last-modified"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(httpdate::parse_http_date(&modified).is_ok(), "{modified}");
    let body = resp.bytes().await.unwrap();
    // The tag is the sha256 of the bytes served, not the agent's version.
    assert_eq!(etag, format!("\"{}\"", hex(&Sha256::digest(&body))));
    let card: Value = serde_json::from_slice(&body).unwrap();
    assert_ne!(etag, format!("\"{}\"", card["version"].as_str().unwrap()));

    // The same agent's card at the root names another URL: other content, another tag.
    let root = get_card(&server.url, &[]).await;
    let root_etag = root.headers()["etag"].to_str().unwrap().to_string();
    assert_ne!(root_etag, etag, "the tag follows the content");

    // Every card declares Legate's supervision extension, not required.
    let extensions = card["capabilities"]["extensions"].as_array().unwrap();
    let supervision = extensions
        .iter()
        .find(|e| e["uri"] == legate_core::remote::SUPERVISION_EXTENSION)
        .expect("the supervision extension");
    assert!(
        supervision["description"]
            .as_str()
            .is_some_and(|d| !d.is_empty())
    );
    assert_ne!(supervision["required"], json!(true));
    let copy = extensions
        .iter()
        .find(|e| e["uri"] == legate_core::remote::COPY_WORKSPACE_EXTENSION)
        .expect("the copy-workspace extension");
    assert!(copy["description"].as_str().is_some_and(|d| !d.is_empty()));
    assert_ne!(copy["required"], json!(true));
    let plans = extensions
        .iter()
        .find(|e| e["uri"] == legate_core::remote::PLAN_CHANGES_EXTENSION)
        .expect("the plan-changes extension");
    assert_ne!(plans["required"], json!(true));

    // Conditional requests: the current tag or date is 304 without a body.
    for header in [
        ("if-none-match", etag.as_str()),
        ("if-modified-since", modified.as_str()),
    ] {
        let resp = get_card(&agent, &[header]).await;
        assert_eq!(resp.status().as_u16(), 304, "{header:?}");
        assert_eq!(resp.headers()["etag"].to_str().unwrap(), etag);
        assert!(resp.headers().contains_key("cache-control"));
        assert!(resp.bytes().await.unwrap().is_empty());
    }
    let listed = format!("\"stale\", {etag}");
    assert_eq!(
        get_card(&agent, &[("if-none-match", &listed)])
            .await
            .status()
            .as_u16(),
        304
    );
    assert_eq!(
        get_card(&agent, &[("if-none-match", "\"stale\", W/")])
            .await
            .status()
            .as_u16(),
        200
    );
    let weak = format!("W/{etag}");
    assert_eq!(
        get_card(&agent, &[("if-none-match", &weak)])
            .await
            .status()
            .as_u16(),
        304
    );
    // A date before the card's, or a tag of another card: the card again.
    let before = httpdate::fmt_http_date(
        httpdate::parse_http_date(&modified).unwrap() - Duration::from_secs(1),
    );
    assert_eq!(
        get_card(&agent, &[("if-modified-since", &before)])
            .await
            .status()
            .as_u16(),
        200
    );
    assert_eq!(
        get_card(
            &agent,
            &[
                ("if-none-match", &root_etag),
                ("if-modified-since", &modified)
            ]
        )
        .await
        .status()
        .as_u16(),
        200,
        "If-None-Match decides over If-Modified-Since"
    );
    server.stop().await;
}

async fn rest(
    method: reqwest::Method,
    url: String,
    content_type: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut r = reqwest::Client::new()
        .request(method, url)
        .bearer_auth(TOKEN)
        .header("A2A-Version", "1.0");
    if let Some(ct) = content_type {
        r = r.header("content-type", ct);
    }
    if let Some(b) = body {
        r = r.body(b.to_string());
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn reason(body: &Value) -> Option<&str> {
    body["error"]["details"]
        .as_array()?
        .iter()
        .find(|d| d["domain"] == "a2a-protocol.org")?
        .get("reason")?
        .as_str()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_json_errors_carry_the_status_of_the_mapping_table() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path()).await;
    let base = format!("{}/agents/revisor", server.url);
    let json = Some("application/json");

    // A finished task.
    let (status, sent) = rest(
        reqwest::Method::POST,
        format!("{base}/message:send"),
        json,
        Some(json!({"message": {"messageId": "m1", "role": "ROLE_USER",
                                "parts": [{"text": "What is in this workspace?"}]}})),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    let id = sent["task"]["id"].as_str().unwrap().to_string();
    assert_eq!(
        sent["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{sent}"
    );

    // Cancel of a finished task: TaskNotCancelableError is 409 Conflict.
    let (status, body) = rest(
        reqwest::Method::POST,
        format!("{base}/tasks/{id}:cancel"),
        None,
        None,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], 409, "{body}");
    assert_eq!(body["error"]["status"], "FAILED_PRECONDITION", "{body}");
    assert_eq!(reason(&body), Some("TASK_NOT_CANCELABLE"), "{body}");

    // A body that is not JSON by its Content-Type: 415, and nothing is stored.
    let before = server.engine.tasks(&TaskFilter::default()).unwrap().len();
    let (status, body) = rest(
        reqwest::Method::POST,
        format!("{base}/message:send"),
        Some("text/plain"),
        Some(json!({"message": {"messageId": "m2", "role": "ROLE_USER",
                                "parts": [{"text": "What is in this workspace?"}]}})),
    )
    .await;
    assert_eq!(status, 415, "{body}");
    assert_eq!(body["error"]["code"], 415, "{body}");
    assert_eq!(reason(&body), Some("CONTENT_TYPE_NOT_SUPPORTED"), "{body}");
    // A part of a media type the agents do not take: ContentTypeNotSupportedError, 415.
    let (status, body) = rest(
        reqwest::Method::POST,
        format!("{base}/message:send"),
        json,
        Some(json!({"message": {"messageId": "m3", "role": "ROLE_USER",
                                "parts": [{"raw": "AAEC", "mediaType": "application/x-unsupported"}]}})),
    )
    .await;
    assert_eq!(status, 415, "{body}");
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT", "{body}");
    assert_eq!(
        server.engine.tasks(&TaskFilter::default()).unwrap().len(),
        before,
        "refused input stored nothing"
    );

    // The rows that were right stay right: unknown task 404, push notifications 400
    // UNIMPLEMENTED, a bad version 400 UNIMPLEMENTED.
    let (status, body) = rest(
        reqwest::Method::GET,
        format!("{base}/tasks/no-such-task"),
        None,
        None,
    )
    .await;
    assert_eq!(
        (status, body["error"]["status"].as_str()),
        (404, Some("NOT_FOUND")),
        "{body}"
    );
    let (status, body) = rest(
        reqwest::Method::POST,
        format!("{base}/tasks/{id}/pushNotificationConfigs"),
        json,
        Some(json!({"url": "http://127.0.0.1:9/hook"})),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(
        reason(&body),
        Some("PUSH_NOTIFICATION_NOT_SUPPORTED"),
        "{body}"
    );
    assert_eq!(body["error"]["status"], "UNIMPLEMENTED", "{body}");
    let resp = reqwest::Client::new()
        .get(format!("{base}/tasks/{id}"))
        .bearer_auth(TOKEN)
        .header("A2A-Version", "99.0")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(reason(&body), Some("VERSION_NOT_SUPPORTED"), "{body}");
    assert_eq!(body["error"]["status"], "UNIMPLEMENTED", "{body}");
    server.stop().await;
}
