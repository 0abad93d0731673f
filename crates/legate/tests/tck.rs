//! The TCK profile behind `legate serve`, driven over HTTP the way the A2A TCK drives its
//! system under test: the behaviour is chosen by the prefix of each `messageId`, the agent is
//! the real `legate agent tck` over ACP, and the token is required.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use legate_frontkit::served::{A2aServed, raw};
use serde_json::{Value, json};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// The server on a home whose default agent is the TCK profile, configured by `config`.
fn with_config(config: &str) -> A2aServed {
    A2aServed::start(CliHome::with_config(LEGATE, config), &["--port", "0"])
}

fn start() -> A2aServed {
    with_config("default_agent = \"tck\"\n\n[agents.tck]\n")
}

fn state(task: &Value) -> &str {
    task["status"]["state"].as_str().unwrap_or("")
}

fn status_text(task: &Value) -> &str {
    task["status"]["message"]["parts"][0]["text"]
        .as_str()
        .unwrap_or("")
}

#[test]
fn tck_scenarios_reach_their_states_through_the_real_server() {
    let sut = start();
    assert!(
        sut.served
            .printed
            .iter()
            .any(|l| l.contains("tck") && l.contains("(legate-tck ")),
        "{:?}",
        sut.served.printed
    );

    // input-required, then a reply into the same task (with its own prefix) completes it.
    let asked = sut.send("tck-input-required-e2e", "start", None);
    assert_eq!(state(&asked), "TASK_STATE_INPUT_REQUIRED", "{asked}");
    assert_eq!(status_text(&asked), legate_tck::scenario::INPUT_QUESTION);
    let id = asked["id"].as_str().unwrap().to_string();
    let done = sut.send("tck-complete-task-e2e", "finish", Some(&id));
    assert_eq!(done["id"], json!(id));
    assert_eq!(done["contextId"], asked["contextId"]);
    assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(
        done["artifacts"][0]["parts"][0]["text"],
        json!("Hello from TCK")
    );
    // A finished task takes no reply, and cannot be subscribed to.
    let again = sut.rpc(
        "SendMessage",
        json!({"message": {"messageId": "tck-complete-task-e2e-2", "role": "ROLE_USER",
            "taskId": id, "parts": [{"text": "more"}]}}),
    );
    assert_eq!(again["error"]["code"], json!(-32004), "{again}");
    let sub = raw(
        &sut.addr,
        "POST",
        "/",
        &sut.addr,
        &[
            ("Content-Type", "application/json"),
            ("A2A-Version", "1.0"),
            ("Authorization", &sut.bearer),
        ],
        &json!({"jsonrpc": "2.0", "id": 8, "method": "SubscribeToTask", "params": {"id": id}})
            .to_string(),
    );
    assert!(sub.body.contains("-32004"), "{sub:?}");

    // rejected (ACP refusal) and failed (an error from the agent).
    let rejected = sut.send("tck-reject-task-e2e", "no", None);
    assert_eq!(state(&rejected), "TASK_STATE_REJECTED", "{rejected}");
    assert_eq!(status_text(&rejected), legate_tck::scenario::REJECTION);
    let failed = sut.send("tck-fail-task-e2e", "boom", None);
    assert_eq!(state(&failed), "TASK_STATE_FAILED", "{failed}");
    assert!(status_text(&failed).starts_with("AGENT_FAILED"), "{failed}");
    assert!(
        status_text(&failed).contains(legate_tck::scenario::FAILURE),
        "{failed}"
    );

    // A file artifact over HTTP+JSON, answered as application/json.
    let r = raw(
        &sut.addr,
        "POST",
        "/message:send",
        &sut.addr,
        &[
            ("Content-Type", "application/json"),
            ("A2A-Version", "1.0"),
            ("Authorization", &sut.bearer),
        ],
        &json!({"message": {"messageId": "tck-artifact-file-e2e", "role": "ROLE_USER",
            "parts": [{"text": "a file"}]}})
        .to_string(),
    );
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.head.contains("content-type: application/json\r\n"),
        "{r:?}"
    );
    let task: Value = serde_json::from_str(&r.body).unwrap();
    let part = &task["task"]["artifacts"][0]["parts"][0];
    assert_eq!(
        part["raw"],
        json!(legate_tck::scenario::FILE_BYTES_BASE64),
        "{task}"
    );
    assert_eq!(part["filename"], json!("output.txt"));
    assert_eq!(part["mediaType"], json!("text/plain"));

    // HTTP+JSON checks A2A-Version too.
    let r = raw(
        &sut.addr,
        "GET",
        "/tasks",
        &sut.addr,
        &[("A2A-Version", "99.0"), ("Authorization", &sut.bearer)],
        "",
    );
    assert_eq!(r.status, 400, "{r:?}");
    assert!(r.body.contains("VERSION_NOT_SUPPORTED"), "{r:?}");
}

/// How many live processes carry `marker` (`NAME=value`) in their environment.
fn processes_with_env(marker: &str) -> usize {
    legate_testkit::procs::with_env(marker).len()
}

