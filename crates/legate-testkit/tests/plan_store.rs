//! Plans stored in proportion to their change (issue 33), through the engine: the scripted
//! agent (revisor) sends its whole plan, one entry per `think:` line, twice per line, and the
//! task's stored events grow linearly with the lines, not with their square; every plan reads
//! back whole, as revisor sent it. (200 and 400 steps here, for a debug build on a loaded
//! machine; the release figures for 400 and 800 are `cargo bench -p legate --bench
//! plan_steps`, docs/BENCHMARKS.md.)

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{EventKind, TaskState};
use legate_store::Store;
use legate_testkit::EngineHarness;

/// (stored event bytes, plans read back) of a revisor task of `steps` thoughts.
async fn task_of(steps: usize) -> (u64, Vec<Vec<legate_core::PlanEntry>>) {
    let h = EngineHarness::start();
    let prompt: String = (0..steps)
        .map(|i| format!("think: thought {i}\n"))
        .collect();
    let t = h.run_prompt(&prompt).await;
    assert_eq!(t.state, TaskState::Completed, "{:?}", t.error);
    let plans = h
        .events(&t.id)
        .into_iter()
        .filter_map(|e| match e.kind {
            EventKind::Plan { entries } => Some(entries),
            _ => None,
        })
        .collect();
    let store = Store::open(&h.home().join("legate.db")).unwrap();
    (store.event_totals(&t.id).unwrap().1, plans)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_of_twice_the_plan_steps_stores_at_most_two_and_a_half_times_as_much() {
    let (small, _) = task_of(200).await;
    let (large, plans) = task_of(400).await;
    assert!(
        large <= small * 5 / 2,
        "200 steps stored {small} bytes, 400 stored {large}"
    );
    // Whole, 400 steps are 803 plans of 401 entries: about 20 MB.
    assert!(large < 4 << 20, "{large}");
    // Each plan reads back as revisor sent it: all pending, then each step in progress and
    // completed in turn, then the answer.
    assert_eq!(plans.len(), 1 + 2 * 401);
    for (k, plan) in plans.iter().enumerate() {
        assert_eq!(plan.len(), 401);
        for (i, e) in plan.iter().enumerate() {
            let want = match k {
                0 => "pending",
                _ if 2 * i + 2 <= k => "completed",
                _ if 2 * i + 1 == k => "in_progress",
                _ => "pending",
            };
            assert_eq!(e.status, want, "plan {k} entry {i}");
        }
        assert_eq!(plan[7].content, "Think");
        assert_eq!(plan[400].content, "Answer");
    }
}
