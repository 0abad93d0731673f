//! The A2A front end to end: `legate_a2a::boot` serves the engine on 127.0.0.1, the engine
//! drives the real scripted agent (revisor) on real pipes with a real SQLite store, and the
//! official Rust client (`a2a-client-lf`) or plain HTTP calls it.
//!
//! The agent binary must be built first: `cargo build -p legate-testkit --bin
//! legate-scripted-agent` (a plain `cargo test --workspace` does it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use a2a::{
    CancelTaskRequest, GetTaskRequest, ListTasksRequest, Message, Part, PartContent, Role,
    SendMessageRequest, StreamResponse, SubscribeToTaskRequest, TaskState,
};
use a2a_client::A2AClientFactory;
use a2a_client::agent_card::AgentCardResolver;
use a2a_client::auth::AuthInterceptor;
use futures::StreamExt;
use legate_core::AgentKind;
use legate_engine::{Engine, TaskFilter};
use legate_frontkit::a2a::{A2aFront, A2aServe};
use legate_testkit::{EngineHarness, TestAgent};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";

/// An engine whose home is `<base>/home`, serving the scripted agent as `revisor` and, when
/// `broken`, an agent whose command does not exist.
fn engine(base: &Path, broken: bool) -> Engine {
    let mut b = EngineHarness::builder().agent(TestAgent::scripted("revisor"));
    if broken {
        b = b.agent(TestAgent::command(
            "broken",
            AgentKind::ACP,
            "/nonexistent/legate-agent",
        ));
    }
    b.engine_in(base)
}

async fn serve(base: &Path, broken: bool) -> A2aFront {
    A2aFront::serve(engine(base, broken), A2aServe::default()).await
}

async fn client(base: &str) -> a2a_client::A2AClient<Box<dyn a2a_client::Transport>> {
    let card = AgentCardResolver::new(None).resolve(base).await.unwrap();
    A2AClientFactory::builder()
        .with_interceptor(Arc::new(AuthInterceptor::bearer(TOKEN)))
        .preferred_bindings(vec![a2a::TRANSPORT_PROTOCOL_JSONRPC.into()])
        .build()
        .create_from_card(&card)
        .await
        .unwrap()
}

fn message(text: &str, context: Option<&str>) -> SendMessageRequest {
    let mut m = Message::new(Role::User, vec![Part::text(text)]);
    m.context_id = context.map(str::to_string);
    SendMessageRequest {
        message: m,
        configuration: None,
        metadata: None,
        tenant: None,
    }
}

