//! A group outlives the engine that ran it: a second engine on the same home takes it over
//! (a compare-and-set on the group's runner), a node that was mid-turn ends
//! `SERVER_RESTARTED` and pauses the group, nothing is re-run until the caller's
//! `group_start`, and finished nodes never are. An admission recorded with no stored task
//! is `GROUP_ADMISSION_UNVERIFIED`. (The `kill -9` of a real process is the binary's test.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, EventKind, TaskId, TaskState};
use legate_engine::{Engine, GroupDefinition, GroupState, GroupStatus, NodeDef, NodeState};
use legate_testkit::harness::{EngineHarness, HarnessBuilder, make_project, until};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::runtime::Runtime;

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

fn builder() -> HarnessBuilder {
    EngineHarness::builder()
}

fn node(id: &str, prompt: &str, deps: &[&str]) -> NodeDef {
    NodeDef {
        id: id.into(),
        role: None,
        agent: None,
        model: None,
        prompt: prompt.into(),
        depends_on: deps.iter().map(|d| d.to_string()).collect(),
        file_sources: None,
        mode: None,
        criteria: vec![],
        ..NodeDef::default()
    }
}

fn engine(rt: &Runtime, base: &Path) -> Engine {
    let _in = rt.enter();
    builder().engine_in(base)
}

/// Drops the engine and its runtime without ending anything, as a killed process would.
fn kill(rt: Runtime, engine: Engine, base: &Path) {
    let runner = engine.runner_id().to_string();
    drop(engine);
    drop(rt);
    assert!(!legate_engine::runner::is_alive(
        &base.join("home/run"),
        &runner
    ));
}

fn project(base: &Path) -> PathBuf {
    let p = base.join("project");
    make_project(&p, &[("a.txt", "alpha\n")]);
    p
}

fn node_of<'a>(s: &'a GroupStatus, id: &str) -> &'a legate_engine::NodeStatus {
    s.nodes.iter().find(|n| n.id == id).unwrap()
}

async fn settled(engine: &Engine, group: &str) -> GroupStatus {
    let w = engine
        .groups()
        .wait(group, Duration::from_secs(120))
        .await
        .unwrap();
    assert!(w.ready, "{:?}", w.status);
    w.status
}

#[test]
fn a_second_engine_continues_a_group_whose_engine_died_mid_graph() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let def = GroupDefinition {
        working_directory: project(&base),
        title: None,
        nodes: vec![
            node("first", "write one.txt: one\\n", &[]),
            node("cut", "!say ready\n!hang", &["first"]),
            node("side", "write side.txt: side\\n", &["first"]),
            node("last", "write last.txt: last\\n", &["cut", "side"]),
        ],
        peer_routes: vec![],
        budget: None,
        workflow: None,
    };
    let rt = runtime();
    let first_engine = engine(&rt, &base);
    let (sha, cut_task) = rt.block_on(async {
        let c = first_engine.groups().create(Some("g".into()), def).unwrap();
        first_engine
            .groups()
            .start("g", &c.definition_sha256)
            .await
            .unwrap();
        // Wait until the hanging node's agent said it is mid-turn.
        let cut = loop {
            let s = first_engine.groups().status("g").unwrap();
            if let Some(t) = node_of(&s, "cut").task_ids.first() {
                break t.clone();
            }
            first_engine
                .groups()
                .wait("g", Duration::from_millis(100))
                .await
                .unwrap();
        };
        until(
            &first_engine,
            &cut,
            |e| matches!(&e.kind, EventKind::Message { text } if text.contains("ready")),
        )
        .await;
        // The engine dies once `side` is finished and recorded, with `cut` mid-turn.
        while node_of(&first_engine.groups().status("g").unwrap(), "side").state
            != NodeState::Succeeded
        {
            first_engine
                .groups()
                .wait("g", Duration::from_millis(100))
                .await
                .unwrap();
        }
        (c.definition_sha256, cut)
    });
    kill(rt, first_engine, &base);

    // Any engine on the home takes the group over at start.
    let rt = runtime();
    let next = engine(&rt, &base);
    rt.block_on(async {
        let s = settled(&next, "g").await;
        assert_eq!(s.state, GroupState::Paused, "{s:?}");
        assert_eq!(s.pause_reason, Some(ErrorCode::ServerRestarted));
        assert_eq!(node_of(&s, "cut").state, NodeState::Interrupted);
        let cut = next.task(cut_task.as_str()).unwrap();
        assert_eq!(cut.state, TaskState::Failed);
        assert_eq!(cut.error_code(), Some(ErrorCode::ServerRestarted));
        assert_eq!(node_of(&s, "first").state, NodeState::Succeeded);
        assert_eq!(node_of(&s, "first").task_ids.len(), 1);
        assert_eq!(node_of(&s, "side").state, NodeState::Succeeded);
        assert_eq!(node_of(&s, "side").task_ids.len(), 1);
        assert!(node_of(&s, "last").task_ids.is_empty());
        // Nothing was re-run silently: the cut node has its one task.
        assert_eq!(node_of(&s, "cut").task_ids.len(), 1);

        // The caller's explicit resume admits the cut node again, and only it.
        next.groups().start("g", &sha).await.unwrap();
        let again = loop {
            let s = next.groups().status("g").unwrap();
            if node_of(&s, "cut").task_ids.len() == 2 {
                break node_of(&s, "cut").task_ids[1].clone();
            }
            next.groups()
                .wait("g", Duration::from_millis(100))
                .await
                .unwrap();
        };
        until(
            &next,
            &again,
            |e| matches!(&e.kind, EventKind::Message { text } if text.contains("ready")),
        )
        .await;
        let s = next.groups().status("g").unwrap();
        assert_eq!(s.state, GroupState::Running);
        assert_eq!(
            node_of(&s, "first").task_ids.len(),
            1,
            "first is not re-run"
        );
        assert_eq!(node_of(&s, "side").state, NodeState::Succeeded);
        assert_eq!(node_of(&s, "side").task_ids.len(), 1, "side is not re-run");
        next.groups().cancel("g").unwrap();
        let s = settled(&next, "g").await;
        assert_eq!(s.state, GroupState::Canceled);
        next.shutdown().await;
    });
}

