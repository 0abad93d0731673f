//! The MCP front end to end in one process: rmcp's own client talks to `LegateMcp` over an
//! in-memory pipe, and the engine drives the real scripted agent (revisor) on real pipes with
//! a real SQLite store.
//!
//! The agent binary must be built first: `cargo build -p legate-testkit --bin
//! legate-scripted-agent` (a plain `cargo test --workspace` does it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::TaskState;
use legate_frontkit::AskCommands;
use legate_frontkit::mcp::{McpClient, McpFront};
use legate_mcp::{McpOptions, Profile};
use legate_testkit::EngineHarness;
use rmcp::model::ProgressNotificationParam;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

async fn harness(options: McpOptions) -> McpFront {
    harness_on(EngineHarness::start(), options).await
}

async fn harness_on(kit: EngineHarness, options: McpOptions) -> McpFront {
    McpFront::serve(kit, options, McpClient::default()).await
}

/// The server numbers one call's notifications 1, 2, 3, … in the order it sends them; rmcp's
/// client may run its handlers concurrently, so the test checks the numbers as a set.
fn assert_counted(progress: &[ProgressNotificationParam]) {
    let mut by_token: HashMap<String, Vec<f64>> = HashMap::new();
    for p in progress {
        by_token
            .entry(format!("{:?}", p.progress_token))
            .or_default()
            .push(p.progress);
    }
    for (token, mut values) in by_token {
        values.sort_by(f64::total_cmp);
        let expected: Vec<f64> = (1..=values.len()).map(|n| n as f64).collect();
        assert_eq!(values, expected, "token {token}");
    }
}