/// Every event of a streamed message, and the task it opens with.
async fn streamed(
    c: &a2a_client::A2AClient<Box<dyn a2a_client::Transport>>,
    request: &SendMessageRequest,
) -> (a2a::Task, Vec<StreamResponse>) {
    let mut stream = c.send_streaming_message(request).await.unwrap();
    let mut events = Vec::new();
    while let Some(e) = stream.next().await {
        events.push(e.unwrap());
    }
    let StreamResponse::Task(first) = &events[0] else {
        panic!("the first event is not the task: {:?}", events[0]);
    };
    (first.clone(), events)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revisor_task_streams_and_is_a_stored_task() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), true).await;
    assert_eq!(server.report.served.len(), 1);
    assert_eq!(server.report.failed.len(), 1);
    assert_eq!(server.report.failed[0].0, "broken");
    assert!(server.report.default_at_root);

    let base = format!("{}/agents/revisor", server.url);
    let card = AgentCardResolver::new(None).resolve(&base).await.unwrap();
    assert_eq!(card.capabilities.streaming, Some(true));
    assert!(!card.version.is_empty());
    assert_eq!(card.supported_interfaces[0].url, base);
    let c = client(&base).await;

    let (first, events) = streamed(
        &c,
        &message(
            "write hello.md: # Hello\nrun cat hello.md\nwrite ../escape.txt: no\nWhat is in this workspace?",
            None,
        ),
    )
    .await;
    let id = first.id.clone();
    let context = first.context_id.clone();
    let Some(StreamResponse::StatusUpdate(last)) = events.last() else {
        panic!("the last event is not a status update");
    };
    assert_eq!(last.status.state, TaskState::Completed);
    let note = last
        .status
        .message
        .as_ref()
        .and_then(|m| m.text())
        .unwrap_or_default()
        .to_string();
    assert!(
        note.contains("escape.txt"),
        "refusals in the status: {note}"
    );
    assert_eq!(
        note.matches("refused by the supervisor").count(),
        1,
        "the refusal line is said once: {note}"
    );
    let texts: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            StreamResponse::StatusUpdate(u) => u
                .status
                .message
                .as_ref()
                .and_then(|m| m.text())
                .map(str::to_string),
            _ => None,
        })
        .collect();
    assert!(texts.iter().any(|t| t.starts_with("tool ")), "{texts:?}");
    let artifact = events
        .iter()
        .find_map(|e| match e {
            StreamResponse::ArtifactUpdate(a) => Some(a.artifact.clone()),
            _ => None,
        })
        .expect("an answer artifact");
    assert_eq!(artifact.artifact_id, "answer");
    let data = artifact
        .parts
        .iter()
        .find_map(|p| match &p.content {
            PartContent::Data(v) => Some(v.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(data["agent"], "revisor");
    assert!(data["toolCalls"].as_f64().unwrap() >= 2.0, "{data}");
    assert!(!data["refusals"].as_array().unwrap().is_empty(), "{data}");

    // The task is the engine's own: `legate tasks` lists it.
    let stored = server.engine.tasks(&TaskFilter::default()).unwrap();
    assert!(
        stored
            .iter()
            .any(|t| t.id.0 == id && t.context_id == context)
    );

    // GetTask with historyLength.
    let t = c
        .get_task(&GetTaskRequest {
            id: id.clone(),
            history_length: Some(0),
            tenant: None,
        })
        .await
        .unwrap();
    assert_eq!(t.status.state, TaskState::Completed);
    assert!(t.history.is_none());
    let t = c
        .get_task(&GetTaskRequest {
            id: id.clone(),
            history_length: None,
            tenant: None,
        })
        .await
        .unwrap();
    assert_eq!(t.history.as_ref().map(Vec::len), Some(2));

    // A finished task cannot be canceled; an unknown one is not found.
    let e = c
        .cancel_task(&CancelTaskRequest {
            id: id.clone(),
            metadata: None,
            tenant: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, a2a::error_code::TASK_NOT_CANCELABLE);
    let e = c
        .get_task(&GetTaskRequest {
            id: "no-such-task".into(),
            history_length: None,
            tenant: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, a2a::error_code::TASK_NOT_FOUND);

    // SubscribeToTask on a finished task: UnsupportedOperationError (§3.1.6); GetTask has it.
    let e = match c
        .subscribe_to_task(&SubscribeToTaskRequest {
            id: id.clone(),
            tenant: None,
        })
        .await
    {
        Err(e) => e,
        Ok(mut sub) => sub
            .next()
            .await
            .expect("an error frame")
            .expect_err("no stream for a finished task"),
    };
    assert_eq!(e.code, a2a::error_code::UNSUPPORTED_OPERATION);
    assert!(e.message.contains("already ended"), "{e:?}");

    // ListTasks, and the same context continued (blocking SendMessage).
    let listed = c
        .list_tasks(&ListTasksRequest {
            context_id: Some(context.clone()),
            status: None,
            page_size: None,
            page_token: None,
            history_length: None,
            status_timestamp_after: None,
            include_artifacts: None,
            tenant: None,
        })
        .await
        .unwrap();
    assert_eq!(listed.tasks.len(), 1);
    let reply = c
        .send_message(&message("read hello.md", Some(&context)))
        .await
        .unwrap();
    let a2a::SendMessageResponse::Task(second) = reply else {
        panic!("not a task");
    };
    assert_eq!(second.context_id, context);
    assert_eq!(second.status.state, TaskState::Completed);
    let answer = second.artifacts.unwrap()[0].parts[0].clone();
    assert!(
        matches!(&answer.content, PartContent::Text(t) if t.contains("Hello")),
        "{answer:?}"
    );

    server.stop().await;

    // After a restart, GetTask still answers from the store.
    let server = serve(dir.path(), false).await;
    let c = client(&server.url).await;
    let t = c
        .get_task(&GetTaskRequest {
            id: id.clone(),
            history_length: None,
            tenant: None,
        })
        .await
        .unwrap();
    assert_eq!(t.status.state, TaskState::Completed);
    assert_eq!(t.artifacts.map(|a| a.len()), Some(1));
    server.stop().await;
}

async fn post(
    url: &str,
    token: Option<&str>,
    version: Option<&str>,
    body: String,
) -> (u16, HashMap<String, String>, Value) {
    let mut r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    if let Some(v) = version {
        r = r.header("A2A-Version", v);
    }
    let resp = r.send().await.unwrap();
    let status = resp.status().as_u16();
    let headers = resp
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or_default().to_string()))
        .collect();
    let body = resp.json::<Value>().await.unwrap_or(Value::Null);
    (status, headers, body)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_the_specified_errors_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), false).await;
    let url = format!("{}/agents/revisor", server.url);
    let v = Some("1.0");

    let (status, headers, body) = post(&url, None, v, "{}".into()).await;
    assert_eq!(status, 401);
    assert!(headers["www-authenticate"].starts_with("Bearer"));
    assert_eq!(body["error"]["code"], "UNAUTHENTICATED");
    let (status, headers, _) = post(&url, Some("wrong-token"), v, "{}".into()).await;
    assert_eq!(status, 401);
    assert!(headers["www-authenticate"].contains("invalid_token"));

    let t = Some(TOKEN);
    let (_, _, body) = post(&url, t, v, "{not json".into()).await;
    assert_eq!(body["error"]["code"], -32700);
    let (_, _, body) = post(
        &url,
        t,
        v,
        json!({"jsonrpc": "2.0", "id": 1, "method": "NoSuchMethod", "params": {}}).to_string(),
    )
    .await;
    assert_eq!(body["error"]["code"], -32601);
    let (_, _, body) = post(
        &url,
        t,
        v,
        json!({"jsonrpc": "2.0", "id": 2, "method": "GetTask", "params": {"id": 42}}).to_string(),
    )
    .await;
    assert_eq!(body["error"]["code"], -32602, "{body}");
    let (_, _, body) = post(
        &url,
        t,
        v,
        json!({"jsonrpc": "2.0", "id": 3, "method": "GetTask", "params": {"id": "nope"}})
            .to_string(),
    )
    .await;
    assert_eq!(body["error"]["code"], -32001, "{body}");
    let (_, _, body) = post(
        &url,
        t,
        None,
        json!({"jsonrpc": "2.0", "id": 4, "method": "GetTask", "params": {"id": "nope"}})
            .to_string(),
    )
    .await;
    assert_eq!(body["error"]["code"], -32009, "{body}");
    let (status, _, body) = post(&url, t, v, "x".repeat(100 * 1024)).await;
    assert_eq!(status, 413);
    assert_eq!(body["error"]["code"], -32600);
    let (_, _, body) = post(
        &url,
        t,
        v,
        json!({"jsonrpc": "2.0", "id": 5, "method": "SendMessage",
               "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "taskId": "nope",
                                      "parts": [{"text": "go on"}]}}})
        .to_string(),
    )
    .await;
    assert_eq!(body["error"]["code"], -32001, "{body}");
    assert!(
        server
            .engine
            .tasks(&TaskFilter::default())
            .unwrap()
            .is_empty(),
        "bad input stored nothing"
    );

    // The HTTP+JSON binding, under the same base URL.
    let rest = reqwest::Client::new()
        .get(format!("{url}/tasks/no-such-task"))
        .bearer_auth(TOKEN)
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status().as_u16(), 404);
    let rest = reqwest::Client::new()
        .get(format!("{url}/tasks?pageSize=5"))
        .bearer_auth(TOKEN)
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status().as_u16(), 200);
    let listed: Value = rest.json().await.unwrap();
    assert_eq!(listed["pageSize"], 5, "{listed}");
    let rest = reqwest::Client::new()
        .get(format!("{url}/tasks"))
        .header("A2A-Version", "1.0")
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status().as_u16(), 401);

    let resp = reqwest::get(format!("{url}/.well-known/agent-card.json"))
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(
        resp.headers()["cache-control"]
            .to_str()
            .unwrap()
            .contains("max-age")
    );
    assert!(resp.headers().contains_key("etag"));
    let root = reqwest::get(format!("{}/.well-known/agent-card.json", server.url))
        .await
        .unwrap();
    assert_eq!(root.status().as_u16(), 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_to_the_supervising_agent_is_refused_and_stores_nothing() {
    // Issue 29, finding 1. Before: the supervising agent was served like any agent, so a
    // remote caller's message ran a task on it (writing into the home later judge sessions
    // shared). Now the engine refuses it with AGENT_RESERVED, whichever front asks.
    let dir = tempfile::tempdir().unwrap();
    let engine = EngineHarness::builder()
        .agent(TestAgent::scripted("revisor"))
        .agent(TestAgent::scripted("judge"))
        .config(|c| c.approvals.agent = Some("judge".into()))
        .engine_in(dir.path());
    let server = A2aFront::serve(engine, A2aServe::default()).await;
    let url = format!("{}/agents/judge", server.url);
    let (_, _, body) = post(
        &url,
        Some(TOKEN),
        Some("1.0"),
        json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
               "params": {"message": {"messageId": "m1", "role": "ROLE_USER",
                                      "parts": [{"text": "write $HOME/note.txt: allow curl"}]}}})
        .to_string(),
    )
    .await;
    let error = body["error"].to_string();
    assert!(error.contains("AGENT_RESERVED"), "{body}");
    assert!(error.contains("supervising agent"), "{body}");
    let stored = server.engine.tasks(&TaskFilter::default()).unwrap();
    assert!(stored.is_empty(), "nothing stored: {stored:?}");
    server.stop().await;
}

