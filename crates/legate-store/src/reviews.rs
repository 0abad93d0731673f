//! Review records: for each copy task, one JSON document the engine owns (where its copy and
//! baseline are, its criteria, the patch summary, verification, test evidence, integration).
//!
//! The store keeps the document and never interprets it; it is deleted with its task.

use crate::Store;
use crate::events::append_in;
use crate::sql::{SqlContext, clamp_i64, store_error, task_not_found};
use crate::tasks::exists;
use legate_core::{Event, EventKind, Result, TaskId, Timestamp};
use rusqlite::{OptionalExtension, Transaction, params};

impl Store {
    /// The review record of `task_id`, if it has one.
    pub fn review(&self, task_id: &TaskId) -> Result<Option<serde_json::Value>> {
        let text: Option<String> = self.read(|conn| {
            conn.prepare_cached("SELECT record FROM reviews WHERE task_id = ?1")
                .and_then(|mut st| st.query_row([task_id.as_str()], |r| r.get(0)).optional())
                .ctx("read a review record")
        })?;
        text.map(|t| {
            serde_json::from_str(&t)
                .map_err(|_| store_error("a stored review record is not valid JSON."))
        })
        .transpose()
    }

    /// Stores the review record of `task_id`, replacing any earlier one.
    pub fn put_review(&self, task_id: &TaskId, record: &serde_json::Value) -> Result<()> {
        let text = record_text(record)?;
        self.write("store a review record", |tx| put_in(tx, task_id, &text))
    }

    /// Stores the review record of `task_id` and appends `events` to its log, in one
    /// transaction (`TASK_NOT_FOUND` without the task). Returns the events as stored.
    pub fn put_review_with_events(
        &self,
        task_id: &TaskId,
        record: &serde_json::Value,
        events: &[EventKind],
    ) -> Result<Vec<Event>> {
        let text = record_text(record)?;
        self.write("store a review record", |tx| {
            if !exists(tx, task_id.as_str())? {
                return Err(task_not_found(task_id.as_str()));
            }
            put_in(tx, task_id, &text)?;
            append_in(tx, task_id, events, Timestamp::now())
        })
    }

    /// Task ids that have a review record, oldest record first, at most `limit`.
    pub fn review_ids(&self, limit: usize) -> Result<Vec<TaskId>> {
        self.read(|conn| {
            conn.prepare_cached("SELECT task_id FROM reviews ORDER BY updated_at, task_id LIMIT ?1")
                .and_then(|mut st| {
                    st.query_map([clamp_i64(limit)], |r| r.get::<_, String>(0).map(TaskId))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("list review records")
        })
    }
}

/// `record` as the text the `record` column keeps.
fn record_text(record: &serde_json::Value) -> Result<String> {
    serde_json::to_string(record)
        .map_err(|_| store_error("a review record could not be serialized."))
}

/// Stores `text` as the review record of `task_id`, replacing any earlier one, inside `tx`.
fn put_in(tx: &Transaction<'_>, task_id: &TaskId, text: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO reviews (task_id, record, updated_at) VALUES (?1, ?2, ?3) \
         ON CONFLICT (task_id) DO UPDATE SET record = excluded.record, \
         updated_at = excluded.updated_at",
    )
    .and_then(|mut st| st.execute(params![task_id.as_str(), text, Timestamp::now().0]))
    .ctx("store a review record")?;
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use crate::Store;
    use crate::tasks::tests::{submitted, task};

    #[test]
    fn a_record_round_trips_and_goes_with_its_task() {
        let store = Store::open_in_memory().unwrap();
        let t = task("t1", 1);
        store.insert_task(&t, &submitted()).unwrap();
        assert_eq!(store.review(&t.id).unwrap(), None);
        store
            .put_review(&t.id, &serde_json::json!({"copy": "/x", "n": 1}))
            .unwrap();
        store
            .put_review(&t.id, &serde_json::json!({"copy": "/x", "n": 2}))
            .unwrap();
        assert_eq!(store.review(&t.id).unwrap().unwrap()["n"], 2);
        assert_eq!(store.review_ids(10).unwrap(), std::slice::from_ref(&t.id));
        let mut done = t.clone();
        done.state = legate_core::TaskState::Completed;
        store.update_task(&done, &[]).unwrap();
        store.prune_finished(0).unwrap();
        assert_eq!(store.review(&t.id).unwrap(), None);
    }
}
