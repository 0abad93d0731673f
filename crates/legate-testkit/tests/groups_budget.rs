//! A group's token budget over the agy stand-in (`fake-agy`, which reports cumulative usage
//! per conversation): turns are admitted one at a time once the running one's counters are
//! in, the group pauses with `GROUP_BUDGET_EXCEEDED` at the turn that reaches the ceiling,
//! and a turn with no counters pauses it with `GROUP_USAGE_UNAVAILABLE`. Nothing is
//! estimated; revisor, which runs no model, reports zero and is counted as zero.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_backend::agy::AgyBackend;
use legate_core::{AgentKind, ErrorCode};
use legate_engine::{
    Budget, BudgetState, GroupDefinition, GroupState, GroupStatus, NodeDef, NodeState, PeerRoute,
    ReceiptState,
};
use legate_testkit::EngineHarness;
use legate_testkit::harness::TestAgent;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

const FAKE: &str = env!("CARGO_BIN_EXE_fake-agy");

fn harness() -> EngineHarness {
    let dir = tempfile::tempdir().unwrap();
    let agy_home = dir.path().join("agy-home");
    let state = agy_home.join(".gemini/antigravity-cli/fake-state");
    let agent = TestAgent::command("agy", AgentKind::AGY, Path::new(FAKE))
        .env("HOME", agy_home.to_str().unwrap())
        .env("FAKE_AGY_STATE_DIR", state.to_str().unwrap());
    EngineHarness::builder()
        .in_dir(dir)
        .backend(
            AgentKind::AGY,
            Arc::new(AgyBackend {
                probe_timeout: Duration::from_secs(3),
                kill_grace: Duration::from_secs(3),
                ..AgyBackend::default()
            }),
        )
        .agent(agent)
        .agent(TestAgent::scripted("revisor"))
        .default_agent("agy")
        .project(&[("a.txt", "alpha\n")])
        .start()
}

fn node(id: &str, prompt: &str) -> NodeDef {
    NodeDef {
        id: id.into(),
        role: None,
        agent: Some("agy".into()),
        model: None,
        prompt: prompt.into(),
        depends_on: vec![],
        file_sources: None,
        mode: None,
        criteria: vec![],
        ..NodeDef::default()
    }
}

async fn run(h: &EngineHarness, nodes: Vec<NodeDef>, max: u64) -> GroupStatus {
    run_routed(h, nodes, vec![], max).await
}