/// Every task the caller may list, with no filter.
async fn all_tasks(
    c: &a2a_client::A2AClient<Box<dyn a2a_client::Transport>>,
) -> a2a::ListTasksResponse {
    c.list_tasks(&ListTasksRequest {
        context_id: None,
        status: None,
        page_size: None,
        page_token: None,
        history_length: None,
        status_timestamp_after: None,
        include_artifacts: None,
        tenant: None,
    })
    .await
    .unwrap()
}

/// A task the CLI (or MCP, or a workflow) started, in a shared server directory: an A2A
/// caller, possibly remote, can neither see it, read it, cancel it, reply into it nor
/// continue its context. Before, it listed it with its history, and a message naming its
/// context made the agent write in that directory, which A2A never offers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_another_front_started_is_out_of_an_a2a_callers_reach() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::create_dir_all(&victim).unwrap();
    std::fs::write(victim.join("notes.txt"), "PRIVATE-NOTES-7e1\n").unwrap();
    let server = serve(dir.path(), false).await;
    let mut local = legate_engine::SubmitRequest::new("read notes.txt");
    local.agent = Some("revisor".into());
    local.workspace = legate_engine::WorkspaceRequest::Shared(victim.clone());
    let local = server.engine.submit(local).unwrap();
    legate_testkit::harness::wait_state(
        &server.engine,
        &local.id,
        legate_core::TaskState::Completed,
    )
    .await;
    let c = client(&format!("{}/agents/revisor", server.url)).await;
    let e = c
        .get_task(&GetTaskRequest {
            id: local.id.to_string(),
            history_length: None,
            tenant: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, a2a::error_code::TASK_NOT_FOUND);
    let e = c
        .cancel_task(&CancelTaskRequest {
            id: local.id.to_string(),
            metadata: None,
            tenant: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, a2a::error_code::TASK_NOT_FOUND);
    let listed = all_tasks(&c).await;
    assert!(listed.tasks.is_empty(), "{:?}", listed.tasks);
    assert_eq!(listed.total_size, 0);
    // Continuing its context, or replying into it: refused, nothing stored or written.
    let count = || server.engine.tasks(&TaskFilter::default()).unwrap().len();
    let err = c
        .send_message(&message("write pwned.txt: x", Some(&local.context_id)))
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("not started by an inbound message"),
        "{err:?}"
    );
    let mut reply = message("write pwned.txt: x", None);
    reply.message.task_id = Some(local.id.to_string());
    assert!(c.send_message(&reply).await.is_err());
    assert_eq!(count(), 1);
    assert!(!victim.join("pwned.txt").exists());
    // A conversation A2A started stays its own: listed, and continued.
    let a2a::SendMessageResponse::Task(mine) =
        c.send_message(&message("hello", None)).await.unwrap()
    else {
        panic!("not a task");
    };
    let listed = all_tasks(&c).await;
    assert_eq!(
        listed
            .tasks
            .iter()
            .map(|t| t.id.clone())
            .collect::<Vec<_>>(),
        vec![mine.id.clone()]
    );
    let a2a::SendMessageResponse::Task(next) = c
        .send_message(&message("hello again", Some(&mine.context_id)))
        .await
        .unwrap()
    else {
        panic!("not a task");
    };
    assert_eq!(next.context_id, mine.context_id);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_task_is_followed_and_canceled() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), false).await;
    let c = client(&format!("{}/agents/revisor", server.url)).await;
    let mut request = message("!hang", None);
    request.configuration = Some(a2a::SendMessageConfiguration {
        accepted_output_modes: None,
        task_push_notification_config: None,
        history_length: None,
        return_immediately: Some(true),
    });
    let a2a::SendMessageResponse::Task(task) = c.send_message(&request).await.unwrap() else {
        panic!("not a task");
    };
    assert!(matches!(
        task.status.state,
        TaskState::Submitted | TaskState::Working
    ));
    let mut sub = c
        .subscribe_to_task(&SubscribeToTaskRequest {
            id: task.id.clone(),
            tenant: None,
        })
        .await
        .unwrap();
    let first = sub.next().await.unwrap().unwrap();
    assert!(matches!(&first, StreamResponse::Task(t) if t.id == task.id));
    let follower = tokio::spawn(async move {
        let mut last = None;
        while let Some(e) = sub.next().await {
            last = Some(e.unwrap());
        }
        last
    });
    // Let the turn start (the engine's own `working` status), then cancel it.
    legate_testkit::harness::wait_state(
        &server.engine,
        &legate_core::TaskId(task.id.clone()),
        legate_core::TaskState::Working,
    )
    .await;
    let canceled = c
        .cancel_task(&CancelTaskRequest {
            id: task.id.clone(),
            metadata: None,
            tenant: None,
        })
        .await
        .unwrap();
    assert_eq!(canceled.status.state, TaskState::Canceled);
    let last = tokio::time::timeout(Duration::from_secs(20), follower)
        .await
        .unwrap()
        .unwrap();
    assert!(
        matches!(&last, Some(StreamResponse::StatusUpdate(u)) if u.status.state == TaskState::Canceled),
        "{last:?}"
    );
    server.stop().await;
}