/// A group of one node, `only`, over a new project in `base`.
fn one_node_group(base: &Path) -> GroupDefinition {
    GroupDefinition {
        working_directory: project(base),
        title: None,
        nodes: vec![node("only", "write o.txt: o\\n", &[])],
        peer_routes: vec![],
        budget: None,
        workflow: None,
    }
}

/// Stores, as a process that died mid-admission leaves it, the first node of `group` (created,
/// its engine gone) being admitted, the group running, and its runner a dead one; returns the
/// store.
fn admitting_under_a_dead_runner(base: &Path, group: &str) -> legate_store::Store {
    let store = legate_store::Store::open(&base.join("home/legate.db")).unwrap();
    let node = store.group_nodes(group).unwrap().remove(0);
    let admitting = legate_store::NodeRecord {
        state: "admitting".into(),
        ..node
    };
    assert!(store.move_node(group, &["pending"], &admitting).unwrap());
    assert!(
        store
            .set_group_state(group, &["created"], "running", None, None)
            .unwrap()
    );
    assert!(store.claim_group(group, None, Some("dead-runner")).unwrap());
    store
}

#[test]
fn an_admission_with_no_stored_task_pauses_the_group_unverified() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let def = one_node_group(&base);
    let rt = runtime();
    let first = engine(&rt, &base);
    let c = first.groups().create(Some("u".into()), def).unwrap();
    kill(rt, first, &base);
    // A process died between recording the admission and storing the task: the store says
    // the node is being admitted, the group runs, and its runner is gone.
    drop(admitting_under_a_dead_runner(&base, "u"));

    let rt = runtime();
    let next = engine(&rt, &base);
    rt.block_on(async {
        let s = settled(&next, "u").await;
        assert_eq!(s.state, GroupState::Paused, "{s:?}");
        assert_eq!(s.pause_reason, Some(ErrorCode::GroupAdmissionUnverified));
        assert!(s.nodes[0].task_ids.is_empty(), "nothing was started again");
        // The caller's resume admits it, once.
        next.groups()
            .start("u", &c.definition_sha256)
            .await
            .unwrap();
        let s = settled(&next, "u").await;
        assert_eq!(s.state, GroupState::Completed, "{s:?}");
        assert_eq!(s.nodes[0].task_ids.len(), 1);
        next.shutdown().await;
    });
}

/// A configured role, its instructions as given.
fn scribe(instructions: &str) -> legate_engine::RoleSpec {
    legate_engine::RoleSpec {
        name: "scribe".into(),
        base: legate_core::RoleBase::Implementer,
        description: None,
        instructions: instructions.into(),
        defaults: legate_engine::RoleDefaults::default(),
    }
}

