//! The workflow acceptance test, from the binary: plan → two parallel implementations →
//! review → synthesis on revisor (the scripted agent is revisor with directives: `!say` puts
//! a peer-message envelope in an implementer's answer, `!chunks` makes the second
//! implementer slow enough to be killed mid-turn). The process running the group is killed
//! with SIGKILL mid-graph; another `legate` process takes the group over (the cut node is
//! `SERVER_RESTARTED`, the group paused), `group start` resumes it, it pauses again for a
//! test Legate runs itself (`requireTests`), and resumes to the end without re-running a
//! finished node. The peer message reaches the reviewer as an extra turn.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, parsed, scripted_config, text};
use legate_frontkit::poll::until;
use serde_json::Value;
use std::time::Duration;

fn node<'a>(s: &'a Value, id: &str) -> &'a Value {
    s["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["id"] == id)
        .unwrap_or_else(|| panic!("no node {id}: {s:#}"))
}

fn tasks_of(s: &Value, id: &str) -> Vec<String> {
    node(s, id)["taskIds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

const ENVELOPE: &str = r#"<legate-peer-message>{"messageId":"impl-a-note-1","toNode":"review","text":"impl-a made parse() return ParseError; check src/parse.txt"}</legate-peer-message>"#;

fn definition(project: &str) -> String {
    format!(
        r#"workingDirectory = {project:?}
title = "plan, two implementations, review, synthesis"

[[nodes]]
id = "plan"
role = "planner"
agent = "revisor"
prompt = "Plan a change to src/parse.txt."

[[nodes.criteria]]
id = "source"
description = "the source file is still there"
check = {{ kind = "file-exists", path = "src/parse.txt" }}

[[nodes]]
id = "impl-a"
agent = "scripted"
prompt = '''!say {ENVELOPE}
write src/a.txt: variant a'''
dependsOn = ["plan"]
fileSources = "plan"

[[nodes.criteria]]
id = "source"
description = "the source file is still there"
check = {{ kind = "file-exists", path = "src/parse.txt" }}

[[nodes]]
id = "impl-b"
agent = "scripted"
prompt = '''!chunks 300 15
write src/b.txt: variant b'''
dependsOn = ["plan"]
fileSources = "plan"

[[nodes.criteria]]
id = "source"
description = "the source file is still there"
check = {{ kind = "file-exists", path = "src/parse.txt" }}

[[nodes]]
id = "review"
role = "reviewer"
agent = "revisor"
prompt = "Review src/parse.txt."
dependsOn = ["impl-a", "impl-b"]
fileSources = "impl-a"

[[nodes.criteria]]
id = "source"
description = "the source file is still there"
check = {{ kind = "file-exists", path = "src/parse.txt" }}

[[nodes]]
id = "synth"
role = "planner"
agent = "revisor"
prompt = "Summarise the review of src/parse.txt."
dependsOn = ["review"]

[[nodes.criteria]]
id = "source"
description = "the source file is still there"
check = {{ kind = "file-exists", path = "src/parse.txt" }}

[[peerRoutes]]
from = "impl-a"
to = "review"

[workflow]
finalNode = "synth"

[workflow.hooks.impl-b]
requireTests = true
"#
    )
}

#[test]
fn a_workflow_survives_kill_9_pauses_for_a_test_and_carries_a_peer_message() {
    let env = CliHome::with_config(env!("CARGO_BIN_EXE_legate"), &scripted_config(""));
    env.make_project(&[("src/parse.txt", "fn parse() {}\n")]);
    let file = env.home().join("group.toml");
    std::fs::write(&file, definition(&env.project().to_string_lossy())).unwrap();
    let created = env.json(&["group", "create", file.to_str().unwrap(), "--json"]);
    let (id, sha) = (
        created["groupId"].as_str().unwrap().to_string(),
        created["definitionSha256"].as_str().unwrap().to_string(),
    );
    // Creating again with the same file is the same group.
    let again = env.json(&[
        "group",
        "create",
        file.to_str().unwrap(),
        "--json",
        "--id",
        &id,
    ]);
    assert_eq!(again["definitionSha256"], sha.as_str());

    // The first runner: killed while impl-b is mid-turn (impl-a and plan finished).
    let mut runner = env.spawn_silent(&["group", "start", &id, &sha]);
    let before = until(
        Duration::from_secs(120),
        "impl-b running with impl-a done",
        || {
            let s = env.json(&["group", "status", &id, "--json"]);
            (node(&s, "impl-a")["state"] == "succeeded"
                && node(&s, "impl-b")["state"] == "running"
                && !tasks_of(&s, "impl-b").is_empty())
            .then_some(s)
        },
    );
    runner.kill().unwrap(); // SIGKILL
    runner.wait().unwrap();
    // One-shot commands that do not wait on the group leave it to its dead runner: one that
    // took it over would admit or cut a node and end.
    let runner_of = || -> Option<String> {
        let db = rusqlite::Connection::open(env.home().join("legate.db")).unwrap();
        db.query_row(
            "SELECT runner FROM groups WHERE group_id = ?1",
            [&id],
            |r| r.get(0),
        )
        .unwrap()
    };
    let dead = runner_of();
    assert!(dead.is_some());
    for args in [
        &["tasks"][..],
        &["group", "status", &id, "--json"],
        &["group", "list"],
    ] {
        let out = env.run(args);
        assert!(out.status.success(), "{args:?}: {}", text(&out));
        assert_eq!(runner_of(), dead, "{args:?} took the group over");
    }
    let s = env.json(&["group", "status", &id, "--json"]);
    assert_eq!(node(&s, "impl-b")["state"], "running", "{s:#}");
    let plan_tasks = tasks_of(&before, "plan");
    let impl_a_tasks = tasks_of(&before, "impl-a");
    assert_eq!(plan_tasks.len(), 1);
    assert_eq!(impl_a_tasks.len(), 1);

    // Another process takes the group over: the cut node is not re-run silently.
    let out = env.run(&["group", "wait", &id, "--timeout", "120", "--json"]);
    let paused: Value = parsed(&out);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert_eq!(paused["state"], "paused", "{paused:#}");
    assert_eq!(paused["pauseReason"], "SERVER_RESTARTED", "{paused:#}");
    assert_eq!(node(&paused, "impl-b")["state"], "interrupted");

    // Resumed: impl-b runs again and is held for its test; nothing finished re-runs.
    let out = env.run(&["group", "start", &id, &sha, "--json"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    let held: Value = parsed(&out);
    assert_eq!(node(&held, "impl-b")["state"], "held", "{held:#}");
    assert_eq!(tasks_of(&held, "plan"), plan_tasks);
    assert_eq!(tasks_of(&held, "impl-a"), impl_a_tasks);
    assert_eq!(node(&held, "review")["state"], "pending");
    // The peer message waits for its recipient.
    let receipts = env.json(&["group", "receipts", &id]);
    assert_eq!(
        receipts["receipts"].as_array().unwrap().len(),
        1,
        "{receipts:#}"
    );
    assert_eq!(receipts["receipts"][0]["state"], "queued");

    // The test, run by Legate in impl-b's copy; then the group resumes to its end.
    let impl_b = tasks_of(&held, "impl-b").last().unwrap().clone();
    let out = env.run(&["test", &impl_b, "--", "true"]);
    assert!(out.status.success(), "{}", text(&out));
    let out = env.run(&["group", "start", &id, &sha, "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let done: Value = parsed(&out);
    assert_eq!(done["state"], "completed", "{done:#}");
    assert_eq!(tasks_of(&done, "plan"), plan_tasks);
    assert_eq!(tasks_of(&done, "impl-a"), impl_a_tasks);
    assert_eq!(tasks_of(&done, "impl-b").last(), Some(&impl_b));

    // The reviewer got the message as its next turn.
    let review = tasks_of(&done, "review");
    assert_eq!(review.len(), 2, "{done:#}");
    let receipts = env.json(&["group", "receipts", &id]);
    let r = &receipts["receipts"][0];
    assert_eq!(
        (r["from"].as_str(), r["to"].as_str(), r["state"].as_str()),
        (Some("impl-a"), Some("review"), Some("sent")),
        "{receipts:#}"
    );
    assert_eq!(r["origin"], "agent-reported");
    assert!(r.get("text").is_none(), "{r}");
    let turn = env.json(&["show", "--json", &review[1]]);
    let prompt = turn["prompt"].as_str().unwrap_or_default();
    assert!(prompt.contains("<legate-peer-data"), "{turn:#}");
    assert!(!prompt.contains("<legate-peer-message>"), "{prompt}");

    // The synthesis, with its reference.
    let result = env.json(&["group", "result", &id]);
    assert_eq!(result["finalNode"], "synth");
    assert_eq!(result["referenceSha256"].as_str().unwrap().len(), 64);
}
