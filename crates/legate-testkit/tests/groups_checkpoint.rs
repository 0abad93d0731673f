//! A node's checkpoint takes the copy's hashes its turn's end read only while the copy is
//! proven unchanged since: a file rewritten after the turn ended (same length, its
//! modification time set back, so that only its change time tells) is in the checkpoint,
//! not what the turn's end read; and a copy left alone is checkpointed with exactly the
//! hashes a fresh read gives. Peer messages around a pause and its resume, and a resume
//! refused for a changed checkpoint, which drops no peer message.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{ErrorCode, TaskId};
use legate_engine::{
    Checkpoint, GroupDefinition, GroupState, GroupStatus, Hook, NodeDef, NodeState, PeerRoute,
    ReceiptState, TestCommand, Workflow,
};
use legate_testkit::harness::EngineHarness;
use std::collections::BTreeMap;
use std::time::Duration;

/// A one-node workflow whose node needs a test Legate runs itself before it is checkpointed
/// (so the group pauses between the turn's end and the checkpoint).
fn held_workflow(h: &EngineHarness) -> GroupDefinition {
    let node = NodeDef {
        id: "tested".into(),
        prompt: "write t.txt: ok\\n".into(),
        criteria: serde_json::from_value(serde_json::json!([{
            "id": "kept",
            "description": "a.txt is still there",
            "check": {"kind": "file-exists", "path": "a.txt"}
        }]))
        .unwrap(),
        ..NodeDef::default()
    };
    GroupDefinition {
        working_directory: h.project(),
        title: Some("checkpoint".into()),
        nodes: vec![node],
        peer_routes: vec![],
        budget: None,
        workflow: Some(Workflow {
            final_node: "tested".into(),
            hooks: BTreeMap::from([(
                "tested".to_string(),
                Hook {
                    require_review: false,
                    require_tests: true,
                },
            )]),
        }),
    }
}

async fn wait(h: &EngineHarness, group: &str) -> GroupStatus {
    let (ready, status) = wait_within(h, group, Duration::from_secs(120)).await;
    assert!(ready, "the group never settled: {status:?}");
    status
}

/// Whether the group settled within `limit`, and its status then.
async fn wait_within(h: &EngineHarness, group: &str, limit: Duration) -> (bool, GroupStatus) {
    let w = h.engine.groups().wait(group, limit).await.unwrap();
    (w.ready, w.status)
}

/// The group started (or resumed), once its wait is over.
async fn started(h: &EngineHarness, group: &str, sha: &str) -> GroupStatus {
    h.engine.groups().start(group, sha).await.unwrap();
    wait(h, group).await
}

/// The node's task, once the group paused holding it for its test.
async fn held(h: &EngineHarness) -> (String, String, TaskId) {
    let c = h.engine.groups().create(None, held_workflow(h)).unwrap();
    h.engine
        .groups()
        .start(&c.group_id, &c.definition_sha256)
        .await
        .unwrap();
    let s = wait(h, &c.group_id).await;
    assert_eq!(s.state, GroupState::Paused, "{s:?}");
    assert_eq!(s.pause_reason, Some(ErrorCode::TestFailed));
    assert_eq!(s.nodes[0].state, NodeState::Held);
    let task = s.nodes[0].task_ids[0].clone();
    (c.group_id, c.definition_sha256, task)
}

/// What the turn's end read: `(treeSha256, patchSha256)` from the task's review record.
fn settled(h: &EngineHarness, task: &TaskId) -> (String, String) {
    let store = legate_store::Store::open(&h.home().join("legate.db")).unwrap();
    let review = store.review(task).unwrap().unwrap();
    let s = &review["settled"];
    assert!(s.is_object(), "the turn's end read no hashes: {review}");
    (
        s["treeSha256"].as_str().unwrap().to_string(),
        s["patchSha256"].as_str().unwrap().to_string(),
    )
}

/// The copy's hashes read now: `(treeSha256, patchSha256)`.
async fn fresh(h: &EngineHarness, task: &TaskId) -> (String, String) {
    let tree = h
        .engine
        .handoffs()
        .context(task.as_str())
        .await
        .unwrap()
        .tree_sha256;
    let patch = h
        .engine
        .reviews()
        .preview(task.as_str())
        .await
        .unwrap()
        .patch
        .sha256;
    (tree, patch)
}

