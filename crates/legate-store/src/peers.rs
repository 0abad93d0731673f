//! Peer messages between the nodes of a group (issue 16 §4): one row per `(group, message id)`
//! with its route, its text, the text's sha256 and its receipt state (`queued`, then `sent`
//! once the recipient's continuation turn was accepted; `queued` again when the recipient,
//! cut by a crash, is to run again in a new conversation).
//!
//! A claim is one `BEGIN IMMEDIATE` transaction that reads the stored row under the id and the
//! counts the caller's caps apply to, then inserts, so two processes recording at once can
//! neither store one id twice nor pass a cap together. This module records and counts; it
//! never decides whether a repeated id is a duplicate or a conflict, nor which routes are
//! allowed (the engine's `group::peer` does), and it never logs a message's text.

use crate::Store;
use crate::sql::{SqlContext, store_error};
use legate_core::{Result, Timestamp};
use rusqlite::{OptionalExtension, Row, Transaction, params};

/// Where a peer message is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerState {
    /// Recorded; waits for the recipient to be admitted and its current turn to end.
    Queued,
    /// The recipient's continuation turn carrying it was accepted (not proof it was read).
    Sent,
}

impl PeerState {
    /// The stored and wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            PeerState::Queued => "queued",
            PeerState::Sent => "sent",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        match s {
            "queued" => Some(PeerState::Queued),
            "sent" => Some(PeerState::Sent),
            _ => None,
        }
    }
}

/// One peer message, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerMessageRecord {
    /// Its place in the group's order (the receipts' cursor), assigned at insert.
    pub seq: i64,
    /// The group it belongs to.
    pub group_id: String,
    /// The id the sending agent chose.
    pub message_id: String,
    /// The node whose answer carried it.
    pub from_node: String,
    /// The node it is for.
    pub to_node: String,
    /// What it says.
    pub text: String,
    /// sha256 of `text`, lower-case hex.
    pub sha256: String,
    /// Its receipt state.
    pub state: PeerState,
    /// The task whose answer carried it.
    pub source_task: Option<String>,
    /// The recipient's task that carries it, once sent.
    pub task_id: Option<String>,
    /// When it was first recorded.
    pub created_at: Timestamp,
    /// When it was marked sent.
    pub sent_at: Option<Timestamp>,
}

/// The caps a claim is checked against, inside its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCaps {
    /// Messages one source node may send during the group.
    pub per_source: u32,
    /// Messages the whole group may carry.
    pub per_group: u32,
}

/// What [`Store::claim_peer_message`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeerClaim {
    /// The id was free; the message is stored as here (its `seq` assigned).
    Claimed(PeerMessageRecord),
    /// The id was taken in this group; here is what is stored under it, unchanged.
    Existing(PeerMessageRecord),
    /// Storing it would pass the source node's cap; nothing was stored.
    SourceFull,
    /// Storing it would pass the group's cap; nothing was stored.
    GroupFull,
}

const COLUMNS: &str = "seq, group_id, message_id, from_node, to_node, text, sha256, state, \
                       source_task, task_id, created_at, sent_at";

fn from_row(r: &Row<'_>) -> rusqlite::Result<PeerMessageRecord> {
    let state: String = r.get(7)?;
    let state = PeerState::parse(&state).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            7,
            rusqlite::types::Type::Text,
            "unknown peer message state".into(),
        )
    })?;
    Ok(PeerMessageRecord {
        seq: r.get(0)?,
        group_id: r.get(1)?,
        message_id: r.get(2)?,
        from_node: r.get(3)?,
        to_node: r.get(4)?,
        text: r.get(5)?,
        sha256: r.get(6)?,
        state,
        source_task: r.get(8)?,
        task_id: r.get(9)?,
        created_at: Timestamp(r.get(10)?),
        sent_at: r.get::<_, Option<i64>>(11)?.map(Timestamp),
    })
}