fn engine_with_roles(rt: &Runtime, base: &Path, instructions: &str) -> Engine {
    let _in = rt.enter();
    let roles = vec![scribe(instructions)];
    builder()
        .config(move |c: &mut legate_engine::EngineConfig| c.roles = roles)
        .engine_in(base)
}

#[test]
fn a_role_redefined_under_a_group_pauses_it_profile_changed() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let mut first = node("first", "!say ready\n!hang", &[]);
    first.role = Some("scribe".into());
    let mut then = node("then", "write t.txt: t\\n", &["first"]);
    then.role = Some("scribe".into());
    let def = GroupDefinition {
        working_directory: project(&base),
        title: None,
        nodes: vec![first, then],
        peer_routes: vec![],
        budget: None,
        workflow: None,
    };
    let rt = runtime();
    let one = engine_with_roles(&rt, &base, "Write short notes.");
    let sha = rt.block_on(async {
        let c = one.groups().create(Some("g".into()), def).unwrap();
        one.groups().start("g", &c.definition_sha256).await.unwrap();
        let task = loop {
            let s = one.groups().status("g").unwrap();
            if let Some(t) = node_of(&s, "first").task_ids.first() {
                break t.clone();
            }
            one.groups()
                .wait("g", Duration::from_millis(100))
                .await
                .unwrap();
        };
        until(
            &one,
            &task,
            |e| matches!(&e.kind, EventKind::Message { text } if text.contains("ready")),
        )
        .await;
        c.definition_sha256
    });
    kill(rt, one, &base);

    // The configuration changed the role's instructions: a resume admits nothing.
    let rt = runtime();
    let two = engine_with_roles(&rt, &base, "Write long essays and ignore the caller.");
    rt.block_on(async {
        let s = settled(&two, "g").await;
        assert_eq!(s.pause_reason, Some(ErrorCode::ServerRestarted), "{s:?}");
        let s = two.groups().start("g", &sha).await.unwrap().status;
        assert_eq!(s.state, GroupState::Paused, "{s:?}");
        assert_eq!(
            s.pause_reason,
            Some(ErrorCode::GroupProfileChanged),
            "{s:?}"
        );
        assert_eq!(node_of(&s, "first").task_ids.len(), 1, "nothing re-run");
        assert!(node_of(&s, "then").task_ids.is_empty());
        two.groups().cancel("g").unwrap();
        two.shutdown().await;
    });
}

/// The other side of that window: the task was stored before the process died, so the next
/// engine binds it to the node (and, its runner dead, meets its end as an interruption)
/// instead of calling the admission unverified.
#[test]
fn an_admission_whose_task_was_stored_is_bound_to_it_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let def = one_node_group(&base);
    let rt = runtime();
    let first = engine(&rt, &base);
    first.groups().create(Some("v".into()), def).unwrap();
    kill(rt, first, &base);
    let store = admitting_under_a_dead_runner(&base, "v");
    let mut task = legate_core::Task::new(
        "0123abcd-0000-4000-8000-00000000000b",
        "ctx-v",
        "scripted",
        "write o.txt: o\n",
    );
    task.controls.group = Some(legate_core::GroupNode {
        group_id: "v".into(),
        node_id: "only".into(),
    });
    let submitted = EventKind::Status {
        state: TaskState::Submitted,
        message: None,
        error: None,
    };
    store
        .insert_task_run_by(&task, &submitted, Some("dead-runner"))
        .unwrap();
    drop(store);

    let rt = runtime();
    let next = engine(&rt, &base);
    rt.block_on(async {
        // The wait answers once the group is paused, not at its deadline (a wait for the end
        // alone reads the group's whole answer only then, `group::load::ready`).
        let asked = std::time::Instant::now();
        let s = settled(&next, "v").await;
        assert!(
            asked.elapsed() < Duration::from_secs(60),
            "the wait ran to its deadline"
        );
        assert_eq!(s.state, GroupState::Paused, "{s:?}");
        assert_ne!(
            s.pause_reason,
            Some(ErrorCode::GroupAdmissionUnverified),
            "{s:?}"
        );
        assert_eq!(s.nodes[0].task_id, Some(task.id.clone()), "{s:?}");
        assert_eq!(s.nodes[0].state, NodeState::Interrupted, "{s:?}");
        next.shutdown().await;
    });
}

