//! A run's ending against an agent that holds on: a leader traced by a process of its own,
//! or with a thread that asked Legate to trace it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::marked::tests::{KillAtEnd, TRACED_LEADER, TRACED_THREAD, python3, tracer};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::time::Instant;

/// A run of `python -c script <state>` in `state`'s directory, unconfined (confinement's PID
/// namespace would end what these tests leave), with a prompt of 8 MiB: more than any pipe
/// holds, so the writer waits on a reader that never comes.
fn unconfined(python: PathBuf, script: &str, state: &Path) -> RunSpec {
    RunSpec {
        exe: python,
        args: vec!["-c".into(), script.into(), state.into()],
        env: Vec::new(),
        cwd: state.parent().unwrap().to_path_buf(),
        prompt: "x".repeat(8 << 20),
        resumed: false,
        kill_grace: Duration::from_millis(200),
        marker: crate::cleanup::new_marker(),
        confinement: None,
        egress: None,
    }
}

/// A run of `script` (`unconfined`), started, once it wrote the pid its state file names
/// (`tracer`: `None` where tracing is refused), with the sender that stops it.
async fn started(
    python: PathBuf,
    script: &str,
    state: &Path,
) -> (
    tokio::task::JoinHandle<Result<RunEnd, Error>>,
    watch::Sender<bool>,
    Option<i32>,
) {
    let spec = unconfined(python, script, state);
    let (sink, _events) = EventSink::channel();
    let (stop, stopped) = watch::channel(false);
    let run = tokio::spawn(run(spec, sink, stopped));
    let pid = tracer(state).await;
    (run, stop, pid)
}

/// What `run` ended with, within 30 s.
async fn ended(run: tokio::task::JoinHandle<Result<RunEnd, Error>>) -> RunEnd {
    tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("the run ended")
        .unwrap()
        .unwrap()
}

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
    let (run, stop, pid) = started(python, TRACED_LEADER, &dir.path().join("tracer")).await;
    let Some(pid) = pid else {
        stop.send_replace(true);
        return;
    };
    let held = KillAtEnd(pid);
    stop.send_replace(true);
    let end = ended(run).await;
    assert!(end.stopped);
    assert_eq!(end.status.map(|s| s.to_string()), None);
    assert!(!end.cleanup.verified, "{:?}", end.cleanup);
    assert_eq!(
        end.input_error.map(|e| e.kind()),
        Some(std::io::ErrorKind::TimedOut)
    );
    // Held, the leader keeps the run alive to cleanup; let go, it is gone. The tracer's end
    // shows only in `/proc`: it is read until then, the pause pacing the reads.
    assert!(end.processes.alive());
    drop(held);
    let began = Instant::now();
    while end.processes.alive() {
        assert!(began.elapsed() < Duration::from_secs(10), "still held");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A leader that leaves behind a process hidden from cleanup (a new session, no
/// environment, so no marker) holding agy's stdin, and exits: the child it forks writes its
/// pid to the file named by the leader's first argument, then sleeps a minute (longer than
/// the run's bounds; ended at the test's end, or on its own if the test fails first)
/// without reading.
const STDIN_HOLDER: &str = "import os, sys, time\n\
                            if os.fork() == 0:\n\
                            \x20   os.setsid()\n\
                            \x20   os.execve(sys.executable, [sys.executable, '-c', \
                            'import os, sys, time\\n\
                            open(sys.argv[1] + \".tmp\", \"w\").write(\"ok %d\" % os.getpid())\\n\
                            os.rename(sys.argv[1] + \".tmp\", sys.argv[1])\\n\
                            time.sleep(60)', sys.argv[1]], {})\n\
                            while not os.path.exists(sys.argv[1]):\n\
                            \x20   time.sleep(0.01)\n";

/// A run whose leader exits on its own, its prompt unread, while a process cleanup cannot
/// find holds its stdin: the writer, still blocked, is given up, and that holder is
/// evidence enough that the cleanup is not verified (the group and the marker show
/// nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdin_held_by_a_hidden_process_leaves_the_cleanup_unverified() {
    let Some(python) = python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("holder");
    let spec = unconfined(python, STDIN_HOLDER, &state);
    let (sink, _events) = EventSink::channel();
    let (_stop, stopped) = watch::channel(false);
    let end = tokio::time::timeout(Duration::from_secs(30), run(spec, sink, stopped))
        .await
        .expect("the run ended")
        .unwrap();
    let text = std::fs::read_to_string(&state).unwrap();
    let _holder = KillAtEnd(text.strip_prefix("ok ").unwrap().parse().unwrap());
    assert!(!end.stopped);
    assert_eq!(end.status.map(|s| s.code()), Some(Some(0)));
    assert!(!end.processes.alive());
    assert!(!end.cleanup.verified, "{:?}", end.cleanup);
    assert_eq!(
        end.input_error.map(|e| e.kind()),
        Some(std::io::ErrorKind::TimedOut)
    );
}

/// A stopped run whose leader has a thread that asked Legate to trace it: the leader is
/// ended and reaped (the traced thread with it), so the run ends at once with the signal's
/// status and a verified cleanup. Before, nothing reaped the traced thread, the leader's exit
/// never came, and after `REAP` the run said its status was unknown, its cleanup unverified,
/// and left both as zombies for as long as Legate ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_run_whose_leader_has_a_thread_traced_here_is_reaped() {
    let Some(python) = python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (run, stop, traced) = started(python, TRACED_THREAD, &dir.path().join("traced")).await;
    stop.send_replace(true);
    let end = ended(run).await;
    assert!(end.stopped);
    let Some(leader) = traced else {
        return;
    };
    // Python dies of the `SIGINT` (or of the `SIGKILL` after it): either way, a status.
    let signal = end.status.and_then(|s| s.signal());
    assert!(
        matches!(signal, Some(libc::SIGINT | libc::SIGKILL)),
        "{signal:?}"
    );
    assert!(end.cleanup.verified, "{:?}", end.cleanup);
    assert!(end.input_error.is_none(), "{:?}", end.input_error);
    assert!(!end.processes.alive());
    assert!(!Path::new(&format!("/proc/{leader}")).exists(), "reaped");
}

/// A run whose leader, with a thread traced by Legate, exits on its own ends then, with its
/// exit code, instead of waiting for its timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_leader_has_a_thread_traced_here_ends_when_the_leader_exits() {
    let Some(python) = python3() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("traced");
    let mut spec = unconfined(python, TRACED_THREAD, &state);
    spec.args.push("3".into());
    let (sink, _events) = EventSink::channel();
    let (_stop, stopped) = watch::channel(false);
    let end = tokio::time::timeout(Duration::from_secs(30), run(spec, sink, stopped))
        .await
        .expect("the run ended")
        .unwrap();
    assert!(!end.stopped);
    assert_eq!(end.status.map(|s| s.code()), Some(Some(3)));
    assert!(end.cleanup.verified, "{:?}", end.cleanup);
    assert!(!end.processes.alive());
}
