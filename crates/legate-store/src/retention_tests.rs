#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use crate::tasks::tests::{submitted, task};
use crate::{ContextRecord, MessageClaim, MessageRecord, TaskFilter};
use legate_core::{EventKind, TaskState, Timestamp};

fn insert(store: &Store, id: &str, context: &str, created: i64, state: TaskState) {
    insert_task(store, id, context, created, state, |_| {});
}

fn insert_task(
    store: &Store,
    id: &str,
    context: &str,
    created: i64,
    state: TaskState,
    tune: impl FnOnce(&mut legate_core::Task),
) {
    let mut t = task(id, created);
    t.context_id = context.into();
    t.state = state;
    tune(&mut t);
    store.insert_task(&t, &submitted()).unwrap();
}

fn ids(store: &Store) -> Vec<String> {
    store
        .list_tasks(&TaskFilter::default())
        .unwrap()
        .into_iter()
        .map(|t| t.id.0)
        .collect()
}

fn context_with_sandbox(store: &Store, id: &str) -> PathBuf {
    let mut r = ContextRecord::new(id, "claude");
    let root = PathBuf::from(format!("/home/u/.legate/sandboxes/{id}-abcdef"));
    r.sandbox_root = Some(root.clone());
    store.put_context(&r).unwrap();
    root
}

fn message(store: &Store, context: &str, id: &str, task: Option<&str>, created: i64) {
    let claimed = store
        .claim_message(&MessageRecord {
            message_id: id.into(),
            context_id: context.into(),
            text: "hello".into(),
            task_id: task.map(|t| TaskId(t.into())),
            created_at: Timestamp(created),
        })
        .unwrap();
    assert_eq!(claimed, MessageClaim::Claimed);
}

fn messages_left(store: &Store) -> Vec<String> {
    store
        .read(|conn| {
            conn.prepare("SELECT message_id FROM messages ORDER BY message_id")
                .and_then(|mut st| {
                    st.query_map([], |r| r.get::<_, String>(0))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("test")
        })
        .unwrap()
}

#[test]
fn prune_keeps_the_newest_finished_and_every_open_task() {
    let store = Store::open_in_memory().unwrap();
    insert(&store, "p1", "ctx", 1, TaskState::Completed);
    insert(&store, "p2", "ctx", 2, TaskState::Failed);
    insert(&store, "p3", "ctx", 3, TaskState::Working);
    insert(&store, "p4", "ctx", 4, TaskState::Canceled);
    insert(&store, "p5", "ctx", 5, TaskState::Completed);
    store
        .append_events(
            &TaskId("p1".into()),
            &[EventKind::Message { text: "x".into() }],
        )
        .unwrap();

    assert_eq!(store.prune_finished(2).unwrap(), 2);
    assert_eq!(ids(&store), ["p5", "p4", "p3"]);
    assert!(
        store
            .events(&TaskId("p1".into()), 0, 10)
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.last_seq(&TaskId("p2".into())).unwrap(), 0);
    assert_eq!(store.prune_finished(2).unwrap(), 0);
    assert_eq!(store.prune_finished(0).unwrap(), 2);
    assert_eq!(
        store.task(&TaskId("p3".into())).unwrap().unwrap().state,
        TaskState::Working
    );
}

#[test]
fn the_candidates_are_the_finished_tasks_beyond_the_newest_and_only_they_are_deleted() {
    let store = Store::open_in_memory().unwrap();
    insert(&store, "a", "c1", 1, TaskState::Completed);
    insert(&store, "b", "c2", 2, TaskState::InputRequired);
    insert(&store, "c", "c3", 3, TaskState::Failed);
    insert(&store, "d", "c4", 4, TaskState::Completed);
    let candidates = store.prunable(1).unwrap();
    assert_eq!(candidates, [TaskId("a".into()), TaskId("c".into())]);
    // The caller spares `c` (it holds its copy, say): only `a` goes, and an open task named
    // is not deleted either.
    let pruned = store
        .prune_tasks(&[TaskId("a".into()), TaskId("b".into())], 1)
        .unwrap();
    assert_eq!(pruned.tasks, 1);
    assert_eq!(ids(&store), ["d", "c", "b"]);
}

#[test]
fn a_conversation_and_its_messages_go_only_when_no_task_is_left_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("legate.db")).unwrap();
    // `gone`: every task pruned. `open`: its newest task still runs. `kept`: the newest.
    insert(&store, "g1", "gone", 10, TaskState::Completed);
    insert(&store, "g2", "gone", 11, TaskState::Completed);
    insert(&store, "o1", "open", 12, TaskState::Completed);
    insert(&store, "o2", "open", 13, TaskState::Working);
    insert(&store, "k1", "kept", 14, TaskState::Completed);
    insert(&store, "k2", "kept", 15, TaskState::Completed);
    let gone = context_with_sandbox(&store, "gone");
    context_with_sandbox(&store, "open");
    context_with_sandbox(&store, "kept");
    // No task is in these: one an earlier prune left, one just written (not retention's).
    let mut left = ContextRecord::new("left", "claude");
    left.updated_at = Timestamp(9);
    store.put_context(&left).unwrap();
    store
        .put_context(&ContextRecord::new("fresh", "claude"))
        .unwrap();
    message(&store, "gone", "m-bound", Some("g2"), 11);
    message(&store, "gone", "m-left", None, 9); // a claim a crash left unbound
    message(&store, "open", "m-open", Some("o1"), 12);
    message(&store, "kept", "m-kept", Some("k2"), 15);
    // Claimed a moment ago in a conversation with no task yet: being queued now.
    message(&store, "new", "m-queued", None, Timestamp::now().0);

    let candidates = store.prunable(2).unwrap();
    assert_eq!(candidates.len(), 3, "{candidates:?}");
    let pruned = store.prune_tasks(&candidates, 2).unwrap();
    assert_eq!(
        pruned,
        Pruned {
            tasks: 3,
            contexts: 2,
            messages: 2,
            comparisons: 0,
            sandboxes: vec![gone],
        }
    );
    assert_eq!(ids(&store), ["k2", "k1", "o2"]);
    assert_eq!(store.context("gone").unwrap(), None);
    assert_eq!(
        store.context("left").unwrap(),
        None,
        "left by an earlier prune"
    );
    assert!(
        store.context("fresh").unwrap().is_some(),
        "not past retention"
    );
    assert!(
        store.context("open").unwrap().is_some(),
        "a task still runs in it"
    );
    assert!(store.context("kept").unwrap().is_some());
    assert_eq!(messages_left(&store), ["m-kept", "m-open", "m-queued"]);
    // Nothing more to do.
    assert_eq!(store.prune_tasks(&[], 2).unwrap(), Pruned::default());
}

