//! The engine against the scripted agent (revisor plus faults) on real pipes and a real
//! SQLite store: lifecycle, faults, admission, cancel, timeouts, subscribers and sessions.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, EventKind, Task, TaskState};
use legate_engine::{EngineConfig, SubmitRequest};
use legate_testkit::harness::HarnessBuilder;
use legate_testkit::{EngineHarness, TestAgent, procs};
use std::time::Duration;

/// The suite's agents: the scripted agent as `agent`, and one per fault chosen at start; an
/// ACP handshake limit short enough for `hang-initialize`.
fn builder() -> HarnessBuilder {
    let mut b = EngineHarness::builder()
        .agent(TestAgent::scripted("agent"))
        .acp_handshake(Duration::from_secs(2));
    for fault in [
        "exit-at-start",
        "hang-initialize",
        "garbage-at-start",
        "auth-prompt",
    ] {
        b = b.agent(TestAgent::scripted(fault).fault(fault));
    }
    b
}

fn harness(tune: impl FnOnce(&mut EngineConfig) + 'static) -> EngineHarness {
    builder().config(tune).start()
}

fn request(prompt: &str) -> SubmitRequest {
    SubmitRequest::new(prompt)
}

async fn run(h: &EngineHarness, req: SubmitRequest) -> Task {
    h.run(req).await
}

async fn wait_state(h: &EngineHarness, task: &Task, state: TaskState) {
    h.wait_state(&task.id, state).await;
}