#[test]
fn an_agent_waiting_for_input_outlives_the_idle_timeout_and_an_idle_one_does_not() {
    let sut = with_config(
        "default_agent = \"tck\"\nidle_timeout_secs = 1\n\n[agents.tck]\nenv = { LEGATE_TEST_MARK = \"tck-idle\" }\n",
    );
    let marker = "LEGATE_TEST_MARK=tck-idle";
    let asked = sut.send("tck-input-required-idle", "start", None);
    assert_eq!(state(&asked), "TASK_STATE_INPUT_REQUIRED", "{asked}");
    // Three idle timeouts later, the session that waits for input is still up (the sleep is
    // the subject: idle timeouts elapsing, with no event to wait for).
    std::thread::sleep(std::time::Duration::from_secs(3));
    assert_eq!(
        processes_with_env(marker),
        1,
        "the waiting agent was stopped"
    );
    let id = asked["id"].as_str().unwrap().to_string();
    let done = sut.send("tck-complete-task-idle", "finish", Some(&id));
    assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    // Once nothing waits, the idle agent goes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while processes_with_env(marker) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the idle agent was never stopped"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// The texts of a task's history, and its messages' roles and ids.
fn history(task: &Value) -> Vec<(String, String, String)> {
    task["history"]
        .as_array()
        .map(|h| {
            h.iter()
                .map(|m| {
                    (
                        m["role"].as_str().unwrap_or("").to_string(),
                        m["messageId"].as_str().unwrap_or("").to_string(),
                        m["parts"][0]["text"].as_str().unwrap_or("").to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_direct_answer_is_a_bare_message_and_a_task_keeps_every_turn_in_its_history() {
    let sut = start();

    // DM-MSG-001: the agent says its answer needs no task; SendMessage answers a Message.
    let answer = sut.rpc(
        "SendMessage",
        json!({"message": {"messageId": "tck-message-response-e2e", "role": "ROLE_USER",
                           "parts": [{"text": "hi"}]}}),
    );
    let message = &answer["result"]["message"];
    assert!(answer["result"]["task"].is_null(), "{answer}");
    assert_eq!(message["role"], json!("ROLE_AGENT"), "{answer}");
    assert_eq!(
        message["parts"][0]["text"],
        json!("Direct message response")
    );
    assert!(message["messageId"].as_str().is_some_and(|s| !s.is_empty()));
    assert!(message["taskId"].is_null(), "nothing to track: {answer}");
    // The work is still a stored task, named in the message's metadata.
    let stored = message["metadata"]["legateTaskId"].as_str().unwrap();
    let got = sut.rpc("GetTask", json!({"id": stored}));
    assert_eq!(state(&got["result"]), "TASK_STATE_COMPLETED", "{got}");
    assert_eq!(got["result"]["contextId"], message["contextId"]);
    // Any other answer stays a task.
    let task = sut.send("tck-complete-task-dm", "hello", None);
    assert_eq!(state(&task), "TASK_STATE_COMPLETED", "{task}");

    // CORE-HIST-005/006: every turn of a multi-turn task, in order, with the caller's ids.
    let asked = sut.send("tck-input-required-h0", "TCK prerequisite", None);
    let id = asked["id"].as_str().unwrap().to_string();
    let q = legate_tck::scenario::INPUT_QUESTION;
    for (n, text) in ["TCK history message 1", "TCK history message 2"]
        .iter()
        .enumerate()
    {
        let again = sut.send(&format!("tck-input-required-h{}", n + 1), text, Some(&id));
        assert_eq!(state(&again), "TASK_STATE_INPUT_REQUIRED", "{again}");
    }
    let done = sut.send(
        "tck-complete-task-h3",
        "TCK complete after history",
        Some(&id),
    );
    assert_eq!(state(&done), "TASK_STATE_COMPLETED", "{done}");
    let got = sut.rpc("GetTask", json!({"id": id, "historyLength": 10}));
    let h = history(&got["result"]);
    let texts: Vec<&str> = h.iter().map(|(_, _, t)| t.as_str()).collect();
    assert_eq!(
        texts,
        [
            "TCK prerequisite",
            q,
            "TCK history message 1",
            q,
            "TCK history message 2",
            q,
            "TCK complete after history",
            "Hello from TCK"
        ],
        "{got}"
    );
    let users: Vec<&str> = h
        .iter()
        .filter(|(role, _, _)| role == "ROLE_USER")
        .map(|(_, id, _)| id.as_str())
        .collect();
    assert_eq!(
        users,
        [
            "tck-input-required-h0",
            "tck-input-required-h1",
            "tck-input-required-h2",
            "tck-complete-task-h3"
        ]
    );
    assert!(h[1].0 == "ROLE_AGENT" && h[7].0 == "ROLE_AGENT", "{h:?}");
    // historyLength: the last n of them; 0 none. The blocking answer has the whole history.
    let last = sut.rpc("GetTask", json!({"id": id, "historyLength": 3}));
    let texts: Vec<String> = history(&last["result"]).into_iter().map(|m| m.2).collect();
    assert_eq!(
        texts,
        [q, "TCK complete after history", "Hello from TCK"],
        "{last}"
    );
    let none = sut.rpc("GetTask", json!({"id": id, "historyLength": 0}));
    assert!(history(&none["result"]).is_empty(), "{none}");
    assert_eq!(history(&done).len(), 8, "{done}");
}
