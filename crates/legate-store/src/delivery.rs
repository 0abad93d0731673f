//! What a task delivers besides its events: its public messages (numbered per task from 1,
//! the newest [`legate_core::delivery::MAX_MESSAGES_PER_TASK`] kept) with the mark of the last
//! event they were derived from, the artifacts collected from its workspace, and the one
//! writer of a task's delivery mode after insert ([`Store::set_task_delivery_mode`]).
//!
//! This module records. It never derives a message from an event (the engine does) and never
//! reads an artifact's bytes (they live under Legate's home, written by the engine).

use crate::Store;
use crate::sql::{SqlContext, clamp_i64, store_error, task_not_found, to_i64, to_u64};
use crate::tasks::exists;
use legate_core::{
    Artifact, ArtifactState, DeliveryMode, MessageKind, MessageOrigin, MessagePage, PublicMessage,
    Result, TaskControls, TaskId,
};
use rusqlite::{Connection, OptionalExtension, Row, params};

/// A message to append: everything but its number and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    /// What it is.
    pub kind: MessageKind,
    /// Who said it.
    pub origin: MessageOrigin,
    /// The model, when known.
    pub model: Option<String>,
    /// When its event was stored.
    pub at: i64,
    /// Its text, already bounded by the engine.
    pub text: String,
    /// The event it comes from.
    pub event_seq: u64,
    /// For a result: the answer's sha256.
    pub result_sha256: Option<String>,
    /// For a result: the answer's length in UTF-16 units.
    pub result_length: Option<u64>,
    /// For a blocker: the error code.
    pub code: Option<String>,
}

const MESSAGE_COLUMNS: &str =
    "seq, kind, origin, model, at, text, event_seq, result_sha256, result_length, code";

fn message_from_row(task_id: &str, r: &Row<'_>) -> rusqlite::Result<Option<PublicMessage>> {
    let seq: i64 = r.get(0)?;
    let kind: String = r.get(1)?;
    let origin: String = r.get(2)?;
    let event_seq: i64 = r.get(6)?;
    let length: Option<i64> = r.get(8)?;
    let (Some(kind), Some(origin), Ok(seq), Ok(event_seq)) = (
        MessageKind::parse(&kind),
        MessageOrigin::parse(&origin),
        u64::try_from(seq),
        u64::try_from(event_seq),
    ) else {
        return Ok(None);
    };
    Ok(Some(PublicMessage {
        id: format!("{task_id}:m{seq}"),
        seq,
        kind,
        origin,
        model: r.get(3)?,
        at: r.get(4)?,
        text: r.get(5)?,
        event_seq,
        result_sha256: r.get(7)?,
        result_length: length.and_then(|n| u64::try_from(n).ok()),
        code: r.get(9)?,
    }))
}

/// `(derived_through, last_seq)` of a task: 0 and 0 before anything was derived.
fn mark_in(conn: &Connection, task_id: &TaskId) -> Result<(u64, u64)> {
    let row: Option<(i64, i64)> = conn
        .prepare_cached(
            "SELECT derived_through, last_seq FROM public_message_marks WHERE task_id = ?1",
        )
        .and_then(|mut st| {
            st.query_row([task_id.as_str()], |r| Ok((r.get(0)?, r.get(1)?)))
                .optional()
        })
        .ctx("read a task's message mark")?;
    match row {
        None => Ok((0, 0)),
        Some((d, l)) => Ok((to_u64(d, "event mark")?, to_u64(l, "message number")?)),
    }
}

fn artifact_from_row(r: &Row<'_>) -> rusqlite::Result<Option<Artifact>> {
    let state: String = r.get(1)?;
    let bytes: Option<i64> = r.get(2)?;
    let Some(state) = ArtifactState::parse(&state) else {
        return Ok(None);
    };
    Ok(Some(Artifact {
        name: r.get(0)?,
        state,
        bytes: bytes.and_then(|n| u64::try_from(n).ok()),
        sha256: r.get(3)?,
        reason: r.get(4)?,
        collected_at: r.get(5)?,
    }))
}

impl Store {
    /// The last event of `task_id` its public messages were derived from (0 for none).
    pub fn message_mark(&self, task_id: &TaskId) -> Result<u64> {
        self.read(|conn| mark_in(conn, task_id).map(|(d, _)| d))
    }