/// Runs `executable args` as the test of `task`'s current patch, which must pass.
async fn passes(h: &EngineHarness, task: &TaskId, executable: &str, args: &[&str]) {
    let patch = fresh(h, task).await.1;
    let test = TestCommand {
        executable: executable.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
    };
    let ev = h
        .engine
        .reviews()
        .test(task.as_str(), &patch, test, None)
        .await
        .unwrap();
    assert!(ev.passed, "{ev:?}");
}

/// Passes the node's test on its current patch and resumes the group; its checkpoint.
async fn tested_and_resumed(
    h: &EngineHarness,
    (group, sha, task): &(String, String, TaskId),
    word: &str,
) -> Checkpoint {
    passes(h, task, "grep", &["-q", word, "t.txt"]).await;
    h.engine.groups().start(group, sha).await.unwrap();
    let s = wait(h, group).await;
    assert_eq!(s.state, GroupState::Completed, "{s:?}");
    s.nodes[0].checkpoint.clone().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_rewritten_after_the_turn_ended_is_in_the_checkpoint_not_the_turn_s_hashes() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .start();
    let node = held(&h).await;
    let task = node.2.clone();
    let at_end = settled(&h, &task);
    assert_eq!(
        at_end,
        fresh(&h, &task).await,
        "the turn's end read them right"
    );
    // After the turn ended: the same length, its modification time set back.
    let path = h.home().join("copies").join(task.as_str()).join("t.txt");
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    std::fs::write(&path, "no\n").unwrap();
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(modified)
        .unwrap();
    let now = fresh(&h, &task).await;
    assert_ne!(now.0, at_end.0);
    assert_ne!(now.1, at_end.1);
    let cp = tested_and_resumed(&h, &node, "no").await;
    assert_eq!(
        (cp.tree_sha256, cp.patch_sha256),
        now,
        "the checkpoint describes the copy as it is, not as the turn's end read it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_left_alone_is_checkpointed_with_the_hashes_its_turn_s_end_read() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .start();
    let node = held(&h).await;
    let at_end = settled(&h, &node.2);
    let cp = tested_and_resumed(&h, &node, "ok").await;
    assert_eq!((cp.tree_sha256, cp.patch_sha256), at_end);
    assert_eq!(fresh(&h, &node.2).await, at_end);
}

fn envelope(id: &str, to: &str) -> String {
    format!(
        r#"<legate-peer-message>{{"messageId":"{id}","toNode":"{to}","text":"look at t.txt again"}}</legate-peer-message>"#
    )
}

/// Peer messages around a paused group: `tested` is held for its test at once (pausing the
/// group); `slow-sender` then sends it a message (a held node takes more turns, so the message
/// is queued, not refused); `receiver`, whose turn outlasts the pause, ends with a message
/// from `sender` waiting, and is held (its turn is over, so a wait on the paused group ends).
/// At resume both take their messages as next turns before they finish, `tested` before
/// its test ran (a node with a message waiting is not checked at resume); its test is then
/// asked for on that turn, and passes. The slow turns take about
/// four seconds against the fraction of a second `tested` takes to be held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_messages_wait_out_a_pause_and_are_each_node_s_next_turn_at_resume() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(|c| c.max_running = 8)
        .start();
    let mut def = held_workflow(&h);
    let criteria = def.nodes[0].criteria.clone();
    let plain = |id: &str, prompt: String, deps: &[&str]| NodeDef {
        id: id.into(),
        prompt,
        depends_on: deps.iter().map(|d| d.to_string()).collect(),
        criteria: criteria.clone(),
        ..NodeDef::default()
    };
    let slow = "!chunks 40 10";
    def.nodes.extend([
        plain(
            "sender",
            format!("!say {}", envelope("to-receiver", "receiver")),
            &[],
        ),
        plain("receiver", slow.into(), &[]),
        plain(
            "slow-sender",
            // `!chunks` ends the turn: the envelope is said first, and read at the turn's end.
            format!("!say {}\n{slow}", envelope("to-tested", "tested")),
            &[],
        ),
        plain(
            "last",
            "What is here?".into(),
            &["tested", "sender", "receiver", "slow-sender"],
        ),
    ]);
    def.workflow.as_mut().unwrap().final_node = "last".into();
    def.peer_routes = [("sender", "receiver"), ("slow-sender", "tested")]
        .map(|(from, to)| PeerRoute {
            from: from.into(),
            to: to.into(),
        })
        .to_vec();
    let c = h.engine.groups().create(None, def).unwrap();
    let s = started(&h, &c.group_id, &c.definition_sha256).await;
    let node = |s: &GroupStatus, id: &str| s.nodes.iter().find(|n| n.id == id).unwrap().clone();
    assert_eq!(s.state, GroupState::Paused, "{s:?}");
    assert_eq!(s.pause_reason, Some(ErrorCode::TestFailed), "{s:?}");
    let tested = node(&s, "tested");
    assert_eq!(tested.state, NodeState::Held, "{s:?}");
    assert_eq!(tested.error, Some(ErrorCode::TestFailed));
    let receiver = node(&s, "receiver");
    assert_eq!(receiver.state, NodeState::Held, "{s:?}");
    assert_eq!(receiver.error, None, "the pause is another node's: {s:?}");
    assert_eq!(receiver.task_ids.len(), 1);
    assert_eq!(node(&s, "slow-sender").state, NodeState::Succeeded, "{s:?}");
    let receipts = |h: &EngineHarness| {
        let mut r = h
            .engine
            .groups()
            .peer_receipts(&c.group_id, None, 20)
            .unwrap()
            .receipts;
        r.sort_by(|a, b| a.message_id.cmp(&b.message_id));
        r.into_iter()
            .map(|r| (r.message_id, r.state))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        receipts(&h),
        [
            ("to-receiver".to_string(), ReceiptState::Queued),
            ("to-tested".to_string(), ReceiptState::Queued)
        ]
    );

    // Resumed before its test ran: a held node with a message waiting is not checked at
    // resume. It takes the message first, and its test is asked for when that turn ends.
    let s = started(&h, &c.group_id, &c.definition_sha256).await;
    assert_eq!(s.state, GroupState::Paused, "{s:?}");
    assert_eq!(s.pause_reason, Some(ErrorCode::TestFailed), "{s:?}");
    let tested = node(&s, "tested");
    assert_eq!(tested.state, NodeState::Held, "{s:?}");
    assert_eq!(tested.task_ids.len(), 2, "{s:?}");
    passes(&h, &tested.task_ids[1], "true", &[]).await;
    let s = started(&h, &c.group_id, &c.definition_sha256).await;
    assert_eq!(s.state, GroupState::Completed, "{s:?}");
    for id in ["tested", "receiver"] {
        let n = node(&s, id);
        assert_eq!(n.task_ids.len(), 2, "{id}: {s:?}");
        assert_eq!(
            n.checkpoint.as_ref().map(|c| &c.task_id),
            Some(&n.task_ids[1]),
            "{id}"
        );
    }
    assert_eq!(
        receipts(&h),
        [
            ("to-receiver".to_string(), ReceiptState::Sent),
            ("to-tested".to_string(), ReceiptState::Sent)
        ]
    );
}

