//! The agy backend through the engine, against `fake-agy` on real pipes and a real store:
//! a task that completes, every diagnostic code from its fake condition, usage from
//! cumulative counters, the environment filter, model selection, stream robustness,
//! timeouts and cancel leaving no process, and a workspace blocked by an unverified cleanup.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_backend::agy::{AgyBackend, cleanup, selection};
use legate_core::{AgentKind, ErrorCode, Event, EventKind, Task, TaskMode, TaskState};
use legate_engine::{SubmitRequest, UsageFilter};
use legate_testkit::{EngineHarness, TestAgent, procs};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

const FAKE: &str = env!("CARGO_BIN_EXE_fake-agy");

/// The suite's engine in `dir`: every agy agent of the tests, `fake-agy` behind most, with
/// probe and kill limits of 3 s.
fn harness_in(dir: tempfile::TempDir) -> EngineHarness {
    // agy keeps the user's HOME; here it is a test directory, and the fake keeps its
    // conversations in its profile (`~/.gemini/antigravity-cli`), which confinement lets it
    // write.
    let agy_home = dir.path().join("agy-home");
    let state = agy_home.join(".gemini/antigravity-cli/fake-state");
    let noexec = dir.path().join("noexec-agy");
    if !noexec.exists() {
        std::fs::write(&noexec, "#!/bin/sh\necho 1.2.11\n").unwrap();
    }
    let agy = |name: &str, command: &Path| {
        TestAgent::command(name, AgentKind::AGY, command).env("HOME", agy_home.to_str().unwrap())
    };
    let fake =
        |name: &str| agy(name, Path::new(FAKE)).env("FAKE_AGY_STATE_DIR", state.to_str().unwrap());
    let agents = [
        fake("agy"),
        fake("agy-auth").env("FAKE_AGY_AUTH", "fail"),
        fake("agy-badversion").env("FAKE_AGY_PROBE", "fail-version"),
        fake("agy-hang").env("FAKE_AGY_PROBE", "hang-version"),
        fake("agy-old").env("FAKE_AGY_PROBE", "incompatible"),
        fake("agy-nohelp").env("FAKE_AGY_PROBE", "fail-help"),
        fake("agy-emptyhelp").env("FAKE_AGY_PROBE", "empty-help"),
        fake("agy-noschema").env("FAKE_AGY_PROBE", "no-json-schema"),
        agy("agy-missing", Path::new("/nonexistent/bin/agy")),
        agy("agy-notonpath", Path::new("agy-surely-not-on-path")),
        agy("agy-noexec", &noexec),
        fake("agy-node").inherit_env("NODE_OPTIONS"),
        fake("agy-flash").model("mock-flash"),
    ];
    let backend = AgyBackend {
        probe_timeout: Duration::from_secs(3),
        kill_grace: Duration::from_secs(3),
        ..AgyBackend::default()
    };
    let mut b = EngineHarness::builder()
        .in_dir(dir)
        .backend(AgentKind::AGY, Arc::new(backend))
        .config(|c| c.cancel_grace = Duration::from_secs(5));
    for a in agents {
        b = b.agent(a);
    }
    b.start()
}

fn harness() -> EngineHarness {
    harness_in(tempfile::tempdir().unwrap())
}

fn request(agent: &str, prompt: &str) -> SubmitRequest {
    SubmitRequest {
        agent: Some(agent.into()),
        ..SubmitRequest::new(prompt)
    }
}

async fn run(h: &EngineHarness, req: SubmitRequest) -> Task {
    let task = h.engine.submit(req).unwrap();
    tokio::time::timeout(Duration::from_secs(60), h.engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap()
}

fn events(h: &EngineHarness, task: &Task) -> Vec<Event> {
    h.engine.events(&task.id, 0, 10_000).unwrap()
}

fn cleanup_detail(h: &EngineHarness, task: &Task) -> serde_json::Value {
    events(h, task)
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::Notice { detail, .. } if detail.get("processCleanup").is_some() => {
                Some(detail["processCleanup"].clone())
            }
            _ => None,
        })
        .expect("a processCleanup event")
}

fn error_code(t: &Task) -> Option<ErrorCode> {
    t.error.as_ref().map(|e| e.code)
}

