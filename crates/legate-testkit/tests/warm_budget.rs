//! Warm sessions never hold a task back: under a descriptor limit with no room for another
//! agent, a task that cannot take a warm session (it works in a shared directory) gets its
//! room by stopping the warm sessions, and runs. Its own binary: it lowers this process's
//! descriptor limit, as a real process would (`prlimit`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "common/limits.rs"]
#[allow(dead_code)] // its engine: this suite starts its own, with warm sessions
mod limits;

use legate_core::TaskState;
use legate_engine::{SubmitRequest, WorkspaceRequest};
use legate_testkit::EngineHarness;
use limits::{open_fds, set_soft_nofile, soft_nofile};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_short_of_room_stops_warm_sessions_and_runs() {
    let dir = tempfile::tempdir().unwrap();
    let engine = EngineHarness::builder()
        .config(|c| {
            c.warm.insert("agent".into(), 2);
            c.max_idle_sessions = 64;
        })
        .engine_in(dir.path());
    let deadline = Instant::now() + Duration::from_secs(60);
    while engine.warm_ready("agent") < 2 {
        assert!(
            Instant::now() < deadline,
            "the warm sessions never became ready"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let shared = std::fs::canonicalize(dir.path()).unwrap().join("shared");
    std::fs::create_dir_all(&shared).unwrap();

    // Room for 20 more descriptors: less than a new agent's 8 plus the reserve of 16, and no
    // idle session of a context to stop: only the warm sessions can make room.
    let restore = soft_nofile();
    set_soft_nofile(open_fds() + 20);
    let mut req = SubmitRequest::new("!say ran");
    req.agent = Some("agent".into());
    req.workspace = WorkspaceRequest::Shared(shared);
    let task = engine.submit(req).unwrap();
    let done = tokio::time::timeout(Duration::from_secs(60), engine.wait(&task.id)).await;
    set_soft_nofile(restore);
    let done = done
        .expect("the task was held back by warm sessions")
        .unwrap();
    assert_eq!(done.state, TaskState::Completed, "{done:?}");
    assert!(
        engine.warm_ready("agent") < 2,
        "no warm session was stopped to make room"
    );
    engine.shutdown().await;
}
