//! `Engine::deliver`, the one call every front makes for an inbound message, with no front
//! involved: the engine drives the real scripted agent (revisor) on real pipes with a real
//! SQLite store. Each conversation rule has its test, and each refusal is shown to change
//! nothing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, Task, TaskState};
use legate_engine::{Delivered, Engine, Inbound, Route, TaskFilter, WorkspaceRequest};
use legate_testkit::{EngineHarness, TestAgent};
use std::path::Path;

/// An engine whose home is under `base`, with two scripted agents, `revisor` (the default)
/// and `other`.
fn engine(base: &Path) -> Engine {
    EngineHarness::builder()
        .agent(TestAgent::scripted("revisor"))
        .agent(TestAgent::scripted("other"))
        .engine_in(base)
}

fn message(agent: &str, context: Option<&str>, text: &str) -> Inbound {
    Inbound {
        agent: agent.into(),
        context_id: context.map(str::to_string),
        text: text.into(),
        ..Inbound::default()
    }
}

fn in_context(engine: &Engine, context: &str) -> Vec<Task> {
    engine
        .tasks(&TaskFilter {
            context_id: Some(context.into()),
            limit: 100,
            ..TaskFilter::default()
        })
        .unwrap()
}

/// The code of a refusal, and that the context's tasks are as they were: the same tasks, the
/// same prompts, and the same state for every task that was not running. (A running task of
/// the context moves from `submitted` to `working` on its own, whatever the refusal did.)
fn refused(engine: &Engine, context: &str, inbound: Inbound) -> ErrorCode {
    let seen = |t: Task| {
        let running = matches!(t.state, TaskState::Submitted | TaskState::Working);
        (t.id, (!running).then_some(t.state), t.prompt)
    };
    let before: Vec<_> = in_context(engine, context).into_iter().map(seen).collect();
    let e = engine.messages().deliver(inbound).expect_err("refused");
    let after: Vec<_> = in_context(engine, context).into_iter().map(seen).collect();
    assert_eq!(before, after, "a refusal changed the context ({e})");
    e.code
}