/// Processes (other than zombies) whose cwd is `root`.
fn processes_in(root: &Path) -> Vec<String> {
    let root = std::fs::canonicalize(root).unwrap();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd == root) {
            found.push(pid.to_string());
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_completes_against_the_fake_and_writes_in_its_sandbox() {
    let h = harness();
    let t = run(&h, request("agy", "write: hello.txt hi from agy")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let root = t.root.clone().unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("hello.txt")).unwrap(),
        "hi from agy"
    );
    let r = t.result.clone().unwrap();
    assert_eq!(r.text, "wrote hello.txt");
    assert_eq!(r.tool_calls, 1);
    assert_eq!(r.stop_reason.as_deref(), Some("end_turn"));
    assert!(t.session_id.as_deref().unwrap().starts_with("conv-"));
    let usage = t.usage.clone().unwrap();
    assert_eq!(usage.total_tokens, Some(120));
    assert_eq!(usage.input_tokens, Some(100));
    assert_eq!(usage.output_tokens, Some(20));
    assert_eq!(usage.model.as_deref(), Some("mock-pro"));
    let cleanup = cleanup_detail(&h, &t);
    assert_eq!(cleanup["verified"], true);
    let pgid = i32::try_from(cleanup["pgid"].as_i64().unwrap()).unwrap();
    assert!(!legate_backend::acp::process_group_alive(pgid));
    let info = h
        .engine
        .agents()
        .probe("agy", Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(info.version.as_deref(), Some("1.2.11"));
    for cap in [
        "stream-json",
        "sandbox",
        "mode-plan",
        "models",
        "conversation",
    ] {
        assert!(info.capabilities.iter().any(|c| c == cap), "{cap}");
    }
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_is_the_difference_of_cumulative_counters_even_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let h = harness_in(dir);
    let first = run(
        &h,
        SubmitRequest {
            context_id: Some("tokens".into()),
            ..request("agy", "tokens: 120")
        },
    )
    .await;
    assert_eq!(first.state, TaskState::Completed, "{:?}", first.error);
    assert_eq!(first.usage.as_ref().unwrap().total_tokens, Some(120));
    h.engine.shutdown().await;
    let dir = h.into_dir();

    // Another process (another engine on the same home) resumes the conversation, on another
    // model: cumulative 170 gives 50 for this task.
    let h = harness_in(dir);
    let second = run(
        &h,
        SubmitRequest {
            context_id: Some("tokens".into()),
            model: Some("mock-flash".into()),
            ..request("agy", "tokens: 50")
        },
    )
    .await;
    assert_eq!(second.state, TaskState::Completed, "{:?}", second.error);
    assert_eq!(
        second.session_id, first.session_id,
        "the conversation is resumed"
    );
    assert_eq!(second.root, first.root, "resuming reuses the workspace");
    let u = second.usage.clone().unwrap();
    assert_eq!(u.total_tokens, Some(50));
    assert_eq!(u.input_tokens, Some(42));
    assert_eq!(u.output_tokens, Some(8));
    assert_eq!(u.model.as_deref(), Some("mock-flash"));
    let args = events(&h, &second)
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::Notice { detail, .. } if detail.get("args").is_some() => {
                Some(detail["args"].to_string())
            }
            _ => None,
        })
        .unwrap();
    assert!(args.contains("--conversation"), "{args}");
    assert!(!args.contains("--new-project"), "{args}");

    // Counters that go down are a reset: no usage, a warning, never 0.
    let third = run(
        &h,
        SubmitRequest {
            context_id: Some("tokens".into()),
            ..request("agy", "reset: now")
        },
    )
    .await;
    assert_eq!(third.state, TaskState::Completed, "{:?}", third.error);
    assert_eq!(third.usage, None);
    assert!(events(&h, &third).iter().any(|e| matches!(
        &e.kind,
        EventKind::Notice { detail, .. } if detail["warning"] == "usage"
    )));
    let missing = run(&h, request("agy", "nousage: x")).await;
    assert_eq!(missing.state, TaskState::Completed);
    assert_eq!(missing.usage, None);

    let report = h
        .engine
        .records()
        .usage(&UsageFilter {
            session_id: second.session_id.clone(),
            ..UsageFilter::default()
        })
        .unwrap();
    assert_eq!(report.total.tasks, 3);
    assert_eq!(report.total.total_tokens, Some(170));
    assert_eq!(report.total.unreported, 1);
    assert_eq!(report.by_model["mock-flash"].total_tokens, Some(50));
    assert_eq!(report.by_model["mock-pro"].total_tokens, Some(120));
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_without_valid_counters_drops_the_baseline() {
    let h = harness();
    let ctx = |p: &str| SubmitRequest {
        context_id: Some("lost".into()),
        ..request("agy", p)
    };
    let warned = |t: &Task| {
        events(&h, t).iter().any(
            |e| matches!(&e.kind, EventKind::Notice { detail, .. } if detail["warning"] == "usage"),
        )
    };
    let first = run(&h, ctx("tokens: 100")).await;
    assert_eq!(first.usage.as_ref().unwrap().total_tokens, Some(100));
    // The crash spends 120 tokens the CLI never reports.
    let crashed = run(&h, ctx("crash: x")).await;
    assert_eq!(error_code(&crashed), Some(ErrorCode::AgyProcessFailed));
    assert_eq!(crashed.usage, None);
    assert!(warned(&crashed));
    // So the next turn's difference (170) is not its own: no usage, a warning.
    let next = run(&h, ctx("tokens: 50")).await;
    assert_eq!(next.state, TaskState::Completed, "{:?}", next.error);
    assert_eq!(next.usage, None, "charged with the lost turn's tokens");
    assert!(warned(&next));
    // Its counters are the new baseline.
    let after = run(&h, ctx("tokens: 30")).await;
    assert_eq!(after.usage.as_ref().unwrap().total_tokens, Some(30));
    // Usage carried only by `step_update` events counts too.
    let step = run(&h, request("agy", "stepusage: x")).await;
    assert_eq!(step.state, TaskState::Completed, "{:?}", step.error);
    assert_eq!(step.usage.as_ref().unwrap().total_tokens, Some(120));
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agy_that_is_not_there_leaves_no_profile_in_home() {
    let h = harness();
    for agent in ["agy-missing", "agy-notonpath"] {
        let t = run(&h, request(agent, "hi")).await;
        assert_eq!(error_code(&t), Some(ErrorCode::AgyNotFound), "{agent}");
    }
    let profile = h.base().join("agy-home/.gemini");
    assert!(!profile.exists(), "{} was created", profile.display());
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_diagnostic_code_comes_from_its_fake_condition() {
    let h = harness();
    let cases: &[(&str, &str, Option<&str>, ErrorCode)] = &[
        ("agy-missing", "hi", None, ErrorCode::AgyNotFound),
        ("agy-notonpath", "hi", None, ErrorCode::AgyNotFound),
        ("agy-noexec", "hi", None, ErrorCode::AgyPermissionDenied),
        ("agy-badversion", "hi", None, ErrorCode::AgyProbeFailed),
        ("agy-hang", "hi", None, ErrorCode::AgyProbeFailed),
        ("agy-old", "hi", None, ErrorCode::AgyIncompatible),
        ("agy-nohelp", "hi", None, ErrorCode::AgyProbeFailed),
        ("agy-emptyhelp", "hi", None, ErrorCode::AgyProbeFailed),
        ("agy-auth", "hi", None, ErrorCode::AgyAuthRequired),
        (
            "agy-auth",
            "hi",
            Some("mock-pro"),
            ErrorCode::AgyAuthRequired,
        ),
        ("agy", "auth: log me out", None, ErrorCode::AgyAuthRequired),
        (
            "agy",
            "hi",
            Some("no-such-model"),
            ErrorCode::ModelNotAvailable,
        ),
        ("agy", "garbage: x", None, ErrorCode::StreamParseError),
        ("agy", "crash: x", None, ErrorCode::AgyProcessFailed),
        ("agy", "failure: x", None, ErrorCode::AgyProcessFailed),
    ];
    for (agent, prompt, model, code) in cases {
        let t = run(
            &h,
            SubmitRequest {
                model: model.map(str::to_owned),
                ..request(agent, prompt)
            },
        )
        .await;
        assert_eq!(
            error_code(&t),
            Some(*code),
            "{agent} {prompt}: {:?}",
            t.error
        );
        let want = if *code == ErrorCode::AgyAuthRequired {
            TaskState::AuthRequired
        } else {
            TaskState::Failed
        };
        assert_eq!(t.state, want, "{agent} {prompt}");
        if *prompt == "failure: x" {
            assert!(t.error.as_ref().unwrap().message.contains("refused"));
            assert_eq!(
                t.usage.as_ref().unwrap().total_tokens,
                Some(40),
                "a failed turn's final counters still count"
            );
        }
        if *prompt == "crash: x" {
            assert!(
                t.error.as_ref().unwrap().message.contains("code 7"),
                "{:?}",
                t.error
            );
            assert_eq!(cleanup_detail(&h, &t)["verified"], true);
        }
    }
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opt_in_of_node_options_is_refused_naming_it() {
    let h = harness();
    let t = run(&h, request("agy-node", "hi")).await;
    assert_eq!(t.state, TaskState::Failed);
    let e = t.error.unwrap();
    assert_eq!(e.code, ErrorCode::AgentStartFailed);
    assert!(e.message.contains("NODE_OPTIONS"), "{}", e.message);
    h.engine.shutdown().await;
}

/// Runs `prompt` with a 1 s timeout, checks that it timed out, and returns the task and its
/// `processCleanup`.
async fn timed_out(h: &EngineHarness, prompt: &str) -> (Task, serde_json::Value) {
    let t = run(
        h,
        SubmitRequest {
            timeout: Some(Duration::from_secs(1)),
            ..request("agy", prompt)
        },
    )
    .await;
    assert_eq!(t.state, TaskState::Failed);
    assert_eq!(error_code(&t), Some(ErrorCode::TaskTimeout));
    let cleanup = cleanup_detail(h, &t);
    (t, cleanup)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_task_leaves_no_process_behind() {
    let h = harness();
    let (t, cleanup) = timed_out(&h, "timeout: sleep").await;
    assert_eq!(cleanup["verified"], true);
    assert_eq!(cleanup["stopped"], true);
    assert_eq!(
        cleanup["signals"],
        serde_json::json!(["SIGINT"]),
        "{cleanup}"
    );
    let pgid = i32::try_from(cleanup["pgid"].as_i64().unwrap()).unwrap();
    assert!(!legate_backend::acp::process_group_alive(pgid));
    assert_eq!(processes_in(t.root.as_ref().unwrap()), Vec::<String>::new());

    // Cancel stops it the same way.
    let task = h.engine.submit(request("agy", "timeout: again")).unwrap();
    wait_for_session(&h, &task).await;
    h.engine.cancel(task.id.as_str()).unwrap();
    let t = h.engine.wait(&task.id).await.unwrap();
    assert_eq!(t.state, TaskState::Canceled, "{:?}", t.error);
    assert_eq!(cleanup_detail(&h, &t)["verified"], true);
    assert_eq!(processes_in(t.root.as_ref().unwrap()), Vec::<String>::new());
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_survives_split_utf8_crlf_long_and_invalid_lines() {
    let h = harness();
    let t = run(&h, request("agy", "split: please")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    assert_eq!(t.result.unwrap().text, "héllo wörld ✓ 日本語");

    let t = run(&h, request("agy", "crlf: hi")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    assert_eq!(t.result.unwrap().text, "fake agy: crlf: hi");

    let t = run(&h, request("agy", "long: line")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let text = t.result.unwrap().text;
    assert_eq!(text.len(), 1024 * 1024 + 3);
    assert!(text.ends_with("xEND"));

    let t = run(&h, request("agy", "malformed: x")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let unparsed: Vec<String> = events(&h, &t)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Unparsed { line } => Some(line),
            _ => None,
        })
        .collect();
    assert_eq!(unparsed, ["this line is not JSON {"]);

    let t = run(&h, request("agy", "stderr: x")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    assert!(events(&h, &t).iter().any(|e| matches!(
        &e.kind,
        EventKind::Stderr { line } if line.contains("diagnostic from the fake agy")
    )));

    let t = run(&h, request("agy", "slow: x")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    assert_eq!(
        t.result.unwrap().text,
        "chunk 1 chunk 2 chunk 3 chunk 4 chunk 5 "
    );
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_tasks_run_in_plan_mode_and_shared_writes_are_refused() {
    let h = harness();
    let t = run(
        &h,
        SubmitRequest {
            mode: Some(TaskMode::ReadOnly),
            ..request("agy", "write: nope.txt x")
        },
    )
    .await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    assert!(!t.root.as_ref().unwrap().join("nope.txt").exists());
    let args = events(&h, &t)
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::Notice { detail, .. } if detail.get("args").is_some() => {
                Some(detail["args"].to_string())
            }
            _ => None,
        })
        .unwrap();
    assert!(args.contains("\"--mode\",\"plan\""), "{args}");

    let shared = tempfile::tempdir().unwrap();
    let t = run(
        &h,
        SubmitRequest {
            workspace: legate_engine::WorkspaceRequest::Shared(shared.path().into()),
            ..request("agy", "write: x.txt y")
        },
    )
    .await;
    assert_eq!(error_code(&t), Some(ErrorCode::AgentUnsupervised));
    assert!(!shared.path().join("x.txt").exists());
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_model_comes_from_the_task_then_the_preference_then_the_default() {
    let h = harness();
    let model_of = |t: &Task| t.usage.as_ref().and_then(|u| u.model.clone());
    let t = run(&h, request("agy-flash", "hi")).await;
    assert_eq!(
        model_of(&t).as_deref(),
        Some("mock-flash"),
        "configured default"
    );
    // What the agent writes in its own HOME is not a preference.
    let state = h.home().join("agents").join("agy-flash");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(
        state.join("model-selection.json"),
        r#"{"model":"mock-pro"}"#,
    )
    .unwrap();
    let t = run(&h, request("agy-flash", "hi")).await;
    assert_eq!(
        model_of(&t).as_deref(),
        Some("mock-flash"),
        "old location ignored"
    );
    selection::save_preference(
        &h.home(),
        "agy-flash",
        Some(&selection::Choice::Model("mock-pro".into())),
    )
    .unwrap();
    let t = run(&h, request("agy-flash", "hi")).await;
    assert_eq!(
        model_of(&t).as_deref(),
        Some("mock-pro"),
        "saved preference"
    );
    let t = run(
        &h,
        SubmitRequest {
            model: Some("mock-flash".into()),
            ..request("agy-flash", "hi")
        },
    )
    .await;
    assert_eq!(
        model_of(&t).as_deref(),
        Some("mock-flash"),
        "the task's own"
    );
    assert_eq!(t.model.as_deref(), Some("mock-flash"));
    let t = run(
        &h,
        SubmitRequest {
            model: Some("auto".into()),
            ..request("agy-flash", "hi")
        },
    )
    .await;
    let args = events(&h, &t)
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::Notice { detail, .. } if detail.get("args").is_some() => {
                Some(detail["args"].to_string())
            }
            _ => None,
        })
        .unwrap();
    assert!(!args.contains("--model"), "auto passes no --model: {args}");
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unverified_cleanup_blocks_the_workspace_for_every_agent_until_the_group_is_gone() {
    let h = harness();
    let ctx = |p: &str| SubmitRequest {
        context_id: Some("blocked".into()),
        ..request("agy", p)
    };
    let first = run(&h, ctx("hi")).await;
    assert_eq!(first.state, TaskState::Completed, "{:?}", first.error);
    let root = std::fs::canonicalize(first.root.clone().unwrap()).unwrap();
    let shared = tempfile::tempdir().unwrap();
    let shared_root = std::fs::canonicalize(shared.path()).unwrap();
    let (mut survivor, pgid) = legate_testkit::sleeping_group();
    for r in [&root, &shared_root] {
        cleanup::block(
            &h.home().join("blocked"),
            r,
            &cleanup::Processes::new(pgid, None),
        )
        .unwrap();
    }
    let blocked = run(&h, ctx("again")).await;
    assert_eq!(
        error_code(&blocked),
        Some(ErrorCode::ProcessCleanupUnverified),
        "{:?}",
        blocked.error
    );
    // Another agent in the same directory is blocked too: the mark is the workspace's.
    let other = run(&h, in_shared("agy-flash", shared.path(), "hi")).await;
    assert_eq!(
        error_code(&other),
        Some(ErrorCode::ProcessCleanupUnverified),
        "{:?}",
        other.error
    );
    survivor.kill().await.unwrap();
    survivor.wait().await.unwrap();
    let after = run(&h, ctx("and again")).await;
    assert_eq!(after.state, TaskState::Completed, "{:?}", after.error);
    let other = run(&h, in_shared("agy-flash", shared.path(), "hi")).await;
    assert_eq!(other.state, TaskState::Completed, "{:?}", other.error);
    assert_eq!(
        std::fs::read_dir(h.home().join("blocked")).unwrap().count(),
        0,
        "the marks are lifted"
    );
    h.engine.shutdown().await;
}

/// A read-only task of `agent` in the shared directory `dir`.
fn in_shared(agent: &str, dir: &Path, prompt: &str) -> SubmitRequest {
    SubmitRequest {
        workspace: legate_engine::WorkspaceRequest::Shared(dir.to_path_buf()),
        mode: Some(TaskMode::ReadOnly),
        ..request(agent, prompt)
    }
}

/// Where the fake keeps its state (and `orphan` its pid) in the harness.
fn fake_state(h: &EngineHarness) -> PathBuf {
    h.base().join("agy-home/.gemini/antigravity-cli/fake-state")
}

/// Whether `pid` is a live process (not a zombie).
fn pid_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X")
    })
}

/// Waits for the `orphan` scenario's pid file and returns the pid.
/// Live processes here whose pid in their own (inner) PID namespace is `inner` and whose
/// command line is `sleep 600`: the orphan, seen from outside agy's namespace.
fn orphans_with_inner_pid(inner: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| {
            let pid = e.file_name().to_str()?.parse::<i32>().ok()?;
            let status = std::fs::read_to_string(e.path().join("status")).ok()?;
            let ns: Vec<i32> = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))?
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect();
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            (ns.len() > 1
                && ns.last() == Some(&inner)
                && cmdline == b"sleep\x00600\x00"
                && pid_alive(pid))
            .then_some(pid)
        })
        .collect()
}

/// The orphan's pid, once the fake has written it. The orphan lives outside every event
/// Legate records (the fake forks it behind Legate's back), so this reads the file until it
/// is whole; the pause paces the reads and orders nothing.
async fn orphan_pid(h: &EngineHarness) -> i32 {
    let file = fake_state(h).join("orphan.pid");
    for _ in 0..1000 {
        if let Some(pid) = std::fs::read_to_string(&file)
            .ok()
            .filter(|t| t.ends_with('\n'))
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the orphan never wrote {}", file.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stubborn_agy_gets_sigkill_after_the_grace_and_the_signals_are_recorded() {
    let h = harness();
    // A run that ends on its own is signalled nothing.
    let t = run(&h, request("agy", "hi")).await;
    assert_eq!(cleanup_detail(&h, &t)["signals"], serde_json::json!([]));
    // Cancel: SIGINT is enough for the plain fake.
    let task = h.engine.submit(request("agy", "timeout: x")).unwrap();
    wait_for_session(&h, &task).await;
    h.engine.cancel(task.id.as_str()).unwrap();
    let t = h.engine.wait(&task.id).await.unwrap();
    assert_eq!(t.state, TaskState::Canceled, "{:?}", t.error);
    let c = cleanup_detail(&h, &t);
    assert_eq!(c["signals"], serde_json::json!(["SIGINT"]), "{c}");
    assert_eq!(c["stopped"], true);

    // A fake that ignores SIGINT is killed after the 3 s grace.
    let task = h.engine.submit(request("agy", "stubborn: x")).unwrap();
    wait_for_session(&h, &task).await;
    let asked = std::time::Instant::now();
    h.engine.cancel(task.id.as_str()).unwrap();
    let t = h.engine.wait(&task.id).await.unwrap();
    let took = asked.elapsed();
    assert_eq!(t.state, TaskState::Canceled, "{:?}", t.error);
    assert!(
        took >= Duration::from_secs(3),
        "SIGKILL came after {took:?}"
    );
    let c = cleanup_detail(&h, &t);
    assert_eq!(
        c["signals"],
        serde_json::json!(["SIGINT", "SIGKILL"]),
        "{c}"
    );
    assert_eq!(c["verified"], true, "{c}");
    assert_eq!(processes_in(t.root.as_ref().unwrap()), Vec::<String>::new());

    // The same on a timeout.
    let (_, c) = timed_out(&h, "stubborn: y").await;
    assert_eq!(
        c["signals"],
        serde_json::json!(["SIGINT", "SIGKILL"]),
        "{c}"
    );
    assert_eq!(c["verified"], true, "{c}");
    h.engine.shutdown().await;
}

async fn wait_for_session(h: &EngineHarness, task: &Task) {
    let mut sub = h.engine.subscribe(&task.id, 0);
    while let Some(e) = sub.next().await.unwrap() {
        if matches!(e.kind, EventKind::Session { .. }) {
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_that_left_the_group_is_found_by_its_marker_and_killed() {
    let h = harness();
    let started = std::time::Instant::now();
    let t = run(&h, request("agy", "orphan: x")).await;
    let took = started.elapsed();
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let pid = orphan_pid(&h).await;
    let c = cleanup_detail(&h, &t);
    assert_eq!(c["verified"], true, "{c}");
    assert_eq!(c["stopped"], false, "{c}");
    if legate_confine::Confinement::probe_namespaces() {
        // agy ran in a PID namespace of its own (the pid it wrote is that namespace's): the
        // orphan died with the namespace when agy exited, before any cleanup had to look.
        assert_eq!(c["signals"], serde_json::json!([]), "{c}");
        assert_eq!(orphans_with_inner_pid(pid), Vec::<i32>::new());
        h.engine.shutdown().await;
        return;
    }
    assert_eq!(c["outsideGroup"], 1, "{c}");
    assert_eq!(
        c["signals"],
        serde_json::json!(["SIGINT", "SIGKILL"]),
        "{c}"
    );
    assert!(
        took >= Duration::from_secs(3),
        "the orphan ignores SIGINT: {took:?}"
    );
    assert_ne!(
        i64::from(pid),
        c["pgid"].as_i64().unwrap(),
        "the orphan left the group"
    );
    assert!(!pid_alive(pid), "the orphan {pid} is still running");
    h.engine.shutdown().await;
}

/// A cgroup-v1 freezer group holding one process: a frozen process cannot act on a signal,
/// not even `SIGKILL`, until it is thawed. Thaws and removes itself when dropped.
struct Frozen {
    dir: PathBuf,
    pid: i32,
}

impl Frozen {
    /// `None` where there is no writable cgroup-v1 freezer (not root, or cgroup v2, whose
    /// freezer lets `SIGKILL` through).
    fn freeze(pid: i32) -> Option<Frozen> {
        let base = Path::new("/sys/fs/cgroup/freezer");
        let dir = base.join(format!("legate-test-{}-{pid}", std::process::id()));
        std::fs::create_dir(&dir).ok()?;
        let frozen = Frozen { dir, pid };
        std::fs::write(frozen.dir.join("cgroup.procs"), pid.to_string()).ok()?;
        std::fs::write(frozen.dir.join("freezer.state"), "FROZEN").ok()?;
        Some(frozen)
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        let _ = std::fs::write(self.dir.join("freezer.state"), "THAWED");
        let parent = self.dir.parent().unwrap().join("cgroup.procs");
        let _ = std::fs::write(parent, self.pid.to_string());
        for _ in 0..100 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orphan_that_cannot_be_killed_blocks_its_workspace_for_every_agent() {
    let h = harness();
    let shared = tempfile::tempdir().unwrap();
    let task = h
        .engine
        .submit(in_shared("agy", shared.path(), "orphan: x"))
        .unwrap();
    let pid = orphan_pid(&h).await;
    if legate_confine::Confinement::probe_namespaces() {
        // The pid is agy's PID namespace's, and the orphan dies with that namespace when agy
        // exits: there is no orphan left to freeze. The mark itself is tested without
        // namespaces, and by the backend's cleanup tests.
        eprintln!("skipped: the orphan dies with agy's PID namespace; nothing to freeze");
        let _ = h.engine.wait(&task.id).await;
        h.engine.shutdown().await;
        return;
    }
    let Some(frozen) = Frozen::freeze(pid) else {
        eprintln!(
            "skipped: no writable cgroup-v1 freezer here to hold a process Legate cannot kill"
        );
        let _ = h.engine.wait(&task.id).await;
        h.engine.shutdown().await;
        return;
    };
    let t = h.engine.wait(&task.id).await.unwrap();
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let c = cleanup_detail(&h, &t);
    assert_eq!(c["verified"], false, "{c}");
    assert_eq!(
        c["signals"],
        serde_json::json!(["SIGINT", "SIGKILL"]),
        "{c}"
    );
    for agent in ["agy", "agy-flash"] {
        let t = run(&h, in_shared(agent, shared.path(), "hi")).await;
        assert_eq!(
            error_code(&t),
            Some(ErrorCode::ProcessCleanupUnverified),
            "{agent}: {:?}",
            t.error
        );
    }
    // Thawed, the pending SIGKILL takes it; the next observation lifts the mark.
    drop(frozen);
    assert!(procs::exited(u32::try_from(pid).unwrap(), Duration::from_secs(5)).await);
    assert!(!pid_alive(pid));
    let t = run(&h, in_shared("agy-flash", shared.path(), "hi")).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kernel_stops_an_agy_write_outside_its_root_profile_and_temp_dir() {
    let enforcement = legate_confine::Confinement::probe();
    let h = harness();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("escaped.txt");
    let t = run(
        &h,
        request("agy", &format!("write-outside: {}", target.display())),
    )
    .await;
    let all = events(&h, &t);
    let details: Vec<serde_json::Value> = all
        .iter()
        .filter_map(|e| match &e.kind {
            EventKind::Notice { detail, .. } => Some(detail.clone()),
            _ => None,
        })
        .collect();
    // The task's first workspace event says how agy is confined (the backend's own report,
    // not "none"); the backend's says exactly where it may write.
    assert_eq!(
        details[0]["confinement"],
        enforcement.as_str(),
        "{details:?}"
    );
    let fence = details
        .iter()
        .find(|d| d.get("writable").is_some())
        .expect("the agy backend reports the confinement it applied");
    assert_eq!(fence["confinement"], enforcement.as_str());
    let writable: Vec<String> = serde_json::from_value(fence["writable"].clone()).unwrap();
    let root = t.root.clone().unwrap();
    assert_eq!(writable[0], root.display().to_string());
    assert!(
        writable[1].ends_with(".gemini/antigravity-cli"),
        "{writable:?}"
    );
    let tmp = PathBuf::from(fence["tmpDir"].as_str().unwrap());
    assert!(
        tmp.starts_with(h.home().join("agents").join("agy")),
        "{tmp:?}"
    );
    assert!(
        !writable
            .iter()
            .any(|w| Path::new(w) == h.home().join("agents").join("agy")),
        "Legate's own state for agy is not writable: {writable:?}"
    );
    if enforcement == legate_confine::Enforcement::None {
        eprintln!("no Landlock on this kernel: the write itself is not tested");
        h.engine.shutdown().await;
        return;
    }
    assert!(!target.exists(), "the unasked write went through");
    let text = serde_json::to_string(&all.iter().map(|e| &e.kind).collect::<Vec<_>>()).unwrap();
    // Landlock's EACCES, or EROFS where the namespace is sealed (read-only mounts first).
    assert!(
        text.contains("Permission denied (os error 13)")
            || text.contains("Read-only file system (os error 30)"),
        "{text}"
    );
    // Inside its private temp dir the same write goes through.
    let scratch = tmp.join("scratch");
    let t = run(
        &h,
        request("agy", &format!("write-outside: {}", scratch.display())),
    )
    .await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    assert!(scratch.exists());
    h.engine.shutdown().await;
}

/// The arguments the backend passed, from the task's `workspace` event.
fn args_of(h: &EngineHarness, t: &Task) -> Vec<String> {
    events(h, t)
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::Notice { detail, .. } if detail.get("args").is_some() => {
                serde_json::from_value(detail["args"].clone()).ok()
            }
            _ => None,
        })
        .expect("an args event")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_schema_gives_structured_output_inline_or_through_a_private_file() {
    let h = harness();
    let schema = serde_json::json!({
        "type": "object",
        "properties": {"summary": {"type": "string"}, "risk": {"type": "integer"}},
        "required": ["summary", "risk"],
    });
    let with_schema = |agent: &str, schema: &serde_json::Value| SubmitRequest {
        json_schema: Some(schema.clone()),
        ..request(agent, "review this")
    };
    let structured = |t: &Task| -> serde_json::Value {
        let r = t.result.as_ref().expect("a result");
        let a = r
            .attachments
            .iter()
            .find(|a| a.name.as_deref() == Some("structured_output.json"))
            .expect("the structured output");
        assert_eq!(a.media_type.as_deref(), Some("application/json"));
        serde_json::from_str(a.text.as_deref().unwrap()).unwrap()
    };
    // With the seed's `effort`, passed as `--effort` before the schema.
    let t = run(
        &h,
        SubmitRequest {
            effort: Some(legate_core::Effort::High),
            ..with_schema("agy", &schema)
        },
    )
    .await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    assert_eq!(
        structured(&t),
        serde_json::json!({"summary": "fake agy: review this", "risk": 0})
    );
    let args = args_of(&h, &t);
    assert_eq!(
        args[args.len() - 4..],
        [
            "--effort".to_string(),
            "high".to_string(),
            "--json-schema".to_string(),
            schema.to_string()
        ]
    );

    // A long schema goes through a 0600 file in the agent's state directory, removed after.
    let mut long = schema.clone();
    long["description"] = "x".repeat(10_000).into();
    let t = run(&h, with_schema("agy", &long)).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    assert_eq!(structured(&t)["risk"], 0);
    let args = args_of(&h, &t);
    let file = PathBuf::from(args.last().unwrap());
    assert_eq!(
        file,
        h.home()
            .join("agents/agy/schemas")
            .join(format!("{}.json", t.id))
    );
    assert!(!file.exists(), "the schema file is removed after the run");

    // An agy without --json-schema cannot; a schema that is not an object, or for an agent
    // of another kind, is refused at submit.
    let t = run(&h, with_schema("agy-noschema", &schema)).await;
    assert_eq!(
        error_code(&t),
        Some(ErrorCode::AgyIncompatible),
        "{:?}",
        t.error
    );
    assert!(t.error.unwrap().message.contains("--json-schema"));
    let e = h
        .engine
        .submit(with_schema(
            "agy",
            &serde_json::json!(["not", "an", "object"]),
        ))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput);
    h.engine.shutdown().await;
}