    /// Appends `messages`, derived from the task's events `derived_from + 1 ..=
    /// derived_through`, numbered after the last one, and drops all but the newest `keep`.
    /// Compare-and-set on the mark: returns `false`, writing nothing, when the stored mark is
    /// no longer `derived_from` (another reader derived them first). `TASK_NOT_FOUND` for an
    /// unknown task.
    pub fn append_public_messages(
        &self,
        task_id: &TaskId,
        derived_from: u64,
        derived_through: u64,
        messages: &[NewMessage],
        keep: usize,
    ) -> Result<bool> {
        self.write("store public messages", |tx| {
            if !exists(tx, task_id.as_str())? {
                return Err(task_not_found(task_id.as_str()));
            }
            let (mark, mut last) = mark_in(tx, task_id)?;
            if mark != derived_from {
                return Ok(false);
            }
            let mut insert = tx
                .prepare_cached(&format!(
                    "INSERT INTO public_messages (task_id, {MESSAGE_COLUMNS}) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)"
                ))
                .ctx("store public messages")?;
            for m in messages {
                last += 1;
                insert
                    .execute(params![
                        task_id.as_str(),
                        to_i64(last, "the message number")?,
                        m.kind.as_str(),
                        m.origin.as_str(),
                        m.model,
                        m.at,
                        m.text,
                        to_i64(m.event_seq, "the event number")?,
                        m.result_sha256,
                        m.result_length.map(|n| to_i64(n, "a length")).transpose()?,
                        m.code,
                    ])
                    .ctx("store public messages")?;
            }
            let floor = to_i64(last.saturating_sub(keep as u64), "a message number")?;
            tx.prepare_cached("DELETE FROM public_messages WHERE task_id = ?1 AND seq <= ?2")
                .and_then(|mut st| st.execute(params![task_id.as_str(), floor]))
                .ctx("drop old public messages")?;
            let through = to_i64(derived_through, "the event mark")?;
            let last_i = to_i64(last, "the message number")?;
            tx.prepare_cached(
                "INSERT INTO public_message_marks (task_id, derived_through, last_seq) \
                 VALUES (?1, ?2, ?3) ON CONFLICT (task_id) DO UPDATE SET \
                 derived_through = excluded.derived_through, last_seq = excluded.last_seq",
            )
            .and_then(|mut st| st.execute(params![task_id.as_str(), through, last_i]))
            .ctx("record a task's message mark")?;
            Ok(true)
        })
    }

    /// Up to `limit` kept messages of `task_id` numbered after `after`, oldest first, with the
    /// number of the oldest kept and of the newest.
    pub fn public_messages(
        &self,
        task_id: &TaskId,
        after: u64,
        limit: usize,
    ) -> Result<MessagePage> {
        let after = to_i64(after, "a cursor")?;
        self.read(|conn| {
            let (_, last_seq) = mark_in(conn, task_id)?;
            let oldest: Option<i64> = conn
                .prepare_cached("SELECT MIN(seq) FROM public_messages WHERE task_id = ?1")
                .and_then(|mut st| st.query_row([task_id.as_str()], |r| r.get(0)))
                .ctx("read public messages")?;
            let mut st = conn
                .prepare_cached(&format!(
                    "SELECT {MESSAGE_COLUMNS} FROM public_messages \
                     WHERE task_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3"
                ))
                .ctx("read public messages")?;
            let rows = st
                .query_map(params![task_id.as_str(), after, clamp_i64(limit)], |r| {
                    message_from_row(task_id.as_str(), r)
                })
                .ctx("read public messages")?;
            let mut messages = Vec::new();
            for row in rows {
                match row.ctx("read public messages")? {
                    Some(m) => messages.push(m),
                    None => return Err(store_error("a stored public message is malformed.")),
                }
            }
            Ok(MessagePage {
                messages,
                oldest_available: oldest.map_or(0, |n| u64::try_from(n).unwrap_or(0)),
                last_seq,
            })
        })
    }

    /// Changes the delivery mode in `task_id`'s controls, the one control that may change
    /// after insert; every other control is kept as stored. Returns the controls as now
    /// stored. `TASK_NOT_FOUND` for an unknown task.
    pub fn set_task_delivery_mode(
        &self,
        task_id: &TaskId,
        mode: DeliveryMode,
    ) -> Result<TaskControls> {
        self.write("change a task's delivery mode", |tx| {
            let stored: Option<Option<String>> = tx
                .prepare_cached("SELECT controls FROM tasks WHERE id = ?1")
                .and_then(|mut st| st.query_row([task_id.as_str()], |r| r.get(0)).optional())
                .ctx("read a task's controls")?;
            let Some(stored) = stored else {
                return Err(task_not_found(task_id.as_str()));
            };
            let mut controls = match stored {
                None => TaskControls::default(),
                Some(s) => serde_json::from_str::<TaskControls>(&s)
                    .map_err(|_| store_error("the stored controls of a task are malformed."))?,
            };
            controls.delivery_mode = mode;
            let text = (!controls.is_empty())
                .then(|| serde_json::to_string(&controls))
                .transpose()
                .map_err(|_| store_error("a task's controls could not be encoded."))?;
            tx.prepare_cached("UPDATE tasks SET controls = ?2 WHERE id = ?1")
                .and_then(|mut st| st.execute(params![task_id.as_str(), text]))
                .ctx("change a task's delivery mode")?;
            Ok(controls)
        })
    }