/// An empty message starts a conversation waiting for input.
fn waiting(engine: &Engine, context: &str) -> Delivered {
    let d = engine
        .messages()
        .deliver(message("revisor", Some(context), ""))
        .unwrap();
    assert_eq!(d.route, Route::Started);
    assert_eq!(d.task.state, TaskState::InputRequired);
    assert_eq!(d.task.context_id, context);
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_resumes_only_its_own_agents_waiting_task_with_text() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let w = waiting(&engine, "c-reply");
    let reply = |agent: &str, context: Option<&str>, text: &str| Inbound {
        task_id: Some(w.task.id.0.clone()),
        ..message(agent, context, text)
    };

    // A task belongs to the agent it was sent to; to another it does not exist.
    assert_eq!(
        engine
            .messages()
            .task_of("revisor", &w.task.id.0)
            .unwrap()
            .id,
        w.task.id
    );
    let e = engine
        .messages()
        .task_of("other", &w.task.id.0)
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::TaskNotFound);
    let prefix = &w.task.id.0[..8];
    assert_eq!(
        engine
            .messages()
            .task_of("revisor", prefix)
            .unwrap_err()
            .code,
        ErrorCode::TaskNotFound
    );

    // A reply names no workspace: the conversation has one.
    let mut with_workspace = reply("revisor", None, "go on");
    with_workspace.workspace = Some(WorkspaceRequest::Sandbox);
    assert_eq!(
        refused(&engine, "c-reply", with_workspace),
        ErrorCode::InvalidWorkspace
    );
    // Another agent's task is not disclosed.
    assert_eq!(
        refused(&engine, "c-reply", reply("other", None, "go on")),
        ErrorCode::TaskNotFound
    );
    let mut unknown = reply("revisor", None, "go on");
    unknown.task_id = Some("../../etc/passwd".into());
    assert_eq!(
        refused(&engine, "c-reply", unknown),
        ErrorCode::TaskNotFound
    );
    // The task's context or none.
    assert_eq!(
        refused(
            &engine,
            "c-reply",
            reply("revisor", Some("c-elsewhere"), "go on")
        ),
        ErrorCode::InvalidInput
    );
    assert!(in_context(&engine, "c-elsewhere").is_empty());
    // An empty reply cannot say what to do.
    for blank in ["", " \n\t"] {
        assert_eq!(
            refused(&engine, "c-reply", reply("revisor", None, blank)),
            ErrorCode::InvalidInput
        );
    }

    let after = engine.records().last_seq(&w.task.id).unwrap();
    let d = engine
        .messages()
        .deliver(reply(
            "revisor",
            Some("c-reply"),
            "What is in this workspace?",
        ))
        .unwrap();
    assert_eq!(d.route, Route::Reply);
    assert_eq!(d.task.id, w.task.id);
    assert_eq!(d.after, after);
    let done = engine.wait(&d.task.id).await.unwrap();
    assert_eq!(done.state, TaskState::Completed);
    assert_eq!(done.prompt, "What is in this workspace?");
    // A finished task takes no reply.
    assert_eq!(
        refused(&engine, "c-reply", reply("revisor", None, "again")),
        ErrorCode::TaskNotAwaitingInput
    );
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_context_keeps_its_agent_and_workspace_and_takes_the_next_turn() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let first = engine
        .messages()
        .deliver(message(
            "revisor",
            Some("c-turns"),
            "What is in this workspace?",
        ))
        .unwrap();
    assert_eq!(first.route, Route::Started);
    assert_eq!(
        engine.wait(&first.task.id).await.unwrap().state,
        TaskState::Completed
    );

    // The context belongs to one agent.
    assert_eq!(
        refused(&engine, "c-turns", message("other", Some("c-turns"), "hi")),
        ErrorCode::InvalidInput
    );
    // It keeps its workspace: naming one, even the same kind, is refused.
    let mut named = message("revisor", Some("c-turns"), "hi");
    named.workspace = Some(WorkspaceRequest::Sandbox);
    assert_eq!(
        refused(&engine, "c-turns", named),
        ErrorCode::InvalidWorkspace
    );

    // A text is the next turn, idempotent by the caller's message id.
    let mut next = message("revisor", Some("c-turns"), "And now?");
    next.message_id = Some("m-1".into());
    let second = engine.messages().deliver(next.clone()).unwrap();
    assert_eq!(second.route, Route::NextTurn);
    assert_eq!(second.after, 0);
    assert_ne!(second.task.id, first.task.id);
    assert_eq!(second.task.context_id, "c-turns");
    assert_eq!(second.task.root, first.task.root);
    let again = engine.messages().deliver(next.clone()).unwrap();
    assert_eq!(again.task.id, second.task.id);
    next.text = "Something else".into();
    assert_eq!(
        refused(&engine, "c-turns", next),
        ErrorCode::MessageIdConflict
    );
    assert_eq!(
        engine.wait(&second.task.id).await.unwrap().state,
        TaskState::Completed
    );

    // An empty text asks for input, in the context's workspace.
    let empty = engine
        .messages()
        .deliver(message("revisor", Some("c-turns"), " "))
        .unwrap();
    assert_eq!(empty.route, Route::NextTurn);
    assert_eq!(empty.task.state, TaskState::InputRequired);
    assert_eq!(empty.task.root, first.task.root);
    assert_eq!(in_context(&engine, "c-turns").len(), 3);
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_without_a_known_context_starts_a_conversation_with_its_agent() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    // No context: a fresh one, for the addressed agent (not the default).
    let mut fresh = message("other", None, "What is in this workspace?");
    fresh.message_id = Some("  ".into());
    fresh.workspace = Some(WorkspaceRequest::Sandbox);
    let d = engine.messages().deliver(fresh).unwrap();
    assert_eq!(d.route, Route::Started);
    assert_eq!(d.task.agent, "other");
    assert!(!d.task.context_id.is_empty());
    assert_eq!(
        engine.wait(&d.task.id).await.unwrap().state,
        TaskState::Completed
    );
    // An unknown agent is the engine's refusal, and nothing is stored.
    let e = engine
        .messages()
        .deliver(message("nobody", Some("c-nobody"), "hi"))
        .unwrap_err();
    assert_ne!(e.code, ErrorCode::Internal, "{e}");
    assert!(in_context(&engine, "c-nobody").is_empty());
    // A context id the engine has not seen starts that context.
    let w = waiting(&engine, "c-new");
    assert_eq!(in_context(&engine, "c-new")[0].id, w.task.id);
    engine.shutdown().await;
}

/// Hostile task ids (SQL wildcards, prefixes of a real id, path-like and control characters)
/// name no task: a reply or a lookup by another agent's front never finds one it should not.
#[test]
fn no_hostile_task_id_finds_a_task() {
    use proptest::prelude::*;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let _guard = rt.enter();
    let engine = engine(dir.path());
    let w = waiting(&engine, "c-hostile");
    let real = w.task.id.0.clone();
    let mut runner = proptest::test_runner::TestRunner::default();
    let ids = prop_oneof![
        any::<String>(),
        "[%_*?./\\\\\\x00-\\x1f-]{0,40}",
        (0..real.len()).prop_map({
            let real = real.clone();
            move |n| real[..n].to_string()
        }),
        Just(format!("{real}%")),
        Just(format!("%{}", &real[4..])),
        Just(real.to_uppercase()),
        Just(format!(" {real}")),
    ];
    runner
        .run(&ids, |id| {
            prop_assume!(id != real);
            let e = engine.messages().task_of("revisor", &id).unwrap_err();
            prop_assert_eq!(e.code, ErrorCode::TaskNotFound);
            let reply = Inbound {
                task_id: Some(id),
                ..message("revisor", None, "go on")
            };
            let e = engine.messages().deliver(reply).unwrap_err();
            prop_assert_eq!(e.code, ErrorCode::TaskNotFound);
            Ok(())
        })
        .unwrap();
    // The waiting task is as it was.
    let stored = engine.task(&real).unwrap();
    assert_eq!(stored.state, TaskState::InputRequired);
    rt.block_on(engine.shutdown());
}