fn existing(
    conn: &rusqlite::Connection,
    group: &str,
    message_id: &str,
) -> Result<Option<PeerMessageRecord>> {
    conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM peer_messages WHERE group_id = ?1 AND message_id = ?2"
    ))
    .and_then(|mut st| st.query_row([group, message_id], from_row).optional())
    .ctx("read a peer message")
}

fn count(tx: &Transaction<'_>, sql: &str, args: &[&str]) -> Result<u32> {
    let n: i64 = tx
        .prepare_cached(sql)
        .and_then(|mut st| st.query_row(rusqlite::params_from_iter(args), |r| r.get(0)))
        .ctx("count peer messages")?;
    u32::try_from(n).map_err(|_| store_error("the store holds an impossible peer message count."))
}

impl Store {
    /// Stores `record` (its `seq`, `state`, `task_id` and `sent_at` are ignored: a new
    /// message is `queued`) unless its id is taken in its group, or a cap would be passed.
    /// One transaction.
    pub fn claim_peer_message(
        &self,
        record: &PeerMessageRecord,
        caps: PeerCaps,
    ) -> Result<PeerClaim> {
        self.write("store a peer message", |tx| {
            if let Some(found) = existing(tx, &record.group_id, &record.message_id)? {
                return Ok(PeerClaim::Existing(found));
            }
            let from_source = count(
                tx,
                "SELECT COUNT(*) FROM peer_messages WHERE group_id = ?1 AND from_node = ?2",
                &[&record.group_id, &record.from_node],
            )?;
            if from_source >= caps.per_source {
                return Ok(PeerClaim::SourceFull);
            }
            let in_group = count(
                tx,
                "SELECT COUNT(*) FROM peer_messages WHERE group_id = ?1",
                &[&record.group_id],
            )?;
            if in_group >= caps.per_group {
                return Ok(PeerClaim::GroupFull);
            }
            tx.prepare_cached(
                "INSERT INTO peer_messages (group_id, message_id, from_node, to_node, text, \
                 sha256, state, source_task, task_id, created_at, sent_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'queued', ?7, NULL, ?8, NULL)",
            )
            .and_then(|mut st| {
                st.execute(params![
                    record.group_id,
                    record.message_id,
                    record.from_node,
                    record.to_node,
                    record.text,
                    record.sha256,
                    record.source_task,
                    record.created_at.0,
                ])
            })
            .ctx("store a peer message")?;
            let stored = existing(tx, &record.group_id, &record.message_id)?
                .ok_or_else(|| store_error("the store lost a peer message it had just written."))?;
            Ok(PeerClaim::Claimed(stored))
        })
    }

    /// The group's message `message_id`, whatever its state.
    pub fn peer_message(
        &self,
        group_id: &str,
        message_id: &str,
    ) -> Result<Option<PeerMessageRecord>> {
        self.read(|conn| existing(conn, group_id, message_id))
    }

