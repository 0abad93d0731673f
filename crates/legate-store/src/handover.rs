//! Handing a remote task over from a runner that died to one that lives.
//!
//! A task whose turn runs on a remote server (its `remote` column set) outlives the process
//! that started it. When that process dies, recovery spares the task
//! ([`Store::fail_unfinished_sparing`]) and a live engine takes it over: it finds it
//! ([`Store::remote_tasks_of`]), claims it with a compare-and-set on the dead runner's id
//! ([`Store::claim_task`]), so that two processes recovering at once never both follow it,
//! and reads when its turn started ([`Store::last_status_at`]) to apply what is left of the
//! local timeout.
//!
//! This module writes only the `runner` column, and only by compare-and-set. It never
//! decides whether a task is taken over; the engine does.

use crate::Store;
use crate::sql::{SqlContext, to_u64};
use legate_core::{Result, TaskId, TaskState, Timestamp};
use rusqlite::{OptionalExtension, params};

/// `'submitted', 'working', 'input-required'`: the unfinished states, for `IN (…)`.
fn unfinished() -> String {
    TaskState::ALL
        .iter()
        .filter(|s| !s.is_terminal())
        .map(|s| format!("'{}'", s.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Store {
    /// The unfinished tasks that `runner` claims and that are bound to a remote task,
    /// oldest first.
    pub fn remote_tasks_of(&self, runner: &str) -> Result<Vec<TaskId>> {
        let sql = format!(
            "SELECT id FROM tasks WHERE runner = ?1 AND remote IS NOT NULL \
             AND state IN ({}) ORDER BY created_at, id",
            unfinished()
        );
        self.read(|conn| {
            conn.prepare_cached(&sql)
                .and_then(|mut st| {
                    st.query_map([runner], |r| r.get::<_, String>(0))?
                        .collect::<rusqlite::Result<Vec<String>>>()
                })
                .ctx("list a runner's remote tasks")
                .map(|ids| ids.into_iter().map(TaskId).collect())
        })
    }

    /// Moves the unfinished task `task_id` from runner `from` to runner `to` (`None`: no
    /// runner), if `from` still claims it. Returns whether it did: of several processes
    /// claiming one task from the same dead runner, exactly one gets `true`. A task that ended
    /// meanwhile, or that another process claimed first, stays as it is.
    pub fn claim_task(&self, task_id: &TaskId, from: &str, to: Option<&str>) -> Result<bool> {
        let sql = format!(
            "UPDATE tasks SET runner = ?3 WHERE id = ?1 AND runner = ?2 AND state IN ({})",
            unfinished()
        );
        self.write("claim a task", |tx| {
            tx.prepare_cached(&sql)
                .and_then(|mut st| st.execute(params![task_id.as_str(), from, to]))
                .ctx("claim a task")
                .map(|changed| changed == 1)
        })
    }

    /// When the task's latest status event saying `state` was stored, and its number; `None`
    /// when it has none.
    pub fn last_status_at(
        &self,
        task_id: &TaskId,
        state: TaskState,
    ) -> Result<Option<(u64, Timestamp)>> {
        self.read(|conn| {
            let row: Option<(i64, i64)> = conn
                .prepare_cached(
                    "SELECT seq, at FROM events WHERE task_id = ?1 AND type = 'status' \
                     AND json_extract(payload, '$.state') = ?2 ORDER BY seq DESC LIMIT 1",
                )
                .and_then(|mut st| {
                    st.query_row(params![task_id.as_str(), state.as_str()], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })
                    .optional()
                })
                .ctx("read when a task's turn started")?;
            row.map(|(seq, at)| Ok((to_u64(seq, "event number")?, Timestamp(at))))
                .transpose()
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tasks::tests::{submitted, task};
    use legate_core::{Error, ErrorCode, EventKind, RemoteRef};

    fn remote(id: &str) -> RemoteRef {
        RemoteRef {
            url: "http://127.0.0.1:9/a2a".into(),
            binding: "JSONRPC".into(),
            task_id: id.into(),
            context_id: None,
        }
    }

    fn insert(store: &Store, id: &str, created: i64, state: TaskState, bound: bool) -> TaskId {
        let mut t = task(id, created);
        t.state = state;
        store.insert_task(&t, &submitted()).unwrap();
        store.set_runner(&t.id, Some("dead")).unwrap();
        if bound {
            store.set_task_remote(&t.id, &remote(id)).unwrap();
        }
        t.id
    }

    #[test]
    fn recovery_spares_only_the_remote_tasks_of_agents_it_is_told_to() {
        let store = Store::open_in_memory().unwrap();
        let local = insert(&store, "local", 1, TaskState::Working, false);
        let bound = insert(&store, "bound", 2, TaskState::Working, true);
        let done = insert(&store, "done", 3, TaskState::Completed, true);
        let error = Error::new(ErrorCode::ServerRestarted, "the process stopped.");

        // `task()` names its agent "claude": spared when bound, failed when not.
        let failed = store
            .fail_unfinished_sparing(Some("dead"), &error, "gone", &|agent| agent == "claude")
            .unwrap()
            .tasks;
        assert_eq!(failed, std::slice::from_ref(&local));
        assert_eq!(
            store.task_runner(&bound).unwrap(),
            Some((TaskState::Working, Some("dead".into())))
        );
        assert_eq!(
            store.remote_tasks_of("dead").unwrap(),
            std::slice::from_ref(&bound)
        );
        assert!(!store.remote_tasks_of("dead").unwrap().contains(&done));

        // An agent that cannot follow its remote task: failed as before.
        let failed = store
            .fail_unfinished_sparing(Some("dead"), &error, "gone", &|_| false)
            .unwrap()
            .tasks;
        assert_eq!(failed, [bound]);
        assert!(store.remote_tasks_of("dead").unwrap().is_empty());
    }

    #[test]
    fn one_claim_wins_and_an_ended_task_is_never_claimed() {
        let store = Store::open_in_memory().unwrap();
        let t = insert(&store, "t", 1, TaskState::Working, true);
        assert!(!store.claim_task(&t, "someone-else", Some("a")).unwrap());
        assert!(store.claim_task(&t, "dead", Some("a")).unwrap());
        // The second claimant read the same dead runner: it loses.
        assert!(!store.claim_task(&t, "dead", Some("b")).unwrap());
        assert_eq!(
            store.task_runner(&t).unwrap(),
            Some((TaskState::Working, Some("a".into())))
        );
        // The adopter may give it back to nobody, or hand it on.
        assert!(store.claim_task(&t, "a", None).unwrap());
        assert_eq!(
            store.task_runner(&t).unwrap(),
            Some((TaskState::Working, None))
        );

        let ended = insert(&store, "ended", 2, TaskState::Failed, true);
        assert!(!store.claim_task(&ended, "dead", Some("a")).unwrap());
        assert!(
            !store
                .claim_task(&TaskId("missing".into()), "dead", Some("a"))
                .unwrap()
        );
    }

    #[test]
    fn the_latest_status_of_a_state_is_found() {
        let store = Store::open_in_memory().unwrap();
        let t = insert(&store, "t", 1, TaskState::Working, true);
        assert_eq!(store.last_status_at(&t, TaskState::Working).unwrap(), None);
        let working = EventKind::Status {
            state: TaskState::Working,
            message: None,
            error: None,
        };
        let message = EventKind::Message {
            text: "\"state\":\"working\"".into(),
        };
        store
            .append_events(&t, &[working.clone(), message.clone()])
            .unwrap();
        let later = store.append_events(&t, &[working, message]).unwrap();
        let (seq, at) = store
            .last_status_at(&t, TaskState::Working)
            .unwrap()
            .unwrap();
        assert_eq!(seq, later[0].seq);
        assert_eq!(at, later[0].at);
        assert_eq!(store.last_status_at(&t, TaskState::Canceled).unwrap(), None);
    }
}
