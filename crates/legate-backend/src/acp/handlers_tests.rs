//! Tests of the ACP handlers: permission answers kept honest whatever the supervisor says,
//! tool calls remembered only in a turn, asks bounded by the session's places, and the client
//! file service's writes only in a turn, as the turn's work.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::EventSink;
use legate_core::{Boundary, PermissionRequest, TaskMode};
use legate_supervisor::{Preset, Supervision, Supervisor};
use proptest::prelude::*;
use serde_json::json;
use std::sync::Arc;

/// A supervisor that answers whatever it was given, offered or not: the handler is what
/// must keep the reply honest.
#[derive(Debug)]
struct Answers(Ruling);

impl Supervisor for Answers {
    fn decide(&self, _: &Supervision, _: &PermissionRequest) -> Ruling {
        self.0.clone()
    }
}

const KINDS: [&str; 4] = ["allow_once", "allow_always", "reject_once", "reject_always"];

fn any_id() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "allow",
            "reject",
            "approved",
            "abort",
            "proceed_once",
            "cancel",
            "default",
            "plan",
            "implement_plan",
        ])
        .prop_map(String::from),
        "[a-z_-]{0,8}",
    ]
}

fn any_verdict() -> impl Strategy<Value = Ruling> {
    (any::<bool>(), prop::option::of(any_id()), "[a-z ]{0,12}").prop_map(
        |(allow, option_id, reason)| {
            let decision = if allow {
                Decision::Allow
            } else {
                Decision::Deny
            };
            Ruling::new(decision, option_id, reason)
        },
    )
}

fn any_tool_kind() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec!["edit", "execute", "switch_mode", "other", "read"])
}

/// A write session's handler state in the temporary directory, asking `supervisor`.
fn state(supervisor: Arc<dyn Supervisor>) -> HandlerState {
    let root = std::env::temp_dir();
    let boundary = Boundary {
        root: root.clone(),
        owned: true,
        allow_execute: false,
    };
    HandlerState::new(
        supervisor,
        Supervision::new(boundary, TaskMode::Write, Preset::claude()),
        root,
    )
}

/// A supervisor that refuses everything.
fn denies() -> Arc<Answers> {
    Arc::new(Answers(Ruling {
        decision: Decision::Deny,
        option_id: None,
        reason: String::new(),
        decider: legate_core::Decider::Table,
        rule_id: None,
    }))
}

/// An idle agent's tool calls (no turn routed) are neither stored nor remembered: a flood
/// of them between turns must not grow Legate's memory. In a turn they are.
#[test]
fn tool_calls_outside_a_turn_are_not_remembered() {
    let shared = state(denies());
    let call: acp::SessionNotification = serde_json::from_value(json!({
        "sessionId": "s-1",
        "update": {"sessionUpdate": "tool_call", "toolCallId": "call-1", "title": "t",
                   "rawInput": {"content": "x".repeat(4096)}},
    }))
    .unwrap();
    session_update(&shared, &call);
    assert!(shared.known_tool("call-1").is_none());
    let (sink, _events) = EventSink::channel();
    shared.route_to(sink, Some(TaskMode::Write));
    session_update(&shared, &call);
    assert!(shared.known_tool("call-1").unwrap().raw_input.is_some());
}

/// A write the agent asks Legate for while no turn runs (as its session opens, between
/// turns) is refused and writes nothing: no turn's end would wait for it, so it could land
/// in a copy whose patch is being read. In a turn it is the turn's work.
#[tokio::test]
async fn a_write_outside_a_turn_is_refused_and_one_in_a_turn_is_its_work() {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let boundary = Boundary {
        root: root.clone(),
        owned: true,
        allow_execute: false,
    };
    let shared = HandlerState::new(
        denies(),
        Supervision::new(boundary, TaskMode::Write, Preset::claude()),
        root.clone(),
    );
    let req = |name: &str| acp::WriteTextFileRequest::new("s-1", root.join(name), "words\n");
    let (sink, _opening) = EventSink::channel();
    shared.route_to(sink, None);
    let err = write_text_file(&shared, &req("opening.txt"))
        .await
        .unwrap_err();
    assert!(err.message.contains("no turn is running"), "{err:?}");
    let (sink, _turn) = EventSink::channel();
    shared.route_to(sink, Some(TaskMode::Write));
    let work = crate::WorkspaceWork::new();
    shared.route_work(work.clone());
    write_text_file(&shared, &req("turn.txt")).await.unwrap();
    work.finished().await;
    shared.clear();
    let err = write_text_file(&shared, &req("between.txt"))
        .await
        .unwrap_err();
    assert!(err.message.contains("no turn is running"), "{err:?}");
    assert_eq!(
        std::fs::read_to_string(root.join("turn.txt")).unwrap(),
        "words\n"
    );
    let mut names: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["turn.txt"]);
}

/// Work a turn's handler started in the workspace is the turn's, waited for after the
/// handler is gone (a turn given up on drops it); once the turn lets go, nothing starts.
#[tokio::test]
async fn work_started_in_a_turn_outlives_its_handler_and_is_waited_for() {
    let shared = state(denies());
    let (sink, _events) = EventSink::channel();
    shared.route_to(sink, Some(TaskMode::Write));
    let work = crate::WorkspaceWork::new();
    shared.route_work(work.clone());
    let (go, wait) = std::sync::mpsc::channel::<()>();
    drop(shared.spawn_in_turn(move || wait.recv().unwrap()).unwrap());
    shared.clear();
    assert!(shared.spawn_in_turn(|| ()).is_none());
    assert_eq!((work.running(), work.started()), (1, 1));
    let finished = tokio::spawn({
        let work = work.clone();
        async move { work.finished().await }
    });
    go.send(()).unwrap();
    finished.await.unwrap();
    assert_eq!(work.running(), 0);
}