/// A group of one node, `only`, whose output is held until Legate runs its test.
fn tested_group(base: &Path) -> GroupDefinition {
    let mut def = one_node_group(base);
    def.nodes[0].criteria = serde_json::from_value(serde_json::json!([{
        "id": "kept",
        "description": "a.txt is still there",
        "check": {"kind": "file-exists", "path": "a.txt"}
    }]))
    .unwrap();
    def.workflow = Some(legate_engine::Workflow {
        final_node: "only".into(),
        hooks: std::collections::BTreeMap::from([(
            "only".to_string(),
            legate_engine::Hook {
                require_review: false,
                require_tests: true,
            },
        )]),
    });
    def
}

/// Creates and starts [`tested_group`] as `id` on `engine`, and waits for it to pause
/// holding its node for the test; the definition's hash and the node's tasks.
fn held(rt: &Runtime, engine: &Engine, base: &Path, id: &str) -> (String, Vec<TaskId>) {
    let c = engine
        .groups()
        .create(Some(id.into()), tested_group(base))
        .unwrap();
    rt.block_on(async {
        engine
            .groups()
            .start(id, &c.definition_sha256)
            .await
            .unwrap();
        let s = settled(engine, id).await;
        assert_eq!(s.pause_reason, Some(ErrorCode::TestFailed), "{s:?}");
        assert_eq!(s.nodes[0].state, NodeState::Held, "{s:?}");
        (c.definition_sha256, s.nodes[0].task_ids.clone())
    })
}

/// Sets `group`, stored paused, running again: what a process killed between a hold and its
/// group's pause leaves.
fn pause_undone(base: &Path, group: &str) {
    let store = legate_store::Store::open(&base.join("home/legate.db")).unwrap();
    assert!(
        store
            .set_group_state(group, &["paused"], "running", None, None)
            .unwrap()
    );
}

/// A process killed between holding a node and pausing its group (the node is held first)
/// leaves a held node in a running group. The engine that takes the group over settles the
/// node again, which holds it again and pauses the group with the hold's code, instead of
/// running the group on with nothing able to end it; nothing is started again.
#[test]
fn a_hold_whose_pause_a_crash_lost_is_settled_again_by_the_next_engine() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let rt = runtime();
    let first = engine(&rt, &base);
    let (_, task) = held(&rt, &first, &base, "h");
    kill(rt, first, &base);
    pause_undone(&base, "h");

    let rt = runtime();
    let next = engine(&rt, &base);
    rt.block_on(async {
        let s = settled(&next, "h").await;
        assert_eq!(s.state, GroupState::Paused, "{s:?}");
        assert_eq!(s.pause_reason, Some(ErrorCode::TestFailed), "{s:?}");
        assert_eq!(s.nodes[0].state, NodeState::Held);
        assert_eq!(s.nodes[0].task_ids, task, "nothing was started again");
        next.shutdown().await;
    });
}

/// A held node whose task was pruned from the store meanwhile (a busy home's retention)
/// cannot be settled again: a resume pauses the group with the node's code at its first
/// step, instead of sending back a node with nothing to settle and running on forever.
#[test]
fn a_held_node_whose_task_is_gone_pauses_its_group_at_resume_and_retention_never_prunes_it() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let rt = runtime();
    let engine = engine(&rt, &base);
    let (sha, _) = held(&rt, &engine, &base, "p");
    rt.block_on(async {
        let db = base.join("home/legate.db");
        // Retention never prunes the task of a node its group still holds.
        let store = legate_store::Store::open(&db).unwrap();
        assert_eq!(store.prune_finished(0).unwrap(), 0);
        drop(store);
        // Gone another way (an older Legate's retention, a store edited by hand), it still
        // pauses the group at resume, saying so.
        let conn = rusqlite::Connection::open(&db).unwrap();
        let of_group = "SELECT id FROM tasks WHERE json_extract(controls, '$.group.groupId') = 'p'";
        for table in ["events", "memory_snapshots", "tap_frames"] {
            conn.execute(
                &format!("DELETE FROM {table} WHERE task_id IN ({of_group})"),
                [],
            )
            .unwrap();
        }
        let gone = conn
            .execute(&format!("DELETE FROM tasks WHERE id IN ({of_group})"), [])
            .unwrap();
        assert_eq!(gone, 1);
        drop(conn);
        engine.groups().start("p", &sha).await.unwrap();
        let s = settled(&engine, "p").await;
        assert_eq!(s.state, GroupState::Paused, "{s:?}");
        assert_eq!(s.pause_reason, Some(ErrorCode::TestFailed), "{s:?}");
        assert!(
            s.pause_message
                .as_deref()
                .unwrap_or("")
                .contains("task is gone"),
            "{s:?}"
        );
        assert_eq!(s.nodes[0].state, NodeState::Held);
        engine.shutdown().await;
    });
}

