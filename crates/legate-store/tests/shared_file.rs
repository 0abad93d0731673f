//! Several `Store`s on one file, standing in for several `legate` processes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{Error, ErrorCode, EventKind, Task, TaskId, TaskState};
use legate_store::{SCHEMA_VERSION, Store, TaskFilter};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Instant;

fn task(id: &str) -> Task {
    Task::new(id, "ctx", "agent", "secret prompt text").with_timeout_secs(60)
}

fn submitted() -> EventKind {
    EventKind::Status {
        state: TaskState::Submitted,
        message: None,
        error: None,
    }
}

fn batch(tag: &str, n: usize) -> Vec<EventKind> {
    (0..n)
        .map(|i| EventKind::Message {
            text: format!("{tag} {i}"),
        })
        .collect()
}

/// Reads `PRAGMA user_version` from the file header (bytes 60..64, big-endian).
fn user_version(path: &Path) -> i64 {
    let bytes = std::fs::read(path).unwrap();
    i64::from(u32::from_be_bytes(bytes[60..64].try_into().unwrap()))
}

#[test]
fn reopening_keeps_data_and_does_not_migrate_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state/legate.db");
    let t = task("reopen-1");
    {
        let store = Store::open(&path).unwrap();
        store.insert_task(&t, &submitted()).unwrap();
        store.append_events(&t.id, &batch("a", 3)).unwrap();
    }
    for _ in 0..3 {
        let store = Store::open(&path).unwrap();
        assert_eq!(store.task(&t.id).unwrap(), Some(t.clone()));
        assert_eq!(store.last_seq(&t.id).unwrap(), 4);
    }
    // Checkpointed on close, so the header is current.
    assert_eq!(user_version(&path), i64::from(SCHEMA_VERSION));
}

#[test]
fn two_processes_opening_a_fresh_file_at_once_both_succeed() {
    for round in 0..5 {
        let dir = tempfile::tempdir().unwrap();
        let path = Arc::new(dir.path().join(format!("fresh-{round}.db")));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let path = Arc::clone(&path);
                thread::spawn(move || Store::open(&path).map(|_| ()))
            })
            .collect();
        for h in handles {
            h.join().unwrap().unwrap();
        }
        let store = Store::open(&path).unwrap();
        store.insert_task(&task("t"), &submitted()).unwrap();
    }
}

#[test]
fn a_reader_and_a_writer_on_one_file_never_see_busy() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legate.db");
    let writer = Store::open(&path).unwrap();
    let reader = Store::open(&path).unwrap();
    let t = task("rw-1");
    writer.insert_task(&t, &submitted()).unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let reading = {
        let done = Arc::clone(&done);
        let id = t.id.clone();
        thread::spawn(move || {
            let mut seen = 0u64;
            let mut reads = 0u32;
            while !done.load(Ordering::Acquire) || seen < 2001 {
                let events = reader.events(&id, seen, 500).unwrap();
                for e in &events {
                    assert_eq!(e.seq, seen + 1, "events arrive in order without gaps");
                    seen = e.seq;
                }
                reader.list_tasks(&TaskFilter::default()).unwrap();
                reader.find_task("rw-1").unwrap();
                reader.cancel_requests("r").unwrap();
                reads += 1;
            }
            (seen, reads)
        })
    };
    for i in 0..100 {
        writer
            .append_events(&t.id, &batch(&format!("b{i}"), 20))
            .unwrap();
    }
    done.store(true, Ordering::Release);
    let (seen, reads) = reading.join().unwrap();
    assert_eq!(seen, 2001);
    assert!(reads > 0);
}

#[test]
fn concurrent_appenders_on_two_connections_leave_no_gap() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legate.db");
    let a = Store::open(&path).unwrap();
    let b = Store::open(&path).unwrap();
    let t = task("gapless");
    a.insert_task(&t, &submitted()).unwrap();

    let run = |store: Store, tag: &'static str| {
        let id = t.id.clone();
        thread::spawn(move || {
            let mut seqs = Vec::new();
            for i in 0..100 {
                let stored = store
                    .append_events(&id, &batch(&format!("{tag}{i}"), 10))
                    .unwrap();
                let first = stored[0].seq;
                assert!(
                    stored.iter().zip(first..).all(|(e, n)| e.seq == n),
                    "a batch is contiguous"
                );
                seqs.extend(stored.iter().map(|e| e.seq));
            }
            seqs
        })
    };
    let ha = run(a.clone(), "a");
    let hb = run(b, "b");
    let mut all = ha.join().unwrap();
    all.extend(hb.join().unwrap());
    all.sort_unstable();
    assert_eq!(all, (2..=2001).collect::<Vec<u64>>());

    let stored = a.events(&t.id, 0, usize::MAX).unwrap();
    assert_eq!(stored.len(), 2001);
    assert!(stored.iter().zip(1..).all(|(e, n)| e.seq == n));
    assert_eq!(a.last_seq(&t.id).unwrap(), 2001);
}

