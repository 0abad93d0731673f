//! The MCP Tasks extension in one process: rmcp's own client, declaring the extension, talks
//! to `LegateMcp` over an in-memory pipe, on the harness's engine (revisor, a real store).
//! What the stdio suites (crates/legate/tests/mcp_tasks*.rs) cannot reach with revisor: a
//! task that asks its caller a question (`input_required` answered through `tasks/update`),
//! and `send_message` answered as a task (its continuation, a duplicate naming the same one).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_engine::SubmitRequest;
use legate_frontkit::mcp::{McpClient, McpFront, params};
use legate_mcp::McpOptions;
use legate_testkit::EngineHarness;
use rmcp::model::{
    CallToolResponse, GetTaskParams, GetTaskResult, InputResponses, TaskPayload, TaskStatus,
    UpdateTaskParams,
};
use serde_json::{Value, json};

async fn front() -> McpFront {
    let client = McpClient {
        tasks: true,
        ..McpClient::default()
    };
    McpFront::serve(EngineHarness::start(), McpOptions::default(), client).await
}

async fn get(h: &McpFront, id: &str) -> GetTaskResult {
    h.client.get_task(GetTaskParams::new(id)).await.unwrap()
}

/// `tasks/get` once the engine says the task ended or waits for input.
async fn settled(h: &McpFront, id: &str) -> GetTaskResult {
    h.engine
        .wait(&legate_core::TaskId(id.to_string()))
        .await
        .unwrap();
    get(h, id).await
}

fn structured(t: &GetTaskResult) -> Value {
    match &t.task.payload {
        TaskPayload::Completed { result } => result["structuredContent"].clone(),
        other => panic!("not completed: {other:?}"),
    }
}

async fn answer(h: &McpFront, id: &str, key: &str, value: Value) -> Result<(), String> {
    let responses: InputResponses = [(key.to_string(), value)].into();
    h.client
        .update_task(UpdateTaskParams::new(id, responses))
        .await
        .map_err(|e| e.to_string())
}

