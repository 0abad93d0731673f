//! Plans across a federation hop as what changed (issue 33): a back Legate's A2A translator
//! for a caller that named the plan-changes extension, read by the front's relay, gives back
//! every plan whole, entry for entry, while its bytes grow with what changed; a change that
//! does not follow the relayed plan is never applied.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use a2a::StreamResponse;
use legate_a2a::convert::{LEGATE_EVENT_KEY, Translator};
use legate_core::{EventKind, PlanEntry, Task};
use legate_remote::translate::{Bounds, Relay};
use proptest::prelude::*;

fn entry(content: &str, status: &str) -> PlanEntry {
    PlanEntry {
        content: content.into(),
        priority: "medium".into(),
        status: status.into(),
    }
}

/// What the front's relay makes of `plans` sent by a back translator.
fn through(plans: &[Vec<PlanEntry>], changes: bool) -> (Vec<EventKind>, usize) {
    let task = Task::new("t1", "c1", "revisor", "p");
    let mut back = Translator::new().with_plan_changes(changes);
    let mut front = Relay::new(Bounds::default()).with_legate_events(true);
    let mut out = Vec::new();
    let mut bytes = 0;
    for p in plans {
        for r in back.event(&task, &EventKind::Plan { entries: p.clone() }) {
            bytes += serde_json::to_string(&r).unwrap().len();
            out.extend(front.update(&r).unwrap());
        }
    }
    (out, bytes)
}

fn revisor(n: usize) -> Vec<Vec<PlanEntry>> {
    let mut plan: Vec<PlanEntry> = (0..n)
        .map(|i| entry(&format!("Think: thought {i}"), "pending"))
        .collect();
    let mut out = vec![plan.clone()];
    for i in 0..n {
        for s in ["in_progress", "completed"] {
            plan[i].status = s.into();
            out.push(plan.clone());
        }
    }
    out
}

fn as_events(plans: &[Vec<PlanEntry>]) -> Vec<EventKind> {
    plans
        .iter()
        .map(|p| EventKind::Plan { entries: p.clone() })
        .collect()
}

#[test]
fn a_growing_plan_crosses_a_hop_whole_in_linear_bytes_and_whole_without_the_extension() {
    let (small, large) = (revisor(200), revisor(400));
    let (got, small_bytes) = through(&small, true);
    assert_eq!(got, as_events(&small));
    let (got, large_bytes) = through(&large, true);
    assert_eq!(got, as_events(&large));
    assert!(
        large_bytes <= small_bytes * 5 / 2,
        "{small_bytes} then {large_bytes}"
    );
    // A caller without the extension gets every plan whole, as before.
    let (got, whole_bytes) = through(&small, false);
    assert_eq!(got, as_events(&small));
    assert!(
        whole_bytes > small_bytes * 10,
        "{whole_bytes} {small_bytes}"
    );
}

#[test]
fn a_change_that_does_not_follow_the_relayed_plan_is_never_applied() {
    let task = Task::new("t1", "c1", "revisor", "p");
    let plans = revisor(3);
    let mut back = Translator::new().with_plan_changes(true);
    let updates: Vec<StreamResponse> = plans
        .iter()
        .flat_map(|p| back.event(&task, &EventKind::Plan { entries: p.clone() }))
        .collect();
    // The front missed the whole first plan: the changes after it are not plans (their
    // text is relayed instead) until the next whole plan, and every plan it does relay is the
    // one the back sent.
    let mut front = Relay::new(Bounds::default()).with_legate_events(true);
    let mut relayed = 0;
    for (j, r) in updates.iter().enumerate().skip(1) {
        for e in front.update(r).unwrap() {
            match e {
                EventKind::Plan { entries } => {
                    assert_eq!(entries, plans[j], "update {j}");
                    relayed += 1;
                }
                other => assert!(relayed == 0, "{other:?} after a plan"),
            }
        }
    }
    assert!(
        matches!(
            front.update(&updates[1]).unwrap()[..],
            [EventKind::Notice { .. }]
        ),
        "a change out of order is its text"
    );
    // A hostile change that does not fit the plan is not applied either.
    let mut front = Relay::new(Bounds::default()).with_legate_events(true);
    front.update(&updates[0]).unwrap();
    let mut bad = updates[1].clone();
    if let StreamResponse::StatusUpdate(u) = &mut bad {
        let meta = u
            .status
            .message
            .as_mut()
            .unwrap()
            .metadata
            .as_mut()
            .unwrap();
        meta.insert(
            LEGATE_EVENT_KEY.into(),
            serde_json::json!({"type": "plan_changes", "n": 2, "base": 1,
                "hunks": [{"at": 99, "del": 1}]}),
        );
    }
    let got = front.update(&bad).unwrap();
    assert!(
        got.iter().all(|e| !matches!(e, EventKind::Plan { .. })),
        "{got:?}"
    );
}

fn arb_plan() -> impl Strategy<Value = Vec<PlanEntry>> {
    let e = (
        "[ab]{0,2}",
        prop::sample::select(vec!["pending", "completed"]),
    )
        .prop_map(|(c, s)| entry(&c, s));
    prop::collection::vec(e, 0..10)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn any_sequence_of_plans_crosses_a_hop_exactly(plans in prop::collection::vec(arb_plan(), 1..24)) {
        let (got, _) = through(&plans, true);
        prop_assert_eq!(got, as_events(&plans));
    }
}

/// A hostile back Legate sends one large plan, then changes of a few bytes that rebuild it
/// again and again: past the turn's bytes of rebuilt plans the changes are no longer
/// rebuilt, so a megabyte of changes cannot cost gigabytes of plans. Before, every one was.
#[test]
fn rebuilt_plans_are_bounded_per_turn() {
    let task = Task::new("t1", "c1", "revisor", "p");
    let plan: Vec<PlanEntry> = (0..2_000)
        .map(|i| entry(&format!("step {i} of a long plan"), "pending"))
        .collect();
    let size = legate_core::plan_change::json_size(&plan);
    let mut back = Translator::new().with_plan_changes(true);
    let mut front = Relay::new(Bounds {
        max_rebuilt_plan_bytes: size * 10,
        ..Bounds::default()
    })
    .with_legate_events(true);
    let mut plans = 0;
    let mut wire = 0;
    for _ in 0..200 {
        for r in back.event(
            &task,
            &EventKind::Plan {
                entries: plan.clone(),
            },
        ) {
            wire += serde_json::to_string(&r).unwrap().len();
            plans += front
                .update(&r)
                .unwrap()
                .iter()
                .filter(|e| matches!(e, EventKind::Plan { .. }))
                .count();
        }
    }
    assert!(plans <= 11, "{plans} plans rebuilt from {wire} bytes");
}
