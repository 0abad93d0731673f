//! Tests of plans stored as what changed: read back whole, linear in size, across handles.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::Store;
use crate::tasks::tests::{submitted, task};
use legate_core::{EventKind, PlanEntry, TaskId};
use proptest::prelude::*;

fn entry(content: &str, status: &str) -> PlanEntry {
    PlanEntry {
        content: content.into(),
        priority: "medium".into(),
        status: status.into(),
    }
}

/// The revisor's plans for `n` steps: each step set in progress, then completed, the whole
/// plan each time.
fn revisor_plans(n: usize) -> Vec<EventKind> {
    let mut plan: Vec<PlanEntry> = (0..n)
        .map(|i| entry(&format!("Think: step number {i} of the task"), "pending"))
        .collect();
    let mut out = Vec::new();
    for i in 0..n {
        for s in ["in_progress", "completed"] {
            plan[i].status = s.into();
            out.push(EventKind::Plan {
                entries: plan.clone(),
            });
        }
    }
    out
}

fn stored_kinds(store: &Store, id: &TaskId) -> Vec<EventKind> {
    store
        .events(id, 1, usize::MAX)
        .unwrap()
        .into_iter()
        .map(|e| e.kind)
        .collect()
}

#[test]
fn a_growing_plan_is_stored_linearly_and_read_back_whole() {
    let bytes = |n: usize| {
        let store = Store::open_in_memory().unwrap();
        let t = task(&format!("plan-{n}"), 1);
        store.insert_task(&t, &submitted()).unwrap();
        let plans = revisor_plans(n);
        // As the pump appends: a few events a batch.
        for batch in plans.chunks(3) {
            store.append_events(&t.id, batch).unwrap();
        }
        assert_eq!(stored_kinds(&store, &t.id), plans);
        // Any page reads back whole, wherever it starts.
        let page = store.events(&t.id, 500, 7).unwrap();
        assert_eq!(
            page.into_iter().map(|e| e.kind).collect::<Vec<_>>(),
            plans[499..506]
        );
        store.event_totals(&t.id).unwrap().1
    };
    let (small, large) = (bytes(400), bytes(800));
    assert!(
        large <= small * 5 / 2,
        "400 steps store {small} bytes, 800 store {large}"
    );
    // Whole, 800 steps would be 2 * 800 plans of ~60 bytes an entry: about 60 MB.
    assert!(large < 8 << 20, "{large}");
}

#[test]
fn plans_read_back_whole_after_reopening_and_from_another_handle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legate.db");
    let plans = revisor_plans(40);
    let t = task("plan-reopen", 1);
    {
        let store = Store::open(&path).unwrap();
        store.insert_task(&t, &submitted()).unwrap();
        store.append_events(&t.id, &plans[..30]).unwrap();
        // Dropped without any shutdown: what a kill -9 leaves, as far as the file goes.
    }
    let a = Store::open(&path).unwrap();
    let b = Store::open(&path).unwrap();
    assert_eq!(stored_kinds(&a, &t.id), plans[..30]);
    // Two handles append in turn: each finds the other's last plan in the store.
    for (i, p) in plans[30..].iter().enumerate() {
        let s = if i % 2 == 0 { &a } else { &b };
        s.append_events(&t.id, std::slice::from_ref(p)).unwrap();
        s.append_events(&t.id, &[EventKind::Message { text: "x".into() }])
            .unwrap();
    }
    let read: Vec<EventKind> = stored_kinds(&b, &t.id)
        .into_iter()
        .filter(|k| matches!(k, EventKind::Plan { .. }))
        .collect();
    assert_eq!(read, plans);
}

#[test]
fn a_changes_row_that_does_not_fit_is_a_store_error_not_a_wrong_plan() {
    let store = Store::open_in_memory().unwrap();
    let t = task("plan-bad", 1);
    store.insert_task(&t, &submitted()).unwrap();
    store.append_events(&t.id, &revisor_plans(30)).unwrap();
    store
        .read(|c| {
            c.execute(
                "UPDATE events SET payload = '{\"type\":\"plan\",\"keyframe\":2,\"since\":1,\"hunks\":[{\"at\":999,\"del\":1}]}' \
                 WHERE seq = 5",
                [],
            )
            .unwrap();
            Ok(())
        })
        .unwrap();
    let err = store.events(&t.id, 0, 100).unwrap_err();
    assert_eq!(err.code, legate_core::ErrorCode::StoreError);
    assert!(err.message.contains("does not rebuild"), "{}", err.message);
}

fn arb_plan() -> impl Strategy<Value = Vec<PlanEntry>> {
    let e = (
        "[ab]{0,2}",
        prop::sample::select(vec!["pending", "completed"]),
    )
        .prop_map(|(c, s)| entry(&c, s));
    prop::collection::vec(e, 0..10)
}

fn arb_event() -> impl Strategy<Value = EventKind> {
    prop_oneof![
        3 => arb_plan().prop_map(|entries| EventKind::Plan { entries }),
        1 => "[a-z]{0,4}".prop_map(|text| EventKind::Message { text }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn any_sequence_of_plans_reads_back_exactly_in_any_page(
        events in prop::collection::vec(arb_event(), 1..40),
        batch in 1usize..6,
        page in 1usize..9,
        reopen_at in 0usize..40,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("legate.db");
        let t = task("plan-prop", 1);
        let mut store = Store::open(&path).unwrap();
        store.insert_task(&t, &submitted()).unwrap();
        for (i, chunk) in events.chunks(batch).enumerate() {
            if i == reopen_at {
                store = Store::open(&path).unwrap();
            }
            store.append_events(&t.id, chunk).unwrap();
        }
        prop_assert_eq!(stored_kinds(&store, &t.id), events.clone());
        let mut cursor = 1;
        let mut paged = Vec::new();
        loop {
            let got = store.events(&t.id, cursor, page).unwrap();
            let Some(last) = got.last() else { break };
            cursor = last.seq;
            paged.extend(got.into_iter().map(|e| e.kind));
        }
        prop_assert_eq!(paged, events);
    }
}

#[test]
fn events_given_up_are_stored_and_returned_as_those_lent() {
    let store = Store::open_in_memory().unwrap();
    let (a, b) = (task("lent", 1), task("given", 1));
    for t in [&a, &b] {
        store.insert_task(t, &submitted()).unwrap();
    }
    let plans = revisor_plans(6);
    for batch in plans.chunks(4) {
        let lent = store.append_events(&a.id, batch).unwrap();
        let given = store.append_events_owned(&b.id, batch.to_vec()).unwrap();
        assert_eq!(lent.len(), given.len());
        for (l, g) in lent.iter().zip(&given) {
            assert_eq!((l.seq, &l.kind), (g.seq, &g.kind));
            assert_eq!(g.task_id, b.id);
        }
    }
    assert_eq!(stored_kinds(&store, &b.id), plans);
    assert_eq!(stored_kinds(&store, &a.id), stored_kinds(&store, &b.id));
    assert!(
        store
            .append_events_owned(&b.id, Vec::new())
            .unwrap()
            .is_empty()
    );
    let gone = store.append_events_owned(&TaskId("nope".into()), plans[..1].to_vec());
    assert!(gone.is_err());
}
