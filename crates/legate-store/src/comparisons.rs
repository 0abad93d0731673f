//! Comparisons: for each, one JSON document the engine owns (the source task, the compared
//! hashes, the targets, the task ids of the reviews and the errors of targets that did not
//! start), written when the comparison is made and once more if a target failed to start.
//!
//! The store keeps the document and never interprets it; a comparison outlives the tasks it
//! names (retention may prune them: the engine reports them missing, never hides them).

use crate::Store;
use crate::sql::{SqlContext, store_error};
use legate_core::{Error, ErrorCode, Result, Timestamp};
use rusqlite::{OptionalExtension, params};

impl Store {
    /// Stores the comparison `id`, replacing its earlier document (its source never changes).
    pub fn put_comparison(
        &self,
        id: &str,
        source_task_id: &str,
        record: &serde_json::Value,
    ) -> Result<()> {
        let text = serde_json::to_string(record)
            .map_err(|_| store_error("a comparison could not be serialized."))?;
        self.write("store a comparison", |tx| {
            tx.prepare_cached(
                "INSERT INTO comparisons (id, source_task_id, record, created_at) \
                 VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (id) DO UPDATE SET record = excluded.record",
            )
            .and_then(|mut st| st.execute(params![id, source_task_id, text, Timestamp::now().0]))
            .ctx("store a comparison")?;
            Ok(())
        })
    }

    /// The comparison `id`; `COMPARISON_NOT_FOUND` when there is none.
    pub fn comparison(&self, id: &str) -> Result<serde_json::Value> {
        let text: Option<String> = self.read(|conn| {
            conn.prepare_cached("SELECT record FROM comparisons WHERE id = ?1")
                .and_then(|mut st| st.query_row([id], |r| r.get(0)).optional())
                .ctx("read a comparison")
        })?;
        let Some(text) = text else {
            return Err(Error::new(
                ErrorCode::ComparisonNotFound,
                format!("no comparison has the id {id:?}"),
            ));
        };
        serde_json::from_str(&text)
            .map_err(|_| store_error("a stored comparison is not valid JSON."))
    }

    /// The ids of the comparisons of `source_task_id`, oldest first.
    pub fn comparisons_of(&self, source_task_id: &str) -> Result<Vec<String>> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT id FROM comparisons WHERE source_task_id = ?1 ORDER BY created_at, id",
            )
            .and_then(|mut st| {
                st.query_map([source_task_id], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<String>>>()
            })
            .ctx("list comparisons")
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_comparison_is_stored_replaced_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("legate.db")).unwrap();
        let doc = serde_json::json!({"taskIds": ["a", "b"], "startErrors": []});
        store
            .put_comparison("c1", "src", &serde_json::json!({}))
            .unwrap();
        store.put_comparison("c1", "src", &doc).unwrap();
        assert_eq!(store.comparison("c1").unwrap(), doc);
        assert_eq!(store.comparisons_of("src").unwrap(), vec!["c1"]);
        let missing = store.comparison("nope").unwrap_err();
        assert_eq!(missing.code, ErrorCode::ComparisonNotFound);
        // Reopened: durable.
        drop(store);
        let store = Store::open(&dir.path().join("legate.db")).unwrap();
        assert_eq!(store.comparison("c1").unwrap(), doc);
    }
}