#[test]
fn a_second_process_recovers_the_tasks_of_a_dead_runner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legate.db");
    let dead = Store::open(&path).unwrap();
    let mut running = task("run-1");
    running.state = TaskState::Working;
    dead.insert_task(&running, &submitted()).unwrap();
    dead.set_runner(&running.id, Some("pid-1")).unwrap();
    dead.insert_task(&task("queued-1"), &submitted()).unwrap();
    drop(dead);

    let next = Store::open(&path).unwrap();
    assert_eq!(next.unfinished_runners().unwrap(), ["pid-1"]);
    let error = Error::new(ErrorCode::ServerRestarted, "the server restarted.");
    let failed = next.fail_unfinished(Some("pid-1"), &error).unwrap();
    assert_eq!(failed, [running.id.clone()]);
    let orphaned = next.fail_unfinished(None, &error).unwrap();
    assert_eq!(orphaned, [TaskId("queued-1".into())]);
    assert!(next.unfinished_runners().unwrap().is_empty());
    let t = next.find_task("run-").unwrap();
    assert_eq!(t.state, TaskState::Failed);
    assert_eq!(t.error_code(), Some(ErrorCode::ServerRestarted));
    assert_eq!(next.last_seq(&t.id).unwrap(), 2);
}

#[test]
fn a_cancel_requested_by_one_process_is_seen_by_the_runner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legate.db");
    let server = Store::open(&path).unwrap();
    let cli = Store::open(&path).unwrap();
    let mut t = task("cancel-1");
    t.state = TaskState::Working;
    server.insert_task(&t, &submitted()).unwrap();
    server.set_runner(&t.id, Some("srv")).unwrap();
    assert!(cli.request_cancel(&t.id).unwrap());
    assert_eq!(server.cancel_requests("srv").unwrap(), [t.id.clone()]);
}

#[test]
fn a_cancel_and_the_end_of_a_task_are_ordered_across_processes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("legate.db");
    let (runner, canceller) = (Store::open(&path).unwrap(), Store::open(&path).unwrap());
    let end_as = |t: &Task, state| {
        let mut t = t.clone();
        t.state = state;
        Some((t, vec![submitted()]))
    };
    // A cancel that commits first is seen by the end, which may then end the task canceled.
    let first = task("0190-cancel-first");
    runner.insert_task(&first, &submitted()).unwrap();
    assert!(canceller.request_cancel(&first.id).unwrap());
    let (ended, events) = runner
        .end_task(&first.id, |stored, requested| {
            assert_eq!(stored.state, TaskState::Submitted);
            assert!(requested, "the end must see the cancel");
            end_as(&first, TaskState::Canceled)
        })
        .unwrap()
        .unwrap();
    assert_eq!(ended.state, TaskState::Canceled);
    assert_eq!(events.len(), 1);
    assert_eq!(
        canceller.task(&first.id).unwrap().unwrap().state,
        TaskState::Canceled
    );
    // An end that commits first: the cancel finds the task finished and says so, and a second
    // end that would overwrite the first is told the state and declines.
    let second = task("0190-end-first");
    runner.insert_task(&second, &submitted()).unwrap();
    runner
        .end_task(&second.id, |_, requested| {
            assert!(!requested);
            end_as(&second, TaskState::Completed)
        })
        .unwrap()
        .unwrap();
    assert!(!canceller.request_cancel(&second.id).unwrap());
    let again = canceller
        .end_task(&second.id, |stored, _| {
            assert_eq!(stored.state, TaskState::Completed);
            None
        })
        .unwrap();
    assert!(again.is_none());
    assert_eq!(
        runner.task(&second.id).unwrap().unwrap().state,
        TaskState::Completed
    );
    // A task that waits for input runs nothing: a cancel request is not recorded for it.
    let mut waiting = task("0190-waiting");
    waiting.state = TaskState::InputRequired;
    runner.insert_task(&waiting, &submitted()).unwrap();
    assert!(!canceller.request_cancel(&waiting.id).unwrap());
    assert_eq!(canceller.cancel_requested_at(&waiting.id).unwrap(), None);
    let missing = runner.end_task(&TaskId("nope".into()), |_, _| None);
    assert_eq!(missing.unwrap_err().code, ErrorCode::TaskNotFound);
}

#[test]
fn store_errors_never_carry_prompt_text() {
    let store = Store::open_in_memory().unwrap();
    let t = task("dup");
    store.insert_task(&t, &submitted()).unwrap();
    let err = store.insert_task(&t, &submitted()).unwrap_err();
    assert_eq!(err.code, ErrorCode::StoreError);
    assert!(!err.to_string().contains("secret"));
}

/// Not a benchmark: run with `--release --ignored --nocapture` to see the rate.
#[test]
#[ignore = "prints a rate; throughput is measured elsewhere"]
fn append_rate() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("legate.db")).unwrap();
    let t = task("rate");
    store.insert_task(&t, &submitted()).unwrap();
    let events = batch(
        "a fairly ordinary chunk of an agent's answer, about this long",
        100,
    );
    let start = Instant::now();
    let batches = 1000;
    for _ in 0..batches {
        store.append_events(&t.id, &events).unwrap();
    }
    let secs = start.elapsed().as_secs_f64();
    println!("{:.0} events/s", f64::from(batches * 100) / secs);
}