/// [`held_workflow`] with `slow-sender`, which sends `tested` a message in a turn that outlasts
/// `tested`'s hold, and `last`, after both.
fn slow_sender_workflow(h: &EngineHarness) -> GroupDefinition {
    let mut def = held_workflow(h);
    let criteria = def.nodes[0].criteria.clone();
    def.nodes.push(NodeDef {
        id: "slow-sender".into(),
        prompt: format!("!say {}\n!chunks 40 10", envelope("to-tested", "tested")),
        criteria: criteria.clone(),
        ..NodeDef::default()
    });
    def.nodes.push(NodeDef {
        id: "last".into(),
        prompt: "What is here?".into(),
        depends_on: vec!["tested".into(), "slow-sender".into()],
        criteria,
        ..NodeDef::default()
    });
    def.workflow.as_mut().unwrap().final_node = "last".into();
    def.peer_routes = vec![PeerRoute {
        from: "slow-sender".into(),
        to: "tested".into(),
    }];
    def
}

/// [`slow_sender_workflow`] created and started, once `tested` is held for its test with
/// `slow-sender`'s message waiting for it: the group, and `tested`'s first task.
async fn message_waiting(h: &EngineHarness) -> (legate_engine::GroupCreated, TaskId) {
    let c = h
        .engine
        .groups()
        .create(None, slow_sender_workflow(h))
        .unwrap();
    let s = started(h, &c.group_id, &c.definition_sha256).await;
    assert_eq!(s.nodes[0].state, NodeState::Held, "{s:?}");
    assert_eq!(s.nodes[1].state, NodeState::Succeeded, "{s:?}");
    let first = s.nodes[0].task_ids[0].clone();
    (c, first)
}