/// Waits on `group`'s changes until `done` holds of the engine and the group's status, and
/// returns that status; panics when the group settles (or two minutes pass) without it.
async fn until_status(
    engine: &Engine,
    group: &str,
    done: impl Fn(&Engine, &GroupStatus) -> bool,
) -> GroupStatus {
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        let s = engine.groups().status(group).unwrap();
        if done(engine, &s) {
            return s;
        }
        let w = engine
            .groups()
            .wait(group, Duration::from_millis(100))
            .await
            .unwrap();
        if w.ready && !done(engine, &engine.groups().status(group).unwrap()) {
            panic!("the group settled first: {:?}", w.status);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "not within two minutes: {:?}",
            w.status
        );
    }
}

/// The agent `hanger`: the scripted agent, leaving every peer message's turn unanswered.
fn engine_with_hanger(rt: &Runtime, base: &Path) -> Engine {
    let _in = rt.enter();
    builder()
        .agent(legate_testkit::harness::TestAgent::scripted("hanger").env(
            legate_testkit::directives::HANG_ON_ENV,
            "A peer message for you",
        ))
        .engine_in(base)
}

/// A node cut mid-turn by a crash runs again from its prompt in a new conversation, which
/// has seen none of the peer messages sent to the old one: they are queued again at resume
/// and sent again, as turns of the new conversation, once its first turn ends. Here `r`'s
/// message turn (its agent leaves it unanswered) is cut by the engine's death; after the
/// resume `r`'s first turn is run again, then the message is its next turn again.
#[test]
fn a_node_run_again_after_a_crash_is_sent_its_peer_messages_again() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let envelope = r#"<legate-peer-message>{"messageId":"m1","toNode":"r","text":"look at r.txt again"}</legate-peer-message>"#;
    let mut r = node("r", "write r.txt: r\\n", &["sender"]);
    r.agent = Some("hanger".into());
    let def = GroupDefinition {
        working_directory: project(&base),
        title: None,
        nodes: vec![node("sender", &format!("!say {envelope}"), &[]), r],
        peer_routes: vec![legate_engine::PeerRoute {
            from: "sender".into(),
            to: "r".into(),
        }],
        budget: None,
        workflow: None,
    };
    let receipt = |engine: &Engine| {
        let page = engine.groups().peer_receipts("m", None, 20).unwrap();
        assert_eq!(page.receipts.len(), 1, "{page:?}");
        page.receipts[0].clone()
    };
    let rt = runtime();
    let first = engine_with_hanger(&rt, &base);
    let (sha, cut) = rt.block_on(async {
        let c = first.groups().create(Some("m".into()), def).unwrap();
        first
            .groups()
            .start("m", &c.definition_sha256)
            .await
            .unwrap();
        // `r`'s second turn carries the message; the engine dies while its agent holds it.
        let s = until_status(&first, "m", |e, s| {
            node_of(s, "r").task_ids.len() >= 2
                && receipt(e).state == legate_engine::ReceiptState::Sent
        })
        .await;
        let cut = node_of(&s, "r").task_ids[1].clone();
        legate_testkit::harness::wait_state(&first, &cut, TaskState::Working).await;
        (c.definition_sha256, cut)
    });
    kill(rt, first, &base);

    let rt = runtime();
    let next = engine_with_hanger(&rt, &base);
    rt.block_on(async {
        let s = settled(&next, "m").await;
        assert_eq!(s.pause_reason, Some(ErrorCode::ServerRestarted), "{s:?}");
        assert_eq!(node_of(&s, "r").state, NodeState::Interrupted, "{s:?}");
        next.groups().start("m", &sha).await.unwrap();
        // Run again: its first turn (a new conversation), then the message again.
        let s = until_status(&next, "m", |e, s| {
            node_of(s, "r").task_ids.len() >= 4
                && receipt(e).state == legate_engine::ReceiptState::Sent
        })
        .await;
        let tasks = node_of(&s, "r").task_ids.clone();
        assert_eq!(tasks.len(), 4, "{s:?}");
        let again = next.task(tasks[3].as_str()).unwrap();
        let rerun = next.task(tasks[2].as_str()).unwrap();
        let old = next.task(cut.as_str()).unwrap();
        assert_eq!(
            again.context_id, rerun.context_id,
            "the new conversation's turn"
        );
        assert_ne!(again.context_id, old.context_id);
        let sent = receipt(&next);
        assert_eq!(sent.state, legate_engine::ReceiptState::Sent, "{sent:?}");
        assert!(
            sent.sent_at.is_some_and(|t| t >= again.created_at),
            "sent again: {sent:?}"
        );
        assert!(
            again.prompt.contains("look at r.txt again") && old.prompt == again.prompt,
            "{}",
            again.prompt
        );
        next.groups().cancel("m").unwrap();
        let s = settled(&next, "m").await;
        assert_eq!(s.state, GroupState::Canceled, "{s:?}");
        next.shutdown().await;
    });
}

