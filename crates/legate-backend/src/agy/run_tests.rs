//! A run's ending against an agent that holds on: a leader traced by a process of its own.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::marked::tests::{TRACED_LEADER, Tracer, python3, tracer};

/// A stopped run whose leader a hidden process traces ends all the same, within its
/// bounds: the leader is killed but cannot be reaped, so the run says its status is unknown
/// and its cleanup unverified instead of waiting for ever; the prompt's writer, blocked on a
/// stdin the tracer holds and nobody reads, is given up and said. Before `REAP`, the run
/// waited on the leader for as long as the tracer lived.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_whose_leader_is_held_by_a_tracer_still_ends() {
    let Some(python) = python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("tracer");
    let spec = RunSpec {
        exe: python,
        args: vec!["-c".into(), TRACED_LEADER.into(), state.clone().into()],
        env: Vec::new(),
        cwd: dir.path().to_path_buf(),
        // More than any pipe holds: the writer waits on a reader that never comes.
        prompt: "x".repeat(8 << 20),
        resumed: false,
        kill_grace: Duration::from_millis(200),
        marker: crate::cleanup::new_marker(),
        confinement: None,
        egress: None,
    };
    let (sink, _events) = EventSink::channel();
    let (stop, stopped) = watch::channel(false);
    let run = tokio::spawn(run(spec, sink, stopped));
    let Some(pid) = tracer(&state).await else {
        stop.send_replace(true);
        return;
    };
    let _tracer = Tracer(pid);
    stop.send_replace(true);
    let end = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the run ended")
        .unwrap()
        .unwrap();
    assert!(end.stopped);
    assert_eq!(end.status.map(|s| s.to_string()), None);
    assert!(!end.cleanup.verified, "{:?}", end.cleanup);
    assert_eq!(
        end.input_error.map(|e| e.kind()),
        Some(std::io::ErrorKind::TimedOut)
    );
}
