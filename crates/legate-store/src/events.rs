//! The per-task event log: append-only, numbered from 1 without gaps.
//!
//! Appending is the hot path. A batch is one transaction: one lookup of the last `seq`
//! (served by the `(task_id, seq)` primary key), then one cached `INSERT` per event. Because
//! every write transaction is `BEGIN IMMEDIATE`, the lookup and the inserts see no other
//! writer, so appenders in other threads or processes can never produce a gap or a
//! duplicate. A payload is the event kind's JSON, `type` tag included; the `type` column
//! repeats the tag for queries. A plan is stored as what changed since the task's previous
//! plan (`plans`), and read back whole.

use crate::Store;
use crate::plans::{PlanCache, PlanReader, PlanWriter};
use crate::sql::{SqlContext, clamp_i64, store_error, task_not_found, to_i64, to_u64};
use crate::tasks::exists;
use legate_core::{Event, EventKind, Result, TaskId, Timestamp};
use rusqlite::Connection;

/// Appends `kinds` to the task's log, stamped `at`, inside the caller's write transaction.
pub(crate) fn append_in(
    tx: &Connection,
    task_id: &TaskId,
    kinds: &[EventKind],
    at: Timestamp,
) -> Result<Vec<Event>> {
    append_with(tx, None, task_id, kinds, at)
}

/// [`append_in`], with the appender's cache of each task's last plan.
fn append_with(
    tx: &Connection,
    plans: Option<&PlanCache>,
    task_id: &TaskId,
    kinds: &[EventKind],
    at: Timestamp,
) -> Result<Vec<Event>> {
    if kinds.is_empty() {
        return Ok(Vec::new());
    }
    let first = append_rows(tx, plans, task_id, kinds, at)?;
    Ok(numbered(task_id, first, at, kinds.iter().cloned()))
}

/// `kinds` as the events they were stored as, numbered from `first`.
fn numbered(
    task_id: &TaskId,
    first: u64,
    at: Timestamp,
    kinds: impl Iterator<Item = EventKind>,
) -> Vec<Event> {
    (first..)
        .zip(kinds)
        .map(|(seq, kind)| Event {
            task_id: task_id.clone(),
            seq,
            at,
            kind,
        })
        .collect()
}

/// Writes `kinds` as the task's next rows; the number of the first.
fn append_rows(
    tx: &Connection,
    plans: Option<&PlanCache>,
    task_id: &TaskId,
    kinds: &[EventKind],
    at: Timestamp,
) -> Result<u64> {
    let last = last_seq_in(tx, task_id)?;
    let mut insert = tx
        .prepare_cached(
            "INSERT INTO events (task_id, seq, at, type, payload) VALUES (?1, ?2, ?3, ?4, ?5)",
        )
        .ctx("append events")?;
    let mut writer = PlanWriter::new(plans);
    for (seq, kind) in (last + 1..).zip(kinds) {
        let changes = match kind {
            EventKind::Plan { entries } => writer.payload(tx, task_id, seq, entries)?,
            _ => None,
        };
        let payload = match changes {
            Some(changes) => changes,
            None => serde_json::to_string(kind).map_err(|_| {
                store_error(format!(
                    "a {} event of task {task_id} could not be encoded.",
                    kind.type_name()
                ))
            })?,
        };
        insert
            .execute((
                task_id.as_str(),
                to_i64(seq, "the event number")?,
                at.0,
                kind.type_name(),
                payload,
            ))
            .ctx("append events")?;
    }
    writer.finish(task_id);
    Ok(last + 1)
}

pub(crate) fn last_seq_in(conn: &Connection, task_id: &TaskId) -> Result<u64> {
    let last: i64 = conn
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM events WHERE task_id = ?1")
        .and_then(|mut st| st.query_row([task_id.as_str()], |r| r.get(0)))
        .ctx("read the last event number")?;
    to_u64(last, "event number")
}