/// Waits (on pidfds, not polling) until no live process carries `marker` (`NAME=value`).
async fn until_no_process(marker: &str) -> bool {
    procs::until_none_with_env(marker, Duration::from_secs(10)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_task_completes_with_its_answer_and_events_in_order() {
    let h = harness(|_| {});
    let task = run(&h, request("write a.txt: hello\nWhat is here?")).await;
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    let result = task.result.clone().unwrap();
    assert!(!result.text.is_empty());
    assert_eq!(result.stop_reason.as_deref(), Some("end_turn"));
    assert!(result.tool_calls >= 1);
    assert!(task.session_id.is_some());
    let root = task.root.clone().unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("a.txt")).unwrap(),
        "hello"
    );
    let events = h.engine.events(&task.id, 0, 10_000).unwrap();
    for (i, e) in events.iter().enumerate() {
        assert_eq!(e.seq, i as u64 + 1);
    }
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Permission { .. }))
    );
    assert!(matches!(
        events.last().unwrap().kind,
        EventKind::Status {
            state: TaskState::Completed,
            ..
        }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_that_fail_to_start_end_with_agent_start_failed() {
    let h = harness(|_| {});
    for agent in ["exit-at-start", "hang-initialize"] {
        let mut req = request("hi");
        req.agent = Some(agent.into());
        let task = run(&h, req).await;
        assert_eq!(task.state, TaskState::Failed, "{agent}: {task:?}");
        assert_eq!(
            task.error_code(),
            Some(ErrorCode::AgentStartFailed),
            "{agent}: {task:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_exits_mid_turn_ends_with_agent_exited() {
    let h = harness(|_| {});
    let task = run(&h, request("!exit 3")).await;
    assert_eq!(task.state, TaskState::Failed, "{task:?}");
    assert_eq!(task.error_code(), Some(ErrorCode::AgentExited), "{task:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_tool_calls_of_a_turn_that_ends_end_turn_are_counted_in_the_status() {
    // Codex reports a turn whose commands failed with `end_turn`: the task completes, and
    // its status says how many tool calls failed.
    let h = harness(|_| {});
    let task = run(&h, request("run true\n!fail-tool cargo build")).await;
    assert_eq!(task.state, TaskState::Completed, "{task:?}");
    let result = task.result.clone().unwrap();
    assert_eq!(result.stop_reason.as_deref(), Some("end_turn"));
    assert_eq!((result.failed_tool_calls, result.tool_calls), (1, 2));
    assert_eq!(
        task.status_message.as_deref(),
        Some("1 of 2 tool calls failed"),
        "{task:?}"
    );
    let events = h.engine.events(&task.id, 0, 10_000).unwrap();
    assert!(events.iter().any(|e| matches!(
        &e.kind,
        EventKind::ToolCallUpdate(u) if u.status == Some(legate_core::ToolStatus::Failed)
    )));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_auth_error_at_the_prompt_ends_the_task_auth_required() {
    // -32000 at `session/prompt` (Claude's adapter when it is not logged in).
    let h = harness(|_| {});
    let mut req = request("write a.txt: hello");
    req.agent = Some("auth-prompt".into());
    let task = run(&h, req).await;
    assert_eq!(task.state, TaskState::AuthRequired, "{task:?}");
    assert_eq!(
        task.error_code(),
        Some(ErrorCode::AgentAuthRequired),
        "{task:?}"
    );
    let message = task.status_message.clone().unwrap_or_default();
    assert!(
        message.contains("log in with the agent's own CLI"),
        "{message}"
    );
    let root = task.root.clone().unwrap();
    assert!(!root.join("a.txt").exists(), "the turn never ran");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_from_the_agent_ends_in_a_clear_state() {
    let h = builder()
        .agent(TestAgent::scripted("marked").env("LEGATE_TEST_MARK", "malformed-1"))
        .start();
    // The task's notices about its agent's stdout.
    let notices = |task: &Task| {
        h.engine
            .events(&task.id, 0, 10_000)
            .unwrap()
            .into_iter()
            .filter(|e| {
                matches!(&e.kind, EventKind::Notice { detail, .. } if detail["stream"] == "stdout")
            })
            .count()
    };
    let ends = |task: &Task, state: TaskState, code: Option<ErrorCode>, notes: usize| {
        assert_eq!((task.state, task.error_code()), (state, code), "{task:?}");
        assert_eq!(notices(task), notes, "{task:?}");
    };

    // A line that is not JSON at all (a stray log line): reported, tolerated.
    let mut req = request("What is here?");
    req.agent = Some("garbage-at-start".into());
    ends(&run(&h, req).await, TaskState::Completed, None, 1);
    ends(
        &run(&h, request("!garbage\nhello?")).await,
        TaskState::Completed,
        None,
        1,
    );

    // JSON that is not JSON-RPC: two in a turn are reported and tolerated; the third ends
    // the turn with AGENT_PROTOCOL_ERROR.
    ends(
        &run(&h, request("!not-jsonrpc 2\nhello?")).await,
        TaskState::Completed,
        None,
        2,
    );
    let mut req = request("!not-jsonrpc 3\n!hang");
    req.agent = Some("marked".into());
    let protocol = Some(ErrorCode::AgentProtocolError);
    ends(&run(&h, req).await, TaskState::Failed, protocol, 3);

    // A response to no request ends the turn at once, not at its timeout.
    let mut req = request("!unknown-response");
    req.agent = Some("marked".into());
    req.timeout = Some(Duration::from_secs(600));
    ends(&run(&h, req).await, TaskState::Failed, protocol, 1);
    assert!(
        until_no_process("LEGATE_TEST_MARK=malformed-1").await,
        "an agent that broke the protocol outlived its task"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_agent_times_out_and_leaves_no_process() {
    let h = builder()
        .agent(TestAgent::scripted("agent").env("LEGATE_TEST_MARK", "timeout-1"))
        .start();
    let mut req = request("!hang");
    req.timeout = Some(Duration::from_secs(1));
    let task = run(&h, req).await;
    assert_eq!(task.state, TaskState::Failed);
    assert_eq!(task.error_code(), Some(ErrorCode::TaskTimeout));
    assert!(
        until_no_process("LEGATE_TEST_MARK=timeout-1").await,
        "the agent process outlived its timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_queue_is_bounded_and_canceling_a_queued_task_leaves_the_running_one() {
    let h = harness(|c| {
        c.max_running = 1;
        c.max_queued = 2;
    });
    let running = h.engine.submit(request("!hang")).unwrap();
    wait_state(&h, &running, TaskState::Working).await;
    let q1 = h.engine.submit(request("!hang")).unwrap();
    let _q2 = h.engine.submit(request("hello")).unwrap();
    let err = h.engine.submit(request("one too many")).unwrap_err();
    assert_eq!(err.code, ErrorCode::QueueFull);

    h.engine.cancel(q1.id.as_str()).unwrap();
    let q1_done = tokio::time::timeout(Duration::from_secs(10), h.engine.wait(&q1.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(q1_done.state, TaskState::Canceled);
    assert_eq!(
        h.engine.task(running.id.as_str()).unwrap().state,
        TaskState::Working
    );

    // A canceled task always ends canceled, and a finished one cannot be canceled again.
    h.engine.cancel(running.id.as_str()).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(20), h.engine.wait(&running.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.state, TaskState::Canceled, "{done:?}");
    let err = h.engine.cancel(running.id.as_str()).unwrap_err();
    assert_eq!(err.code, ErrorCode::TaskNotCancelable);
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_and_late_subscribers_see_every_event_once_in_order() {
    let h = harness(|_| {});
    let task = h.engine.submit(request("!chunks 2000")).unwrap();
    let mut live = h.engine.subscribe(&task.id, 0);
    let mut seen = Vec::new();
    while let Some(e) = live.next().await.unwrap() {
        seen.push(e.seq);
    }
    let stored = h.engine.events(&task.id, 0, 100_000).unwrap();
    assert_eq!(seen, stored.iter().map(|e| e.seq).collect::<Vec<_>>());
    let chunks = stored
        .iter()
        .filter(|e| matches!(e.kind, EventKind::Message { .. }))
        .count();
    assert!(chunks >= 2000, "{chunks}");

    let mut late = h.engine.subscribe(&task.id, 10);
    let mut late_seen = Vec::new();
    while let Some(e) = late.next().await.unwrap() {
        late_seen.push(e.seq);
    }
    assert_eq!(late_seen, seen[10..].to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_continues_its_agent_session_and_idle_sessions_stop() {
    let h = builder()
        .agent(TestAgent::scripted("agent").env("LEGATE_TEST_MARK", "idle-1"))
        .config(|c| c.idle_timeout = Duration::from_secs(1))
        .start();
    let mut first = request("write n.txt: one");
    first.context_id = Some("ctx-a".into());
    let a = run(&h, first).await;
    let mut second = request("read n.txt");
    second.context_id = Some("ctx-a".into());
    let b = run(&h, second).await;
    assert_eq!(b.state, TaskState::Completed);
    assert_eq!(a.session_id, b.session_id);
    assert_eq!(a.root, b.root);
    assert!(b.result.clone().unwrap().text.contains("one"));
    let events = h.engine.events(&b.id, 0, 1000).unwrap();
    assert!(
        events
            .iter()
            .any(|e| matches!(e.kind, EventKind::Session { resumed: true, .. }))
    );

    // Another agent cannot take over the context.
    let mut other = request("hi");
    other.context_id = Some("ctx-a".into());
    other.agent = Some("garbage-at-start".into());
    assert_eq!(
        h.engine.submit(other).unwrap_err().code,
        ErrorCode::InvalidInput
    );

    assert!(
        until_no_process("LEGATE_TEST_MARK=idle-1").await,
        "the idle agent process was not stopped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_prompt_waits_for_input_and_a_reply_resumes_the_same_task() {
    let h = harness(|_| {});
    // `submit` still refuses an empty prompt.
    let err = h.engine.submit(request("  ")).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);

    let waiting = h.engine.submit_or_ask(request(" \n ")).unwrap();
    assert_eq!(waiting.state, TaskState::InputRequired);
    assert_eq!(
        waiting.status_message.as_deref(),
        Some(legate_engine::EMPTY_PROMPT_MESSAGE)
    );
    let stored = h.engine.task(waiting.id.as_str()).unwrap();
    assert_eq!(stored.state, TaskState::InputRequired);
    let events = h.engine.events(&waiting.id, 0, 100).unwrap();
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(matches!(
        &events[0].kind,
        EventKind::Status { state: TaskState::InputRequired, message: Some(m), .. }
            if m.contains("reply into this task")
    ));
    // No agent ran: still waiting a little later. This sleep is the test's subject (nothing
    // may start during it); no event can announce that nothing happened.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        h.engine.task(waiting.id.as_str()).unwrap().state,
        TaskState::InputRequired
    );

    let err = h.engine.reply(waiting.id.as_str(), "   ").unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidInput);
    let resumed = h
        .engine
        .reply(waiting.id.as_str(), "write b.txt: hi\nWhat is here?")
        .unwrap();
    assert_eq!(resumed.id, waiting.id);
    assert_eq!(resumed.context_id, waiting.context_id);
    assert_eq!(resumed.state, TaskState::Submitted);
    let done = tokio::time::timeout(Duration::from_secs(60), h.engine.wait(&waiting.id))
        .await
        .expect("the task ends")
        .unwrap();
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert_eq!(done.prompt, "write b.txt: hi\nWhat is here?");
    let root = done.root.clone().unwrap();
    assert_eq!(std::fs::read_to_string(root.join("b.txt")).unwrap(), "hi");

    // A task that does not wait for input takes no reply.
    let err = h.engine.reply(waiting.id.as_str(), "more").unwrap_err();
    assert_eq!(err.code, ErrorCode::TaskNotAwaitingInput);
    assert_eq!(err.code.as_str(), "TASK_NOT_AWAITING_INPUT");
    let err = h.engine.reply("no-such-task", "more").unwrap_err();
    assert_eq!(err.code, ErrorCode::TaskNotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_waiting_for_input_can_be_canceled() {
    let h = harness(|_| {});
    let waiting = h.engine.submit_or_ask(request("")).unwrap();
    assert_eq!(waiting.state, TaskState::InputRequired);
    h.engine.cancel(waiting.id.as_str()).unwrap();
    let task = tokio::time::timeout(Duration::from_secs(10), h.engine.wait(&waiting.id))
        .await
        .expect("the task ends")
        .unwrap();
    assert_eq!(task.state, TaskState::Canceled);
    let err = h.engine.reply(waiting.id.as_str(), "go").unwrap_err();
    assert_eq!(err.code, ErrorCode::TaskNotAwaitingInput);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn next_turn_asks_sends_once_or_resumes_in_the_contexts_workspace() {
    let h = harness(|_| {});
    let shared = tempfile::tempdir().unwrap();
    let mut first = request("write n.txt: one");
    first.context_id = Some("ctx-turn".into());
    first.workspace = legate_engine::WorkspaceRequest::Shared(shared.path().to_path_buf());
    let a = run(&h, first).await;
    assert_eq!(a.state, TaskState::Completed);
    let turn = |prompt: &str| legate_engine::ContinueRequest {
        context_id: "ctx-turn".into(),
        prompt: prompt.into(),
        mode: None,
        timeout: None,
    };

    // Empty: the context's next task waits for input, in the same shared directory.
    let asked = h
        .engine
        .messages()
        .next_turn(turn("  "), Some("m-0".into()))
        .unwrap();
    assert_eq!(asked.state, TaskState::InputRequired);
    assert_eq!(asked.context_id, "ctx-turn");
    assert_eq!(asked.root, a.root);
    h.engine.cancel(asked.id.as_str()).unwrap();

    // With a message id, longer than the MCP tool's 2000 characters: once, idempotently.
    let long = format!("read n.txt\n{}", "# padding\n".repeat(300));
    let b = h
        .engine
        .messages()
        .next_turn(turn(&long), Some("m-1".into()))
        .unwrap();
    let again = h
        .engine
        .messages()
        .next_turn(turn(&long), Some("m-1".into()))
        .unwrap();
    assert_eq!(b.id, again.id, "the same id and text is the same task");
    let err = h
        .engine
        .messages()
        .next_turn(turn("read other.txt"), Some("m-1".into()))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::MessageIdConflict);
    let b = tokio::time::timeout(Duration::from_secs(60), h.engine.wait(&b.id))
        .await
        .expect("the task ends")
        .unwrap();
    assert_eq!(b.state, TaskState::Completed, "{b:?}");
    assert!(b.result.unwrap().text.contains("one"));

    // Without one: a plain resume, a new task each time.
    let c = h
        .engine
        .messages()
        .next_turn(turn("read n.txt"), None)
        .unwrap();
    let d = h
        .engine
        .messages()
        .next_turn(turn("read n.txt"), None)
        .unwrap();
    assert_ne!(c.id, d.id);
    for t in [c, d] {
        let t = tokio::time::timeout(Duration::from_secs(60), h.engine.wait(&t.id))
            .await
            .expect("the task ends")
            .unwrap();
        assert_eq!(t.root, a.root);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_keeps_the_workspace_it_started_with() {
    use legate_engine::WorkspaceRequest;
    let h = harness(|_| {});
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut first = request("write a.txt: one");
    first.context_id = Some("ctx-keep".into());
    first.workspace = WorkspaceRequest::Shared(one.path().to_path_buf());
    let a = run(&h, first).await;
    assert_eq!(a.state, TaskState::Completed);
    let stored = h.engine.tasks(&Default::default()).unwrap().len();

    // Another directory, or a sandbox, for the same context: refused, nothing stored.
    for other in [
        WorkspaceRequest::Shared(two.path().to_path_buf()),
        WorkspaceRequest::Sandbox,
    ] {
        let mut next = request("write b.txt: two");
        next.context_id = Some("ctx-keep".into());
        next.workspace = other.clone();
        let err = h.engine.submit(next).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidWorkspace, "{other:?}: {err}");
        assert!(err.message.contains("keeps the workspace"), "{err}");
    }
    assert_eq!(h.engine.tasks(&Default::default()).unwrap().len(), stored);
    assert!(!two.path().join("b.txt").exists());

    // Left out, or the same directory by another spelling: the context's directory.
    let mut next = request("write b.txt: two");
    next.context_id = Some("ctx-keep".into());
    let b = run(&h, next).await;
    assert_eq!(
        (b.state, b.workspace, &b.root),
        (TaskState::Completed, a.workspace, &a.root)
    );
    assert!(one.path().join("b.txt").exists());
    let mut again = request("read b.txt");
    again.context_id = Some("ctx-keep".into());
    again.workspace = WorkspaceRequest::Shared(
        one.path()
            .join(".")
            .join("..")
            .join(one.path().file_name().unwrap()),
    );
    let c = run(&h, again).await;
    assert_eq!((c.state, &c.root), (TaskState::Completed, &a.root));

    // A sandbox context refuses a directory, and a new context still gets its sandbox.
    let mut sandboxed = request("write s.txt: s");
    sandboxed.context_id = Some("ctx-sandbox".into());
    let s = run(&h, sandboxed).await;
    assert_eq!(s.workspace, legate_core::WorkspaceKind::Sandbox);
    let mut moved = request("write s.txt: t");
    moved.context_id = Some("ctx-sandbox".into());
    moved.workspace = WorkspaceRequest::Shared(two.path().to_path_buf());
    let err = h.engine.submit(moved).unwrap_err();
    assert_eq!(err.code, ErrorCode::InvalidWorkspace);
    assert!(err.message.contains("its sandbox"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_tasks_past_the_retention_limit_are_pruned_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let engine = builder().engine_in(dir.path());
    let mut ids = Vec::new();
    for i in 0..4 {
        let task = engine
            .submit(request(&format!("write f{i}.txt: {i}")))
            .unwrap();
        let task = tokio::time::timeout(Duration::from_secs(60), engine.wait(&task.id))
            .await
            .expect("the task ends")
            .unwrap();
        assert_eq!(task.state, TaskState::Completed);
        ids.push(task.id);
        // Distinct creation times, so "oldest" is well defined: the sleep moves the clock, it
        // synchronises nothing.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    engine.shutdown().await;
    drop(engine);
    let next = builder().config(|c| c.retention = 2).engine_in(dir.path());
    let kept: Vec<_> = next
        .tasks(&Default::default())
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(
        kept,
        [ids[3].clone(), ids[2].clone()],
        "the newest two stay"
    );
    assert!(
        next.events(&ids[0], 0, 10).unwrap().is_empty(),
        "events go too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_prompt_answers_usage_fills_the_tasks_usage_and_the_report() {
    let h = harness(|_| {});
    let t = run(&h, request("!usage 30 12\nwhat is here?")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let u = t.usage.clone().expect("usage from the prompt's answer");
    assert_eq!(u.input_tokens, Some(30));
    assert_eq!(u.output_tokens, Some(12));
    assert_eq!(u.total_tokens, Some(42));
    // revisor's usage_update fills the context fields of the same usage.
    assert!(u.context_used.is_some(), "{u:?}");
    assert_eq!(u.model.as_deref(), Some(legate_revisor::MODELS[0].0));
    let report = h
        .engine
        .records()
        .usage(&legate_engine::UsageFilter {
            task_id: Some(t.id.0.clone()),
            ..legate_engine::UsageFilter::default()
        })
        .unwrap();
    assert_eq!(report.total.total_tokens, Some(42));
    assert_eq!(
        report.by_model[legate_revisor::MODELS[0].0].input_tokens,
        Some(30)
    );
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_schema_for_an_acp_agent_is_refused_at_submit() {
    let h = harness(|_| {});
    let e = h
        .engine
        .submit(SubmitRequest {
            json_schema: Some(serde_json::json!({"type": "object"})),
            ..request("hi")
        })
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput);
    assert!(e.message.contains("kind agy"), "{e}");
    assert!(h.engine.tasks(&Default::default()).unwrap().is_empty());
    h.engine.shutdown().await;
}