fn sha256(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delegate_wait_with_progress_and_read_the_result_in_pieces() {
    let h = harness(McpOptions::default()).await;
    let tools = h.client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 50);
    assert!(tools.iter().all(|t| t.output_schema.is_some()));

    let emoji_line = "😀é€ ".repeat(400);
    let prompt = format!("write notes.md: {emoji_line}\nread notes.md\nWhat is in this workspace?");
    let run = h.call("run", json!({"prompt": prompt})).await;
    assert_eq!(run["state"], "submitted");
    assert_eq!(run["mode"], "write");
    let task_id = run["taskId"].as_str().unwrap().to_string();

    let mut after = 0;
    for call in 0.. {
        let token = format!("p{call}");
        let w = h
            .wait_with_progress(json!({"taskId": task_id, "after": after}), &token)
            .await;
        after = w["nextCursor"].as_u64().unwrap();
        if w["ready"] == true {
            assert_eq!(w["state"], "completed", "{w}");
            assert_eq!(w["timedOut"], false);
            break;
        }
    }
    let progress = h.handler.progress.lock().unwrap().clone();
    assert!(progress.len() >= 3, "{} notifications", progress.len());
    assert_counted(&progress);
    assert!(
        progress
            .iter()
            .all(|p| !p.message.as_deref().unwrap_or("").contains("notes.md")),
        "notifications must not carry content"
    );

    let small = h
        .call("result", json!({"taskId": task_id, "includeResult": false}))
        .await;
    assert_eq!(small["ready"], true);
    assert!(small["answer"].is_null() && small["prompt"].is_null());
    let whole = h
        .call("read_result", json!({"taskId": task_id, "limit": 50000}))
        .await;
    assert_eq!(whole["hasMore"], false);
    let text = whole["text"].as_str().unwrap().to_string();
    assert!(text.contains('😀'), "the answer quotes the file: {text}");
    assert_eq!(whole["contentSha256"], sha256(&text));
    assert_eq!(small["answerSha256"], whole["contentSha256"]);

    let mut joined = String::new();
    let mut offset = 0;
    let mut pieces = 0;
    loop {
        let piece = h
            .call(
                "read_result",
                json!({"taskId": task_id, "offset": offset, "limit": 333,
                       "expectedContentSha256": whole["contentSha256"]}),
            )
            .await;
        joined.push_str(piece["text"].as_str().unwrap());
        pieces += 1;
        if piece["hasMore"] == false {
            break;
        }
        offset = piece["nextOffset"].as_u64().unwrap();
    }
    assert!(pieces > 3);
    assert_eq!(sha256(&joined), whole["contentSha256"].as_str().unwrap());
    assert_eq!(
        h.fail(
            "read_result",
            json!({"taskId": task_id, "expectedContentSha256": sha256("other")})
        )
        .await,
        "CONTENT_CHANGED"
    );

    let events = h
        .call("events", json!({"taskId": task_id, "limit": 2}))
        .await;
    assert_eq!(events["events"].as_array().unwrap().len(), 2);
    assert_eq!(events["hasMore"], true);
    assert_eq!(events["truncated"], false);
    let status = h.call("status", json!({"taskId": task_id})).await;
    assert_eq!(status["task"]["state"], "completed");
    let listed = h.call("tasks", json!({})).await;
    assert_eq!(listed["tasks"][0]["taskId"], task_id.as_str());
    let sessions = h.call("sessions", json!({})).await;
    assert_eq!(sessions["sessions"][0]["lastTaskId"], task_id.as_str());
    let health = h.call("health", json!({})).await;
    assert_eq!(health["toolProfile"], "full");
    assert_eq!(health["agents"][0]["starts"], true, "{health}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_structured_error_and_changes_nothing() {
    let h = harness(McpOptions::default()).await;
    let file = h.kit.base().join("file.txt");
    std::fs::write(&file, "x").unwrap();
    for (tool, args, code) in [
        ("run", json!({"prompt": 5}), "INVALID_INPUT"),
        ("run", json!({"prompt": "hi", "bogus": 1}), "INVALID_INPUT"),
        (
            "run",
            json!({"prompt": "hi", "jsonSchema": {"type": "object"}}),
            "INVALID_INPUT",
        ),
        ("run", json!({"prompt": "  "}), "INVALID_INPUT"),
        (
            "run",
            json!({"prompt": "hi", "agent": "nobody"}),
            "AGENT_NOT_FOUND",
        ),
        (
            "run",
            json!({"prompt": "hi", "workingDirectory": file}),
            "INVALID_WORKSPACE",
        ),
        (
            "run",
            json!({"prompt": "hi", "workingDirectory": "rel/dir"}),
            "INVALID_WORKSPACE",
        ),
        (
            "run",
            json!({"prompt": "hi", "mode": "yolo"}),
            "INVALID_INPUT",
        ),
        (
            "status",
            json!({"taskId": "00000000-dead"}),
            "TASK_NOT_FOUND",
        ),
        ("wait", json!({"taskId": "00000000-dead"}), "TASK_NOT_FOUND"),
        (
            "resume",
            json!({"contextId": "nope", "prompt": "hi"}),
            "CONTEXT_NOT_FOUND",
        ),
        ("tasks", json!({"limit": 0}), "INVALID_INPUT"),
        ("tasks", json!({"state": "sleeping"}), "INVALID_INPUT"),
        ("sessions", json!({"limit": 201}), "INVALID_INPUT"),
        ("integrate", json!({}), "INVALID_INPUT"),
    ] {
        assert_eq!(h.fail(tool, args.clone()).await, code, "{tool} {args}");
    }
    assert_eq!(
        h.refused("no_such_tool", json!({})).await,
        "TOOL_NOT_AVAILABLE"
    );
    // jsonSchema reaches the engine, which refuses it for revisor (an ACP agent).
    let r = h
        .call_raw(
            "run",
            json!({"prompt": "hi", "jsonSchema": {"type": "object"}}),
        )
        .await;
    let message = r.structured_content.unwrap()["error"]["message"].to_string();
    assert!(message.contains("kind agy"), "{message}");
    assert!(
        h.call("tasks", json!({})).await["tasks"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let run = h.call("run", json!({"prompt": "What is here?"})).await;
    let id = run["taskId"].as_str().unwrap();
    h.wait_done(id).await;
    for (tool, args, code) in [
        (
            "wait",
            json!({"taskId": id, "timeoutSeconds": 0}),
            "INVALID_INPUT",
        ),
        (
            "wait",
            json!({"taskId": id, "timeoutSeconds": 61}),
            "INVALID_INPUT",
        ),
        ("wait", json!({"taskId": id, "after": 999}), "INVALID_INPUT"),
        (
            "events",
            json!({"taskId": id, "after": 999}),
            "INVALID_INPUT",
        ),
        (
            "events",
            json!({"taskId": id, "limit": 1001}),
            "INVALID_INPUT",
        ),
        (
            "read_result",
            json!({"taskId": id, "limit": 1}),
            "INVALID_INPUT",
        ),
        (
            "read_result",
            json!({"taskId": id, "offset": 100000}),
            "INVALID_INPUT",
        ),
        ("cancel", json!({"taskId": id}), "TASK_NOT_CANCELABLE"),
    ] {
        assert_eq!(h.fail(tool, args.clone()).await, code, "{tool} {args}");
    }
    assert_eq!(
        h.call("tasks", json!({})).await["tasks"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_profiles_refuse_write_and_make_tasks_read_only() {
    let h = harness(McpOptions {
        profile: Profile::Query,
        ..McpOptions::default()
    })
    .await;
    assert_eq!(
        h.fail("run", json!({"prompt": "hi", "mode": "write"}))
            .await,
        "MODE_NOT_ALLOWED"
    );
    let run = h.call("run", json!({"prompt": "write a.txt: no"})).await;
    assert_eq!(run["mode"], "read-only");
    let id = run["taskId"].as_str().unwrap().to_string();
    h.wait_done(&id).await;
    let result = h.call("result", json!({"taskId": id})).await;
    assert_eq!(result["refusals"].as_array().unwrap().len(), 1, "{result}");
    let resumed = h
        .call(
            "resume",
            json!({"contextId": run["contextId"], "prompt": "What is here?"}),
        )
        .await;
    assert_eq!(resumed["mode"], "read-only");
    let health = h.call("health", json!({"probe": false})).await;
    assert_eq!(health["toolProfile"], "query");
    assert_eq!(health["readOnly"], true);
    assert!(health["agents"][0]["starts"].is_null());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_is_idempotent_and_runs_as_the_contexts_next_turn() {
    let h = harness(McpOptions::default()).await;
    let first = h
        .call("run", json!({"prompt": "run sleep 1\nwrite a.txt: one"}))
        .await;
    let context = first["contextId"].as_str().unwrap().to_string();
    let first_id = first["taskId"].as_str().unwrap().to_string();

    let receipt = h
        .call(
            "send_message",
            json!({"taskId": first_id, "messageId": "m-1", "text": "append a.txt: two\nread a.txt"}),
        )
        .await;
    assert_eq!(receipt["state"], "queued", "{receipt}");
    assert_eq!(receipt["duplicate"], false);
    assert_eq!(receipt["contextId"], context.as_str());
    let next_id = receipt["continuationTaskId"].as_str().unwrap().to_string();
    assert_ne!(next_id, first_id);

    let status = h.call("status", json!({"taskId": first_id})).await;
    assert_eq!(status["continuationPending"], true);
    assert_eq!(status["queuedTaskIds"][0], next_id.as_str());

    let again = h
        .call(
            "send_message",
            json!({"contextId": context, "messageId": "m-1", "text": "append a.txt: two\nread a.txt"}),
        )
        .await;
    assert_eq!(again["duplicate"], true);
    assert_eq!(again["continuationTaskId"], next_id.as_str());
    assert_eq!(
        h.fail(
            "send_message",
            json!({"contextId": context, "messageId": "m-1", "text": "something else"})
        )
        .await,
        "MESSAGE_ID_CONFLICT"
    );
    assert_eq!(
        h.fail(
            "send_message",
            json!({"contextId": context, "taskId": first_id, "messageId": "m-2", "text": "x"})
        )
        .await,
        "INVALID_INPUT"
    );
    // The tool is for short input: over 2000 characters is refused (resume takes long prompts).
    assert_eq!(
        h.fail(
            "send_message",
            json!({"contextId": context, "messageId": "m-3", "text": "é".repeat(2001)})
        )
        .await,
        "INVALID_INPUT"
    );

    h.wait_done(&first_id).await;
    h.wait_done(&next_id).await;
    let first_task = h.engine.task(&first_id).unwrap();
    let next_task = h.engine.task(&next_id).unwrap();
    assert_eq!(first_task.state, TaskState::Completed);
    assert_eq!(next_task.state, TaskState::Completed);
    assert_eq!(next_task.context_id, context);
    // The message ran after the first turn ended, in the same sandbox.
    let next_events = h.engine.events(&next_task.id, 0, 1000).unwrap();
    let started = next_events
        .iter()
        .find(|e| matches!(&e.kind, legate_core::EventKind::Status { state, .. } if *state == TaskState::Working))
        .unwrap();
    assert!(started.at >= first_task.updated_at);
    let answer = next_task.result.unwrap().text;
    assert!(answer.contains("onetwo"), "{answer}");
    let receipt = h
        .call(
            "send_message",
            json!({"contextId": context, "messageId": "m-1", "text": "append a.txt: two\nread a.txt"}),
        )
        .await;
    assert_eq!(receipt["state"], "sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silence_still_brings_progress_and_a_timed_out_wait_leaves_the_task_running() {
    let h = harness(McpOptions {
        heartbeat: Duration::from_millis(300),
        ..McpOptions::default()
    })
    .await;
    let run = h.call("run", json!({"prompt": "run sleep 3"})).await;
    let id = run["taskId"].as_str().unwrap().to_string();
    let w = h
        .wait_with_progress(json!({"taskId": id, "timeoutSeconds": 2}), "quiet")
        .await;
    assert_eq!(w["ready"], false);
    assert_eq!(w["timedOut"], true);
    let progress = h.handler.progress.lock().unwrap().clone();
    let beats = progress
        .iter()
        .filter(|p| {
            p.message
                .as_deref()
                .unwrap_or("")
                .starts_with("no new event")
        })
        .count();
    assert!(beats >= 2, "{progress:?}");
    assert_counted(&progress);
    h.wait_done(&id).await;
    assert_eq!(h.engine.task(&id).unwrap().state, TaskState::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_leaves_does_not_cancel_its_task() {
    let h = harness(McpOptions::default()).await;
    let run = h
        .call("run", json!({"prompt": "run sleep 1\nwrite done.txt: yes"}))
        .await;
    let id = run["taskId"].as_str().unwrap().to_string();
    let McpFront {
        engine,
        client,
        kit: _kit,
        ..
    } = h;
    client.cancel().await.unwrap();
    let task = tokio::time::timeout(
        Duration::from_secs(30),
        engine.wait(&legate_core::TaskId(id)),
    )
    .await
    .unwrap()
    .unwrap();
    assert_eq!(task.state, TaskState::Completed);
    drop(_kit);
}

/// A context keeps the workspace it started in: `run` into an existing context with another
/// workspace is INVALID_WORKSPACE and stores nothing; without one it inherits the context's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_keeps_its_workspace() {
    let h = harness(McpOptions::default()).await;
    let shared = h.kit.base().join("shared");
    let other = shared.with_file_name("other");
    std::fs::create_dir_all(&shared).unwrap();
    std::fs::create_dir_all(&other).unwrap();

    let first = h
        .call(
            "run",
            json!({"prompt": "write a.txt: one", "workingDirectory": shared}),
        )
        .await;
    let context = first["contextId"].as_str().unwrap().to_string();
    h.wait_done(first["taskId"].as_str().unwrap()).await;
    assert_eq!(
        std::fs::read_to_string(shared.join("a.txt")).unwrap(),
        "one"
    );

    let count = |tasks: Value| tasks["tasks"].as_array().unwrap().len();
    let before = count(h.call("tasks", json!({})).await);
    assert_eq!(
        h.fail(
            "run",
            json!({"prompt": "read a.txt", "contextId": context, "workingDirectory": other}),
        )
        .await,
        "INVALID_WORKSPACE"
    );
    assert_eq!(count(h.call("tasks", json!({})).await), before);

    let inherited = h
        .call("run", json!({"prompt": "read a.txt", "contextId": context}))
        .await;
    assert_eq!(inherited["workspace"], "shared", "{inherited}");
    let id = inherited["taskId"].as_str().unwrap().to_string();
    h.wait_done(&id).await;
    let status = h.call("status", json!({"taskId": id})).await;
    assert_eq!(status["task"]["root"], shared.display().to_string());
    let result = h.call("result", json!({"taskId": id})).await;
    assert!(
        result["answer"].as_str().unwrap().contains("one"),
        "{result}"
    );

    let sandboxed = h.call("run", json!({"prompt": "What is here?"})).await;
    assert_eq!(
        h.fail(
            "run",
            json!({"prompt": "read a.txt", "contextId": sandboxed["contextId"],
                   "workingDirectory": shared}),
        )
        .await,
        "INVALID_WORKSPACE"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_and_status_report_a_request_awaiting_supervision() {
    let kit = EngineHarness::builder()
        .supervisor(Arc::new(AskCommands))
        .start();
    let h = harness_on(kit, McpOptions::default()).await;
    let run = h.call("run", json!({"prompt": "run touch x.txt"})).await;
    let task_id = run["taskId"].as_str().unwrap().to_string();
    let status = h.call("status", json!({"taskId": task_id})).await;
    assert!(status["awaitingSupervision"].is_array(), "{status}");
    // Wait until the approval is announced; `wait` then lists it.
    let mut after = 0;
    let waiting = loop {
        let w = h
            .call(
                "wait",
                json!({"taskId": task_id, "after": after, "timeoutSeconds": 30}),
            )
            .await;
        after = w["nextCursor"].as_u64().unwrap();
        if !w["awaitingSupervision"].as_array().unwrap().is_empty() {
            break w;
        }
        assert_ne!(w["ready"], true, "the task ended without asking: {w}");
    };
    let awaiting = &waiting["awaitingSupervision"][0];
    assert_eq!(awaiting["title"], "touch x.txt", "{awaiting}");
    assert_eq!(awaiting["kind"], "execute");
    assert_eq!(awaiting["ruleId"], "ask-commands");
    assert!(awaiting["deadline"].as_i64().unwrap() > 0);
    let id = awaiting["id"].as_str().unwrap().to_string();
    let status = h.call("status", json!({"taskId": task_id})).await;
    assert_eq!(status["awaitingSupervision"][0]["id"], id.as_str());
    h.engine
        .approvals()
        .answer(
            &id,
            legate_engine::ApprovalAnswer {
                answer: legate_engine::Answer::Deny,
                reason: None,
                channel: "mcp".into(),
            },
        )
        .unwrap();
    let events = h.wait_done(&task_id).await;
    assert!(!events.is_empty());
    let status = h.call("status", json!({"taskId": task_id})).await;
    assert_eq!(status["awaitingSupervision"], json!([]), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reviewers_checked_report_is_in_its_result_and_schema() {
    let h = harness(McpOptions::default()).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("lib.rs"), "fn f() {\n    x.unwrap();\n}\n").unwrap();
    let mut req = legate_engine::SubmitRequest::new("review lib.rs");
    req.role = Some("reviewer".into());
    req.workspace = legate_engine::WorkspaceRequest::Shared(dir.path().to_path_buf());
    let task = h.engine.submit(req).unwrap();
    let done = h.engine.wait(&task.id).await.unwrap();
    assert_eq!(done.state, TaskState::Completed, "{:?}", done.error);

    let out = h
        .call(
            "result",
            json!({"taskId": task.id.to_string(), "includeResult": false}),
        )
        .await;
    let report = &out["report"];
    assert_eq!(report["kind"], "review", "{out}");
    assert_eq!(report["origin"], "agent-reported");
    assert_eq!(report["citationsChecked"], true);
    assert_eq!(report["findings"][0]["path"], "lib.rs");
    assert_eq!(report["findings"][0]["line"], 2);
    assert_eq!(report["findings"][0]["quote"], "x.unwrap();");

    // The published output schema describes it: a plan or a review, with its origin.
    let tools = h.client.list_all_tools().await.unwrap();
    let result = tools.iter().find(|t| t.name == "result").unwrap();
    let schema = serde_json::to_string(result.output_schema.as_ref().unwrap()).unwrap();
    for word in [
        "citationsChecked",
        "reviewedFiles",
        "agent-reported",
        "\"review\"",
    ] {
        assert!(schema.contains(word), "{word} missing from {schema}");
    }
}

/// `run` passes `tap: true` to the engine (issue 34): the task's ACP frames are recorded; a
/// task run without it was not tapped (`TAP_OFF`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_tap_records_the_tasks_frames() {
    let h = harness(McpOptions::default()).await;
    let tapped = h
        .call("run", json!({"prompt": "!say over mcp", "tap": true}))
        .await;
    let tapped = tapped["taskId"].as_str().unwrap().to_string();
    h.wait_done(&tapped).await;
    let plain = h.call("run", json!({"prompt": "!say untapped"})).await;
    let plain = plain["taskId"].as_str().unwrap().to_string();
    h.wait_done(&plain).await;

    let records = h.engine.records();
    let task = records.find_task(&tapped).unwrap();
    assert!(task.controls.tap);
    let frames = records.tap_frames(&task, 0, 1000).unwrap();
    assert!(
        frames
            .iter()
            .any(|f| f.direction == legate_core::TapDirection::ToAgent
                && f.frame.contains("session/prompt")),
        "{frames:?}"
    );
    assert!(
        frames
            .iter()
            .any(|f| f.direction == legate_core::TapDirection::FromAgent
                && f.frame.contains("over mcp")),
        "{frames:?}"
    );
    let task = records.find_task(&plain).unwrap();
    let err = records.tap_frames(&task, 0, 1000).unwrap_err();
    assert_eq!(err.code, legate_core::ErrorCode::TapOff, "{err}");
}