impl Store {
    /// Appends events to a task's log in one transaction, numbered after the last one, and
    /// returns them as stored (with `seq` and `at`). `TASK_NOT_FOUND` if there is no such
    /// task. An empty slice does nothing and returns nothing.
    pub fn append_events(&self, task_id: &TaskId, events: &[EventKind]) -> Result<Vec<Event>> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let (first, at) = self.append_batch(task_id, events)?;
        Ok(numbered(task_id, first, at, events.iter().cloned()))
    }

    /// [`Store::append_events`] for events the caller gives up: they are returned as stored
    /// without being copied (a plan event is as big as the agent's plan).
    pub fn append_events_owned(
        &self,
        task_id: &TaskId,
        events: Vec<EventKind>,
    ) -> Result<Vec<Event>> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let (first, at) = self.append_batch(task_id, &events)?;
        Ok(numbered(task_id, first, at, events.into_iter()))
    }

    /// One batch's transaction: the number of its first event, and the time it was stamped
    /// with (taken inside the transaction, so that a task's times follow its numbers).
    fn append_batch(&self, task_id: &TaskId, events: &[EventKind]) -> Result<(u64, Timestamp)> {
        self.write_events("append events", task_id, |tx, plans| {
            let at = Timestamp::now();
            Ok((append_rows(tx, Some(plans), task_id, events, at)?, at))
        })
    }

    /// One transaction that appends to the events of task `task_id` (`body`, given the
    /// transaction and the plan cache): `TASK_NOT_FOUND` if there is no such task; the plan
    /// cache cleared when it fails (its rollback may have taken rows the cache knows).
    fn write_events<T>(
        &self,
        what: &str,
        task_id: &TaskId,
        body: impl FnOnce(&rusqlite::Transaction<'_>, &PlanCache) -> Result<T>,
    ) -> Result<T> {
        let plans = &self.inner.plans;
        let written = self.write(what, |tx| {
            if !exists(tx, task_id.as_str())? {
                return Err(task_not_found(task_id.as_str()));
            }
            body(tx, plans)
        });
        if written.is_err() {
            plans.clear();
        }
        written
    }

    /// Up to `limit` events of the task with `seq > after`, in ascending order. An unknown
    /// task has no events.
    pub fn events(&self, task_id: &TaskId, after: u64, limit: usize) -> Result<Vec<Event>> {
        let after = i64::try_from(after).unwrap_or(i64::MAX);
        self.read(|conn| {
            let rows = conn
                .prepare_cached(
                    "SELECT seq, at, type, payload FROM events WHERE task_id = ?1 AND seq > ?2 \
                     ORDER BY seq LIMIT ?3",
                )
                .and_then(|mut st| {
                    st.query_map((task_id.as_str(), after, clamp_i64(limit)), |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, i64>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, String>(3)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("read events")?;
            let mut plans = PlanReader::default();
            rows.into_iter()
                .map(|(seq, at, kind, payload)| {
                    let seq = to_u64(seq, "event number")?;
                    let kind = plans.event(conn, task_id, seq, &kind, &payload)?;
                    Ok(Event {
                        task_id: task_id.clone(),
                        seq,
                        at: Timestamp(at),
                        kind,
                    })
                })
                .collect()
        })
    }

    /// How many events the task has and the bytes of their payloads (as stored, JSON); both
    /// 0 when it has none (or does not exist). What the engine's output limits start a turn
    /// from.
    pub fn event_totals(&self, task_id: &TaskId) -> Result<(u64, u64)> {
        self.read(|conn| {
            let (count, bytes): (i64, i64) = conn
                .prepare_cached(
                    "SELECT COUNT(*), COALESCE(SUM(LENGTH(CAST(payload AS BLOB))), 0) \
                     FROM events WHERE task_id = ?1",
                )
                .and_then(|mut st| st.query_row([task_id.as_str()], |r| Ok((r.get(0)?, r.get(1)?))))
                .ctx("count a task's events")?;
            Ok((to_u64(count, "event count")?, to_u64(bytes, "event bytes")?))
        })
    }

    /// Whether the task has a `notice` event whose `detail.event` is `event`; `false` for an
    /// unknown task.
    pub fn has_notice(&self, task_id: &TaskId, event: &str) -> Result<bool> {
        self.read(|conn| notice_held(conn, task_id, event, None))
    }

    /// Appends `events` to the task unless it has a notice whose `detail.event` is `marker`
    /// already, looked for in the same transaction (of two writers racing, one appends).
    /// Whether it appended. `TASK_NOT_FOUND` if there is no such task.
    pub fn append_events_unless_notice(
        &self,
        task_id: &TaskId,
        marker: &str,
        events: &[EventKind],
    ) -> Result<bool> {
        self.write_events("append events once", task_id, |tx, plans| {
            if notice_held(tx, task_id, marker, None)? {
                return Ok(false);
            }
            append_rows(tx, Some(plans), task_id, events, Timestamp::now())?;
            Ok(true)
        })
    }

    /// Appends each of `notices` (notices whose `detail.event` is `event`) that the task
    /// does not hold already, with the same event and message, in one transaction (of two
    /// writers racing, one appends each). Returns how many it appended. `TASK_NOT_FOUND` if
    /// there is no such task.
    pub fn append_new_notices(
        &self,
        task_id: &TaskId,
        event: &str,
        notices: &[EventKind],
    ) -> Result<usize> {
        if notices.is_empty() {
            return Ok(0);
        }
        self.write_events("append new notices", task_id, |tx, plans| {
            let mut new: Vec<EventKind> = Vec::new();
            for notice in notices {
                let EventKind::Notice { message, .. } = notice else {
                    continue;
                };
                if !notice_held(tx, task_id, event, Some(message))? && !new.contains(notice) {
                    new.push(notice.clone());
                }
            }
            if !new.is_empty() {
                append_rows(tx, Some(plans), task_id, &new, Timestamp::now())?;
            }
            Ok(new.len())
        })
    }

    /// The number of the task's last event; 0 when it has none (or does not exist).
    pub fn last_seq(&self, task_id: &TaskId) -> Result<u64> {
        self.read(|conn| last_seq_in(conn, task_id))
    }
}

/// Whether the task has a notice whose `detail.event` is `event` (and, given, whose message
/// is `message`), read on `conn` (a transaction's, too).
fn notice_held(
    conn: &Connection,
    task_id: &TaskId,
    event: &str,
    message: Option<&str>,
) -> Result<bool> {
    conn.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM events WHERE task_id = ?1 AND type = 'notice' \
         AND json_extract(payload, '$.detail.event') = ?2 \
         AND (?3 IS NULL OR json_extract(payload, '$.message') = ?3))",
    )
    .and_then(|mut st| {
        st.query_row(rusqlite::params![task_id.as_str(), event, message], |r| {
            r.get(0)
        })
    })
    .ctx("look for a notice")
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use crate::tasks::tests::{submitted, task};
    use legate_core::ErrorCode;
    use proptest::prelude::*;

    fn message(i: usize) -> EventKind {
        EventKind::Message {
            text: format!("chunk {i}"),
        }
    }

    #[test]
    fn appends_are_numbered_after_the_last_event() {
        let store = Store::open_in_memory().unwrap();
        let t = task("ev-1", 1);
        store.insert_task(&t, &submitted()).unwrap();
        let batch: Vec<_> = (0..100).map(message).collect();
        let stored = store.append_events(&t.id, &batch).unwrap();
        assert_eq!(stored.len(), 100);
        assert_eq!(stored[0].seq, 2);
        assert_eq!(stored[99].seq, 101);
        assert_eq!(stored[5].kind, message(5));
        let more = store.append_events(&t.id, &[message(100)]).unwrap();
        assert_eq!(more[0].seq, 102);
        assert_eq!(store.last_seq(&t.id).unwrap(), 102);
        assert!(store.append_events(&t.id, &[]).unwrap().is_empty());

        let read = store.events(&t.id, 0, 1000).unwrap();
        assert_eq!(read.len(), 102);
        assert!(read.iter().zip(1..).all(|(e, n)| e.seq == n));
        assert_eq!(read[0].kind, submitted());
        assert_eq!(&read[1..101], &stored[..]);

        let page = store.events(&t.id, 50, 10).unwrap();
        assert_eq!(
            page.iter().map(|e| e.seq).collect::<Vec<_>>(),
            (51..=60).collect::<Vec<_>>()
        );
        assert!(store.events(&t.id, 102, 10).unwrap().is_empty());
        assert!(store.events(&t.id, u64::MAX, 10).unwrap().is_empty());
    }

    #[test]
    fn a_notice_is_found_by_its_detail_event_only() {
        let store = Store::open_in_memory().unwrap();
        let t = task("ev-notice", 1);
        store.insert_task(&t, &submitted()).unwrap();
        let notice = |event: serde_json::Value| EventKind::Notice {
            message: "peer-message-refused".into(),
            detail: serde_json::json!({"event": event}),
        };
        assert!(!store.has_notice(&t.id, "peer-message-refused").unwrap());
        // A message saying the name, a notice of another event, one with no detail: none is it.
        store
            .append_events(
                &t.id,
                &[
                    message(0),
                    notice(serde_json::json!("other")),
                    notice(serde_json::json!(["peer-message-refused"])),
                    EventKind::Notice {
                        message: "peer-message-refused".into(),
                        detail: serde_json::Value::Null,
                    },
                ],
            )
            .unwrap();
        assert!(!store.has_notice(&t.id, "peer-message-refused").unwrap());
        store
            .append_events(&t.id, &[notice(serde_json::json!("peer-message-refused"))])
            .unwrap();
        assert!(store.has_notice(&t.id, "peer-message-refused").unwrap());
        assert!(
            !store
                .has_notice(&TaskId("nope".into()), "peer-message-refused")
                .unwrap()
        );
        // New notices by their event and message, both: each once.
        let said = |m: &str, event: &str| EventKind::Notice {
            message: m.into(),
            detail: serde_json::json!({"event": event}),
        };
        let first = [
            said("peer message \"m\" refused", "peer-message-refused"),
            said("peer message \"n\" refused", "peer-message-refused"),
        ];
        assert_eq!(
            store
                .append_new_notices(&t.id, "peer-message-refused", &first)
                .unwrap(),
            2
        );
        let again = [
            said("peer message \"n\" refused", "peer-message-refused"),
            said("peer message \"o\" refused", "peer-message-refused"),
            said("peer message \"o\" refused", "peer-message-refused"),
        ];
        assert_eq!(
            store
                .append_new_notices(&t.id, "peer-message-refused", &again)
                .unwrap(),
            1
        );
        // A message held under another event is no reason to leave one out.
        assert_eq!(
            store
                .append_new_notices(
                    &t.id,
                    "other",
                    &[said("peer message \"m\" refused", "other")]
                )
                .unwrap(),
            1
        );
        // Appended once: the second writer finds the first one's marker.
        let marked = [notice(serde_json::json!("settled"))];
        assert!(
            store
                .append_events_unless_notice(&t.id, "settled", &marked)
                .unwrap()
        );
        let after = store.events(&t.id, 0, 100).unwrap();
        assert!(
            !store
                .append_events_unless_notice(&t.id, "settled", &marked)
                .unwrap()
        );
        assert_eq!(store.events(&t.id, 0, 100).unwrap(), after);
        assert_eq!(
            store
                .append_events_unless_notice(&TaskId("nope".into()), "settled", &marked)
                .unwrap_err()
                .code,
            legate_core::ErrorCode::TaskNotFound
        );
        assert_eq!(
            store
                .append_new_notices(&TaskId("nope".into()), "other", &first)
                .unwrap_err()
                .code,
            legate_core::ErrorCode::TaskNotFound
        );
    }

    #[test]
    fn appending_to_a_missing_task_is_task_not_found() {
        let store = Store::open_in_memory().unwrap();
        let err = store
            .append_events(&TaskId("nope".into()), &[message(0)])
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::TaskNotFound);
        assert_eq!(store.last_seq(&TaskId("nope".into())).unwrap(), 0);
    }

    #[test]
    fn the_type_column_holds_the_tag() {
        let store = Store::open_in_memory().unwrap();
        let t = task("ev-type", 1);
        store.insert_task(&t, &submitted()).unwrap();
        store
            .append_events(&t.id, &[EventKind::Stderr { line: "x".into() }])
            .unwrap();
        let types: Vec<String> = store
            .read(|c| {
                let mut st = c.prepare("SELECT type FROM events ORDER BY seq").unwrap();
                let rows = st.query_map([], |r| r.get(0)).unwrap();
                Ok(rows.map(|r| r.unwrap()).collect())
            })
            .unwrap();
        assert_eq!(types, ["status", "stderr"]);
    }

    #[test]
    fn events_of_two_tasks_are_numbered_separately() {
        let store = Store::open_in_memory().unwrap();
        let (a, b) = (task("ev-a", 1), task("ev-b", 2));
        store.insert_task(&a, &submitted()).unwrap();
        store.insert_task(&b, &submitted()).unwrap();
        store
            .append_events(&a.id, &[message(0), message(1)])
            .unwrap();
        let on_b = store.append_events(&b.id, &[message(2)]).unwrap();
        assert_eq!(on_b[0].seq, 2);
        assert_eq!(store.last_seq(&a.id).unwrap(), 3);
    }

    #[test]
    fn totals_count_a_tasks_events_and_their_payload_bytes() {
        let store = Store::open_in_memory().unwrap();
        let (a, b) = (task("tot-a", 1), task("tot-b", 2));
        store.insert_task(&a, &submitted()).unwrap();
        store.insert_task(&b, &submitted()).unwrap();
        let kinds = [
            message(1),
            EventKind::Message {
                text: "é\u{0}".into(),
            },
        ];
        store.append_events(&a.id, &kinds).unwrap();
        let bytes: u64 = std::iter::once(submitted())
            .chain(kinds)
            .map(|k| serde_json::to_string(&k).unwrap().len() as u64)
            .sum();
        assert_eq!(store.event_totals(&a.id).unwrap(), (3, bytes));
        let one = serde_json::to_string(&submitted()).unwrap().len() as u64;
        assert_eq!(store.event_totals(&b.id).unwrap(), (1, one));
        assert_eq!(store.event_totals(&TaskId("none".into())).unwrap(), (0, 0));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn message_and_tool_payloads_round_trip(
            texts in proptest::collection::vec(any::<String>(), 1..8),
            nul_text in "[a-z\\x00\u{1F600}\u{FEFF}]{0,16}",
        ) {
            let store = Store::open_in_memory().unwrap();
            let t = task("prop", 1);
            store.insert_task(&t, &submitted()).unwrap();
            let mut kinds: Vec<EventKind> = texts
                .iter()
                .map(|text| EventKind::Message { text: text.clone() })
                .collect();
            kinds.push(EventKind::Message { text: format!("\0{nul_text}\0") });
            kinds.push(EventKind::Thought { text: nul_text.clone() });
            kinds.push(EventKind::Notice {
                message: nul_text.clone(),
                detail: serde_json::json!({ "k": nul_text, "n": [1, 2.5, null] }),
            });
            let stored = store.append_events(&t.id, &kinds).unwrap();
            let read = store.events(&t.id, 1, usize::MAX).unwrap();
            prop_assert_eq!(&read, &stored);
            let back: Vec<EventKind> = read.into_iter().map(|e| e.kind).collect();
            prop_assert_eq!(back, kinds);
        }
    }
}
