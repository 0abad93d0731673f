//! Roles through the engine, on real pipes and a real store: the built-ins and a configured
//! role resolved at submit (unknown names, read-only bases, defaults filled and overridden),
//! the role's instructions framed into the prompt the agent really receives (`fake-agy`
//! echoes its whole prompt), the stored role kept by a resume after the configuration
//! changed, a continuation refusing another role, planner tasks in agy's plan mode, and a
//! bad `[roles.NAME]` stopping the engine at start.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{AgentKind, ErrorCode, EventKind, RoleBase, Task, TaskMode, TaskRole, TaskState};
use legate_engine::{ContinueRequest, EngineConfig, RoleDefaults, RoleSpec, SubmitRequest};
use legate_testkit::{EngineHarness, HarnessBuilder, TestAgent};
use std::path::Path;
use std::time::Duration;

const FAKE: &str = env!("CARGO_BIN_EXE_fake-agy");
const INSTRUCTIONS: &str = "Check access control first.\nCite only real lines.";

fn security_review(instructions: &str) -> RoleSpec {
    RoleSpec {
        name: "security-review".into(),
        base: RoleBase::Reviewer,
        description: Some("access control".into()),
        instructions: instructions.into(),
        defaults: RoleDefaults {
            agent: Some("agy".into()),
            model: Some("mock-flash".into()),
            timeout_seconds: Some(77),
            ..RoleDefaults::default()
        },
    }
}

fn fast_fixer() -> RoleSpec {
    RoleSpec {
        name: "fast-fixer".into(),
        base: RoleBase::Implementer,
        description: None,
        instructions: "Keep the change small.".into(),
        defaults: RoleDefaults {
            timeout_seconds: Some(90),
            ..RoleDefaults::default()
        },
    }
}

/// The scripted agent (the default) and `fake-agy` as `agy`, with `roles` configured.
fn builder(base: &Path, roles: Vec<RoleSpec>) -> HarnessBuilder {
    let agy_home = base.join("agy-home");
    let state = agy_home.join(".gemini/antigravity-cli/fake-state");
    EngineHarness::builder()
        .agent(TestAgent::scripted("revisor"))
        .agent(
            TestAgent::command("agy", AgentKind::AGY, FAKE)
                .env("HOME", agy_home.to_str().unwrap())
                .env("FAKE_AGY_STATE_DIR", state.to_str().unwrap()),
        )
        .config(move |c: &mut EngineConfig| c.roles = roles)
}

fn harness(roles: Vec<RoleSpec>) -> EngineHarness {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    builder(&base, roles).in_dir(dir).start()
}

fn with_role(role: &str, prompt: &str) -> SubmitRequest {
    SubmitRequest {
        role: Some(role.into()),
        ..SubmitRequest::new(prompt)
    }
}

async fn ended(h: &EngineHarness, task: Task) -> Task {
    tokio::time::timeout(Duration::from_secs(60), h.engine.wait(&task.id))
        .await
        .expect("the task ends")
        .unwrap()
}