/// A task waiting for its caller (an empty prompt asks for one), recorded as a `run`
/// answered as a task, and the key of its question among the task's input requests.
async fn asking_task(h: &McpFront, request: SubmitRequest) -> (String, String) {
    let asking = h.engine.submit_or_ask(request).unwrap();
    let id = asking.id.to_string();
    h.engine
        .call_tasks()
        .record(&id, "run", &json!({"taskId": id}))
        .unwrap();
    let TaskPayload::InputRequired { input_requests } = get(h, &id).await.task.payload else {
        panic!("not asking")
    };
    let key = input_requests.keys().next().unwrap().clone();
    (id, key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_of_the_agent_is_answered_through_tasks_update() {
    let h = front().await;
    // A task that waits for its caller (what an agent asking a question leaves): revisor
    // cannot ask, so the engine's own empty-prompt path puts it in `input-required`.
    let asking = h.engine.submit_or_ask(SubmitRequest::new("")).unwrap();
    let id = asking.id.to_string();
    let direct = json!({"taskId": id, "state": "input-required"});
    h.engine.call_tasks().record(&id, "run", &direct).unwrap();

    let t = get(&h, &id).await;
    assert_eq!(t.task.status(), TaskStatus::InputRequired);
    let TaskPayload::InputRequired { input_requests } = &t.task.payload else {
        panic!("{t:?}")
    };
    let (key, request) = input_requests.iter().next().unwrap();
    assert!(key.starts_with("reply-"), "{key}");
    let request = serde_json::to_value(request).unwrap();
    assert_eq!(request["method"], "elicitation/create", "{request}");
    assert_eq!(request["params"]["mode"], "form", "{request}");
    assert_eq!(
        request["params"]["requestedSchema"]["required"],
        json!(["answer"]),
        "{request}"
    );

    // Bad updates change nothing.
    for (k, v) in [
        (
            "reply-999999",
            json!({"action": "accept", "content": {"answer": "x"}}),
        ),
        (
            key.as_str(),
            json!({"action": "accept", "content": {"answer": "  "}}),
        ),
        (
            key.as_str(),
            json!({"action": "accept", "content": {"answer": 7}}),
        ),
        (key.as_str(), json!({"action": "accept"})),
        (key.as_str(), json!({"verb": "accept"})),
    ] {
        let e = answer(&h, &id, k, v).await.unwrap_err();
        assert!(e.contains("INVALID_INPUT"), "{e}");
    }
    assert_eq!(get(&h, &id).await.task.status(), TaskStatus::InputRequired);

    answer(
        &h,
        &id,
        key,
        json!({"action": "accept", "content": {"answer": "write answered.txt: yes\nread answered.txt"}}),
    )
    .await
    .unwrap();
    let done = settled(&h, &id).await;
    assert_eq!(done.task.status(), TaskStatus::Completed, "{done:?}");
    let body = structured(&done);
    assert_eq!(
        body["outcome"],
        h.call("result", json!({"taskId": id})).await
    );
    assert_eq!(body["outcome"]["state"], "completed");
    // Answered: the task waits on nothing now.
    let e = answer(
        &h,
        &id,
        key,
        json!({"action": "accept", "content": {"answer": "again"}}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("TASK_NOT_AWAITING_INPUT"), "{e}");

    // A decline of another question cancels that task.
    let (other_id, key) = asking_task(&h, SubmitRequest::new("")).await;
    answer(&h, &other_id, &key, json!({"action": "decline"}))
        .await
        .unwrap();
    assert_eq!(
        settled(&h, &other_id).await.task.status(),
        TaskStatus::Cancelled
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_as_a_task_follows_its_continuation() {
    let h = front().await;
    let first = h
        .client
        .call_tool_once(params("run", json!({"prompt": "write one.txt: 1"})))
        .await
        .unwrap();
    let CallToolResponse::Task(first) = first else {
        panic!("run was not answered as a task: {first:?}")
    };
    let first = first.task.task_id;
    assert_eq!(
        settled(&h, &first).await.task.status(),
        TaskStatus::Completed
    );
    let status = h.call("status", json!({"taskId": first})).await;
    let context = status["task"]["contextId"].as_str().unwrap().to_string();
    let args = json!({"messageId": "6f1f4b3e-0b8e-4d7a-9c39-5b0d3c6f2a11", "contextId": context,
                      "text": "read one.txt"});
    let created = h
        .client
        .call_tool_once(params("send_message", args.clone()))
        .await
        .unwrap();
    let CallToolResponse::Task(created) = created else {
        panic!("not a task: {created:?}")
    };
    let id = created.task.task_id.clone();
    let done = settled(&h, &id).await;
    assert_eq!(done.task.status(), TaskStatus::Completed, "{done:?}");
    let body = structured(&done);
    assert_eq!(body["continuationTaskId"], id.as_str());
    assert_eq!(
        body["outcome"],
        h.call("result", json!({"taskId": id})).await
    );
    // The same message again names the same task, which keeps its first answer.
    let again = h
        .client
        .call_tool_once(params("send_message", args))
        .await
        .unwrap();
    let CallToolResponse::Task(again) = again else {
        panic!("not a task: {again:?}")
    };
    assert_eq!(again.task.task_id, id);
    assert_eq!(structured(&get(&h, &id).await)["duplicate"], false);
}

fn code_of(e: &rmcp::ServiceError) -> String {
    e.to_string()
}

async fn cancel(h: &McpFront, id: &str) -> Result<(), String> {
    h.client
        .cancel_task(rmcp::model::CancelTaskParams::new(id))
        .await
        .map(|_| ())
        .map_err(|e| code_of(&e))
}

/// An op that asks its confirmation, then (only when confirmed) "writes": what `integrate`
/// in mode ask does, without a project.
fn asking_op(h: &McpFront, wrote: std::sync::Arc<std::sync::atomic::AtomicBool>) -> String {
    use legate_engine::{Confirmation, ConfirmationRequest, Confirmer};
    h.engine
        .call_tasks()
        .start("integrate", move |confirmer| async move {
            let request = ConfirmationRequest {
                task_id: legate_core::TaskId("t".into()),
                source: "/nowhere".into(),
                sha256: "0".repeat(64),
                files: vec![],
                summary: Default::default(),
            };
            match confirmer.confirm(&request).await {
                Confirmation::Accept { confirm: true } => {
                    wrote.store(true, std::sync::atomic::Ordering::SeqCst);
                    (json!({"integrated": true}), false)
                }
                _ => (json!({"error": {"code": "CONFIRMATION_DECLINED"}}), true),
            }
        })
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_is_canceled_only_while_it_waits_on_its_confirmation() {
    let h = front().await;
    let wrote = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let op = asking_op(&h, wrote.clone());
    while get(&h, &op).await.task.status() != TaskStatus::InputRequired {
        tokio::task::yield_now().await;
    }
    // Waiting on its confirmation: the cancel answers it, the op refuses, nothing is written.
    cancel(&h, &op).await.unwrap();
    assert_eq!(get(&h, &op).await.task.status(), TaskStatus::Cancelled);
    assert!(!wrote.load(std::sync::atomic::Ordering::SeqCst));
    // Ended: acknowledged, nothing changes.
    cancel(&h, &op).await.unwrap();
    assert_eq!(get(&h, &op).await.task.status(), TaskStatus::Cancelled);

    // Running past any question (a test command, an integration under way): refused.
    let (release, released) = tokio::sync::oneshot::channel::<()>();
    let running = h
        .engine
        .call_tasks()
        .start("test", move |_| async move {
            let _ = released.await;
            (json!({"passed": true}), false)
        })
        .unwrap();
    let e = cancel(&h, &running).await.unwrap_err();
    assert!(e.contains("TASK_NOT_CANCELABLE"), "{e}");
    assert_eq!(get(&h, &running).await.task.status(), TaskStatus::Working);
    release.send(()).unwrap();
    h.engine.call_tasks().settle().await;
    assert_eq!(get(&h, &running).await.task.status(), TaskStatus::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_op_that_panics_ends_failed_internal() {
    let h = front().await;
    let op = h
        .engine
        .call_tasks()
        .start("test", |_| async move {
            if std::hint::black_box(true) {
                panic!("a bug");
            }
            (json!({}), false)
        })
        .unwrap();
    h.engine.call_tasks().settle().await;
    let t = get(&h, &op).await;
    let TaskPayload::Failed { error } = &t.task.payload else {
        panic!("{t:?}")
    };
    assert_eq!(error["data"]["code"], "INTERNAL", "{error:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_profile_cannot_answer_a_task_that_may_write() {
    let client = McpClient {
        tasks: true,
        ..McpClient::default()
    };
    let options = McpOptions {
        profile: legate_mcp::Profile::Query,
        ..McpOptions::default()
    };
    let h = McpFront::serve(EngineHarness::start(), options, client).await;
    let mut request = SubmitRequest::new("");
    request.mode = Some(legate_core::TaskMode::Write);
    let (id, key) = asking_task(&h, request).await;
    let e = answer(
        &h,
        &id,
        &key,
        json!({"action": "accept", "content": {"answer": "write x.txt: x"}}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("MODE_NOT_ALLOWED"), "{e}");
    assert_eq!(
        h.engine.task(&id).unwrap().state,
        legate_core::TaskState::InputRequired
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_obeys_send_messages_length_limit() {
    let h = front().await;
    let (id, key) = asking_task(&h, SubmitRequest::new("")).await;
    let max = h.engine.config().fronts.message_max_chars;
    let long = "a".repeat(max + 1);
    let e = answer(
        &h,
        &id,
        &key,
        json!({"action": "accept", "content": {"answer": long}}),
    )
    .await
    .unwrap_err();
    assert!(e.contains("INVALID_INPUT"), "{e}");
    assert_eq!(
        h.engine.task(&id).unwrap().state,
        legate_core::TaskState::InputRequired
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_answers_to_one_question_start_one_turn() {
    let h = front().await;
    let (id, key) = asking_task(&h, SubmitRequest::new("")).await;
    let seq: u64 = key.strip_prefix("reply-").unwrap().parse().unwrap();
    // An answer to a question that is no longer the latest (what a second answer racing
    // in from another process meets once the first one's turn asked again): refused.
    let e = h
        .engine
        .answer_question(&id, "write stale.txt: x", seq - 1)
        .unwrap_err();
    assert_eq!(e.code.as_str(), "TASK_NOT_AWAITING_INPUT", "{e}");
    assert_eq!(
        h.engine.task(&id).unwrap().state,
        legate_core::TaskState::InputRequired
    );
    // Two answers with the same key at once: one turn starts, the other is refused.
    let one = json!({"action": "accept", "content": {"answer": "write one.txt: 1"}});
    let two = json!({"action": "accept", "content": {"answer": "write two.txt: 2"}});
    let (a, b) = tokio::join!(answer(&h, &id, &key, one), answer(&h, &id, &key, two));
    assert!(a.is_ok() != b.is_ok(), "{a:?} {b:?}");
    let e = a.err().or(b.err()).unwrap();
    assert!(e.contains("TASK_NOT_AWAITING_INPUT"), "{e}");
    settled(&h, &id).await;
    let prompts = h
        .engine
        .events(&legate_core::TaskId(id.clone()), 0, 1000)
        .unwrap()
        .into_iter()
        .filter(|e| matches!(e.kind, legate_core::EventKind::Prompt { .. }))
        .count();
    assert_eq!(prompts, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_recorded_for_one_kind_of_call_is_not_taken_by_another() {
    let h = front().await;
    let task = h.engine.submit_or_ask(SubmitRequest::new("")).unwrap();
    let id = task.id.to_string();
    let calls = h.engine.call_tasks();
    calls
        .record(&id, "run", &json!({"taskId": id, "first": true}))
        .unwrap();
    // A group (or comparison) whose caller-chosen id is the task's: refused, the row kept.
    for tool in ["group_start", "compare"] {
        let e = calls
            .record(&id, tool, &json!({"groupId": id}))
            .unwrap_err();
        assert_eq!(e.code.as_str(), "INVALID_INPUT", "{e}");
    }
    // The same kind (a duplicate send_message naming its continuation): the first kept.
    calls
        .record(&id, "send_message", &json!({"continuationTaskId": id}))
        .unwrap();
    let row = calls.get(&id).unwrap().record;
    assert_eq!(row.tool, "run");
    assert_eq!(row.answer.unwrap()["first"], true);
}
