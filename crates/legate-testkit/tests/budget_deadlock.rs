//! Found attacking admission: it took a running place (`max_running`) before it waited for
//! room, and a session kept for a task waiting for input is never stopped for room. With one
//! place, a new task waited for room holding it, and the reply to the waiting task, which
//! needs no new session and would free the only session, waited for the place: neither ever
//! ran. Room now comes before the place. Alone in its test binary (the limit is the
//! process's).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/limits.rs"]
mod limits;

use legate_core::{EventKind, TaskState};
use legate_engine::SubmitRequest;
use limits::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_to_a_waiting_task_is_not_starved_by_a_task_waiting_for_room() {
    let dir = tempfile::tempdir().unwrap();
    let engine = engine(dir.path(), 1);

    // A session for context c1, then a task of c1 waiting for input (its session kept).
    let mut first = SubmitRequest::new("write x.txt: 1");
    first.context_id = Some("c1".into());
    let first = engine.submit(first).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(60), engine.wait(&first.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    let mut ask = SubmitRequest::new("");
    ask.context_id = Some("c1".into());
    let asking = engine.submit_or_ask(ask).unwrap();
    assert_eq!(asking.state, TaskState::InputRequired);

    // No room for a new agent; a new task takes the only place and waits for room.
    let original = soft_nofile();
    set_soft_nofile(open_fds() + 20);
    let waiting = engine.submit(SubmitRequest::new("write y.txt: 1")).unwrap();
    until(&engine, &waiting.id, |e| {
        matches!(&e.kind, EventKind::Status { state: TaskState::Submitted, message: Some(m), .. }
            if m.starts_with("waiting for file descriptors"))
    })
    .await;

    // The reply continues c1's live session: it needs no new descriptors.
    engine.reply(asking.id.as_str(), "write z.txt: 1").unwrap();
    let replied = tokio::time::timeout(Duration::from_secs(30), engine.wait(&asking.id)).await;
    let _ = engine.cancel(waiting.id.as_str());
    // Control: once the task waiting for room is canceled (its place freed), the reply runs.
    let after = tokio::time::timeout(Duration::from_secs(30), engine.wait(&asking.id)).await;
    set_soft_nofile(original);
    let after = after.map(|t| t.unwrap().state);
    assert!(
        replied.is_ok(),
        "the reply never ran while the other task held the place; after canceling it: {after:?}"
    );
    engine.shutdown().await;
}