    /// Replaces the artifacts recorded for `task_id` (a later turn's collection replaces the
    /// earlier one). `TASK_NOT_FOUND` for an unknown task.
    pub fn replace_artifacts(&self, task_id: &TaskId, artifacts: &[Artifact]) -> Result<()> {
        self.write("record artifacts", |tx| {
            if !exists(tx, task_id.as_str())? {
                return Err(task_not_found(task_id.as_str()));
            }
            tx.prepare_cached("DELETE FROM artifacts WHERE task_id = ?1")
                .and_then(|mut st| st.execute([task_id.as_str()]))
                .ctx("record artifacts")?;
            let mut insert = tx
                .prepare_cached(
                    "INSERT INTO artifacts (task_id, name, state, bytes, sha256, reason, collected_at) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .ctx("record artifacts")?;
            for a in artifacts {
                insert
                    .execute(params![
                        task_id.as_str(),
                        a.name,
                        a.state.as_str(),
                        a.bytes.map(|n| to_i64(n, "an artifact's size")).transpose()?,
                        a.sha256,
                        a.reason,
                        a.collected_at,
                    ])
                    .ctx("record artifacts")?;
            }
            Ok(())
        })
    }

    /// The artifacts recorded for `task_id`, by name.
    pub fn artifacts(&self, task_id: &TaskId) -> Result<Vec<Artifact>> {
        self.read(|conn| {
            let mut st = conn
                .prepare_cached(
                    "SELECT name, state, bytes, sha256, reason, collected_at FROM artifacts \
                     WHERE task_id = ?1 ORDER BY name",
                )
                .ctx("read artifacts")?;
            let rows = st
                .query_map([task_id.as_str()], artifact_from_row)
                .ctx("read artifacts")?;
            let mut out = Vec::new();
            for row in rows {
                match row.ctx("read artifacts")? {
                    Some(a) => out.push(a),
                    None => return Err(store_error("a stored artifact record is malformed.")),
                }
            }
            Ok(out)
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tasks::tests::{submitted, task};
    use legate_core::ErrorCode;

    fn store_with_task() -> (Store, TaskId) {
        let store = Store::open_in_memory().unwrap();
        let t = task("t-msgs", 1);
        store.insert_task(&t, &submitted()).unwrap();
        (store, t.id)
    }

    fn msg(n: u64) -> NewMessage {
        NewMessage {
            kind: MessageKind::Blocker,
            origin: MessageOrigin::Legate,
            model: None,
            at: 7,
            text: format!("m{n}"),
            event_seq: n,
            result_sha256: None,
            result_length: None,
            code: None,
        }
    }

    #[test]
    fn the_newest_hundred_are_kept_and_the_page_says_where_the_kept_ones_start() {
        let (store, id) = store_with_task();
        let batch: Vec<_> = (1..=130).map(msg).collect();
        assert!(
            store
                .append_public_messages(&id, 0, 130, &batch, 100)
                .unwrap()
        );
        let page = store.public_messages(&id, 0, 1000).unwrap();
        assert_eq!(page.messages.len(), 100);
        assert_eq!(page.oldest_available, 31);
        assert_eq!(page.last_seq, 130);
        assert_eq!(page.messages[0].seq, 31);
        assert_eq!(page.messages[0].id, "t-msgs:m31");
        assert_eq!(page.messages[0].text, "m31");
        assert_eq!(store.message_mark(&id).unwrap(), 130);
    }

    #[test]
    fn a_stale_mark_writes_nothing() {
        let (store, id) = store_with_task();
        assert!(
            store
                .append_public_messages(&id, 0, 3, &[msg(1)], 100)
                .unwrap()
        );
        assert!(
            !store
                .append_public_messages(&id, 0, 5, &[msg(2)], 100)
                .unwrap()
        );
        let page = store.public_messages(&id, 0, 10).unwrap();
        assert_eq!(page.messages.len(), 1);
        assert_eq!(store.message_mark(&id).unwrap(), 3);
    }

    #[test]
    fn the_delivery_mode_changes_and_nothing_else_does() {
        let store = Store::open_in_memory().unwrap();
        let mut t = task("t-mode", 1);
        t.controls.artifact_paths = vec!["out.txt".into()];
        store.insert_task(&t, &submitted()).unwrap();
        let c = store
            .set_task_delivery_mode(&t.id, DeliveryMode::Messages)
            .unwrap();
        assert_eq!(c.delivery_mode, DeliveryMode::Messages);
        let back = store.task(&t.id).unwrap().unwrap();
        assert_eq!(back.controls.delivery_mode, DeliveryMode::Messages);
        assert_eq!(back.controls.artifact_paths, vec!["out.txt".to_string()]);
        let err = store
            .set_task_delivery_mode(&TaskId("nope".into()), DeliveryMode::Events)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound);
    }

    #[test]
    fn artifacts_are_replaced_as_a_set() {
        let (store, id) = store_with_task();
        let a = |name: &str, state| Artifact {
            name: name.into(),
            state,
            bytes: Some(3),
            sha256: Some("ab".into()),
            reason: None,
            collected_at: 1,
        };
        store
            .replace_artifacts(
                &id,
                &[
                    a("b.txt", ArtifactState::Collected),
                    a("a", ArtifactState::Missing),
                ],
            )
            .unwrap();
        store
            .replace_artifacts(&id, &[a("c", ArtifactState::Blocked)])
            .unwrap();
        let got = store.artifacts(&id).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].name, "c");
        assert_eq!(got[0].state, ArtifactState::Blocked);
    }
}