#[test]
fn a_groups_tasks_are_kept_until_the_group_ends() {
    let store = Store::open_in_memory().unwrap();
    let mut g = crate::groups::tests::group("g1");
    g.state = "running".into();
    store
        .insert_group(&g, &[crate::groups::tests::node("a", 0)])
        .unwrap();
    let in_group = |t: &mut legate_core::Task| {
        t.controls.group = Some(legate_core::GroupNode {
            group_id: "g1".into(),
            node_id: "a".into(),
        });
    };
    insert_task(&store, "node", "c1", 1, TaskState::Completed, in_group);
    insert(&store, "plain", "c2", 2, TaskState::Completed);
    insert(&store, "newest", "c3", 3, TaskState::Completed);
    assert_eq!(store.prunable(1).unwrap(), [TaskId("plain".into())]);
    // Paused is not ended either.
    store
        .set_group_state("g1", &[], "paused", None, None)
        .unwrap();
    assert_eq!(store.prunable(1).unwrap(), [TaskId("plain".into())]);
    // Even named to prune_tasks, a running group's task stays.
    store
        .prune_tasks(&[TaskId("node".into()), TaskId("plain".into())], 1)
        .unwrap();
    assert_eq!(ids(&store), ["newest", "node"]);
    // Canceled, but a node still running: an engine continuing the group settles it from
    // its task, which must still be there.
    store
        .set_group_state("g1", &[], "canceled", None, None)
        .unwrap();
    let mut running = crate::groups::tests::node("a", 0);
    running.state = "running".into();
    assert!(store.move_node("g1", &["pending"], &running).unwrap());
    assert!(store.prunable(1).unwrap().is_empty());
    running.state = "canceled".into();
    assert!(store.move_node("g1", &["running"], &running).unwrap());
    assert_eq!(store.prunable(1).unwrap(), [TaskId("node".into())]);
}

#[test]
fn a_task_spared_for_good_does_not_pin_what_the_kept_tasks_let_go() {
    let store = Store::open_in_memory().unwrap();
    // A copy task spared while its conversation has an open task: old, and staying.
    insert_task(&store, "spared", "held", 1, TaskState::Completed, |t| {
        t.workspace = WorkspaceKind::Copy;
    });
    insert(&store, "open", "held", 2, TaskState::Working);
    // A message never bound to a task, in a conversation no task is in, older than the kept
    // task but younger than the spared one.
    message(&store, "nowhere", "m-old", None, 5);
    insert(&store, "kept", "c", 10, TaskState::Completed);
    store.prune_tasks(&[], 1).unwrap();
    assert_eq!(messages_left(&store), Vec::<String>::new());
    assert_eq!(ids(&store), ["kept", "open", "spared"]);
}

