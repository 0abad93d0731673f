//! Plans stored as what changed (issue 33), end to end on a real `legate serve` (the back of
//! the front kit's fleet, serving revisor): after a `kill -9` mid-task, a fresh CLI process
//! reads every plan the agent sent back whole, entry for entry, and the restarted server
//! appends and reads plans on.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::fleet::{Fleet, GATED, wait_gate};
use legate_frontkit::sse::frame_state;
use serde_json::Value;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// The statuses of each stored plan of a task, in order.
fn plans(events: &[Value]) -> Vec<Vec<(String, String)>> {
    events
        .iter()
        .filter(|e| e["type"] == "plan")
        .map(|e| {
            e["entries"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| {
                    (
                        x["content"].as_str().unwrap().to_owned(),
                        x["status"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        })
        .collect()
}

/// What revisor sends for `thoughts` thoughts before the gate: its plan all pending, then
/// each thought in progress and completed, then the gate's step in progress.
fn expected(first: &[(String, String)], thoughts: usize) -> Vec<Vec<(String, String)>> {
    let mut plan: Vec<(String, String)> = first.to_vec();
    let mut out = vec![plan.clone()];
    for i in 0..=thoughts {
        plan[i].1 = "in_progress".into();
        out.push(plan.clone());
        if i < thoughts {
            plan[i].1 = "completed".into();
            out.push(plan.clone());
        }
    }
    out
}

#[test]
fn plans_read_back_whole_after_a_kill_9_mid_task_and_the_restarted_server_goes_on() {
    const N: usize = 120;
    let mut fleet = Fleet::start(LEGATE, "");
    let prompt: String = (0..N)
        .map(|i| format!("think: thought {i}\n"))
        .chain(std::iter::once(GATED.to_owned()))
        .collect();
    let mut stream = fleet.back.stream("revisor", "plans-kill", &prompt);
    let first = stream.next().expect("an empty stream");
    let id = first["task"]["id"].as_str().unwrap().to_owned();
    wait_gate(&fleet.back);
    // The agent reaches the gate once its permission is answered, which does not wait for
    // the plans it sent before to be stored: the kill may come while they are written.
    fleet.back.kill_9();
    drop(stream);

    // A fresh process reads the store the killed one left.
    let stored = plans(&fleet.back.events(&id));
    assert!(!stored.is_empty());
    let all_pending = &stored[0];
    assert!(all_pending.iter().all(|(_, s)| s == "pending"));
    assert_eq!(all_pending.len(), N + 3, "{all_pending:?}");
    assert!(
        all_pending[..N].iter().all(|(c, _)| c == "Think"),
        "{all_pending:?}"
    );
    assert_eq!(all_pending[N + 2].0, "Answer");
    // Whatever was stored before the kill reads back whole, in order, with nothing missing
    // in between: the plans the agent sent, up to where the store stopped.
    let all = expected(all_pending, N);
    assert!(stored.len() <= all.len(), "{} plans stored", stored.len());
    assert_eq!(stored[..], all[..stored.len()]);

    // Restarted on the same store: a new task's plans are stored and read back whole too.
    fleet.back.restart();
    let prompt: String = (0..10).map(|i| format!("think: again {i}\n")).collect();
    let mut stream = fleet.back.stream("revisor", "plans-after", &prompt);
    let first = stream.next().expect("an empty stream");
    let again = first["task"]["id"].as_str().unwrap().to_owned();
    stream.drain();
    assert_eq!(
        frame_state(stream.frames.last().unwrap()),
        Some("TASK_STATE_COMPLETED")
    );
    let after = plans(&fleet.back.events(&again));
    let last = after.last().unwrap();
    assert!(last.iter().all(|(_, s)| s == "completed"), "{last:?}");
    assert_eq!(after.len(), 1 + 2 * 11);
    // And the killed task still reads back the same.
    assert_eq!(plans(&fleet.back.events(&id)), stored);
}
