//! Groups and workflows over a real engine, real copies, real SQLite and the scripted agent
//! (revisor with fault directives): the order nodes run in, a failure blocking dependents, a
//! hook pausing the group and the same `group_start` resuming it without re-running
//! anything, tampered checkpoints, and a group continued by a second engine on the same
//! home after the first died mid-graph. The token budget's suite is `groups_budget.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, EventKind, TaskId, TaskState};
use legate_engine::{
    Criterion, Engine, GroupCreated, GroupDefinition, GroupState, GroupStatus, Hook, NodeDef,
    NodeState, TestCommand, Workflow,
};
use legate_testkit::harness::{EngineHarness, span, until};
use std::collections::BTreeMap;
use std::time::Duration;

const LIMIT: Duration = Duration::from_secs(120);

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

fn definition(h: &EngineHarness, nodes: Vec<NodeDef>) -> GroupDefinition {
    GroupDefinition {
        working_directory: h.project(),
        title: Some("test".into()),
        nodes,
        peer_routes: vec![],
        budget: None,
        workflow: None,
    }
}

fn harness() -> EngineHarness {
    EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .start()
}

/// Creates `def` under a new id and starts it.
async fn started(h: &EngineHarness, def: GroupDefinition) -> GroupCreated {
    let c = h.engine.groups().create(None, def).unwrap();
    h.engine
        .groups()
        .start(&c.group_id, &c.definition_sha256)
        .await
        .unwrap();
    c
}

async fn settle(engine: &Engine, group: &str) -> GroupStatus {
    let w = engine.groups().wait(group, LIMIT).await.unwrap();
    assert!(w.ready, "the group never settled: {:?}", w.status);
    w.status
}

fn state_of(s: &GroupStatus, id: &str) -> NodeState {
    s.nodes.iter().find(|n| n.id == id).unwrap().state
}