/// The official Python SDK (`a2a-sdk`, in the pinned environment `legate_testkit::python`
/// provisions) streams a revisor task. Skipped, saying so, when `python3` is missing, except in
/// CI (`LEGATE_REQUIRE_PYTHON` or `CI` set), where that fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_streams_a_revisor_task() {
    let Some(python) = legate_testkit::python("a2a.client, httpx") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), false).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/stream.py");
    let base = format!("{}/agents/revisor", server.url);
    let out = tokio::process::Command::new(&python)
        .arg(&script)
        .args([
            base.as_str(),
            TOKEN,
            "write hello.md: # Hello\nWhat is in this workspace?",
        ])
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["kinds"][0], "task", "{summary}");
    assert_eq!(summary["state"], "TASK_STATE_COMPLETED", "{summary}");
    assert_eq!(summary["data"]["agent"], "revisor", "{summary}");
    let id = summary["task"].as_str().unwrap();
    assert!(
        server
            .engine
            .tasks(&TaskFilter::default())
            .unwrap()
            .iter()
            .any(|t| t.id.0 == id)
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_message_asks_for_input_and_a_reply_resumes_the_task() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path(), false).await;
    let base = format!("{}/agents/revisor", server.url);
    let c = client(&base).await;

    let empty = SendMessageRequest {
        message: Message::new(Role::User, vec![]),
        configuration: None,
        metadata: None,
        tenant: None,
    };
    let a2a::SendMessageResponse::Task(waiting) = c.send_message(&empty).await.unwrap() else {
        panic!("not a task");
    };
    assert_eq!(waiting.status.state, TaskState::InputRequired);
    let sentence = waiting
        .status
        .message
        .as_ref()
        .and_then(|m| m.text())
        .unwrap_or_default()
        .to_string();
    assert!(sentence.contains("reply into this task"), "{sentence}");

    // The reply carries the task's id and resumes the same task.
    let mut reply = message("What is in this workspace?", Some(&waiting.context_id));
    reply.message.task_id = Some(waiting.id.clone());
    let mut stream = c.send_streaming_message(&reply).await.unwrap();
    let mut events = Vec::new();
    while let Some(e) = stream.next().await {
        events.push(e.unwrap());
    }
    let StreamResponse::Task(first) = &events[0] else {
        panic!("the first event is not the task: {:?}", events[0]);
    };
    assert_eq!(first.id, waiting.id);
    assert_ne!(first.status.state, TaskState::InputRequired);
    let Some(StreamResponse::StatusUpdate(last)) = events.last() else {
        panic!("the last event is not a status update");
    };
    assert_eq!(last.status.state, TaskState::Completed);
    let stored = server.engine.task(&waiting.id).unwrap();
    assert_eq!(stored.prompt, "What is in this workspace?");

    // A finished task takes no reply.
    let err = c.send_message(&reply).await.unwrap_err();
    assert!(
        format!("{err:?}").contains("TASK_NOT_AWAITING_INPUT"),
        "{err:?}"
    );
    server.stop().await;
}