/// A message turn that finds the engine's places all taken waits for one, as an admission
/// does, instead of pausing the group `QUEUE_FULL`: two tasks outside the group hold both
/// running places (and no queue) while the group resumes to deliver `tested` its message;
/// once they end, the message is its next turn and the group completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_turn_waits_for_a_place_instead_of_pausing_the_group() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(|c| {
            c.max_running = 2;
            c.max_queued = 0;
        })
        .start();
    let def = slow_sender_workflow(&h);
    let c = h.engine.groups().create(None, def).unwrap();
    let s = started(&h, &c.group_id, &c.definition_sha256).await;
    assert_eq!(s.nodes[0].state, NodeState::Held, "{s:?}");
    assert_eq!(s.nodes[1].state, NodeState::Succeeded, "{s:?}");
    let first = s.nodes[0].task_ids[0].clone();

    // Both places taken by tasks outside the group.
    let hangers: Vec<_> = (0..2)
        .map(|_| h.engine.submit(h.on_copy("!hang")).unwrap())
        .collect();
    for t in &hangers {
        h.wait_state(&t.id, legate_core::TaskState::Working).await;
    }
    passes(&h, &first, "true", &[]).await;
    h.engine
        .groups()
        .start(&c.group_id, &c.definition_sha256)
        .await
        .unwrap();
    // No place: the group goes on waiting, paused by nothing.
    let (ready, status) = wait_within(&h, &c.group_id, Duration::from_secs(3)).await;
    assert!(!ready, "{status:?}");
    assert_eq!(status.state, GroupState::Running, "{status:?}");
    for t in &hangers {
        h.engine.cancel(t.id.as_str()).unwrap();
    }
    let s = wait(&h, &c.group_id).await;
    assert_eq!(s.state, GroupState::Completed, "{s:?}");
    assert_eq!(s.nodes[0].task_ids.len(), 2, "{s:?}");
}

/// A message turn refused for good (the recipient's copy discarded while it was held) holds
/// its node at once, with the refusal's code, under its group paused with it: the node is not
/// left running under a paused group, where a wait on the group could not end. A resume tries
/// the message again, and is refused again, until the caller cancels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_message_turn_holds_its_node_with_the_refusal() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .start();
    let (c, first) = message_waiting(&h).await;
    h.engine.reviews().discard(first.as_str()).await.unwrap();
    for _ in 0..2 {
        // Held with a message waiting: sent back to take it, which its closed copy refuses.
        let s = started(&h, &c.group_id, &c.definition_sha256).await;
        assert_eq!(s.state, GroupState::Paused, "{s:?}");
        assert_eq!(s.pause_reason, Some(ErrorCode::CopyClosed), "{s:?}");
        assert_eq!(s.nodes[0].state, NodeState::Held, "{s:?}");
        assert_eq!(s.nodes[0].error, Some(ErrorCode::CopyClosed), "{s:?}");
        assert!(
            s.pause_message
                .as_deref()
                .is_some_and(|m| m.contains("node tested's next turn, a peer message, was refused")),
            "{s:?}"
        );
        assert_eq!(
            s.nodes[0].task_ids,
            std::slice::from_ref(&first),
            "no turn started"
        );
        let page = h
            .engine
            .groups()
            .peer_receipts(&c.group_id, None, 20)
            .unwrap();
        assert_eq!(page.receipts[0].state, ReceiptState::Queued, "{page:?}");
    }
    h.engine.groups().cancel(&c.group_id).unwrap();
    let s = wait(&h, &c.group_id).await;
    assert_eq!(s.state, GroupState::Canceled, "{s:?}");
}

/// A peer message an earlier Legate sent as a turn, under its own form of the delivery id
/// (the group and the message id only), and stopped before marking sent, is found again by
/// this one: marked sent with that turn, not sent a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_an_earlier_legate_sent_before_it_stopped_is_not_sent_again() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .start();
    let (c, first) = message_waiting(&h).await;
    // What the earlier Legate left: the turn sent under its id, the message still queued.
    let digest = legate_core::remote::sha256_hex(format!("{}\0to-tested", c.group_id).as_bytes());
    let turn = h
        .engine
        .send_message(legate_engine::MessageRequest {
            context_id: h.engine.task(first.as_str()).unwrap().context_id,
            message_id: format!("peer-{}", &digest[..40]),
            text: "the message, as the earlier Legate framed it".into(),
            mode: None,
        })
        .unwrap()
        .task;
    h.wait(&turn.id).await;
    passes(&h, &turn.id, "true", &[]).await;
    let s = started(&h, &c.group_id, &c.definition_sha256).await;
    assert_eq!(s.state, GroupState::Completed, "{s:?}");
    assert_eq!(
        s.nodes[0].task_ids,
        [first, turn.id.clone()],
        "no second turn"
    );
    let page = h
        .engine
        .groups()
        .peer_receipts(&c.group_id, None, 20)
        .unwrap();
    assert_eq!(page.receipts[0].state, ReceiptState::Sent, "{page:?}");
}