fn tasks_of(s: &GroupStatus, id: &str) -> Vec<TaskId> {
    s.nodes
        .iter()
        .find(|n| n.id == id)
        .unwrap()
        .task_ids
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diamond_runs_each_node_after_its_dependencies_with_their_checkpoints_as_data() {
    let h = harness();
    let def = definition(
        &h,
        vec![
            node("plan", "write plan.txt: the plan\\n", &[]),
            node("left", "write left.txt: left\\n", &["plan"]),
            node("right", "write right.txt: right\\n", &["plan"]),
            node("join", "write join.txt: joined\\n", &["left", "right"]),
        ],
    );
    let created = h
        .engine
        .groups()
        .create(Some("diamond".into()), def.clone())
        .unwrap();
    assert_eq!(created.definition_sha256.len(), 64);
    // The same id and definition answer the same; another definition is a conflict.
    let again = h
        .engine
        .groups()
        .create(Some("diamond".into()), def.clone())
        .unwrap();
    assert_eq!(again.definition_sha256, created.definition_sha256);
    assert!(again.existing);
    let mut other = def.clone();
    other.nodes[0].prompt = "write other.txt: x\\n".into();
    let err = h
        .engine
        .groups()
        .create(Some("diamond".into()), other)
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::GroupConflict);
    // Nothing runs before the start, and the start needs the hash.
    assert_eq!(
        h.engine.groups().status("diamond").unwrap().state,
        GroupState::Created
    );
    let err = h
        .engine
        .groups()
        .start("diamond", &"0".repeat(64))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::GroupConflict);
    h.engine
        .groups()
        .start("diamond", &created.definition_sha256)
        .await
        .unwrap();
    let s = settle(&h.engine, "diamond").await;
    assert_eq!(s.state, GroupState::Completed, "{s:?}");
    for n in &s.nodes {
        assert_eq!(n.state, NodeState::Succeeded, "{n:?}");
        assert_eq!(n.task_ids.len(), 1, "{n:?}");
        assert!(n.checkpoint.is_some());
    }
    let id = |n: &str| tasks_of(&s, n)[0].clone();
    let (plan, left, right, join) = (id("plan"), id("left"), id("right"), id("join"));
    let (_, plan_end) = span(&h.engine, &plan);
    for dependent in [&left, &right] {
        assert!(
            span(&h.engine, dependent).0 >= plan_end,
            "started before plan ended"
        );
    }
    let join_start = span(&h.engine, &join).0;
    assert!(join_start >= span(&h.engine, &left).1 && join_start >= span(&h.engine, &right).1);
    // Each node is a copy task of the group, in messages delivery, and the join node read
    // its two predecessors' results and checkpoints as fenced data.
    let join_task = h.engine.task(join.as_str()).unwrap();
    let g = join_task.controls.group.clone().unwrap();
    assert_eq!(
        (g.group_id.as_str(), g.node_id.as_str()),
        ("diamond", "join")
    );
    assert_eq!(join_task.controls.delivery_mode.as_str(), "messages");
    assert!(join_task.prompt.contains("<legate-workflow-context>"));
    for (n, t) in [("left", &left), ("right", &right)] {
        let cp = s
            .nodes
            .iter()
            .find(|x| x.id == n)
            .unwrap()
            .checkpoint
            .clone()
            .unwrap();
        assert!(join_task.prompt.contains(t.as_str()));
        assert!(join_task.prompt.contains(&cp.result_sha256));
    }
    assert!(
        !join_task.prompt.contains(plan.as_str()),
        "only direct dependencies"
    );
    // Each node worked in its own copy; nothing was merged between copies.
    let join_copy = h.home().join("copies").join(join.as_str());
    assert!(join_copy.join("join.txt").exists());
    assert!(!join_copy.join("left.txt").exists());
    assert_eq!(h.engine.groups().list().unwrap()[0].group_id, "diamond");
    // A completed group takes no new start.
    let err = h
        .engine
        .groups()
        .start("diamond", &created.definition_sha256)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::GroupClosed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_node_blocks_its_dependents_and_the_others_finish() {
    let h = harness();
    let def = definition(
        &h,
        vec![
            node("root", "write r.txt: r\\n", &[]),
            node("broken", "!exit 3", &["root"]),
            node("fine", "write f.txt: f\\n", &["root"]),
            node("after", "write x.txt: never\\n", &["broken"]),
            node("later", "write y.txt: never\\n", &["after", "fine"]),
        ],
    );
    let c = started(&h, def).await;
    let s = settle(&h.engine, &c.group_id).await;
    assert_eq!(s.state, GroupState::Failed, "{s:?}");
    assert_eq!(state_of(&s, "broken"), NodeState::Failed);
    assert_eq!(state_of(&s, "fine"), NodeState::Succeeded);
    assert_eq!(state_of(&s, "after"), NodeState::Blocked);
    assert_eq!(state_of(&s, "later"), NodeState::Blocked);
    assert!(tasks_of(&s, "after").is_empty() && tasks_of(&s, "later").is_empty());
    assert!(s.pause_reason.is_some(), "the failure's code is said");
    let err = h
        .engine
        .groups()
        .workflow_result(&c.group_id)
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::WorkflowResultUnavailable);
}

fn chain_with_tests(h: &EngineHarness) -> GroupDefinition {
    let mut def = definition(
        h,
        vec![
            node("impl", "write impl.txt: done\\n", &[]),
            node("tested", "write t.txt: ok\\n", &["impl"]),
            node("synth", "write s.txt: summary\\n", &["impl", "tested"]),
        ],
    );
    // Every step of a workflow names its acceptance criteria (here a file check that holds).
    for n in &mut def.nodes {
        n.criteria = serde_json::from_value(serde_json::json!([{
            "id": "kept",
            "description": "a.txt is still there",
            "check": {"kind": "file-exists", "path": "a.txt"}
        }]))
        .unwrap();
    }
    def.workflow = Some(Workflow {
        final_node: "synth".into(),
        hooks: BTreeMap::from([(
            "tested".to_string(),
            Hook {
                require_review: false,
                require_tests: true,
            },
        )]),
    });
    def
}