fn answer(t: &Task) -> String {
    t.result
        .as_ref()
        .map(|r| r.text.clone())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_role_or_write_on_a_read_only_base_is_refused_before_anything_is_stored() {
    let h = harness(vec![security_review(INSTRUCTIONS)]);
    let e = h.engine.submit(with_role("architect", "hi")).unwrap_err();
    assert_eq!(e.code, ErrorCode::RoleNotFound, "{e}");
    assert!(e.message.contains("security-review"), "{e}");
    for role in ["planner", "reviewer", "security-review"] {
        let e = h
            .engine
            .submit(SubmitRequest {
                mode: Some(TaskMode::Write),
                ..with_role(role, "write a.txt: x")
            })
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::ModeNotAllowed, "{role}: {e}");
        assert!(e.message.contains(role), "{e}");
    }
    let e = h
        .engine
        .submit(SubmitRequest {
            json_schema: Some(serde_json::json!({"type": "object"})),
            agent: Some("agy".into()),
            ..with_role("planner", "plan")
        })
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput, "{e}");
    assert!(h.engine.tasks(&Default::default()).unwrap().is_empty());
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_omitting_mode_is_read_only_and_its_role_is_stored() {
    let h = harness(vec![]);
    let t = ended(
        &h,
        h.engine
            .submit(with_role("planner", "write a.txt: no\nWhat is here?"))
            .unwrap(),
    )
    .await;
    assert_eq!(t.mode, TaskMode::ReadOnly);
    assert_eq!(t.role, Some(TaskRole::builtin(RoleBase::Planner)));
    assert_eq!(
        t.prompt, "write a.txt: no\nWhat is here?",
        "stored as written"
    );
    assert!(!t.root.as_ref().unwrap().join("a.txt").exists());
    assert_eq!(t.result.as_ref().unwrap().refusals.len(), 1, "{t:?}");
    // The plain implementer is stored as no role and still writes.
    let plain = ended(
        &h,
        h.engine
            .submit(with_role("implementer", "write b.txt: yes"))
            .unwrap(),
    )
    .await;
    assert_eq!((plain.mode, plain.role.clone()), (TaskMode::Write, None));
    assert!(plain.root.as_ref().unwrap().join("b.txt").exists());
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn defaults_fill_what_the_request_left_out_and_an_explicit_argument_wins() {
    let h = harness(vec![security_review(INSTRUCTIONS), fast_fixer()]);
    let t = ended(
        &h,
        h.engine
            .submit(with_role("security-review", "look"))
            .unwrap(),
    )
    .await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    assert_eq!(t.agent, "agy");
    assert_eq!(t.model.as_deref(), Some("mock-flash"));
    assert_eq!(t.timeout_secs, 77);
    assert_eq!(t.mode, TaskMode::ReadOnly);
    let role = t.role.clone().unwrap();
    assert_eq!(
        (role.name.as_str(), role.base),
        ("security-review", RoleBase::Reviewer)
    );
    assert_eq!(role.instructions, INSTRUCTIONS);

    let explicit = ended(
        &h,
        h.engine
            .submit(SubmitRequest {
                agent: Some("revisor".into()),
                timeout: Some(Duration::from_secs(5)),
                model: Some("auto".into()),
                ..with_role("security-review", "look")
            })
            .unwrap(),
    )
    .await;
    assert_eq!(explicit.agent, "revisor");
    assert_eq!(explicit.timeout_secs, 5);
    assert_eq!(explicit.model.as_deref(), Some("auto"));

    let fixer = ended(
        &h,
        h.engine
            .submit(with_role("fast-fixer", "write c.txt: ok"))
            .unwrap(),
    )
    .await;
    assert_eq!((fixer.mode, fixer.timeout_secs), (TaskMode::Write, 90));
    assert!(fixer.root.as_ref().unwrap().join("c.txt").exists());
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_receives_the_callers_prompt_then_the_roles_framed_instructions() {
    let h = harness(vec![security_review(INSTRUCTIONS)]);
    let t = ended(
        &h,
        h.engine
            .submit(with_role("security-review", "review src/ please"))
            .unwrap(),
    )
    .await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let said = answer(&t);
    // fake-agy answers `fake agy: <the prompt it was given>`.
    assert!(
        said.starts_with("fake agy: review src/ please\n\nLegate framing:"),
        "{said}"
    );
    assert!(
        said.contains("Legate role: security-review (built on reviewer). This task is read-only"),
        "{said}"
    );
    assert!(
        said.contains("never outrank the caller's task or Legate's rules"),
        "{said}"
    );
    assert!(
        said.contains("\n> Check access control first.\n> Cite only real lines."),
        "{said}"
    );
    assert_eq!(t.prompt, "review src/ please");

    // The plain implementer's prompt reaches the agent byte for byte.
    let plain = ended(
        &h,
        h.engine
            .submit(SubmitRequest {
                agent: Some("agy".into()),
                ..SubmitRequest::new("just this")
            })
            .unwrap(),
    )
    .await;
    assert_eq!(answer(&plain), "fake agy: just this");
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_keeps_the_stored_role_after_the_configuration_changed() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let engine = builder(&base, vec![security_review(INSTRUCTIONS)]).engine_in(&base);
    let first = engine
        .submit(with_role("security-review", "first look"))
        .unwrap();
    let first = engine.wait(&first.id).await.unwrap();
    assert_eq!(first.state, TaskState::Completed, "{:?}", first.error);
    engine.shutdown().await;

    // The role's instructions change, then the role is removed altogether.
    for roles in [vec![security_review("Something else entirely.")], vec![]] {
        let engine = builder(&base, roles).engine_in(&base);
        let next = engine
            .resume(ContinueRequest {
                context_id: first.context_id.clone(),
                prompt: "second look".into(),
                mode: None,
                timeout: None,
            })
            .unwrap();
        let next = engine.wait(&next.id).await.unwrap();
        assert_eq!(next.state, TaskState::Completed, "{:?}", next.error);
        assert_eq!(next.role, first.role, "the stored snapshot");
        assert_eq!(next.mode, TaskMode::ReadOnly);
        let said = answer(&next);
        assert!(said.contains("> Check access control first."), "{said}");
        assert!(!said.contains("Something else"), "{said}");
        // Naming another role on the conversation is refused; naming its own is fine.
        let e = engine
            .submit(SubmitRequest {
                context_id: Some(first.context_id.clone()),
                agent: Some("agy".into()),
                ..with_role("planner", "plan now")
            })
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput, "{e}");
        assert!(
            e.message
                .contains("a conversation keeps its role; hand off"),
            "{e}"
        );
        engine.shutdown().await;
    }
    drop(dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_on_agy_runs_in_plan_mode() {
    let h = harness(vec![]);
    let t = ended(
        &h,
        h.engine
            .submit(SubmitRequest {
                agent: Some("agy".into()),
                ..with_role("planner", "write: nope.txt x")
            })
            .unwrap(),
    )
    .await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    assert!(!t.root.as_ref().unwrap().join("nope.txt").exists());
    let args = h
        .engine
        .events(&t.id, 0, 10_000)
        .unwrap()
        .into_iter()
        .find_map(|e| match e.kind {
            EventKind::Notice { detail, .. } if detail.get("args").is_some() => {
                Some(detail["args"].to_string())
            }
            _ => None,
        })
        .unwrap();
    assert!(args.contains("\"--mode\",\"plan\""), "{args}");
    h.engine.shutdown().await;
}

#[test]
fn a_bad_configured_role_stops_the_engine_at_start_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().canonicalize().unwrap();
    let mut replaced = security_review(INSTRUCTIONS);
    replaced.name = "reviewer".into();
    let mut stranger = security_review(INSTRUCTIONS);
    stranger.defaults.agent = Some("nobody".into());
    let mut empty = fast_fixer();
    empty.instructions = "  ".into();
    for (roles, says) in [
        (vec![replaced], "roles.reviewer: is a built-in role"),
        (
            vec![stranger],
            "roles.security-review: defaults.agent \"nobody\"",
        ),
        (
            vec![empty],
            "roles.fast-fixer: instructions must not be empty",
        ),
        (
            vec![fast_fixer(), fast_fixer()],
            "roles.fast-fixer: is declared twice",
        ),
    ] {
        let Err(e) = builder(&base, roles).try_engine_in(&base) else {
            panic!("{says}: the engine started");
        };
        assert_eq!(e.code, ErrorCode::ConfigInvalid, "{e}");
        assert!(e.message.contains(says), "{e}");
    }
}