/// A resume refused because a finished node's copy changed
/// (`WORKFLOW_CHECKPOINT_CHANGED`) drops nothing: every checkpoint is checked before a held
/// node's peer messages are recorded again, so `talk`, held for two messages under one id
/// and listed before the changed node, keeps both its hold and its answer as they were (no
/// `peer-message-dropped` notice), and the next resume, once the copy is put back, drops the
/// second message and lists it in its answer. Before, the nodes were resumed in their order,
/// so `talk`'s drop was made, and lost to the refused answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_refused_for_a_changed_checkpoint_drops_no_peer_message() {
    let h = EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(|c| c.max_running = 8)
        .start();
    let say = |id: &str, text: &str| {
        format!(
            r#"<legate-peer-message>{{"messageId":"{id}","toNode":"hear","text":"{text}"}}</legate-peer-message>"#
        )
    };
    let plain = |id: &str, prompt: String, deps: &[&str]| NodeDef {
        id: id.into(),
        prompt,
        depends_on: deps.iter().map(|d| d.to_string()).collect(),
        ..NodeDef::default()
    };
    let def = GroupDefinition {
        working_directory: h.project(),
        title: Some("drops".into()),
        nodes: vec![
            plain(
                "talk",
                format!("!say {}{}", say("dup", "one"), say("dup", "two")),
                &[],
            ),
            plain("hear", "What is here?".into(), &["talk"]),
            plain("done", "write d.txt: done\\n".into(), &[]),
        ],
        peer_routes: vec![PeerRoute {
            from: "talk".into(),
            to: "hear".into(),
        }],
        budget: None,
        workflow: None,
    };
    let c = h.engine.groups().create(None, def).unwrap();
    let s = started(&h, &c.group_id, &c.definition_sha256).await;
    let node = |s: &GroupStatus, id: &str| s.nodes.iter().find(|n| n.id == id).unwrap().clone();
    assert_eq!(
        s.pause_reason,
        Some(ErrorCode::PeerMessageConflict),
        "{s:?}"
    );
    assert_eq!(node(&s, "talk").state, NodeState::Held, "{s:?}");
    let done = node(&s, "done");
    assert_eq!(done.state, NodeState::Succeeded, "{s:?}");
    let talk = node(&s, "talk").task_ids[0].clone();
    let drops = |h: &EngineHarness| {
        h.engine
            .events(&talk, 0, 10_000)
            .unwrap()
            .into_iter()
            .filter(|e| {
                matches!(&e.kind, legate_core::EventKind::Notice { detail, .. }
                    if detail["event"] == "peer-message-dropped")
            })
            .count()
    };

    let changed = h
        .home()
        .join("copies")
        .join(done.task_ids[0].as_str())
        .join("d.txt");
    std::fs::write(&changed, "changed\n").unwrap();
    let e = h
        .engine
        .groups()
        .start(&c.group_id, &c.definition_sha256)
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::WorkflowCheckpointChanged, "{e}");
    assert_eq!(drops(&h), 0, "a refused resume dropped a message");
    let s = h.engine.groups().status(&c.group_id).unwrap();
    assert_eq!(
        s.pause_reason,
        Some(ErrorCode::WorkflowCheckpointChanged),
        "{s:?}"
    );
    let held = node(&s, "talk");
    assert_eq!(held.state, NodeState::Held, "{s:?}");
    assert_eq!(held.error, Some(ErrorCode::PeerMessageConflict), "{s:?}");

    std::fs::write(&changed, "done\n").unwrap();
    let resumed = h
        .engine
        .groups()
        .start(&c.group_id, &c.definition_sha256)
        .await
        .unwrap();
    // The scripted agent's answer repeats its directive, so the second envelope is there
    // twice: each is dropped, noted and listed.
    let dropped = resumed.dropped_peer_messages;
    assert_eq!(dropped.len(), 2, "{dropped:?}");
    assert_eq!(drops(&h), dropped.len(), "{dropped:?}");
    for d in &dropped {
        assert_eq!((d.node_id.as_str(), &d.task_id), ("talk", &talk));
        assert!(
            d.reason.contains("\"dup\"") && !d.reason.contains("two"),
            "{d:?}"
        );
    }
    assert_eq!(wait(&h, &c.group_id).await.state, GroupState::Completed);
}