/// In the child: the base directory of the engine whose turn is cut.
const CUT_CHILD_BASE: &str = "LEGATE_TEST_A2A_CUT_CHILD_BASE";
const CUT_READY: &str = "a2a-cut-child-ready";

/// The child: starts a revisor turn that never ends, says so once its session is recorded,
/// and waits to be killed.
#[test]
#[ignore = "the Legate process a_cut_task_is_continued_by_a_message_that_refers_to_it kills; run by it"]
fn a2a_cut_child_engine() {
    let base = std::path::PathBuf::from(std::env::var(CUT_CHILD_BASE).expect("run by the parent"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let engine = engine(&base, false);
        let mut request = legate_engine::SubmitRequest::new("!hang");
        request.agent = Some("revisor".into());
        // Started as an A2A message starts one: only such a task is an A2A caller's.
        request.inbound = true;
        let task = engine.submit(request).unwrap();
        while engine.task(task.id.as_str()).unwrap().session_id.is_none() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!("{CUT_READY} {}", task.id);
        std::future::pending::<()>().await;
    });
}

/// A message asking to continue `cut` (`metadata.legateContinue`, `referenceTaskIds`).
fn continue_message(cut: &str, text: &str) -> SendMessageRequest {
    let mut request = message(text, None);
    request.message.reference_task_ids = Some(vec![cut.to_string()]);
    request.message.metadata = Some(HashMap::from([("legateContinue".into(), json!(true))]));
    request
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_task_is_continued_by_a_message_that_refers_to_it() {
    let dir = tempfile::tempdir().unwrap();
    let base_dir = dir.path().to_str().unwrap();
    let cut = legate_testkit::killed_child::run_until_ready(
        "a2a_cut_child_engine",
        &[(CUT_CHILD_BASE, base_dir)],
        CUT_READY,
        std::process::Stdio::null(),
    );
    let server = serve(dir.path(), false).await;
    let base = format!("{}/agents/revisor", server.url);
    let c = client(&base).await;
    let stored = server.engine.task(&cut).unwrap();
    assert_eq!(
        stored.error.as_ref().map(|e| e.code),
        Some(legate_core::ErrorCode::ServerRestarted)
    );
    let count = || server.engine.tasks(&TaskFilter::default()).unwrap().len();
    assert_eq!(count(), 1, "the restart started nothing");

    // With text, or without the reference: refused, nothing stored.
    let err = c
        .send_message(&continue_message(&cut, "do something else"))
        .await
        .unwrap_err();
    assert!(format!("{err:?}").contains("INVALID_INPUT"), "{err:?}");
    let mut unreferenced = continue_message(&cut, "");
    unreferenced.message.reference_task_ids = None;
    let err = c.send_message(&unreferenced).await.unwrap_err();
    assert!(format!("{err:?}").contains("referenceTaskIds"), "{err:?}");
    assert_eq!(count(), 1);

    let (first, events) = streamed(&c, &continue_message(&cut, "")).await;
    assert_ne!(first.id, cut);
    assert_eq!(first.context_id, stored.context_id);
    let Some(StreamResponse::StatusUpdate(last)) = events.last() else {
        panic!("the last event is not a status update");
    };
    assert_eq!(last.status.state, TaskState::Completed);
    let next = server.engine.task(&first.id).unwrap();
    assert_eq!(
        next.controls.continued_from.as_ref().map(|t| t.as_str()),
        Some(cut.as_str())
    );
    assert_eq!(next.session_id, stored.session_id);

    // Again: the same continuation. The continuation itself is not one to continue.
    let a2a::SendMessageResponse::Task(again) =
        c.send_message(&continue_message(&cut, "")).await.unwrap()
    else {
        panic!("not a task");
    };
    assert_eq!(again.id, first.id);
    let err = c
        .send_message(&continue_message(&first.id, ""))
        .await
        .unwrap_err();
    assert!(
        format!("{err:?}").contains("TASK_NOT_CONTINUABLE"),
        "{err:?}"
    );
    assert_eq!(count(), 2);
    server.stop().await;
}