/// A message id is checked the same on every route: over `MAX_MESSAGE_ID_BYTES` or with a
/// control character it is `INVALID_INPUT` and nothing is stored, whether the message starts
/// a conversation, replies into a waiting task or takes a context's next turn. (Before, only
/// a next turn checked it: a hostile id of any size reached the agent on the other two.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_message_id_is_refused_on_every_route() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let w = waiting(&engine, "c-ids");
    let long = "m".repeat(legate_engine::MAX_MESSAGE_ID_BYTES + 1);
    for id in [long.as_str(), "m\n1", "m\u{1b}[2J", "m\u{0}"] {
        let with_id = |mut inbound: Inbound| {
            inbound.message_id = Some(id.to_string());
            inbound
        };
        // Starting a conversation.
        let start = with_id(message("revisor", Some("c-ids-new"), "hello"));
        assert_eq!(
            refused(&engine, "c-ids-new", start),
            ErrorCode::InvalidInput,
            "{id:?}"
        );
        assert!(in_context(&engine, "c-ids-new").is_empty());
        // A reply into the waiting task.
        let reply = with_id(Inbound {
            task_id: Some(w.task.id.0.clone()),
            ..message("revisor", None, "go on")
        });
        assert_eq!(
            refused(&engine, "c-ids", reply),
            ErrorCode::InvalidInput,
            "{id:?}"
        );
        // The context's next turn.
        let next = with_id(message("revisor", Some("c-ids"), "next"));
        assert_eq!(
            refused(&engine, "c-ids", next),
            ErrorCode::InvalidInput,
            "{id:?}"
        );
    }
    let stored = engine.task(w.task.id.as_str()).unwrap();
    assert_eq!(stored.state, TaskState::InputRequired);
    // The limit itself is accepted.
    let ok = Inbound {
        message_id: Some("m".repeat(legate_engine::MAX_MESSAGE_ID_BYTES)),
        ..message("revisor", Some("c-ids-ok"), "hello")
    };
    let d = engine.messages().deliver(ok).unwrap();
    assert_eq!(
        engine.wait(&d.task.id).await.unwrap().state,
        TaskState::Completed
    );
    engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_chooses_the_role_only_when_it_starts_the_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let with_role = |context: &str, text: &str, role: &str| Inbound {
        role: Some(role.into()),
        ..message("revisor", Some(context), text)
    };
    let e = engine
        .messages()
        .deliver(with_role("c-role", "hi", "architect"))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::RoleNotFound, "{e}");
    assert!(in_context(&engine, "c-role").is_empty(), "nothing stored");

    let first = engine
        .messages()
        .deliver(with_role("c-role", "write a.txt: no", "planner"))
        .unwrap();
    assert_eq!(first.route, Route::Started);
    let first = engine.wait(&first.task.id).await.unwrap();
    assert_eq!(first.mode, legate_core::TaskMode::ReadOnly);
    assert_eq!(first.role.as_ref().unwrap().name, "planner");

    // Another role on the conversation is refused, on a next turn and on a reply alike.
    let e = engine
        .messages()
        .deliver(with_role("c-role", "now write", "implementer"))
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput, "{e}");
    assert!(e.message.contains("keeps its role"), "{e}");
    let w = waiting(&engine, "c-role-wait");
    let reply = Inbound {
        task_id: Some(w.task.id.0.clone()),
        role: Some("reviewer".into()),
        ..message("revisor", None, "go on")
    };
    assert_eq!(
        engine.messages().deliver(reply).unwrap_err().code,
        ErrorCode::InvalidInput
    );
    assert_eq!(in_context(&engine, "c-role").len(), 1);

    // Leaving the role out, or repeating it, keeps the conversation's.
    for role in [None, Some("planner")] {
        let next = engine
            .messages()
            .deliver(Inbound {
                role: role.map(str::to_string),
                ..message("revisor", Some("c-role"), "What is here?")
            })
            .unwrap();
        assert_eq!(next.route, Route::NextTurn);
        let next = engine.wait(&next.task.id).await.unwrap();
        assert_eq!(next.role, first.role);
        assert_eq!(next.mode, legate_core::TaskMode::ReadOnly);
    }
    engine.shutdown().await;
}

