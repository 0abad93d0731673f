//! Admission against the descriptor limit, on the engine with the scripted agent: with this
//! test process's own `RLIMIT_NOFILE` lowered (by `prlimit`, a real process setting it) so
//! that two running agents leave no room for a third, a new task waits `submitted` with an
//! event saying why, and starts and completes once the running ones are canceled. Alone in its
//! test binary: the limit is the whole process's.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/limits.rs"]
mod limits;

use legate_core::{EventKind, TaskState};
use legate_engine::SubmitRequest;
use limits::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_without_room_waits_submitted_and_starts_when_room_is_freed() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 4);

    let (hanging, original) = two_busy_agents_and_no_room(&engine).await;

    let waiting = engine.submit(SubmitRequest::new("write x.txt: 1")).unwrap();
    let said = until(&engine, &waiting.id, |e| {
        matches!(&e.kind, EventKind::Status { state: TaskState::Submitted, message: Some(m), .. }
            if m.starts_with("waiting for file descriptors"))
    })
    .await;
    assert!(
        !said.iter().any(|e| matches!(
            e.kind,
            EventKind::Status {
                state: TaskState::Working,
                ..
            }
        )),
        "{said:?}"
    );
    let stored = engine.task(waiting.id.as_str()).unwrap();
    assert_eq!(stored.state, TaskState::Submitted);
    assert!(
        stored
            .status_message
            .as_deref()
            .is_some_and(|m| m.contains("file descriptors")),
        "{stored:?}"
    );

    // Freeing room (the running tasks end, their agents stop) lets it start and complete.
    for t in &hanging {
        engine.cancel(t.id.as_str()).unwrap();
    }
    let done = tokio::time::timeout(Duration::from_secs(60), engine.wait(&waiting.id))
        .await
        .expect("the waiting task ends")
        .unwrap();
    set_soft_nofile(original);
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert_eq!(done.status_message, None, "{done:?}");
    // A canceled task's agent is stopped (freeing its room) before its end is stored, so the
    // waiting task may finish first: wait for each end rather than read it at once.
    for t in &hanging {
        let ended = tokio::time::timeout(Duration::from_secs(60), engine.wait(&t.id))
            .await
            .expect("the canceled task ends")
            .unwrap();
        assert_eq!(ended.state, TaskState::Canceled, "{ended:?}");
    }
    engine.shutdown().await;
}