fn grep(word: &str, file: &str) -> TestCommand {
    TestCommand {
        executable: "grep".into(),
        args: vec!["-q".into(), word.into(), file.into()],
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_needs_tests_pauses_the_group_and_the_same_start_resumes_without_rerunning() {
    let h = harness();
    let c = h
        .engine
        .groups()
        .create(None, chain_with_tests(&h))
        .unwrap();
    let g = c.group_id.as_str();
    h.engine
        .groups()
        .start(g, &c.definition_sha256)
        .await
        .unwrap();
    let s = settle(&h.engine, g).await;
    assert_eq!(s.state, GroupState::Paused, "{s:?}");
    assert_eq!(s.pause_reason, Some(ErrorCode::TestFailed));
    assert_eq!(state_of(&s, "impl"), NodeState::Succeeded);
    assert_eq!(state_of(&s, "tested"), NodeState::Held);
    assert_eq!(state_of(&s, "synth"), NodeState::Pending);
    // Resuming without the evidence changes nothing: still held, nothing re-run.
    let again = h
        .engine
        .groups()
        .start(g, &c.definition_sha256)
        .await
        .unwrap()
        .status;
    assert_eq!(again.state, GroupState::Paused);
    assert_eq!(tasks_of(&again, "tested").len(), 1);
    // A client-reported test does not count; a test Legate runs does.
    let tested = tasks_of(&s, "tested")[0].clone();
    let sha = h
        .engine
        .reviews()
        .preview(tested.as_str())
        .await
        .unwrap()
        .patch
        .sha256;
    let ev = h
        .engine
        .reviews()
        .test(tested.as_str(), &sha, grep("ok", "t.txt"), None)
        .await
        .unwrap();
    assert!(ev.passed, "{ev:?}");
    h.engine
        .groups()
        .start(g, &c.definition_sha256)
        .await
        .unwrap();
    let s = settle(&h.engine, g).await;
    assert_eq!(s.state, GroupState::Completed, "{s:?}");
    for n in ["impl", "tested", "synth"] {
        assert_eq!(tasks_of(&s, n).len(), 1, "node {n} ran once");
    }
    // The final node received every finished intermediate.
    let synth = h.engine.task(tasks_of(&s, "synth")[0].as_str()).unwrap();
    assert!(synth.prompt.contains(tasks_of(&s, "impl")[0].as_str()));
    assert!(synth.prompt.contains(tested.as_str()));
    let result = h.engine.groups().workflow_result(g).await.unwrap();
    assert_eq!(result.final_node, "synth");
    assert_eq!(result.task_id, synth.id);
    assert!(
        result.synthesis.get("summary").is_some(),
        "{:?}",
        result.synthesis
    );
    assert_eq!(result.reference_sha256.len(), 64);
    // Tampering a finished node's copy afterwards: the synthesis is no longer offered.
    std::fs::write(
        h.home().join("copies").join(tested.as_str()).join("t.txt"),
        "tampered\n",
    )
    .unwrap();
    let err = h.engine.groups().workflow_result(g).await.unwrap_err();
    assert_eq!(
        err.code,
        ErrorCode::WorkflowCheckpointChanged,
        "{}",
        err.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_over_a_tampered_checkpoint_is_refused_and_runs_nothing() {
    let h = harness();
    let c = h
        .engine
        .groups()
        .create(None, chain_with_tests(&h))
        .unwrap();
    let g = c.group_id.as_str();
    h.engine
        .groups()
        .start(g, &c.definition_sha256)
        .await
        .unwrap();
    let s = settle(&h.engine, g).await;
    assert_eq!(state_of(&s, "tested"), NodeState::Held);
    let tested = tasks_of(&s, "tested")[0].clone();
    let sha = h
        .engine
        .reviews()
        .preview(tested.as_str())
        .await
        .unwrap()
        .patch
        .sha256;
    assert!(
        h.engine
            .reviews()
            .test(tested.as_str(), &sha, grep("ok", "t.txt"), None)
            .await
            .unwrap()
            .passed
    );
    // The first node's copy changes while the group waits.
    let first = tasks_of(&s, "impl")[0].clone();
    std::fs::write(
        h.home()
            .join("copies")
            .join(first.as_str())
            .join("impl.txt"),
        "not what was checkpointed\n",
    )
    .unwrap();
    let err = h
        .engine
        .groups()
        .start(g, &c.definition_sha256)
        .await
        .unwrap_err();
    assert_eq!(
        err.code,
        ErrorCode::WorkflowCheckpointChanged,
        "{}",
        err.message
    );
    let s = h.engine.groups().status(g).unwrap();
    assert_eq!(s.state, GroupState::Paused);
    assert_eq!(s.pause_reason, Some(ErrorCode::WorkflowCheckpointChanged));
    assert!(
        tasks_of(&s, "synth").is_empty(),
        "nothing ran after the refusal"
    );
    // Canceling ends it for good.
    assert_eq!(
        h.engine.groups().cancel(g).unwrap().state,
        GroupState::Canceled
    );
    assert_eq!(
        h.engine
            .groups()
            .start(g, &c.definition_sha256)
            .await
            .unwrap_err()
            .code,
        ErrorCode::GroupClosed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canceling_a_group_cancels_its_running_node_and_admits_nothing_more() {
    let h = harness();
    let def = definition(
        &h,
        vec![
            node("slow", "!say ready\n!hang", &[]),
            node("next", "write n.txt: n\\n", &["slow"]),
        ],
    );
    let c = h.engine.groups().create(None, def).unwrap();
    let g = c.group_id.as_str();
    h.engine
        .groups()
        .start(g, &c.definition_sha256)
        .await
        .unwrap();
    let slow = loop {
        let s = h.engine.groups().status(g).unwrap();
        if let Some(t) = tasks_of(&s, "slow").first() {
            break t.clone();
        }
        h.engine
            .groups()
            .wait(g, Duration::from_millis(100))
            .await
            .unwrap();
    };
    until(
        &h.engine,
        &slow,
        |e| matches!(&e.kind, EventKind::Message { text } if text.contains("ready")),
    )
    .await;
    h.engine.groups().cancel(g).unwrap();
    let s = settle(&h.engine, g).await;
    assert_eq!(s.state, GroupState::Canceled);
    let ended = h.wait(&slow).await;
    assert_eq!(ended.state, TaskState::Canceled);
    // Its end is recorded, and the dependent never ran.
    let s = loop {
        let s = h.engine.groups().status(g).unwrap();
        if state_of(&s, "slow") != NodeState::Running {
            break s;
        }
        h.engine
            .groups()
            .wait(g, Duration::from_millis(100))
            .await
            .unwrap();
    };
    assert_eq!(state_of(&s, "slow"), NodeState::Canceled);
    assert_eq!(state_of(&s, "next"), NodeState::Canceled);
    assert!(tasks_of(&s, "next").is_empty());
}

#[test]
fn a_definition_breaking_a_rule_is_refused_before_anything_is_stored() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in = rt.enter();
    let h = harness();
    let cases: Vec<(GroupDefinition, ErrorCode)> = vec![
        (definition(&h, vec![]), ErrorCode::WorkflowInvalid),
        (
            definition(&h, vec![node("a", "x", &["b"]), node("b", "x", &["a"])]),
            ErrorCode::WorkflowInvalid,
        ),
        (
            definition(&h, vec![node("a", "x", &["ghost"])]),
            ErrorCode::WorkflowInvalid,
        ),
        (
            definition(&h, vec![node("a", "x", &[]), node("a", "y", &[])]),
            ErrorCode::WorkflowInvalid,
        ),
        (
            definition(&h, vec![node("a", &"x".repeat(65 * 1024), &[])]),
            ErrorCode::WorkflowContextTooLarge,
        ),
        (
            definition(
                &h,
                (0..33).map(|i| node(&format!("n{i}"), "x", &[])).collect(),
            ),
            ErrorCode::WorkflowInvalid,
        ),
        (
            {
                let mut b = node("b", "x", &[]);
                b.file_sources = Some("a".into());
                definition(&h, vec![node("a", "x", &[]), b])
            },
            ErrorCode::WorkflowInvalid,
        ),
        (
            {
                let mut d = definition(&h, vec![node("a", "x", &[]), node("b", "x", &[])]);
                d.workflow = Some(Workflow {
                    final_node: "b".into(),
                    hooks: BTreeMap::new(),
                });
                d
            },
            ErrorCode::WorkflowInvalid,
        ),
        // The project is selected once per set of include paths, yet every node's own
        // criteria and include paths are still checked: a later node with the first node's
        // include paths but a criterion without an id, or with include paths of its own that
        // leave the project, is refused like a first node would be.
        (
            {
                let mut b = node("b", "x", &[]);
                b.criteria = vec![Criterion {
                    id: " ".into(),
                    description: "d".into(),
                    check: None,
                }];
                definition(&h, vec![node("a", "x", &[]), b])
            },
            ErrorCode::InvalidInput,
        ),
        (
            {
                let mut a = node("a", "x", &[]);
                a.include_paths = vec!["a.txt".into()];
                let mut b = node("b", "x", &[]);
                b.include_paths = vec!["a.txt".into(), "../elsewhere".into()];
                definition(&h, vec![a, b])
            },
            ErrorCode::InvalidIncludePath,
        ),
        (
            {
                let mut a = node("a", "x", &[]);
                a.include_paths = vec!["a.txt".into()];
                let mut b = node("b", "x", &[]);
                b.include_paths = vec!["missing.txt".into()];
                let mut c = node("c", "x", &[]);
                c.include_paths = vec!["a.txt".into()];
                definition(&h, vec![a, c, b])
            },
            ErrorCode::InvalidIncludePath,
        ),
    ];
    for (i, (def, code)) in cases.into_iter().enumerate() {
        let err = h
            .engine
            .groups()
            .create(Some(format!("bad{i}")), def)
            .unwrap_err();
        assert_eq!(err.code, code, "case {i}: {}", err.message);
    }
    assert!(h.engine.groups().list().unwrap().is_empty());
    let err = h.engine.groups().status("bad0").unwrap_err();
    assert_eq!(err.code, ErrorCode::GroupNotFound);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_file_sources_starts_from_a_new_copy_of_that_dependency_s_files() {
    let h = harness();
    let mut reviewer = node("extend", "write two.txt: two\\n", &["base", "other"]);
    reviewer.file_sources = Some("base".into());
    let def = definition(
        &h,
        vec![
            node("base", "write one.txt: one\\n", &[]),
            node("other", "write other.txt: other\\n", &[]),
            reviewer,
        ],
    );
    let c = started(&h, def).await;
    let s = settle(&h.engine, &c.group_id).await;
    assert_eq!(s.state, GroupState::Completed, "{s:?}");
    let base = tasks_of(&s, "base")[0].clone();
    let extend = tasks_of(&s, "extend")[0].clone();
    let copy = h.home().join("copies").join(extend.as_str());
    // Its copy holds the source's change and its own; the other dependency gave data only.
    assert_eq!(
        std::fs::read_to_string(copy.join("one.txt")).unwrap(),
        "one\n"
    );
    assert!(copy.join("two.txt").exists());
    assert!(!copy.join("other.txt").exists());
    // The source copy is untouched, and the new task is still the group's.
    let base_copy = h.home().join("copies").join(base.as_str());
    assert!(!base_copy.join("two.txt").exists());
    let t = h.engine.task(extend.as_str()).unwrap();
    assert_eq!(t.controls.group.unwrap().node_id, "extend");
    let files: Vec<String> = h
        .engine
        .reviews()
        .preview(extend.as_str())
        .await
        .unwrap()
        .patch
        .files
        .iter()
        .map(|f| f.path.clone())
        .collect();
    assert!(files.contains(&"one.txt".to_string()) && files.contains(&"two.txt".to_string()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_wider_than_the_queue_waits_for_places_instead_of_pausing() {
    // One running place and one queued place; six nodes ready at once.
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(|c| {
            c.max_running = 1;
            c.max_queued = 1;
        })
        .start();
    let nodes: Vec<NodeDef> = (0..6)
        .map(|i| node(&format!("w{i}"), &format!("write w{i}.txt: {i}\\n"), &[]))
        .collect();
    let c = started(&h, definition(&h, nodes)).await;
    let s = settle(&h.engine, &c.group_id).await;
    assert_eq!(s.state, GroupState::Completed, "{s:?}");
    assert!(s.pause_reason.is_none(), "{s:?}");
    for n in &s.nodes {
        assert_eq!(n.state, NodeState::Succeeded, "{n:?}");
        assert_eq!(n.task_ids.len(), 1, "each node ran once: {n:?}");
    }
}

#[test]
fn the_node_limit_is_the_configured_one() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in = rt.enter();
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(|c| c.max_group_nodes = 40)
        .start();
    let many = |n: usize| {
        definition(
            &h,
            (0..n).map(|i| node(&format!("n{i}"), "x", &[])).collect(),
        )
    };
    h.engine
        .groups()
        .create(Some("forty".into()), many(40))
        .unwrap();
    let err = h
        .engine
        .groups()
        .create(Some("forty-one".into()), many(41))
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::WorkflowInvalid, "{}", err.message);
    assert!(err.message.contains("40"), "{}", err.message);
    // Past the ceiling the engine does not start at all.
    let elsewhere = tempfile::tempdir().unwrap();
    let err = EngineHarness::builder()
        .config(|c| c.max_group_nodes = legate_engine::MAX_NODES + 1)
        .try_engine_in(elsewhere.path())
        .err()
        .unwrap();
    assert_eq!(err.code, ErrorCode::ConfigInvalid);
}
