//! What lets several processes share tasks and a restart lose nothing: which engine instance
//! (runner) runs a task, cancel requests left for that runner, and failing the unfinished
//! tasks of a runner that died. Pruning old finished tasks is `retention`'s.
//!
//! A task is *unfinished* while its state is not terminal (`submitted`, `working`,
//! `input-required`). Only this module writes the `runner` and `cancel_requested_at`
//! columns.

use crate::Store;
use crate::approvals::expire_pending_in;
use crate::events::append_in;
use crate::sql::{SqlContext, store_error, task_not_found};
use legate_core::{Error, ErrorCode, EventKind, Result, TaskId, TaskState, Timestamp};
use rusqlite::{OptionalExtension, params};

/// `'submitted', 'working', …`: the states that are (or are not) terminal, for `IN (…)`.
pub(crate) fn states(terminal: bool) -> String {
    TaskState::ALL
        .iter()
        .filter(|s| s.is_terminal() == terminal)
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What [`Store::fail_unfinished_sparing`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndedTasks {
    /// The tasks it failed or canceled, oldest first.
    pub tasks: Vec<TaskId>,
    /// How many of their pending approvals expired.
    pub approvals_expired: usize,
}

fn collect_ids(rows: rusqlite::Result<Vec<String>>, what: &str) -> Result<Vec<TaskId>> {
    Ok(rows.ctx(what)?.into_iter().map(TaskId).collect())
}

impl Store {
    /// Records which engine instance runs the task (`None` clears it). `TASK_NOT_FOUND` if
    /// there is no such task.
    pub fn set_runner(&self, task_id: &TaskId, runner: Option<&str>) -> Result<()> {
        self.write("record a task's runner", |tx| {
            set_runner_opt_in(tx, task_id, runner)
        })
    }

    /// A task's state and the runner recorded on it (`None` when no runner claims it), or
    /// `None` when there is no such task. What a follower needs to tell a task that is still
    /// being run from one whose process died.
    pub fn task_runner(&self, task_id: &TaskId) -> Result<Option<(TaskState, Option<String>)>> {
        let row: Option<(String, Option<String>)> = self.read(|conn| {
            conn.prepare_cached("SELECT state, runner FROM tasks WHERE id = ?1")
                .and_then(|mut st| {
                    st.query_row([task_id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                })
                .ctx("read a task's runner")
        })?;
        row.map(|(state, runner)| {
            TaskState::parse(&state)
                .map(|state| (state, runner))
                .ok_or_else(|| store_error(format!("task {task_id} has an unreadable state.")))
        })
        .transpose()
    }

    /// The distinct runners of unfinished tasks, sorted.
    pub fn unfinished_runners(&self) -> Result<Vec<String>> {
        let sql = format!(
            "SELECT DISTINCT runner FROM tasks WHERE runner IS NOT NULL AND state IN ({}) \
             ORDER BY runner",
            states(false)
        );
        self.read(|conn| {
            conn.prepare_cached(&sql)
                .and_then(|mut st| {
                    st.query_map([], |r| r.get(0))?
                        .collect::<rusqlite::Result<Vec<String>>>()
                })
                .ctx("list runners")
        })
    }

    /// In one transaction, fails every unfinished task of `runner` (`None`: unfinished tasks
    /// that no runner claimed) with `error`: state `failed`, the error, the error's sentence
    /// as status message, `updated_at` now, and a `status` event saying so. A task whose
    /// cancel was requested ([`Store::request_cancel`]) ends `canceled` instead, with
    /// `TASK_CANCELED` and a status message saying why it ended there. Their pending
    /// approvals expire in the same transaction (the error's sentence as the reason): their
    /// agents are gone, and nobody would read an answer. Returns their ids, oldest first.
    pub fn fail_unfinished(&self, runner: Option<&str>, error: &Error) -> Result<Vec<TaskId>> {
        self.fail_unfinished_sparing(runner, error, &error.message, &|_| false)
            .map(|ended| ended.tasks)
    }

    /// [`Store::fail_unfinished`], except that a task bound to a remote task (its `remote`
    /// column is set, see [`Store::set_task_remote`]) whose agent `spare` names is left as it
    /// is, still claimed by `runner`, for an engine to take over
    /// ([`Store::claim_task`]). `spare` gets the task's agent name; the store does not know
    /// which agents can follow a remote task, the engine does. The pending approvals of the
    /// tasks it ends expire with `approval_reason`, in the same transaction: a process that
    /// dies right after leaves no approval waiting for a task that ended.
    pub fn fail_unfinished_sparing(
        &self,
        runner: Option<&str>,
        error: &Error,
        approval_reason: &str,
        spare: &dyn Fn(&str) -> bool,
    ) -> Result<EndedTasks> {
        let select = format!(
            "SELECT id, cancel_requested_at IS NOT NULL, agent, remote IS NOT NULL FROM tasks \
             WHERE runner IS ?1 AND state IN ({}) ORDER BY created_at, id",
            states(false)
        );
        self.write("fail unfinished tasks", |tx| {
            let rows = tx
                .prepare_cached(&select)
                .and_then(|mut st| {
                    st.query_map([runner], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, bool>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, bool>(3)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<(String, bool, String, bool)>>>()
                })
                .ctx("find unfinished tasks")?;
            let rows: Vec<(String, bool)> = rows
                .into_iter()
                .filter(|(_, _, agent, remote)| !(*remote && spare(agent)))
                .map(|(id, cancel, _, _)| (id, cancel))
                .collect();
            let now = Timestamp::now();
            let failed = EventKind::Status {
                state: TaskState::Failed,
                message: Some(error.message.clone()),
                error: Some(error.clone()),
            };
            let canceled_message = format!("canceled; {}", error.message);
            let canceled_error = Error::new(ErrorCode::TaskCanceled, canceled_message.clone());
            let canceled = EventKind::Status {
                state: TaskState::Canceled,
                message: Some(canceled_message.clone()),
                error: Some(canceled_error.clone()),
            };
            let mut update = tx
                .prepare_cached(
                    "UPDATE tasks SET state = ?2, error_code = ?3, error_message = ?4, \
                     status_message = ?5, updated_at = ?6 WHERE id = ?1",
                )
                .ctx("fail unfinished tasks")?;
            let mut ids = Vec::with_capacity(rows.len());
            let mut approvals_expired = 0;
            for (id, cancel_requested) in rows {
                let id = TaskId(id);
                let (state, code, message, status, event) = if cancel_requested {
                    (
                        TaskState::Canceled,
                        Some(canceled_error.code.as_str()),
                        Some(canceled_error.message.as_str()),
                        &canceled_message,
                        &canceled,
                    )
                } else {
                    (
                        TaskState::Failed,
                        Some(error.code.as_str()),
                        Some(error.message.as_str()),
                        &error.message,
                        &failed,
                    )
                };
                update
                    .execute(params![
                        id.as_str(),
                        state.as_str(),
                        code,
                        message,
                        status,
                        now.0,
                    ])
                    .ctx("fail unfinished tasks")?;
                append_in(tx, &id, std::slice::from_ref(event), now)?;
                approvals_expired += expire_pending_in(tx, &id, approval_reason, now.0)?;
                ids.push(id);
            }
            Ok(EndedTasks {
                tasks: ids,
                approvals_expired,
            })
        })
    }

    /// Asks for the task to be canceled: records the time of the first request while the
    /// task is queued or running (`submitted`, `working`). Returns whether it was; a task that
    /// ended, or waits for input (nothing runs, so the caller ends it itself), is left alone.
    /// `TASK_NOT_FOUND` if there is no such task.
    pub fn request_cancel(&self, task_id: &TaskId) -> Result<bool> {
        let update = format!(
            "UPDATE tasks SET cancel_requested_at = COALESCE(cancel_requested_at, ?2) \
             WHERE id = ?1 AND state IN ('{}', '{}')",
            TaskState::Submitted.as_str(),
            TaskState::Working.as_str()
        );
        self.write("request a cancel", |tx| {
            let changed = tx
                .prepare_cached(&update)
                .and_then(|mut st| st.execute(params![task_id.as_str(), Timestamp::now().0]))
                .ctx("request a cancel")?;
            if changed > 0 {
                return Ok(true);
            }
            if crate::tasks::exists(tx, task_id.as_str())? {
                Ok(false)
            } else {
                Err(task_not_found(task_id.as_str()))
            }
        })
    }

    /// When a cancel of the task was first requested, if it was. `TASK_NOT_FOUND` if there
    /// is no such task.
    pub fn cancel_requested_at(&self, task_id: &TaskId) -> Result<Option<Timestamp>> {
        self.read(|conn| {
            let row: Option<Option<i64>> = conn
                .prepare_cached("SELECT cancel_requested_at FROM tasks WHERE id = ?1")
                .and_then(|mut st| st.query_row([task_id.as_str()], |r| r.get(0)).optional())
                .ctx("read a cancel request")?;
            match row {
                Some(at) => Ok(at.map(Timestamp)),
                None => Err(task_not_found(task_id.as_str())),
            }
        })
    }

    /// Unfinished tasks of `runner` whose cancel was requested, oldest request first.
    pub fn cancel_requests(&self, runner: &str) -> Result<Vec<TaskId>> {
        let sql = format!(
            "SELECT id FROM tasks WHERE runner = ?1 AND cancel_requested_at IS NOT NULL \
             AND state IN ({}) ORDER BY cancel_requested_at, id",
            states(false)
        );
        self.read(|conn| {
            collect_ids(
                conn.prepare_cached(&sql).and_then(|mut st| {
                    st.query_map([runner], |r| r.get(0))?
                        .collect::<rusqlite::Result<Vec<String>>>()
                }),
                "list cancel requests",
            )
        })
    }
}

/// Records `runner` (or none) on task `task_id` inside `tx`; `TASK_NOT_FOUND` without it.
fn set_runner_opt_in(
    tx: &rusqlite::Transaction<'_>,
    task_id: &TaskId,
    runner: Option<&str>,
) -> Result<()> {
    let changed = tx
        .prepare_cached("UPDATE tasks SET runner = ?2 WHERE id = ?1")
        .and_then(|mut st| st.execute(params![task_id.as_str(), runner]))
        .ctx("record a task's runner")?;
    if changed == 0 {
        return Err(task_not_found(task_id.as_str()));
    }
    Ok(())
}

/// Records `runner` on task `task_id` inside `tx` (the task was just stored or updated in
/// the same transaction).
pub(crate) fn set_runner_in(
    tx: &rusqlite::Transaction<'_>,
    task_id: &TaskId,
    runner: &str,
) -> Result<()> {
    set_runner_opt_in(tx, task_id, Some(runner))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tasks::tests::{submitted, task};
    use legate_core::ErrorCode;

    fn insert(store: &Store, id: &str, created: i64, state: TaskState, runner: Option<&str>) {
        let mut t = task(id, created);
        t.state = state;
        store.insert_task(&t, &submitted()).unwrap();
        store.set_runner(&t.id, runner).unwrap();
    }

    #[test]
    fn a_task_is_stored_with_its_runner_in_one_write_and_a_refused_write_claims_nothing() {
        let store = Store::open_in_memory().unwrap();
        let t = task("t1", 1);
        store
            .insert_task_run_by(&t, &submitted(), Some("runner-a"))
            .unwrap();
        assert_eq!(
            store.task_runner(&t.id).unwrap(),
            Some((TaskState::Submitted, Some("runner-a".to_string())))
        );
        // A second insert of the same id fails as a whole: the runner stays the first one's.
        let err = store
            .insert_task_run_by(&t, &submitted(), Some("runner-b"))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::StoreError);
        assert_eq!(
            store.task_runner(&t.id).unwrap(),
            Some((TaskState::Submitted, Some("runner-a".to_string())))
        );
        // A reply's update records its runner with it; one for a missing task stores nothing.
        store.update_task_run_by(&t, &[], "runner-c").unwrap();
        assert_eq!(
            store.task_runner(&t.id).unwrap(),
            Some((TaskState::Submitted, Some("runner-c".to_string())))
        );
        let missing = task("t2", 2);
        let err = store
            .update_task_run_by(&missing, &[submitted()], "runner-c")
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound);
        assert_eq!(store.task_runner(&missing.id).unwrap(), None);
    }

    #[test]
    fn non_terminal_states_are_the_three_open_ones() {
        assert_eq!(states(false), "'submitted', 'working', 'input-required'");
    }

    #[test]
    fn runners_of_unfinished_tasks() {
        let store = Store::open_in_memory().unwrap();
        insert(&store, "r1", 1, TaskState::Working, Some("p1"));
        insert(&store, "r2", 2, TaskState::Completed, Some("p2"));
        insert(&store, "r3", 3, TaskState::InputRequired, Some("p3"));
        insert(&store, "r4", 4, TaskState::Submitted, None);
        insert(&store, "r5", 5, TaskState::Submitted, Some("p1"));
        assert_eq!(store.unfinished_runners().unwrap(), ["p1", "p3"]);
        assert_eq!(
            store.task_runner(&TaskId("r1".into())).unwrap(),
            Some((TaskState::Working, Some("p1".into())))
        );
        assert_eq!(
            store.task_runner(&TaskId("r4".into())).unwrap(),
            Some((TaskState::Submitted, None))
        );
        assert_eq!(store.task_runner(&TaskId("none".into())).unwrap(), None);
        let err = store
            .set_runner(&TaskId("none".into()), Some("x"))
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound);
    }

    #[test]
    fn a_task_whose_cancel_was_accepted_ends_canceled_when_its_runner_died() {
        let store = Store::open_in_memory().unwrap();
        insert(&store, "c1", 1, TaskState::Working, Some("dead"));
        insert(&store, "c2", 2, TaskState::Working, Some("dead"));
        assert!(store.request_cancel(&TaskId("c1".into())).unwrap());
        let error = Error::new(ErrorCode::ServerRestarted, "the process stopped.");
        let ended = store.fail_unfinished(Some("dead"), &error).unwrap();
        assert_eq!(ended.len(), 2);
        let canceled = store.task(&TaskId("c1".into())).unwrap().unwrap();
        assert_eq!(canceled.state, TaskState::Canceled);
        assert_eq!(
            canceled.error.as_ref().map(|e| e.code),
            Some(ErrorCode::TaskCanceled)
        );
        assert_eq!(
            canceled.status_message.as_deref(),
            Some("canceled; the process stopped.")
        );
        let events = store.events(&canceled.id, 0, 10).unwrap();
        assert!(matches!(
            events.last().map(|e| &e.kind),
            Some(EventKind::Status {
                state: TaskState::Canceled,
                error: Some(Error {
                    code: ErrorCode::TaskCanceled,
                    ..
                }),
                ..
            })
        ));
        let failed = store.task(&TaskId("c2".into())).unwrap().unwrap();
        assert_eq!(failed.state, TaskState::Failed);
        assert_eq!(failed.error.as_ref(), Some(&error));
    }

    #[test]
    fn the_approvals_of_the_tasks_a_dead_runner_left_expire_in_the_same_write() {
        use crate::approvals::ApprovalState;
        use crate::approvals::tests::approval;
        let store = Store::open_in_memory().unwrap();
        insert(&store, "w1", 1, TaskState::InputRequired, Some("dead"));
        insert(&store, "w2", 2, TaskState::Working, Some("alive"));
        let (w1, w2) = (TaskId("w1".into()), TaskId("w2".into()));
        store.insert_approval(&approval("a1", &w1, 1), "s").unwrap();
        store.insert_approval(&approval("a2", &w2, 2), "s").unwrap();
        store.insert_approval(&approval("a3", &w1, 3), "s").unwrap();
        store
            .answer_approval("a3", &crate::approvals::tests::allow_for_task())
            .unwrap();
        let error = Error::new(ErrorCode::ServerRestarted, "the process stopped.");

        let ended = store
            .fail_unfinished_sparing(Some("dead"), &error, "nobody is left to answer", &|_| false)
            .unwrap();
        assert_eq!(
            ended,
            EndedTasks {
                tasks: vec![w1.clone()],
                approvals_expired: 1,
            }
        );
        let a1 = store.approval("a1").unwrap().unwrap();
        assert_eq!(a1.state, ApprovalState::Expired);
        assert_eq!(
            a1.closed_reason.as_deref(),
            Some("nobody is left to answer")
        );
        // Audited as refused by the deadline, nothing sent.
        assert_eq!(
            a1.decided.map(|d| d.decider),
            Some(legate_core::Decider::Deadline)
        );
        // Another runner's task, and an approval answered before, are left as they were.
        assert_eq!(
            store.approval("a2").unwrap().unwrap().state,
            ApprovalState::Pending
        );
        assert_eq!(
            store.approval("a3").unwrap().unwrap().state,
            ApprovalState::Allowed
        );
        // Nothing is left for a second pass.
        let again = store
            .fail_unfinished_sparing(Some("dead"), &error, "again", &|_| false)
            .unwrap();
        assert_eq!(again.tasks, Vec::<TaskId>::new());
        assert_eq!(again.approvals_expired, 0);
    }

    #[test]
    fn fail_unfinished_fails_only_that_runners_open_tasks() {
        let store = Store::open_in_memory().unwrap();
        insert(&store, "f1", 1, TaskState::Working, Some("dead"));
        insert(&store, "f2", 2, TaskState::Completed, Some("dead"));
        insert(&store, "f3", 3, TaskState::Submitted, Some("alive"));
        insert(&store, "f4", 4, TaskState::Submitted, None);
        insert(&store, "f5", 5, TaskState::InputRequired, Some("dead"));
        let error = Error::new(
            ErrorCode::ServerRestarted,
            "the process running the task stopped.",
        );

        let failed = store.fail_unfinished(Some("dead"), &error).unwrap();
        assert_eq!(failed, [TaskId("f1".into()), TaskId("f5".into())]);
        for id in &failed {
            let t = store.task(id).unwrap().unwrap();
            assert_eq!(t.state, TaskState::Failed);
            assert_eq!(t.error.as_ref(), Some(&error));
            assert_eq!(t.status_message.as_deref(), Some(error.message.as_str()));
            assert!(t.updated_at > Timestamp(5));
            let events = store.events(id, 0, 10).unwrap();
            assert_eq!(events.len(), 2);
            assert_eq!(
                events[1].kind,
                EventKind::Status {
                    state: TaskState::Failed,
                    message: Some(error.message.clone()),
                    error: Some(error.clone()),
                }
            );
        }
        assert_eq!(
            store.task(&TaskId("f2".into())).unwrap().unwrap().state,
            TaskState::Completed
        );
        assert_eq!(store.unfinished_runners().unwrap(), ["alive"]);
        assert!(
            store
                .fail_unfinished(Some("dead"), &error)
                .unwrap()
                .is_empty()
        );

        let orphans = store.fail_unfinished(None, &error).unwrap();
        assert_eq!(orphans, [TaskId("f4".into())]);
        assert_eq!(
            store.task(&TaskId("f3".into())).unwrap().unwrap().state,
            TaskState::Submitted
        );
    }

    #[test]
    fn cancel_requests_are_recorded_once_and_only_while_open() {
        let store = Store::open_in_memory().unwrap();
        insert(&store, "c1", 1, TaskState::Working, Some("p"));
        insert(&store, "c2", 2, TaskState::Completed, Some("p"));
        insert(&store, "c3", 3, TaskState::Working, Some("q"));
        let c1 = TaskId("c1".into());

        assert_eq!(store.cancel_requested_at(&c1).unwrap(), None);
        assert!(store.request_cancel(&c1).unwrap());
        let first = store.cancel_requested_at(&c1).unwrap().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(3));
        assert!(store.request_cancel(&c1).unwrap());
        assert_eq!(store.cancel_requested_at(&c1).unwrap(), Some(first));

        assert!(!store.request_cancel(&TaskId("c2".into())).unwrap());
        assert_eq!(
            store.cancel_requested_at(&TaskId("c2".into())).unwrap(),
            None
        );
        let err = store.request_cancel(&TaskId("zz".into())).unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound);

        assert_eq!(
            store.cancel_requests("p").unwrap(),
            std::slice::from_ref(&c1)
        );
        assert!(store.cancel_requests("q").unwrap().is_empty());

        let mut t = store.task(&c1).unwrap().unwrap();
        t.state = TaskState::Canceled;
        store.update_task(&t, &[]).unwrap();
        assert!(store.cancel_requests("p").unwrap().is_empty());
        assert_eq!(store.cancel_requested_at(&c1).unwrap(), Some(first), "kept");
    }
}
