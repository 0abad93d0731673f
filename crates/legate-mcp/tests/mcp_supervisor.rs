//! The supervisor profile over real sockets: `/mcp` and `/supervisor/mcp` served by one
//! router on 127.0.0.1 over a real engine whose scripted agent waits on an `ask`. Each path
//! refuses the other's token (401); the supervisor's server lists `approvals`, `decide` and
//! `audit` only, refuses `run`, and its `decide` lets the waiting agent go on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{EventKind, TaskId, TaskState};
use legate_engine::SubmitRequest;
use legate_frontkit::AskCommands;
use legate_frontkit::mcp::{INITIALIZE, McpHttp, messages};
use legate_mcp::ServeOptions;
use legate_mcp::http::SUPERVISOR_PATH;
use legate_testkit::raw_http::TOKEN;
use legate_testkit::{EngineHarness, TestAgent};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
const SUPERVISOR: &str = "5555555555555555555555555555555555555555555555555555555555555555";

async fn start() -> McpHttp {
    let kit = EngineHarness::builder()
        .agent(TestAgent::scripted("agent"))
        .supervisor(Arc::new(AskCommands))
        .config(|c| c.approvals.deadline = Duration::from_secs(120))
        .start();
    McpHttp::serve(kit, ServeOptions::default(), Some(SUPERVISOR)).await
}

fn awaiting(kit: &EngineHarness, task: &TaskId) -> Option<String> {
    kit.events(task).into_iter().find_map(|e| match e.kind {
        EventKind::Notice { detail, .. } if detail["event"] == "awaiting_supervision" => {
            detail["approvalId"].as_str().map(str::to_owned)
        }
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_path_refuses_the_other_token_and_the_supervisor_cannot_delegate() {
    let server = start().await;
    // The caller's token on the supervisor's path: 401, named.
    let r = server
        .post_as(SUPERVISOR_PATH, TOKEN, &[], INITIALIZE)
        .await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.body.contains("caller token is refused"), "{}", r.body);
    assert!(!r.body.contains(TOKEN));
    // The supervisor's token on the caller's path: 401, named.
    let r = server.post_as("/mcp", SUPERVISOR, &[], INITIALIZE).await;
    assert_eq!(r.status, 401, "{}", r.body);
    assert!(r.body.contains("supervisor token is refused"), "{}", r.body);
    // No token, and a made-up one: 401 on both.
    for path in ["/mcp", SUPERVISOR_PATH] {
        let r = server.post_as(path, &"9".repeat(64), &[], INITIALIZE).await;
        assert_eq!(r.status, 401, "{path}: {}", r.body);
    }
    // Each token on its own path: admitted.
    assert_eq!(
        server.post_as("/mcp", TOKEN, &[], INITIALIZE).await.status,
        200
    );

    // The supervisor's server lists three tools, and `run` does not exist there.
    let session = server.session(SUPERVISOR_PATH, SUPERVISOR).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}).to_string();
    let r = server
        .post_as(SUPERVISOR_PATH, SUPERVISOR, &[&session], &list)
        .await;
    let tools: Vec<String> = messages(&r)[0]["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(tools, ["approvals", "decide", "audit"]);
    let run = server
        .supervisor_call(&session, 3, "run", json!({"prompt": "run touch x"}))
        .await;
    assert_eq!(run["error"]["code"], -32602, "{run}");
    assert_eq!(run["error"]["data"]["code"], "TOOL_NOT_AVAILABLE", "{run}");
    assert!(
        server
            .kit
            .engine
            .tasks(&Default::default())
            .unwrap()
            .is_empty()
    );
    server.stop.cancel();
    server.kit.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decide_over_the_supervisor_endpoint_answers_the_waiting_agent() {
    let server = start().await;
    let task = server
        .kit
        .engine
        .submit(SubmitRequest::new("run touch approved.txt"))
        .unwrap();
    let kit = &server.kit;
    kit.until(&task.id, |e| {
        matches!(&e.kind, EventKind::Notice { detail, .. } if detail["event"] == "awaiting_supervision")
    })
    .await;
    let id = awaiting(kit, &task.id).unwrap();
    let session = server.session(SUPERVISOR_PATH, SUPERVISOR).await;

    let listed = server
        .supervisor_call(&session, 2, "approvals", json!({}))
        .await;
    let approvals = &listed["result"]["structuredContent"]["approvals"];
    assert_eq!(approvals.as_array().unwrap().len(), 1, "{listed}");
    let a = &approvals[0];
    assert_eq!(a["id"], id.as_str());
    assert_eq!(a["state"], "pending");
    assert_eq!(a["ruleId"], "ask-commands");
    assert_eq!(a["tool"]["command"], json!(["touch", "approved.txt"]));
    assert!(a["secondsLeft"].as_u64().unwrap() <= 120, "{a}");

    // An unknown id and a too-short prefix are APPROVAL_NOT_FOUND; a bad answer is refused
    // by the schema's type.
    let missing = server
        .supervisor_call(
            &session,
            3,
            "decide",
            json!({"id": "nope", "answer": "allow"}),
        )
        .await;
    assert_eq!(
        missing["result"]["structuredContent"]["error"]["code"], "APPROVAL_NOT_FOUND",
        "{missing}"
    );
    let bad = server
        .supervisor_call(
            &session,
            4,
            "decide",
            json!({"id": id, "answer": "yes please"}),
        )
        .await;
    assert_eq!(
        bad["result"]["structuredContent"]["error"]["code"], "INVALID_INPUT",
        "{bad}"
    );

    // A prefix of eight characters names it.
    let decided = server
        .supervisor_call(
            &session,
            5,
            "decide",
            json!({"id": &id[..8], "answer": "allow", "reason": "fine by me"}),
        )
        .await;
    let approval = &decided["result"]["structuredContent"]["approval"];
    assert_eq!(approval["state"], "allowed", "{decided}");
    let done = kit.wait(&task.id).await;
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert!(done.root.unwrap().join("approved.txt").exists());

    // Answering again: APPROVAL_CLOSED; the audit names the human and the channel.
    let again = server
        .supervisor_call(&session, 6, "decide", json!({"id": id, "answer": "deny"}))
        .await;
    assert_eq!(
        again["result"]["structuredContent"]["error"]["code"], "APPROVAL_CLOSED",
        "{again}"
    );
    let audit = server
        .supervisor_call(
            &session,
            7,
            "audit",
            json!({"taskId": task.id.0, "since": "1h"}),
        )
        .await;
    let entries = audit["result"]["structuredContent"]["entries"]
        .as_array()
        .unwrap()
        .clone();
    let human = entries
        .iter()
        .find(|e| e["decider"] == "human")
        .unwrap_or_else(|| panic!("{audit}"));
    assert_eq!(human["channel"], "mcp");
    assert_eq!(human["decision"], "allow");
    assert_eq!(human["approvalId"], id.as_str());
    server.stop.cancel();
    server.kit.engine.shutdown().await;
}