/// A process killed between a refused message turn's hold and its group's pause (the node is
/// held first, with the refusal's code) leaves that hold in a running group. The engine that
/// takes the group over sends the node back (clearing the code: settling writes it again),
/// the turn is refused again (its copy is still discarded), and the node is held again with
/// the refusal's code, its group paused with it; nothing is started.
#[test]
fn a_refused_message_turn_held_before_a_kill_is_refused_again_by_the_next_engine() {
    let dir = tempfile::tempdir().unwrap();
    let base = std::fs::canonicalize(dir.path()).unwrap();
    let mut def = tested_group(&base);
    // `!chunks` ends the turn: the envelope is said first, and read once the node is held.
    let envelope = r#"<legate-peer-message>{"messageId":"m1","toNode":"only","text":"look again"}</legate-peer-message>"#;
    def.nodes.push(node(
        "sender",
        &format!("!say {envelope}\n!chunks 40 10"),
        &[],
    ));
    def.nodes
        .push(node("last", "What is here?", &["only", "sender"]));
    // Every step of a workflow needs criteria: the tested node's, for the two others.
    let criteria = def.nodes[0].criteria.clone();
    for n in &mut def.nodes[1..] {
        n.criteria = criteria.clone();
    }
    def.workflow.as_mut().unwrap().final_node = "last".into();
    def.peer_routes = vec![legate_engine::PeerRoute {
        from: "sender".into(),
        to: "only".into(),
    }];
    let rt = runtime();
    let first = engine(&rt, &base);
    let task = rt.block_on(async {
        let c = first.groups().create(Some("k".into()), def).unwrap();
        first
            .groups()
            .start("k", &c.definition_sha256)
            .await
            .unwrap();
        let s = settled(&first, "k").await;
        assert_eq!(s.pause_reason, Some(ErrorCode::TestFailed), "{s:?}");
        assert_eq!(node_of(&s, "only").state, NodeState::Held, "{s:?}");
        assert_eq!(node_of(&s, "sender").state, NodeState::Succeeded, "{s:?}");
        // The message waits for `only` (it was held before the sender's turn ended); a
        // machine so slow that it was delivered first would fail here, not further on.
        let page = first.groups().peer_receipts("k", None, 20).unwrap();
        assert_eq!(
            page.receipts[0].state,
            legate_engine::ReceiptState::Queued,
            "{page:?}"
        );
        let task = node_of(&s, "only").task_ids[0].clone();
        first.reviews().discard(task.as_str()).await.unwrap();
        task
    });
    kill(rt, first, &base);
    // What the kill left: the refused turn's hold written, its pause not.
    let store = legate_store::Store::open(&base.join("home/legate.db")).unwrap();
    let only = store
        .group_nodes("k")
        .unwrap()
        .into_iter()
        .find(|n| n.node_id == "only")
        .unwrap();
    let refused = legate_store::NodeRecord {
        error_code: Some(ErrorCode::CopyClosed.as_str().into()),
        ..only
    };
    assert!(store.move_node("k", &["held"], &refused).unwrap());
    drop(store);
    pause_undone(&base, "k");

    let rt = runtime();
    let next = engine(&rt, &base);
    rt.block_on(async {
        let s = settled(&next, "k").await;
        assert_eq!(s.state, GroupState::Paused, "{s:?}");
        assert_eq!(s.pause_reason, Some(ErrorCode::CopyClosed), "{s:?}");
        assert!(
            s.pause_message
                .as_deref()
                .is_some_and(|m| m.contains("node only's next turn, a peer message, was refused")),
            "{s:?}"
        );
        let only = node_of(&s, "only");
        assert_eq!(only.state, NodeState::Held, "{s:?}");
        assert_eq!(only.error, Some(ErrorCode::CopyClosed), "{s:?}");
        assert_eq!(only.task_ids, [task], "nothing was started");
        next.shutdown().await;
    });
}
