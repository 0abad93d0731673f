//! Messages a caller sent to a conversation (`send_message`): each client-chosen message id
//! is stored once per conversation, with its text and the task that carries it as the
//! context's next turn.
//!
//! The context and the message id are the primary key, so claiming an id is atomic across
//! processes: the first claim wins and every later one reads the stored record back. An id
//! is the caller's within one conversation: the same id in another context is another
//! message (no caller can take an id from a conversation it cannot reach). This module records; it never
//! decides whether a repeated id is a duplicate or a conflict (the engine does).

use crate::Store;
use crate::sql::{SqlContext, store_error};
use legate_core::{Result, TaskId, Timestamp};
use rusqlite::{OptionalExtension, Row, params};

/// One message, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageRecord {
    /// The id the client chose.
    pub message_id: String,
    /// The conversation it was sent to.
    pub context_id: String,
    /// What it says.
    pub text: String,
    /// The task that carries it, once submitted.
    pub task_id: Option<TaskId>,
    /// When it was first received.
    pub created_at: Timestamp,
}

/// What [`Store::claim_message`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MessageClaim {
    /// The id was free and is now this caller's.
    Claimed,
    /// The id was taken already; here is what is stored under it.
    Existing(MessageRecord),
}

const COLUMNS: &str = "message_id, context_id, text, task_id, created_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<MessageRecord> {
    Ok(MessageRecord {
        message_id: r.get(0)?,
        context_id: r.get(1)?,
        text: r.get(2)?,
        task_id: r.get::<_, Option<String>>(3)?.map(TaskId),
        created_at: Timestamp(r.get(4)?),
    })
}

impl Store {
    /// Stores `record` unless its message id is taken in its context; then returns the stored
    /// record instead, unchanged. One transaction.
    pub fn claim_message(&self, record: &MessageRecord) -> Result<MessageClaim> {
        self.write("store a message", |tx| {
            let inserted = tx
                .prepare_cached(&format!(
                    "INSERT INTO messages ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5) \
                     ON CONFLICT (context_id, message_id) DO NOTHING"
                ))
                .and_then(|mut st| {
                    st.execute(params![
                        record.message_id,
                        record.context_id,
                        record.text,
                        record.task_id.as_ref().map(TaskId::as_str),
                        record.created_at.0,
                    ])
                })
                .ctx("store a message")?;
            if inserted == 1 {
                return Ok(MessageClaim::Claimed);
            }
            tx.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM messages WHERE context_id = ?1 AND message_id = ?2"
            ))
            .and_then(|mut st| {
                st.query_row(params![record.context_id, record.message_id], from_row)
            })
            .ctx("read a message")
            .map(MessageClaim::Existing)
        })
    }

    /// Records the task that carries a claimed message of `context_id`.
    pub fn bind_message(&self, context_id: &str, message_id: &str, task_id: &TaskId) -> Result<()> {
        self.write("bind a message to its task", |tx| {
            let changed = tx
                .prepare_cached(
                    "UPDATE messages SET task_id = ?3 WHERE context_id = ?1 AND message_id = ?2",
                )
                .and_then(|mut st| st.execute(params![context_id, message_id, task_id.as_str()]))
                .ctx("bind a message to its task")?;
            if changed == 0 {
                return Err(store_error(
                    "the store has no message with that id to bind to a task.",
                ));
            }
            Ok(())
        })
    }

    /// Forgets a claimed message of `context_id` that never got its task (its submission was
    /// refused), so that the id may be sent again. A message bound to a task is kept.
    pub fn release_message(&self, context_id: &str, message_id: &str) -> Result<()> {
        self.write("release a message", |tx| {
            const RELEASE: &str =
                "DELETE FROM messages WHERE context_id = ?1 AND message_id = ?2 AND task_id IS NULL";
            tx.prepare_cached(RELEASE)
                .and_then(|mut st| st.execute([context_id, message_id]))
                .ctx("release a message")?;
            Ok(())
        })
    }

    /// The message of `context_id` stored under this id, if any.
    pub fn message(&self, context_id: &str, message_id: &str) -> Result<Option<MessageRecord>> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM messages WHERE context_id = ?1 AND message_id = ?2"
            ))
            .and_then(|mut st| st.query_row([context_id, message_id], from_row).optional())
            .ctx("read a message")
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn record(id: &str, text: &str) -> MessageRecord {
        MessageRecord {
            message_id: id.into(),
            context_id: "ctx".into(),
            text: text.into(),
            task_id: None,
            created_at: Timestamp(7),
        }
    }

    #[test]
    fn the_first_claim_wins_and_later_ones_read_it_back() {
        let store = Store::open_in_memory().unwrap();
        assert_eq!(
            store.claim_message(&record("m1", "hello")).unwrap(),
            MessageClaim::Claimed
        );
        match store.claim_message(&record("m1", "other")).unwrap() {
            MessageClaim::Existing(r) => assert_eq!(r, record("m1", "hello")),
            MessageClaim::Claimed => panic!("claimed twice"),
        }
        // The same id in another context is another message.
        let elsewhere = MessageRecord {
            context_id: "other".into(),
            ..record("m1", "other")
        };
        assert_eq!(
            store.claim_message(&elsewhere).unwrap(),
            MessageClaim::Claimed
        );
        assert_eq!(
            store.message("other", "m1").unwrap(),
            Some(elsewhere.clone())
        );
        assert_eq!(
            store.message("ctx", "m1").unwrap(),
            Some(record("m1", "hello"))
        );
    }

    #[test]
    fn a_bound_message_survives_release_and_an_unbound_one_does_not() {
        let store = Store::open_in_memory().unwrap();
        store.claim_message(&record("a", "x")).unwrap();
        store.claim_message(&record("b", "y")).unwrap();
        store
            .bind_message("ctx", "a", &TaskId("t1".into()))
            .unwrap();
        store.release_message("ctx", "a").unwrap();
        store.release_message("ctx", "b").unwrap();
        assert_eq!(
            store.message("ctx", "a").unwrap().unwrap().task_id,
            Some(TaskId("t1".into()))
        );
        assert_eq!(store.message("ctx", "b").unwrap(), None);
        assert_eq!(
            store.claim_message(&record("b", "z")).unwrap(),
            MessageClaim::Claimed
        );
        let err = store
            .bind_message("ctx", "nope", &TaskId("t".into()))
            .unwrap_err();
        assert_eq!(err.code, legate_core::ErrorCode::StoreError);
    }
}
