//! Task retention in a running engine, never restarted: with a small `retention` and a short
//! `retention_interval`, the periodic pass prunes the finished tasks beyond the newest, their
//! conversations' rows, messages and sandboxes, removes a sandbox no conversation records,
//! follows no link planted in a sandbox, and spares a task whose copy another operation holds.
//! The real scripted agent (revisor) on real pipes, a real SQLite store and real directories.
//! Every wait is on the store or the disk, retried under a generous deadline
//! (`legate_testkit::harness::until_holds`); no fixed sleep is an assertion.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_core::{Task, TaskId, TaskState};
use legate_engine::{MessageRequest, SubmitRequest, TaskFilter};
use legate_store::Store;
use legate_testkit::EngineHarness;
use legate_testkit::harness::until_holds;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// How long a pass may take to come, at most.
const DEADLINE: Duration = Duration::from_secs(60);

fn harness(retention: usize) -> EngineHarness {
    harness_keeping_copies(retention, Duration::ZERO)
}

/// [`harness`] whose finished copies are kept `copies` untouched (`[copies]
/// retention_hours`); the copy sweep's first pass after start is a minute away, longer than
/// these tests.
fn harness_keeping_copies(retention: usize, copies: Duration) -> EngineHarness {
    EngineHarness::builder()
        .project(&[("a.txt", "alpha\n")])
        .config(move |c| {
            c.retention = retention;
            c.retention_interval = Duration::from_millis(50);
            c.review.retention = copies;
        })
        .start()
}

fn in_context(context: &str, prompt: &str) -> SubmitRequest {
    let mut req = SubmitRequest::new(prompt);
    req.context_id = Some(context.into());
    req
}

fn task_ids(h: &EngineHarness) -> Vec<TaskId> {
    h.engine
        .tasks(&TaskFilter {
            limit: 1000,
            ..TaskFilter::default()
        })
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect()
}

fn store(h: &EngineHarness) -> Store {
    Store::open(&h.home().join("legate.db")).unwrap()
}

/// A directory outside Legate's home with one file, for a link to point at.
fn precious(h: &EngineHarness) -> PathBuf {
    let dir = h.base().join("precious");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("keep.txt"), "mine\n").unwrap();
    dir
}

/// Sets `dir`'s modification time an hour back, as a sandbox left long ago would have.
fn age(dir: &Path) {
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::open(dir)
        .unwrap()
        .set_modified(an_hour_ago)
        .unwrap();
}

/// One conversation: a first task, then a message as its second turn.
struct Conversation {
    context: String,
    first: Task,
    second: Task,
    message_id: String,
}