#[test]
fn a_copy_task_is_kept_while_its_conversation_has_an_open_task() {
    let store = Store::open_in_memory().unwrap();
    let copy = |t: &mut legate_core::Task| t.workspace = WorkspaceKind::Copy;
    insert_task(&store, "first", "copy", 1, TaskState::Completed, copy);
    insert_task(&store, "next", "copy", 2, TaskState::Submitted, copy);
    insert(&store, "other", "elsewhere", 3, TaskState::Completed);
    insert(&store, "newest", "elsewhere", 4, TaskState::Completed);
    assert_eq!(store.prunable(1).unwrap(), [TaskId("other".into())]);
    // Named anyway, it is still not deleted.
    let pruned = store
        .prune_tasks(&[TaskId("first".into()), TaskId("other".into())], 1)
        .unwrap();
    assert_eq!(pruned.tasks, 1);
    assert_eq!(ids(&store), ["newest", "next", "first"]);
    let mut next = store.task(&TaskId("next".into())).unwrap().unwrap();
    next.state = TaskState::Completed;
    store.update_task(&next, &[]).unwrap();
    assert_eq!(store.prune_finished(1).unwrap(), 2);
    assert_eq!(ids(&store), ["newest"]);
}

#[test]
fn a_comparison_goes_once_every_task_it_names_is_gone_and_it_is_past_retention() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("legate.db")).unwrap();
    let review = |cmp: &'static str| {
        move |t: &mut legate_core::Task| t.controls.comparison_id = Some(cmp.into())
    };
    insert(&store, "src", "s", 10, TaskState::Completed);
    insert_task(
        &store,
        "r1",
        "r1",
        12,
        TaskState::Completed,
        review("cmp-1"),
    );
    insert_task(&store, "r2", "r2", 13, TaskState::Failed, review("cmp-1"));
    insert_task(
        &store,
        "r3",
        "r3",
        15,
        TaskState::Completed,
        review("cmp-2"),
    );
    insert(&store, "k1", "k1", 20, TaskState::Completed);
    insert(&store, "k2", "k2", 21, TaskState::Completed);
    let doc = serde_json::json!({});
    for (id, source, created) in [
        ("cmp-1", "src", 11), // its source and both reviews pruned
        ("cmp-2", "src", 14), // its review r3 is kept
        ("cmp-3", "src", 30), // newer than every task kept: its reviews are being started
        ("cmp-4", "k1", 5),   // its source is kept
    ] {
        store.put_comparison(id, source, &doc).unwrap();
        store
            .write("test", |tx| {
                tx.execute(
                    "UPDATE comparisons SET created_at = ?2 WHERE id = ?1",
                    params![id, created],
                )
                .ctx("test")
            })
            .unwrap();
        store
            .insert_call_task(id, "compare", crate::CallTaskState::Answered, None, None)
            .unwrap();
    }

    let pruned = store.prune_tasks(&store.prunable(3).unwrap(), 3).unwrap();
    assert_eq!((pruned.tasks, pruned.comparisons), (3, 1));
    assert_eq!(ids(&store), ["k2", "k1", "r3"]);
    let err = store.comparison("cmp-1").unwrap_err();
    assert_eq!(err.code, legate_core::ErrorCode::ComparisonNotFound);
    for kept in ["cmp-2", "cmp-3", "cmp-4"] {
        assert!(store.comparison(kept).is_ok(), "{kept}");
        assert!(store.call_task(kept).unwrap().is_some(), "{kept}");
    }
    assert!(
        store.call_task("cmp-1").unwrap().is_none(),
        "its call goes with it"
    );

    // With no finished task kept, nothing marks what is past retention: no comparison goes.
    assert_eq!(store.prune_finished(0).unwrap(), 3);
    for kept in ["cmp-2", "cmp-3", "cmp-4"] {
        assert!(store.comparison(kept).is_ok(), "{kept}");
    }
}

#[test]
fn prune_deletes_the_calls_answered_as_tasks_whose_work_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("legate.db")).unwrap();
    use crate::CallTaskState::{Answered, Completed, Running};
    insert(&store, "old", "ctx", 1, TaskState::Completed);
    insert(&store, "new", "ctx", 2, TaskState::Completed);
    for (id, tool, state, runner) in [
        ("old", "run", Answered, None),
        ("new", "send_message", Answered, None),
        ("g-gone", "group_start", Answered, None),
        ("op-1", "test", Completed, Some("r")),
        ("op-2", "integrate", Completed, Some("r")),
        ("op-3", "test", Running, Some("r")),
    ] {
        store
            .insert_call_task(id, tool, state, None, runner)
            .unwrap();
    }
    assert_eq!(store.prune_finished(1).unwrap(), 1);
    let left: Vec<bool> = ["old", "new", "g-gone", "op-1", "op-2", "op-3"]
        .iter()
        .map(|id| store.call_task(id).unwrap().is_some())
        .collect();
    // op-1 and op-2 were recorded in the same millisecond or later: the newer is kept.
    assert_eq!(left[..3], [false, true, false]);
    assert_eq!(left[3..].iter().filter(|k| **k).count(), 2, "{left:?}");
    assert!(left[5], "a running op is never pruned");
}
