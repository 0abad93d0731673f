//! A task's W3C trace context (issue 34): the `traceparent` and `tracestate` of its first
//! turn's span, kept so that a reply into it, or a turn re-attached after a restart, continues
//! the task's own trace rather than whatever launched that turn.
//!
//! This module stores and reads the two fields as given, each within its bound; it never parses
//! or judges them (the engine does, through `legate_trace::TraceContext`, on the way in and on
//! the way out) and never replaces a context once one is kept.

use crate::Store;
use crate::sql::{SqlContext, task_not_found};
use legate_core::{Result, TaskId};
use rusqlite::{OptionalExtension, params};

/// The longest `traceparent` kept (as `legate_trace::MAX_TRACEPARENT`).
pub const MAX_TRACEPARENT: usize = 256;
/// The longest `tracestate` kept (as `legate_trace::MAX_TRACESTATE`); a longer one is not kept.
pub const MAX_TRACESTATE: usize = 512;

/// A stored trace context: `traceparent`, then `tracestate` if any.
pub type StoredTrace = (String, Option<String>);

impl Store {
    /// Keeps `traceparent` (and `tracestate`) as task `task_id`'s trace context, unless it has
    /// one already (the first turn's stays). A field past its bound is not kept (a
    /// `traceparent` past its bound keeps nothing). `TASK_NOT_FOUND` for an unknown task.
    pub fn keep_task_trace(
        &self,
        task_id: &TaskId,
        traceparent: &str,
        tracestate: Option<&str>,
    ) -> Result<()> {
        if traceparent.len() > MAX_TRACEPARENT {
            return Ok(());
        }
        let tracestate = tracestate.filter(|s| s.len() <= MAX_TRACESTATE);
        self.write("keep a task's trace context", |tx| {
            let exists = tx
                .prepare_cached("SELECT 1 FROM tasks WHERE id = ?1")
                .and_then(|mut st| st.exists([task_id.as_str()]))
                .ctx("keep a task's trace context")?;
            if !exists {
                return Err(task_not_found(task_id.as_str()));
            }
            tx.prepare_cached(
                "UPDATE tasks SET traceparent = ?2, tracestate = ?3
                 WHERE id = ?1 AND traceparent IS NULL",
            )
            .and_then(|mut st| st.execute(params![task_id.as_str(), traceparent, tracestate]))
            .ctx("keep a task's trace context")?;
            Ok(())
        })
    }

    /// Task `task_id`'s trace context, when one was kept (`None` for an unknown task too).
    pub fn task_trace(&self, task_id: &TaskId) -> Result<Option<StoredTrace>> {
        let row: Option<(Option<String>, Option<String>)> = self.read(|conn| {
            conn.prepare_cached("SELECT traceparent, tracestate FROM tasks WHERE id = ?1")
                .and_then(|mut st| {
                    st.query_row([task_id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                        .optional()
                })
                .ctx("read a task's trace context")
        })?;
        Ok(row.and_then(|(parent, state)| parent.map(|p| (p, state))))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::tasks::tests::{submitted, task};

    #[test]
    fn the_first_context_kept_stays_and_bounds_hold() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("legate.db")).unwrap();
        let task = task("t1", 1);
        store.insert_task(&task, &submitted()).unwrap();
        assert_eq!(store.task_trace(&task.id).unwrap(), None);
        // Too long: nothing kept.
        store
            .keep_task_trace(&task.id, &"0".repeat(MAX_TRACEPARENT + 1), None)
            .unwrap();
        assert_eq!(store.task_trace(&task.id).unwrap(), None);
        let first = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        store
            .keep_task_trace(&task.id, first, Some(&"k=v,".repeat(200)))
            .unwrap();
        assert_eq!(
            store.task_trace(&task.id).unwrap(),
            Some((first.to_string(), None)),
            "a tracestate past its bound is not kept"
        );
        store
            .keep_task_trace(
                &task.id,
                "00-11111111111111111111111111111111-2222222222222222-01",
                Some("a=b"),
            )
            .unwrap();
        assert_eq!(
            store.task_trace(&task.id).unwrap(),
            Some((first.to_string(), None))
        );
        let unknown = TaskId("nope".to_string());
        assert!(store.keep_task_trace(&unknown, first, None).is_err());
    }
}
