//! A task canceled while it waits for room under the descriptor limit gives its queued place
//! back, on the engine with the scripted agent: this process's `RLIMIT_NOFILE` is lowered (by
//! `prlimit`, a real process setting it) so that two running agents leave no room for a third.
//! Alone in its test binary: the limit is the whole process's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/limits.rs"]
mod limits;

use legate_core::{EventKind, TaskState};
use legate_engine::{SlotCounts, SubmitRequest};
use limits::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_canceled_while_it_waits_for_room_gives_its_queued_place_back() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 4);
    let (hanging, original) = two_busy_agents_and_no_room(&engine).await;

    let waiting = engine.submit(SubmitRequest::new("hello")).unwrap();
    until(&engine, &waiting.id, |e| {
        matches!(&e.kind, EventKind::Status { state: TaskState::Submitted, message: Some(m), .. }
            if m.starts_with("waiting for file descriptors"))
    })
    .await;
    let counts = engine.slot_counts();
    engine.cancel(waiting.id.as_str()).unwrap();
    let canceled = tokio::time::timeout(Duration::from_secs(30), engine.wait(&waiting.id))
        .await
        .expect("the waiting task ends")
        .unwrap();
    let after = engine.slot_counts();
    set_soft_nofile(original);
    assert_eq!(
        counts,
        SlotCounts {
            running: 2,
            queued: 1
        }
    );
    assert_eq!(canceled.state, TaskState::Canceled, "{canceled:?}");
    assert_eq!(
        after,
        SlotCounts {
            running: 2,
            queued: 0
        }
    );

    for t in &hanging {
        engine.cancel(t.id.as_str()).unwrap();
        engine.wait(&t.id).await.unwrap();
    }
    assert_eq!(
        engine.slot_counts(),
        SlotCounts {
            running: 0,
            queued: 0
        }
    );
    engine.shutdown().await;
}