/// A conversation another front started is no inbound message's: `deliver` refuses to
/// continue it, and so does the submit behind it (the context is read again there, and may
/// have been started by another front in between), changing nothing. A conversation an
/// inbound message started keeps its mark on every later turn, whoever sends it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbound_message_never_continues_another_fronts_conversation() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let local = engine
        .submit(legate_engine::SubmitRequest::new("hello"))
        .unwrap();
    legate_testkit::harness::wait_state(&engine, &local.id, TaskState::Completed).await;
    let code = refused(
        &engine,
        &local.context_id,
        message("revisor", Some(&local.context_id), "write x.txt: x"),
    );
    assert_eq!(code, ErrorCode::InvalidInput);
    let mut behind = legate_engine::SubmitRequest::new("write x.txt: x");
    behind.context_id = Some(local.context_id.clone());
    behind.workspace = WorkspaceRequest::Context;
    behind.inbound = true;
    let e = engine.submit(behind).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput, "{e}");
    assert_eq!(in_context(&engine, &local.context_id).len(), 1);

    let started = engine
        .messages()
        .deliver(message("revisor", None, "hello"))
        .unwrap();
    assert!(started.task.controls.inbound);
    legate_testkit::harness::wait_state(&engine, &started.task.id, TaskState::Completed).await;
    let ctx = started.task.context_id.clone();
    // Its next inbound turn keeps the mark.
    let next = engine
        .messages()
        .deliver(message("revisor", Some(&ctx), "hello again"))
        .unwrap();
    assert!(next.task.controls.inbound, "a later turn keeps the mark");
    legate_testkit::harness::wait_state(&engine, &next.task.id, TaskState::Completed).await;
}

/// An inbound caller may name a new conversation's id itself, and reads every task of it. A
/// task of another front naming that id (a local `legate run --context deploy-review`,
/// believing it new; an MCP `run`, `continue` or `send_message`) would run in the caller's
/// workspace and hand it the prompt: each is refused, and the context is as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_fronts_task_never_joins_a_conversation_an_inbound_caller_started() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    let planted = engine
        .messages()
        .deliver(message(
            "revisor",
            Some("deploy-review"),
            "write notes.txt: planted",
        ))
        .unwrap();
    legate_testkit::harness::wait_state(&engine, &planted.task.id, TaskState::Completed).await;
    let mut local = legate_engine::SubmitRequest::new("our secret hint is ops/db-prod");
    local.context_id = Some("deploy-review".into());
    let e = engine.submit(local).unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput, "{e}");
    assert!(e.message.contains("inbound"), "{e}");
    let e = engine
        .resume(legate_engine::ContinueRequest {
            context_id: "deploy-review".into(),
            prompt: "our secret hint".into(),
            mode: None,
            timeout: None,
        })
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput, "{e}");
    let e = engine
        .send_message(legate_engine::MessageRequest {
            context_id: "deploy-review".into(),
            message_id: "m1".into(),
            text: "our secret hint".into(),
            mode: None,
        })
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput, "{e}");
    let e = engine
        .messages()
        .next_turn(
            legate_engine::ContinueRequest {
                context_id: "deploy-review".into(),
                prompt: "our secret hint".into(),
                mode: None,
                timeout: None,
            },
            None,
        )
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::InvalidInput, "{e}");
    let tasks = in_context(&engine, "deploy-review");
    assert_eq!(tasks.len(), 1, "{tasks:?}");
    assert!(!tasks.iter().any(|t| t.prompt.contains("secret")));
}

/// A message id is the caller's within one conversation: the same id in another context is
/// another message, so a caller of one conversation cannot take an id that another
/// conversation's caller will send (once one key across every context, it made that later
/// send `MESSAGE_ID_CONFLICT`). Within a context the id still keeps its text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_id_taken_in_one_context_is_free_in_another() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path());
    for context in ["c-one", "c-two"] {
        let first = engine
            .messages()
            .deliver(message("revisor", Some(context), "What is here?"))
            .unwrap();
        assert_eq!(
            engine.wait(&first.task.id).await.unwrap().state,
            TaskState::Completed
        );
    }
    let mut one = message("revisor", Some("c-one"), "And now?");
    one.message_id = Some("m-1".into());
    let taken = engine.messages().deliver(one.clone()).unwrap();
    let mut two = message("revisor", Some("c-two"), "Something else?");
    two.message_id = Some("m-1".into());
    let other = engine.messages().deliver(two).unwrap();
    assert_ne!(other.task.id, taken.task.id);
    assert_eq!(other.task.context_id, "c-two");
    one.text = "Another text".into();
    assert_eq!(refused(&engine, "c-one", one), ErrorCode::MessageIdConflict);
    for t in [taken.task.id, other.task.id] {
        assert_eq!(engine.wait(&t).await.unwrap().state, TaskState::Completed);
    }
}