/// Answers one `session/request_permission` with `verdict`; the reply and the one event
/// it made.
fn answer(
    verdict: Ruling,
    options: &[(String, &str)],
    tool_kind: &str,
) -> (acp::RequestPermissionResponse, Vec<EventKind>) {
    let shared = state(Arc::new(Answers(verdict)));
    let (sink, mut events) = EventSink::channel();
    shared.route_to(sink, Some(TaskMode::Write));
    let options: Vec<_> = options
        .iter()
        .map(|(id, kind)| json!({"optionId": id, "name": id, "kind": kind}))
        .collect();
    let req: acp::RequestPermissionRequest = serde_json::from_value(json!({
        "sessionId": "s-1",
        "toolCall": {"toolCallId": "call-1", "title": "a tool", "kind": tool_kind},
        "options": options,
    }))
    .unwrap();
    let Permission::Now(reply) = permission(&shared, &req) else {
        panic!("a table ruling is answered at once");
    };
    shared.clear();
    let mut emitted = Vec::new();
    while let Ok(e) = events.try_recv() {
        emitted.push(e);
    }
    (reply, emitted)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Whatever the supervisor answers, the agent gets an id it offered or `cancelled`; a
    /// refusal never goes out as an allowing option; and the one permission event says
    /// exactly what was answered.
    #[test]
    fn the_reply_is_an_offered_id_or_cancelled(
        verdict in any_verdict(),
        options in prop::collection::vec((any_id(), prop::sample::select(KINDS.to_vec())), 0..5),
        tool_kind in any_tool_kind(),
    ) {
        let (reply, events) = answer(verdict.clone(), &options, tool_kind);
        let sent = match &reply.outcome {
            acp::RequestPermissionOutcome::Selected(s) => Some(s.option_id.0.to_string()),
            acp::RequestPermissionOutcome::Cancelled => None,
            other => panic!("unexpected outcome {other:?}"),
        };
        if let Some(id) = &sent {
            let offered = options.iter().find(|(o, _)| o == id);
            prop_assert!(offered.is_some(), "{id} was not offered: {options:?}");
            // The supervisor's choice goes out unchanged when it was offered.
            prop_assert_eq!(Some(id), verdict.option_id.as_ref());
            if verdict.decision == Decision::Deny {
                let first = options.iter().find(|(o, _)| o == id).map(|(_, k)| *k);
                prop_assert!(
                    matches!(first, Some("reject_once" | "reject_always")),
                    "a refusal answered with {id} ({first:?})"
                );
            }
        }
        prop_assert_eq!(events.len(), 1, "{:?}", events);
        match &events[0] {
            EventKind::Permission { verdict: recorded, offered, .. } => {
                prop_assert_eq!(&recorded.option_id, &sent);
                let ids: Vec<String> = options.iter().map(|(o, _)| o.clone()).collect();
                prop_assert_eq!(offered, &ids);
                if sent.is_none() && verdict.decision == Decision::Allow && verdict.option_id.is_some() {
                    // An allow whose option was dropped is recorded as the refusal it became.
                    prop_assert_eq!(recorded.decision, Decision::Deny);
                }
            }
            other => prop_assert!(false, "not a permission event: {:?}", other),
        }
    }
}

/// A channel whose answers never come: the requests handed to it stay waiting.
#[derive(Debug)]
struct Silent;

#[async_trait::async_trait]
impl ApprovalChannel for Silent {
    async fn ask(&self, _: Ask) -> crate::Answered {
        std::future::pending().await
    }
    fn record(&self, _: Sent<'_>) {}
}

#[derive(Debug)]
struct AlwaysAsk;

impl Supervisor for AlwaysAsk {
    fn decide(&self, _: &Supervision, _: &PermissionRequest) -> Ruling {
        Ruling {
            decision: Decision::Ask,
            ..Ruling::new(Decision::Ask, None, "ask")
        }
    }
}

/// An agent that floods the queue gets a refusal beyond the session's places, and a place
/// is free again once a waiting request is dropped.
#[test]
fn a_flood_of_asks_is_refused_beyond_the_sessions_places() {
    let shared = state(Arc::new(AlwaysAsk)).with_channel(Some(Arc::new(Silent)));
    let (sink, _events) = EventSink::channel();
    shared.route_to(sink, Some(TaskMode::Write));
    shared.route_task(TaskId("t".into()));
    let req: acp::RequestPermissionRequest = serde_json::from_value(json!({
        "sessionId": "s-1",
        "toolCall": {"toolCallId": "call-1", "title": "touch x", "kind": "execute"},
        "options": [
            {"optionId": "allow", "name": "allow", "kind": "allow_once"},
            {"optionId": "reject", "name": "reject", "kind": "reject_once"},
        ],
    }))
    .unwrap();
    let mut waiting: Vec<_> = (0..super::super::state::MAX_PENDING_ASKS)
        .map(|_| match permission(&shared, &req) {
            Permission::Ask(p) => p,
            Permission::Now(r) => panic!("refused too early: {r:?}"),
        })
        .collect();
    let Permission::Now(refused) = permission(&shared, &req) else {
        panic!("one request too many was queued");
    };
    match refused.outcome {
        acp::RequestPermissionOutcome::Selected(s) => {
            assert_eq!(s.option_id.0.as_ref(), "reject")
        }
        other => panic!("{other:?}"),
    }
    waiting.pop();
    assert!(matches!(permission(&shared, &req), Permission::Ask(_)));
}