async fn run_routed(
    h: &EngineHarness,
    nodes: Vec<NodeDef>,
    peer_routes: Vec<PeerRoute>,
    max: u64,
) -> GroupStatus {
    let def = GroupDefinition {
        working_directory: h.project(),
        title: None,
        nodes,
        peer_routes,
        budget: Some(Budget {
            max_total_tokens: max,
        }),
        workflow: None,
    };
    let c = h.engine.groups().create(None, def).unwrap();
    h.engine
        .groups()
        .start(&c.group_id, &c.definition_sha256)
        .await
        .unwrap();
    let w = h
        .engine
        .groups()
        .wait(&c.group_id, Duration::from_secs(120))
        .await
        .unwrap();
    assert!(w.ready, "{:?}", w.status);
    w.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_group_pauses_at_the_turn_that_reaches_its_budget() {
    let h = harness();
    // Four independent nodes of 400 tokens each under a ceiling of 1000: the first two
    // leave 200, the third is admitted and passes the ceiling, the fourth never starts.
    let nodes = ["n1", "n2", "n3", "n4"]
        .iter()
        .map(|id| node(id, "tokens: 400"))
        .collect();
    let s = run(&h, nodes, 1000).await;
    assert_eq!(s.state, GroupState::Paused, "{s:?}");
    assert_eq!(s.pause_reason, Some(ErrorCode::GroupBudgetExceeded));
    let ran: Vec<_> = s.nodes.iter().filter(|n| !n.task_ids.is_empty()).collect();
    assert_eq!(ran.len(), 3, "{s:?}");
    assert!(ran.iter().all(|n| n.state == NodeState::Succeeded));
    assert_eq!(s.nodes[3].state, NodeState::Pending);
    let b = s.budget.as_ref().unwrap();
    // The figures are the agents' own counters, added.
    let mut counted = 0;
    for n in &ran {
        let t = h.engine.task(n.task_ids[0].as_str()).unwrap();
        counted += t.usage.unwrap().total_tokens.unwrap();
    }
    assert_eq!(counted, 1200);
    assert_eq!(b.known_subtotal_tokens, 1200);
    assert_eq!(b.observed_total_tokens, Some(1200));
    assert_eq!(b.margin_tokens, -200);
    assert_eq!(b.state, BudgetState::Exceeded);
    assert!(b.tasks_without_counters.is_empty());
    // The budget is part of the definition: resuming pauses again at once, admitting none.
    let again = resumed(&h, &s).await;
    assert_eq!(again.pause_reason, Some(ErrorCode::GroupBudgetExceeded));
    assert!(again.nodes[3].task_ids.is_empty());
}

/// `s`'s group resumed, once its wait is over.
async fn resumed(h: &EngineHarness, s: &GroupStatus) -> GroupStatus {
    h.engine
        .groups()
        .start(&s.group_id, &s.definition_sha256)
        .await
        .unwrap();
    let w = h
        .engine
        .groups()
        .wait(&s.group_id, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(w.ready, "{:?}", w.status);
    w.status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_without_counters_pauses_the_group_rather_than_guessing() {
    let h = harness();
    let s = run(
        &h,
        vec![node("quiet", "nousage: x"), node("next", "tokens: 10")],
        1000,
    )
    .await;
    assert_eq!(s.state, GroupState::Paused, "{s:?}");
    assert_eq!(s.pause_reason, Some(ErrorCode::GroupUsageUnavailable));
    let b = s.budget.unwrap();
    assert_eq!(b.state, BudgetState::Unavailable);
    assert_eq!(b.tasks_without_counters, s.nodes[0].task_ids);
    assert_eq!(b.observed_total_tokens, None);
    assert!(s.nodes[1].task_ids.is_empty(), "nothing admitted after it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revisor_turns_count_as_zero_tokens_not_as_missing_counters() {
    let h = harness();
    let mut plain = node("plain", "What is here?");
    plain.agent = Some("revisor".into());
    let mut counted = node("counted", "tokens: 10");
    counted.depends_on = vec!["plain".into()];
    let s = run(&h, vec![plain, counted], 1000).await;
    assert_eq!(s.state, GroupState::Completed, "{s:?}");
    let b = s.budget.unwrap();
    assert!(b.tasks_without_counters.is_empty(), "{b:?}");
    assert_eq!(b.observed_total_tokens, Some(10));
    let t = h.engine.task(s.nodes[0].task_ids[0].as_str()).unwrap();
    assert_eq!(
        t.usage.unwrap().total_tokens,
        Some(0),
        "revisor's own report"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_message_turn_counts_the_tokens_of_nodes_already_finished() {
    let h = harness();
    // `sender` (120 tokens, fake agy's default) ends with a message for `receiver`, which
    // runs after it (200 tokens): 320 of a 300 budget. The message would be the receiver's
    // next turn; the budget's gate must count the finished sender too, and pause instead.
    let sender = node(
        "sender",
        r#"note <legate-peer-message>{"messageId":"m1","toNode":"receiver","text":"look at a.txt"}</legate-peer-message>"#,
    );
    let mut receiver = node("receiver", "tokens: 200");
    receiver.depends_on = vec!["sender".into()];
    let routes = vec![PeerRoute {
        from: "sender".into(),
        to: "receiver".into(),
    }];
    let s = run_routed(&h, vec![sender, receiver], routes, 300).await;
    assert_eq!(s.state, GroupState::Paused, "{s:?}");
    assert_eq!(
        s.pause_reason,
        Some(ErrorCode::GroupBudgetExceeded),
        "{s:?}"
    );
    assert_eq!(s.nodes[1].task_ids.len(), 1, "no second turn: {s:?}");
    // Its turn is over and nothing of it runs: it is held (so a wait on the paused group
    // is over), not left running.
    assert_eq!(s.nodes[1].state, NodeState::Held, "{s:?}");
    assert_eq!(s.nodes[1].error, Some(ErrorCode::GroupBudgetExceeded));
    let b = s.budget.as_ref().unwrap();
    assert_eq!(b.observed_total_tokens, Some(320), "{b:?}");
    let queued = |h: &EngineHarness| {
        let r = h
            .engine
            .groups()
            .peer_receipts(&s.group_id, None, 20)
            .unwrap();
        assert_eq!(r.receipts.len(), 1, "{r:?}");
        r.receipts[0].state
    };
    assert_eq!(queued(&h), ReceiptState::Queued);
    // A resume sends the held node back to its gate, which pauses again: still no turn.
    let again = resumed(&h, &s).await;
    assert_eq!(again.pause_reason, Some(ErrorCode::GroupBudgetExceeded));
    assert_eq!(again.nodes[1].state, NodeState::Held, "{again:?}");
    assert_eq!(again.nodes[1].task_ids.len(), 1, "{again:?}");
    assert_eq!(queued(&h), ReceiptState::Queued);
}
