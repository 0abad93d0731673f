//! The link from a task cut by a restart to its one continuation (`controls.continuedFrom`,
//! unique by the `tasks_continued_from` index). This module only reads it; the engine decides
//! when a task may be continued.

use crate::Store;
use crate::sql::SqlContext;
use crate::tasks::{RawTask, TASK_COLUMNS};
use legate_core::{Result, Task, TaskId};
use rusqlite::OptionalExtension;

impl Store {
    /// The task that continues `cut`, if one was stored.
    pub fn continuation_of(&self, cut: &TaskId) -> Result<Option<Task>> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {TASK_COLUMNS} FROM tasks WHERE controls IS NOT NULL \
                 AND json_extract(controls, '$.continuedFrom') = ?1"
            ))
            .and_then(|mut st| st.query_row([cut.as_str()], RawTask::from_row).optional())
            .ctx("find a task's continuation")?
            .map(RawTask::decode)
            .transpose()
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_core::EventKind;

    fn task(id: &str, continued_from: Option<&str>) -> Task {
        let mut t = Task::new(id, "c", "agent", "p");
        t.controls.continued_from = continued_from.map(|c| TaskId(c.into()));
        t
    }

    #[test]
    fn a_cut_task_has_at_most_one_continuation() {
        let store = Store::open_in_memory().unwrap();
        let first = EventKind::Status {
            state: legate_core::TaskState::Submitted,
            message: None,
            error: None,
        };
        store.insert_task(&task("cut", None), &first).unwrap();
        assert!(
            store
                .continuation_of(&TaskId("cut".into()))
                .unwrap()
                .is_none()
        );
        store
            .insert_task(&task("next", Some("cut")), &first)
            .unwrap();
        let found = store
            .continuation_of(&TaskId("cut".into()))
            .unwrap()
            .unwrap();
        assert_eq!(found.id.as_str(), "next");
        // A second continuation of the same task is refused by the store itself.
        assert!(
            store
                .insert_task(&task("again", Some("cut")), &first)
                .is_err()
        );
        // Tasks that continue nothing are not constrained.
        store.insert_task(&task("other", None), &first).unwrap();
    }
}