    /// The group's messages for `to_node` still `queued`, oldest first.
    pub fn queued_peer_messages(
        &self,
        group_id: &str,
        to_node: &str,
    ) -> Result<Vec<PeerMessageRecord>> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM peer_messages \
                 WHERE group_id = ?1 AND to_node = ?2 AND state = 'queued' ORDER BY seq"
            ))
            .and_then(|mut st| {
                st.query_map([group_id, to_node], from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .ctx("read queued peer messages")
        })
    }

    /// Marks a queued message `sent`, carried by `task_id`. Compare-and-set: returns false
    /// (and changes nothing) when it was not `queued` any more, or is unknown.
    pub fn mark_peer_message_sent(
        &self,
        group_id: &str,
        message_id: &str,
        task_id: &str,
        at: Timestamp,
    ) -> Result<bool> {
        self.write("mark a peer message sent", |tx| {
            let changed = tx
                .prepare_cached(
                    "UPDATE peer_messages SET state = 'sent', task_id = ?3, sent_at = ?4 \
                     WHERE group_id = ?1 AND message_id = ?2 AND state = 'queued'",
                )
                .and_then(|mut st| st.execute(params![group_id, message_id, task_id, at.0]))
                .ctx("mark a peer message sent")?;
            Ok(changed == 1)
        })
    }

    /// Queues again every message of the group sent to `to_node`, forgetting the turns that
    /// carried them, while that node is `interrupted`: it is to run again from its prompt in
    /// a new conversation, which has seen none of them. How many it queued again (none when
    /// none was sent, or the node is no longer interrupted: a resume that raced another).
    pub fn requeue_peer_messages_to(&self, group_id: &str, to_node: &str) -> Result<usize> {
        self.write("queue peer messages again", |tx| {
            tx.prepare_cached(
                "UPDATE peer_messages SET state = 'queued', task_id = NULL, sent_at = NULL \
                 WHERE group_id = ?1 AND to_node = ?2 AND state = 'sent' AND EXISTS ( \
                 SELECT 1 FROM group_nodes WHERE group_id = ?1 AND node_id = ?2 \
                 AND state = 'interrupted')",
            )
            .and_then(|mut st| st.execute(params![group_id, to_node]))
            .ctx("queue peer messages again")
        })
    }

    /// Up to `limit` of the group's messages after `after` (a `seq`), in order.
    pub fn peer_messages_after(
        &self,
        group_id: &str,
        after: i64,
        limit: u32,
    ) -> Result<Vec<PeerMessageRecord>> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {COLUMNS} FROM peer_messages WHERE group_id = ?1 AND seq > ?2 \
                 ORDER BY seq LIMIT ?3"
            ))
            .and_then(|mut st| {
                st.query_map(params![group_id, after, limit], from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .ctx("read peer messages")
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const CAPS: PeerCaps = PeerCaps {
        per_source: 2,
        per_group: 3,
    };

    fn record(group: &str, id: &str, from: &str, text: &str) -> PeerMessageRecord {
        PeerMessageRecord {
            seq: 0,
            group_id: group.into(),
            message_id: id.into(),
            from_node: from.into(),
            to_node: "check".into(),
            text: text.into(),
            sha256: legate_core::remote::sha256_hex(text.as_bytes()),
            state: PeerState::Sent,
            source_task: Some("t1".into()),
            task_id: Some("ignored".into()),
            created_at: Timestamp(5),
            sent_at: None,
        }
    }

    #[test]
    fn a_claim_is_stored_queued_once_and_read_back_unchanged() {
        let store = Store::open_in_memory().unwrap();
        let PeerClaim::Claimed(first) = store
            .claim_peer_message(&record("g", "m1", "a", "hi"), CAPS)
            .unwrap()
        else {
            panic!("not claimed");
        };
        assert_eq!(first.state, PeerState::Queued);
        assert_eq!(first.task_id, None);
        match store
            .claim_peer_message(&record("g", "m1", "a", "other"), CAPS)
            .unwrap()
        {
            PeerClaim::Existing(found) => assert_eq!(found, first),
            other => panic!("{other:?}"),
        }
        // The same id in another group is another message.
        assert!(matches!(
            store
                .claim_peer_message(&record("h", "m1", "a", "hi"), CAPS)
                .unwrap(),
            PeerClaim::Claimed(_)
        ));
    }

    #[test]
    fn caps_are_counted_per_source_then_per_group() {
        let store = Store::open_in_memory().unwrap();
        for id in ["1", "2"] {
            assert!(matches!(
                store
                    .claim_peer_message(&record("g", id, "a", id), CAPS)
                    .unwrap(),
                PeerClaim::Claimed(_)
            ));
        }
        assert_eq!(
            store
                .claim_peer_message(&record("g", "3", "a", "x"), CAPS)
                .unwrap(),
            PeerClaim::SourceFull
        );
        assert!(matches!(
            store
                .claim_peer_message(&record("g", "3", "b", "x"), CAPS)
                .unwrap(),
            PeerClaim::Claimed(_)
        ));
        assert_eq!(
            store
                .claim_peer_message(&record("g", "4", "c", "x"), CAPS)
                .unwrap(),
            PeerClaim::GroupFull
        );
        assert_eq!(store.peer_messages_after("g", 0, 20).unwrap().len(), 3);
    }

    #[test]
    fn sent_is_compare_and_set_and_pages_follow_seq() {
        let store = Store::open_in_memory().unwrap();
        store
            .claim_peer_message(&record("g", "m1", "a", "one"), CAPS)
            .unwrap();
        store
            .claim_peer_message(&record("g", "m2", "b", "two"), CAPS)
            .unwrap();
        let queued = store.queued_peer_messages("g", "check").unwrap();
        assert_eq!(
            queued
                .iter()
                .map(|m| m.message_id.as_str())
                .collect::<Vec<_>>(),
            ["m1", "m2"]
        );
        assert!(
            store
                .mark_peer_message_sent("g", "m1", "t9", Timestamp(9))
                .unwrap()
        );
        assert!(
            !store
                .mark_peer_message_sent("g", "m1", "t10", Timestamp(10))
                .unwrap()
        );
        assert!(
            !store
                .mark_peer_message_sent("g", "nope", "t10", Timestamp(10))
                .unwrap()
        );
        let page = store.peer_messages_after("g", 0, 1).unwrap();
        assert_eq!(page[0].state, PeerState::Sent);
        assert_eq!(page[0].task_id.as_deref(), Some("t9"));
        let next = store.peer_messages_after("g", page[0].seq, 20).unwrap();
        assert_eq!(next.len(), 1);
        assert_eq!(next[0].message_id, "m2");
        assert_eq!(store.queued_peer_messages("g", "check").unwrap().len(), 1);
    }

    #[test]
    fn requeueing_an_interrupted_recipient_queues_its_sent_messages_only() {
        use crate::NodeRecord;
        use crate::groups::tests::{group, node};
        let store = Store::open_in_memory().unwrap();
        let interrupted = |id: &str, position| NodeRecord {
            state: "interrupted".into(),
            ..node(id, position)
        };
        store
            .insert_group(
                &group("g"),
                &[interrupted("check", 0), interrupted("elsewhere", 1)],
            )
            .unwrap();
        let running = NodeRecord {
            state: "running".into(),
            ..node("check", 0)
        };
        store.insert_group(&group("h"), &[running]).unwrap();
        let mut other = record("g", "m3", "a", "three");
        other.to_node = "elsewhere".into();
        for r in [
            record("g", "m1", "a", "one"),
            record("g", "m2", "b", "two"),
            other,
            record("h", "m1", "a", "one"),
        ] {
            store.claim_peer_message(&r, CAPS).unwrap();
        }
        for (group, id) in [("g", "m1"), ("g", "m3"), ("h", "m1")] {
            assert!(
                store
                    .mark_peer_message_sent(group, id, "t9", Timestamp(9))
                    .unwrap()
            );
        }
        // m1 sent, m2 still queued: only m1 changes.
        assert_eq!(store.requeue_peer_messages_to("g", "check").unwrap(), 1);
        let queued = store.queued_peer_messages("g", "check").unwrap();
        assert_eq!(
            queued
                .iter()
                .map(|m| (m.message_id.as_str(), m.task_id.as_deref(), m.sent_at))
                .collect::<Vec<_>>(),
            [("m1", None, None), ("m2", None, None)]
        );
        // Another recipient's and another group's stay sent; a recipient no longer
        // interrupted (a resume that raced another moved it on) is left alone.
        assert_eq!(store.requeue_peer_messages_to("h", "check").unwrap(), 0);
        let sent = |group: &str| {
            store
                .peer_messages_after(group, 0, 20)
                .unwrap()
                .into_iter()
                .filter(|m| m.state == PeerState::Sent)
                .map(|m| m.message_id)
                .collect::<Vec<_>>()
        };
        assert_eq!(sent("g"), ["m3"]);
        assert_eq!(sent("h"), ["m1"]);
        assert_eq!(store.requeue_peer_messages_to("g", "check").unwrap(), 0);
    }
}