async fn converse(h: &EngineHarness, i: usize) -> Conversation {
    let context = format!("ctx-{i}");
    let first = h
        .run(in_context(&context, &format!("write a.txt: {i}")))
        .await;
    assert_eq!(first.state, TaskState::Completed, "{:?}", first.error);
    let message_id = format!("m-{i}");
    let receipt = h
        .engine
        .send_message(MessageRequest {
            context_id: context.clone(),
            message_id: message_id.clone(),
            text: format!("write b.txt: {i}"),
            mode: None,
        })
        .unwrap();
    let second = h.wait(&receipt.task.id).await;
    assert_eq!(second.state, TaskState::Completed, "{:?}", second.error);
    assert_eq!(second.root, first.root, "one sandbox per conversation");
    Conversation {
        context,
        first,
        second,
        message_id,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_engine_prunes_old_tasks_with_their_conversations_and_sandboxes() {
    let h = harness(2);
    let outside = precious(&h);
    let mut talks = Vec::new();
    for i in 0..4 {
        let talk = converse(&h, i).await;
        if i == 0 {
            // The agent leaves a link out of its sandbox; removing the sandbox must not follow it.
            let root = talk.first.root.clone().unwrap();
            std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        }
        talks.push(talk);
    }
    let newest = talks.last().unwrap();
    let kept = vec![newest.second.id.clone(), newest.first.id.clone()];
    let old_roots: Vec<PathBuf> = talks[..3]
        .iter()
        .map(|t| t.first.root.clone().unwrap())
        .collect();
    let pruned = until_holds(DEADLINE, || {
        task_ids(&h) == kept && old_roots.iter().all(|r| !r.exists())
    })
    .await;
    assert!(pruned, "left: {:?}", task_ids(&h));

    let store = store(&h);
    for talk in &talks[..3] {
        for task in [&talk.first, &talk.second] {
            assert!(h.engine.events(&task.id, 0, 10).unwrap().is_empty());
        }
        assert_eq!(
            store.context(&talk.context).unwrap(),
            None,
            "{}",
            talk.context
        );
        assert_eq!(
            store.message(&talk.context, &talk.message_id).unwrap(),
            None,
            "{}",
            talk.message_id
        );
    }
    let root = newest.first.root.clone().unwrap();
    assert!(root.join("b.txt").is_file(), "the newest sandbox is kept");
    let context = store.context(&newest.context).unwrap().unwrap();
    assert_eq!(context.sandbox_root.as_deref(), Some(root.as_path()));
    let message = store
        .message(&newest.context, &newest.message_id)
        .unwrap()
        .unwrap();
    assert_eq!(message.task_id.as_ref(), Some(&newest.second.id));
    assert_eq!(
        std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
        "mine\n",
        "the link's target survives"
    );

    // The pruned conversation's id starts a new one: a new sandbox, and not the old agent
    // session, whose directory is gone.
    let again = h
        .run(in_context(&talks[0].context, "write c.txt: again"))
        .await;
    assert_eq!(again.state, TaskState::Completed, "{:?}", again.error);
    let new_root = again.root.clone().unwrap();
    assert_ne!(Some(&new_root), talks[0].first.root.as_ref());
    assert!(new_root.join("c.txt").is_file());
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sandbox_no_conversation_records_is_removed_without_following_its_links() {
    let h = harness(1000);
    let outside = precious(&h);
    let sandboxes = h.home().join("sandboxes");
    std::fs::create_dir_all(&sandboxes).unwrap();
    // Made a moment ago, as a turn makes its sandbox just before recording it: kept.
    let young = sandboxes.join("young000-abcdef");
    std::fs::create_dir(&young).unwrap();
    // Not named as Legate names sandboxes: never touched, however old.
    let foreign = sandboxes.join("not-a-sandbox-here");
    std::fs::create_dir(&foreign).unwrap();
    age(&foreign);
    // Left by a crash between deleting its conversation's row and removing it.
    let orphan = sandboxes.join("orphan00-abcdef");
    std::fs::create_dir_all(orphan.join("deep")).unwrap();
    std::fs::write(orphan.join("deep/work.txt"), "agent's\n").unwrap();
    std::os::unix::fs::symlink(&outside, orphan.join("escape")).unwrap();
    std::os::unix::fs::symlink(outside.join("keep.txt"), orphan.join("deep/file-link")).unwrap();
    age(&orphan);

    let removed = until_holds(DEADLINE, || !orphan.exists()).await;
    assert!(removed, "the unrecorded sandbox is still there");
    assert_eq!(
        std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
        "mine\n"
    );
    assert!(young.is_dir(), "a new sandbox may be about to be recorded");
    assert!(foreign.is_dir(), "not a sandbox Legate made");
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_within_its_own_retention_is_not_pruned_with_its_task() {
    let h = harness_keeping_copies(1, Duration::from_secs(3600));
    let copy = h.run(h.on_copy("write b.txt: x")).await;
    assert_eq!(copy.state, TaskState::Completed, "{:?}", copy.error);
    let older = h.run(in_context("plain", "write a.txt: 1")).await;
    let newest = h.run(in_context("plain", "write a.txt: 2")).await;
    // `older` goes; the copy task, older still, is kept: its copy is within `[copies]
    // retention_hours`, and its review may still come.
    let pruned = until_holds(DEADLINE, || !task_ids(&h).contains(&older.id)).await;
    assert!(pruned, "left: {:?}", task_ids(&h));
    assert_eq!(task_ids(&h), [newest.id.clone(), copy.id.clone()]);
    assert!(h.home().join("copies").join(copy.id.as_str()).is_dir());
    let preview = h.engine.reviews().preview(copy.id.as_str()).await.unwrap();
    assert!(!preview.patch.sha256.is_empty());
    h.engine.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_whose_copy_is_in_use_is_kept_past_retention_until_it_is_let_go() {
    let h = harness(1);
    let copy = h.run(h.on_copy("write b.txt: x")).await;
    assert_eq!(copy.state, TaskState::Completed, "{:?}", copy.error);
    // An operation holds the copy (as a verification, a test or an integration would).
    let baseline = legate_workspace::Baseline::open(
        &h.home().join("baselines").join(copy.id.as_str()),
        &h.home().join("copies").join(copy.id.as_str()),
    )
    .unwrap();
    let lock = baseline.lock().unwrap();
    let older = h.run(in_context("plain", "write a.txt: 1")).await;
    let newest = h.run(in_context("plain", "write a.txt: 2")).await;
    // `older` and the copy task are both past retention; a pass that pruned `older` looked
    // at the copy task too (it is older still).
    let pruned = until_holds(DEADLINE, || !task_ids(&h).contains(&older.id)).await;
    assert!(pruned, "left: {:?}", task_ids(&h));
    assert_eq!(task_ids(&h), [newest.id.clone(), copy.id.clone()]);

    drop(lock);
    let pruned = until_holds(DEADLINE, || task_ids(&h) == [newest.id.clone()]).await;
    assert!(pruned, "left: {:?}", task_ids(&h));
    h.engine.shutdown().await;
}
