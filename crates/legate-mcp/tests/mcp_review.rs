//! Copy workspaces and their review over MCP, end to end in one process: rmcp's own client
//! talks to `LegateMcp` over an in-memory pipe; the engine drives the scripted agent (revisor)
//! on a copy of a fresh `git init` repository, and `fake-agy` for token usage, models and
//! capabilities.
//!
//! The agent binaries must be built first: `cargo build -p legate-testkit --bins` (a plain
//! `cargo test --workspace` does it).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_engine::ApprovalMode;
use legate_frontkit::mcp::{self, McpClient as Client, McpFront};
use legate_mcp::Profile;
use legate_testkit::{EngineHarness, TestAgent, git};
use rmcp::model::{ElicitResult, ElicitationAction};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;

async fn harness(profile: Profile, approval: ApprovalMode, handler: Client) -> McpFront {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let kit = EngineHarness::builder()
        .in_dir(dir)
        .agent(TestAgent::scripted("agent"))
        .agent(TestAgent::fake_agy("agy").model("mock-flash").env(
            "FAKE_AGY_STATE_DIR",
            base.join("fake-agy-state").display().to_string(),
        ))
        // Installed and compatible, but logged out: `agy models` asks for a login.
        .agent(TestAgent::fake_agy("agy-out").env("FAKE_AGY_AUTH", "fail"))
        .config(move |c| c.review.approval = approval)
        .start();
    McpFront::serve(kit, mcp::profile(profile), handler).await
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn reviews() -> Value {
    json!([
        {"criterionId": "greets", "verdict": "passed", "path": "src/greeting.txt", "line": 1,
         "quote": "hi world", "explanation": "the first line now says hi"},
        {"criterionId": "notes", "verdict": "passed", "path": "NOTES.md", "line": 1,
         "quote": "# Notes", "explanation": "the file starts with its title"}
    ])
}

/// Previews and verifies a copy task; returns the patch sha256.
async fn verified(h: &McpFront, id: &str) -> String {
    let preview = h.call("preview", json!({"taskId": id})).await;
    let sha = preview["sha256"].as_str().unwrap().to_string();
    let v = h
        .call(
            "verify",
            json!({"taskId": id, "expectedSha256": sha, "reviews": reviews()}),
        )
        .await;
    assert_eq!(v["passed"], true, "{v}");
    sha
}

fn names(tools: &[rmcp::model::Tool]) -> BTreeSet<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_task_is_reviewed_and_integrated_entirely_over_mcp() {
    let h = harness(Profile::Full, ApprovalMode::Auto, Client::default()).await;
    let project = h.project("project");
    let path = project.display().to_string();

    let listed = h.call("list_project_files", json!({"path": path})).await;
    let files: Vec<&str> = listed["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["README.md", "src/greeting.txt"], "{listed}");
    assert_eq!(listed["blockedFiles"][0]["path"], ".env", "{listed}");
    assert_eq!(
        listed["blockedFiles"][0]["reason"], "SECRET_FILE",
        "{listed}"
    );
    assert_eq!(
        h.fail("list_project_files", json!({"path": "relative"}))
            .await,
        "INVALID_WORKSPACE"
    );
    assert_eq!(
        h.fail(
            "run",
            json!({"prompt": "x", "workingDirectory": path, "workspace": {"kind": "copy", "path": path}})
        )
        .await,
        "INVALID_INPUT"
    );

    let id = h.copy_task(&project).await;
    // The agent never touched the original.
    assert_eq!(
        std::fs::read_to_string(project.join("src/greeting.txt")).unwrap(),
        "hello world\nbye\n"
    );
    assert!(!project.join("NOTES.md").exists());

    let preview = h.call("preview", json!({"taskId": id})).await;
    assert_eq!(preview["summary"]["filesChanged"], 2, "{preview}");
    assert_eq!(preview["summary"]["added"], 1);
    assert_eq!(preview["summary"]["modified"], 1);
    assert_eq!(preview["files"][0]["path"], "NOTES.md");
    assert_eq!(preview["files"][0]["status"], "A");
    assert_eq!(preview["files"][1]["path"], "src/greeting.txt");
    assert_eq!(preview["files"][1]["insertions"], 1);
    assert_eq!(preview["files"][1]["deletions"], 1);
    assert!(preview["verification"].is_null());
    let sha = preview["sha256"].as_str().unwrap().to_string();
    let length = preview["patchLength"].as_u64().unwrap();

    // The whole patch in small windows, bound to the sha256.
    let mut patch = String::new();
    let mut offset = 0;
    let mut windows = 0;
    loop {
        let w = h
            .call(
                "read_patch",
                json!({"taskId": id, "expectedSha256": sha, "offset": offset, "limit": 64}),
            )
            .await;
        assert_eq!(w["sha256"], sha);
        patch.push_str(w["text"].as_str().unwrap());
        offset = w["nextOffset"].as_u64().unwrap();
        windows += 1;
        if w["hasMore"] == false {
            break;
        }
    }
    assert!(windows > 2);
    assert_eq!(patch.len() as u64, length);
    assert_eq!(sha256(patch.as_bytes()), sha);
    assert!(patch.contains("-hello world\n+hi world\n"), "{patch}");
    assert!(patch.contains("+++ b/NOTES.md"), "{patch}");
    // One file's part.
    let part = h
        .call(
            "read_patch",
            json!({"taskId": id, "expectedSha256": sha, "path": "NOTES.md"}),
        )
        .await;
    assert!(
        part["text"].as_str().unwrap().contains("+# Notes"),
        "{part}"
    );
    assert!(
        !part["text"].as_str().unwrap().contains("greeting"),
        "{part}"
    );
    assert_eq!(
        h.fail(
            "read_patch",
            json!({"taskId": id, "expectedSha256": "00".repeat(32)})
        )
        .await,
        "PATCH_CHANGED"
    );

    // Integration before verification is refused and changes nothing.
    assert_eq!(
        h.fail("integrate", json!({"taskId": id, "expectedSha256": sha}))
            .await,
        "VERIFICATION_REQUIRED"
    );
    assert!(!project.join("NOTES.md").exists());

    // A review whose quote is not at the cited line does not pass; a real one does.
    let mut bad = reviews();
    bad[1]["quote"] = json!("# Not there");
    let v = h
        .call(
            "verify",
            json!({"taskId": id, "expectedSha256": sha, "reviews": bad}),
        )
        .await;
    assert_eq!(v["passed"], false, "{v}");
    assert_eq!(v["criteria"][1]["citationChecked"], false, "{v}");
    let v = h
        .call(
            "verify",
            json!({"taskId": id, "expectedSha256": sha, "reviews": reviews()}),
        )
        .await;
    assert_eq!(v["passed"], true, "{v}");
    assert_eq!(v["source"], "client-reported");
    assert_eq!(v["criteria"][0]["checkPassed"], true, "{v}");

    let t = h
        .call(
            "test",
            json!({"taskId": id, "expectedSha256": sha, "timeoutSeconds": 30,
                   "command": {"executable": "grep", "args": ["-q", "hi world", "src/greeting.txt"]}}),
        )
        .await;
    assert_eq!(t["passed"], true, "{t}");
    assert_eq!(t["source"], "legate-executor");
    assert_eq!(t["exitCode"], 0);
    assert_eq!(t["sha256After"], sha);
    assert!(t["testError"].is_null());
    let reported = h
        .call(
            "record_test",
            json!({"taskId": id, "expectedSha256": sha, "exitCode": 0, "output": "ok",
                   "command": {"executable": "make", "args": ["check"]}}),
        )
        .await;
    assert_eq!(reported["source"], "client-reported");
    assert_eq!(reported["confinement"], "client");
    let preview = h.call("preview", json!({"taskId": id})).await;
    assert_eq!(preview["tests"].as_array().unwrap().len(), 2, "{preview}");
    assert_eq!(preview["tests"][0]["stale"], false, "{preview}");
    assert_eq!(preview["verification"]["passed"], true, "{preview}");
    assert!(preview["stale"].is_null(), "{preview}");

    let integrated = h
        .call("integrate", json!({"taskId": id, "expectedSha256": sha}))
        .await;
    assert_eq!(integrated["sha256"], sha);
    assert_eq!(integrated["approval"], "auto");
    assert_eq!(
        integrated["files"],
        json!(["NOTES.md", "src/greeting.txt"]),
        "{integrated}"
    );
    // The original has exactly the change, and nothing else.
    assert_eq!(
        std::fs::read_to_string(project.join("src/greeting.txt")).unwrap(),
        "hi world\nbye\n"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("NOTES.md")).unwrap(),
        "# Notes"
    );
    assert_eq!(
        std::fs::read_to_string(project.join(".env")).unwrap(),
        "SECRET=do-not-copy\n"
    );
    let status: BTreeSet<String> = git(
        &project,
        &["status", "--porcelain", "--untracked-files=all"],
    )
    .lines()
    .map(str::to_string)
    .collect();
    assert_eq!(
        status,
        BTreeSet::from([
            " M src/greeting.txt".to_string(),
            "?? .env".to_string(),
            "?? NOTES.md".to_string()
        ])
    );
    assert_eq!(
        h.fail("integrate", json!({"taskId": id, "expectedSha256": sha}))
            .await,
        "COPY_UNAVAILABLE"
    );
    let preview = h.call("preview", json!({"taskId": id})).await;
    assert_eq!(preview["integration"]["sha256"], sha, "{preview}");

    let events = h.call("events", json!({"taskId": id, "limit": 1000})).await;
    let names: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["detail"]["event"].as_str())
        .collect();
    for expected in [
        "copy.ready",
        "copy.patch",
        "copy.verified",
        "copy.tested",
        "copy.integrated",
    ] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }

    let discarded = h.call("discard", json!({"taskId": id})).await;
    assert_eq!(discarded["taskId"], id.as_str());
    assert!(!h.base.join("home/copies").join(&id).exists());
    assert_eq!(
        h.fail("discard", json!({"taskId": id})).await,
        "COPY_UNAVAILABLE"
    );
    let swept = h.call("cleanup", json!({})).await;
    assert!(swept["removed"].is_array(), "{swept}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn profiles_offer_the_review_tools_by_group() {
    const QUERY: &[&str] = &[
        "agents",
        "cancel",
        "events",
        "health",
        "list_project_files",
        "read_result",
        "result",
        "resume",
        "roles",
        "run",
        "send_message",
        "sessions",
        "status",
        "tasks",
        "usage",
        "wait",
        "wait_many",
    ];
    const REVIEW: &[&str] = &["context", "handoff", "preview", "read_patch", "verify"];
    const IMPLEMENTATION: &[&str] = &[
        "cleanup",
        "continue",
        "discard",
        "integrate",
        "record_test",
        "test",
    ];
    // ctrl (issue 17): the reading tools are query tools, set_model a write.
    const CONTROLS_QUERY: &[&str] = &["get_agent_policy", "get_model", "list_models"];
    const CONTROLS_WRITE: &[&str] = &["set_model"];
    // Issues 16 and 17: the readers are query tools; what writes memory, starts or stops
    // groups, or widens the sandbox ceiling is an implementation tool.
    const LATER_QUERY: &[&str] = &[
        "compare",
        "comparison",
        "get_sandbox_policy",
        "memory_list",
        "memory_read",
        "set_delivery_mode",
        "read_artifact",
        "group_status",
        "group_wait",
        "groups",
        "workflow_result",
        "peer_receipts",
    ];
    const LATER_WRITE: &[&str] = &[
        "memory_write",
        "memory_remove",
        "set_sandbox_policy",
        "group_create",
        "group_start",
        "group_cancel",
    ];
    let set = |groups: &[&[&str]]| -> BTreeSet<String> {
        groups
            .iter()
            .flat_map(|g| g.iter().map(|n| n.to_string()))
            .collect()
    };
    for (profile, expected) in [
        (Profile::Query, set(&[QUERY, CONTROLS_QUERY, LATER_QUERY])),
        (
            Profile::Review,
            set(&[QUERY, CONTROLS_QUERY, LATER_QUERY, REVIEW]),
        ),
        (
            Profile::Implementation,
            set(&[
                QUERY,
                CONTROLS_QUERY,
                LATER_QUERY,
                REVIEW,
                IMPLEMENTATION,
                CONTROLS_WRITE,
                LATER_WRITE,
            ]),
        ),
        (
            Profile::Full,
            set(&[
                QUERY,
                CONTROLS_QUERY,
                LATER_QUERY,
                REVIEW,
                IMPLEMENTATION,
                CONTROLS_WRITE,
                LATER_WRITE,
            ]),
        ),
    ] {
        let h = harness(profile, ApprovalMode::Auto, Client::default()).await;
        let tools = h.client.list_all_tools().await.unwrap();
        assert_eq!(names(&tools), expected, "{profile}");
        for t in &tools {
            let out = t.output_schema.as_ref().unwrap();
            assert_eq!(out["type"], "object", "{}", t.name);
            assert!(out["properties"]["error"].is_object(), "{}", t.name);
        }
        for name in set(&[
            QUERY,
            CONTROLS_QUERY,
            REVIEW,
            IMPLEMENTATION,
            CONTROLS_WRITE,
        ])
        .difference(&expected)
        {
            assert_eq!(
                h.refused(name, json!({"taskId": "0000"})).await,
                "TOOL_NOT_AVAILABLE",
                "{profile} {name}"
            );
        }
    }
    // A review profile runs copy tasks read-only; their patch can be previewed and verified
    // but never integrated (and the tool is not there).
    let h = harness(Profile::Review, ApprovalMode::Auto, Client::default()).await;
    let project = h.project("project");
    let run = h
        .call(
            "run",
            json!({"prompt": "What is here?", "workspace": {
                "kind": "copy", "path": project.display().to_string(), "includePaths": ["src"],
            }}),
        )
        .await;
    assert_eq!(run["mode"], "read-only");
    let id = run["taskId"].as_str().unwrap().to_string();
    h.wait_done(&id).await;
    let preview = h.call("preview", json!({"taskId": id})).await;
    assert_eq!(preview["summary"]["filesChanged"], 0, "{preview}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_reports_tokens_per_task() {
    let h = harness(Profile::Query, ApprovalMode::Auto, Client::default()).await;
    let counted = h
        .call("run", json!({"prompt": "tokens: 600", "agent": "agy"}))
        .await;
    let counted = counted["taskId"].as_str().unwrap().to_string();
    h.wait_done(&counted).await;
    let plain = h
        .call("run", json!({"prompt": "!nousage\nWhat is here?"}))
        .await;
    let plain = plain["taskId"].as_str().unwrap().to_string();
    h.wait_done(&plain).await;

    let one = h.call("usage", json!({"taskId": &counted[..8]})).await;
    let rows = one["byTask"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{one}");
    assert_eq!(rows[0]["taskId"], counted.as_str());
    assert_eq!(rows[0]["agent"], "agy");
    assert_eq!(rows[0]["totalTokens"], 600, "{one}");
    assert_eq!(rows[0]["inputTokens"], 500, "{one}");
    assert_eq!(rows[0]["outputTokens"], 100, "{one}");
    assert_eq!(one["total"]["totalTokens"], 600);

    let all = h.call("usage", json!({})).await;
    assert_eq!(all["total"]["tasks"], 2, "{all}");
    assert_eq!(all["total"]["unreported"], 1, "{all}");
    assert_eq!(all["total"]["totalTokens"], 600, "{all}");
    let by_agent = h.call("usage", json!({"agent": "agent"})).await;
    assert_eq!(by_agent["byTask"][0]["taskId"], plain.as_str());
    assert!(by_agent["byTask"][0]["totalTokens"].is_null(), "{by_agent}");
    assert_eq!(
        h.fail("usage", json!({"taskId": "zzzz"})).await,
        "TASK_NOT_FOUND"
    );
    assert_eq!(h.fail("usage", json!({"bogus": 1})).await, "INVALID_INPUT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integration_in_ask_mode_needs_an_elicited_confirmation() {
    let client = Client {
        elicits: true,
        ..Client::default()
    };
    let h = harness(Profile::Implementation, ApprovalMode::Ask, client).await;
    let project = h.project("project");
    let id = h.copy_task(&project).await;
    let sha = verified(&h, &id).await;
    let untouched = || {
        assert_eq!(
            std::fs::read_to_string(project.join("src/greeting.txt")).unwrap(),
            "hello world\nbye\n"
        );
        assert!(!project.join("NOTES.md").exists());
    };

    for answer in [
        ElicitResult::new(ElicitationAction::Decline),
        ElicitResult::new(ElicitationAction::Cancel),
        ElicitResult::new(ElicitationAction::Accept).with_content(json!({"confirm": false})),
        ElicitResult::new(ElicitationAction::Accept),
    ] {
        *h.handler.answer.lock().unwrap() = Some(answer.clone());
        assert_eq!(
            h.fail("integrate", json!({"taskId": id, "expectedSha256": sha}))
                .await,
            "INTEGRATION_DECLINED",
            "{answer:?}"
        );
        untouched();
    }
    {
        let asked = h.handler.asked.lock().unwrap();
        assert_eq!(asked.len(), 4);
        let (message, schema) = &asked[0];
        assert!(message.contains(&id), "{message}");
        assert!(message.contains(&sha), "{message}");
        assert!(
            message.contains(&project.display().to_string()),
            "{message}"
        );
        assert!(message.contains("M src/greeting.txt (+1 -1)"), "{message}");
        assert!(message.contains("A NOTES.md"), "{message}");
        assert_eq!(schema["required"], json!(["confirm"]), "{schema}");
        assert_eq!(schema["properties"]["confirm"]["type"], "boolean");
    }

    *h.handler.answer.lock().unwrap() =
        Some(ElicitResult::new(ElicitationAction::Accept).with_content(json!({"confirm": true})));
    let integrated = h
        .call("integrate", json!({"taskId": id, "expectedSha256": sha}))
        .await;
    assert_eq!(integrated["approval"], "ask", "{integrated}");
    assert_eq!(
        std::fs::read_to_string(project.join("src/greeting.txt")).unwrap(),
        "hi world\nbye\n"
    );
    assert_eq!(
        std::fs::read_to_string(project.join("NOTES.md")).unwrap(),
        "# Notes"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_elicitation_cannot_confirm_an_integration() {
    let h = harness(Profile::Full, ApprovalMode::Ask, Client::default()).await;
    let project = h.project("project");
    let id = h.copy_task(&project).await;
    let sha = verified(&h, &id).await;
    assert_eq!(
        h.fail("integrate", json!({"taskId": id, "expectedSha256": sha}))
            .await,
        "INTEGRATION_DECLINED"
    );
    assert!(h.handler.asked.lock().unwrap().is_empty());
    assert_eq!(
        std::fs::read_to_string(project.join("src/greeting.txt")).unwrap(),
        "hello world\nbye\n"
    );
    assert!(!project.join("NOTES.md").exists());

    // A failing command is an answer (passed: false, testError), not a failed call.
    let failing = h
        .call(
            "test",
            json!({"taskId": id, "expectedSha256": sha,
                   "command": {"executable": "grep", "args": ["-q", "hello", "src/greeting.txt"]}}),
        )
        .await;
    assert_eq!(failing["passed"], false, "{failing}");
    assert_eq!(failing["exitCode"], 1, "{failing}");
    assert_eq!(failing["testError"]["code"], "TEST_FAILED", "{failing}");
    assert_eq!(
        h.fail(
            "test",
            json!({"taskId": id, "expectedSha256": sha, "timeoutSeconds": 0,
                   "command": {"executable": "true"}})
        )
        .await,
        "INVALID_INPUT"
    );
}

/// An agent's entry in an answer's `agents`, by name.
fn agent<'a>(answer: &'a Value, name: &str) -> &'a Value {
    answer["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == name)
        .unwrap_or_else(|| panic!("no agent {name} in {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_list_models_and_health_lists_capabilities() {
    let h = harness(Profile::Query, ApprovalMode::Auto, Client::default()).await;

    let listed = h.call("agents", json!({})).await;
    assert_eq!(listed["defaultAgent"], "agent");
    let agy = agent(&listed, "agy");
    assert_eq!(agy["kind"], "agy");
    assert_eq!(agy["model"], "mock-flash", "the configured model: {agy}");
    assert_eq!(
        agy["models"],
        json!([{"id": "mock-pro", "name": "Mock Pro"}, {"id": "mock-flash", "name": "Mock Flash"}]),
        "{agy}"
    );
    assert!(agy["modelsError"].is_null(), "{agy}");
    let out = agent(&listed, "agy-out");
    assert!(out["models"].is_null(), "{out}");
    assert_eq!(out["modelsError"]["code"], "AGY_AUTH_REQUIRED", "{out}");
    let acp = agent(&listed, "agent");
    // An ACP agent names its models in a throwaway session (revisor offers two).
    assert!(acp["model"].is_null(), "{acp}");
    assert!(acp["modelsError"].is_null(), "{acp}");
    let ids: Vec<&str> = acp["models"]
        .as_array()
        .unwrap_or_else(|| panic!("an ACP agent's models: {acp}"))
        .iter()
        .filter_map(|m| m["id"].as_str())
        .collect();
    assert_eq!(ids, ["revisor-standard", "revisor-thorough"], "{acp}");
    assert_eq!(acp["default"], true);

    let unprobed = h.call("agents", json!({"probe": false})).await;
    let agy = agent(&unprobed, "agy");
    assert_eq!(agy["model"], "mock-flash");
    assert!(
        agy["models"].is_null() && agy["modelsError"].is_null(),
        "{agy}"
    );
    assert_eq!(h.fail("agents", json!({"bogus": 1})).await, "INVALID_INPUT");

    let health = h.call("health", json!({})).await;
    for name in ["agy", "agy-out"] {
        let agy = agent(&health, name);
        assert_eq!(agy["starts"], true, "{agy}");
        let capabilities: BTreeSet<&str> = agy["capabilities"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap())
            .collect();
        // fake-agy's --help announces every flag the driver knows.
        for c in [
            "stream-json",
            "sandbox",
            "mode-plan",
            "mode-accept-edits",
            "models",
            "model",
            "conversation",
            "json-schema",
            "add-dir",
            "new-project",
            "effort",
        ] {
            assert!(capabilities.contains(c), "{name} lacks {c}: {agy}");
        }
    }
    let acp = agent(&health, "agent");
    assert_eq!(acp["starts"], true, "{acp}");
    // An ACP agent lists the session lifecycle it announced (the scripted agent: load only).
    assert_eq!(acp["capabilities"], json!(["session/load"]), "{acp}");
    let unprobed = h.call("health", json!({"probe": false})).await;
    assert_eq!(agent(&unprobed, "agy")["capabilities"], json!([]));
    assert!(agent(&unprobed, "agy")["starts"].is_null());
}

fn keys(v: &Value) -> Vec<&str> {
    let mut k: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    k.sort_unstable();
    k
}

/// The answers are the engine's own types now; their wire shape is the one clients had
/// (every key, nulls and empty lists included), and a hostile client's extra field inside an
/// engine-shaped argument (a criterion's check, a review, a command) is refused, not ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engine_typed_answers_keep_their_shape_and_arguments_refuse_extra_fields() {
    let h = harness(Profile::Full, ApprovalMode::Auto, Client::default()).await;
    let project = h.project("project");
    let path = project.display().to_string();
    let sneaky = json!([{"id": "c", "description": "d",
        "check": {"kind": "file-exists", "path": "x", "shell": "rm -rf /"}}]);
    assert_eq!(
        h.fail(
            "run",
            json!({"prompt": "x", "workspace": {"kind": "copy", "path": path, "criteria": sneaky}})
        )
        .await,
        "INVALID_INPUT"
    );
    let tasks = h.call("tasks", json!({})).await;
    assert_eq!(tasks["tasks"], json!([]), "a refused run created a task");

    let id = h.copy_task(&project).await;
    let sha = h.call("preview", json!({"taskId": id})).await["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let mut bad_reviews = reviews();
    bad_reviews[0]["approvedBy"] = json!("the boss");
    let bad = json!({"taskId": id, "expectedSha256": sha, "reviews": bad_reviews});
    assert_eq!(h.fail("verify", bad).await, "INVALID_INPUT");
    let bad = json!({"taskId": id, "expectedSha256": sha,
        "command": {"executable": "true", "args": [], "shell": true}});
    assert_eq!(h.fail("test", bad).await, "INVALID_INPUT");

    let v = h
        .call(
            "verify",
            json!({"taskId": id, "expectedSha256": sha, "reviews": reviews()}),
        )
        .await;
    assert_eq!(
        keys(&v),
        [
            "criteria", "evidence", "passed", "sha256", "source", "taskId"
        ]
    );
    assert_eq!(
        keys(&v["criteria"][0]),
        [
            "checkPassed",
            "citationChecked",
            "criterionId",
            "passed",
            "problems",
            "verdict"
        ]
    );
    assert_eq!(v["criteria"][1]["problems"], json!([]), "{v}");
    let t = h
        .call(
            "test",
            json!({"taskId": id, "expectedSha256": sha,
                   "command": {"executable": "true"}}),
        )
        .await;
    let record_keys = [
        "command",
        "confinement",
        "durationMs",
        "exitCode",
        // Whether it ran in a fresh tree of the patch (`fresh: true`) or in the copy.
        "fresh",
        "id",
        "network",
        "outputTruncated",
        "passed",
        "recordedAt",
        // What the kernel enforced for an observed test (the sandbox policy's evidence).
        "sandbox",
        "sha256After",
        "sha256Before",
        "signal",
        "source",
        "stderr",
        "stdout",
        "testError",
        "timedOut",
    ];
    let mut with_task = record_keys.to_vec();
    with_task.push("taskId");
    with_task.sort_unstable();
    assert_eq!(keys(&t), with_task, "{t}");
    assert!(t["signal"].is_null() && t["testError"].is_null(), "{t}");
    assert_eq!(t["command"], json!({"executable": "true", "args": []}));
    let preview = h.call("preview", json!({"taskId": id})).await;
    assert_eq!(
        keys(&preview),
        [
            "copyDirectory",
            "files",
            "integration",
            "patchLength",
            "readOnlyViolations",
            "sha256",
            "source",
            "stale",
            "summary",
            "taskId",
            "tests",
            "verification"
        ]
    );
    let mut with_stale = record_keys.to_vec();
    with_stale.push("stale");
    with_stale.sort_unstable();
    assert_eq!(keys(&preview["tests"][0]), with_stale, "{preview}");
    assert_eq!(
        keys(&preview["files"][0]),
        [
            "binary",
            "deletions",
            "insertions",
            "mode",
            "newBlob",
            "oldBlob",
            "path",
            "status"
        ]
    );
    assert_eq!(preview["files"][0]["status"], "A", "{preview}");
    let done = h
        .call("integrate", json!({"taskId": id, "expectedSha256": sha}))
        .await;
    // `journal` is the one key the engine's record adds to what the mirror showed.
    assert_eq!(
        keys(&done),
        [
            "approval",
            "files",
            "integratedAt",
            "journal",
            "leftoverFiles",
            "restoredByteOrderMarks",
            "sha256",
            "taskId"
        ]
    );
}
