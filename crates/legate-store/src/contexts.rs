//! Conversation contexts: for each context id, the agent it talks to, the agent session to
//! resume, and the sandbox the context's tasks share.

use crate::Store;
use crate::sql::{SqlContext, clamp_i64, store_error};
use legate_core::{Result, Timestamp};
use rusqlite::{OptionalExtension, Row, params};
use std::path::PathBuf;

/// One conversation context, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextRecord {
    /// The context id (A2A `contextId`).
    pub context_id: String,
    /// The configured agent's name.
    pub agent: String,
    /// The agent session later tasks resume, once known.
    pub session_id: Option<String>,
    /// The context's sandbox, when it has one.
    pub sandbox_root: Option<PathBuf>,
    /// Whether the agent that opened `session_id` announced it can continue it later
    /// (`session/resume` or `session/load`), as it said then; `None` when not recorded.
    pub resumable: Option<bool>,
    /// When the record last changed.
    pub updated_at: Timestamp,
}

impl ContextRecord {
    /// A context of `agent` with nothing recorded yet, changed now.
    pub fn new(context_id: impl Into<String>, agent: impl Into<String>) -> Self {
        Self {
            context_id: context_id.into(),
            agent: agent.into(),
            session_id: None,
            sandbox_root: None,
            resumable: None,
            updated_at: Timestamp::now(),
        }
    }
}

fn from_row(r: &Row<'_>) -> rusqlite::Result<ContextRecord> {
    Ok(ContextRecord {
        context_id: r.get(0)?,
        agent: r.get(1)?,
        session_id: r.get(2)?,
        sandbox_root: r.get::<_, Option<String>>(3)?.map(PathBuf::from),
        updated_at: Timestamp(r.get(4)?),
        resumable: r.get(5)?,
    })
}

impl Store {
    /// The context with this id, if any.
    pub fn context(&self, id: &str) -> Result<Option<ContextRecord>> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT context_id, agent, session_id, sandbox_root, updated_at, resumable \
                 FROM contexts WHERE context_id = ?1",
            )
            .and_then(|mut st| st.query_row([id], from_row).optional())
            .ctx("read a context")
        })
    }

    /// Stores the record, replacing any record with the same context id.
    pub fn put_context(&self, r: &ContextRecord) -> Result<()> {
        let sandbox_root = r
            .sandbox_root
            .as_deref()
            .map(|p| {
                p.to_str().ok_or_else(|| {
                    store_error("the sandbox root is not valid UTF-8 and cannot be stored.")
                })
            })
            .transpose()?;
        self.write("store a context", |tx| {
            tx.prepare_cached(
                "INSERT INTO contexts (context_id, agent, session_id, sandbox_root, updated_at, resumable) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (context_id) DO UPDATE SET \
                 agent = excluded.agent, session_id = excluded.session_id, \
                 sandbox_root = excluded.sandbox_root, updated_at = excluded.updated_at, \
                 resumable = excluded.resumable",
            )
            .and_then(|mut st| {
                st.execute(params![
                    r.context_id,
                    r.agent,
                    r.session_id,
                    sandbox_root,
                    r.updated_at.0,
                    r.resumable
                ])
            })
            .ctx("store a context")?;
            Ok(())
        })
    }

    /// Whether any context records `root` as its sandbox (a warm session's sandbox, once
    /// handed to a task, is its context's; the start-up sweep must leave it).
    pub fn sandbox_in_use(&self, root: &std::path::Path) -> Result<bool> {
        let root = root.to_string_lossy().into_owned();
        self.read(|conn| {
            conn.prepare_cached("SELECT 1 FROM contexts WHERE sandbox_root = ?1 LIMIT 1")
                .and_then(|mut st| st.exists([root.as_str()]))
                .ctx("look a sandbox up")
        })
    }

    /// The sandbox of every context that records one, in no particular order: what a sweep
    /// of unrecorded sandboxes must leave.
    pub fn recorded_sandboxes(&self) -> Result<Vec<PathBuf>> {
        self.read(|conn| {
            conn.prepare_cached("SELECT sandbox_root FROM contexts WHERE sandbox_root IS NOT NULL")
                .and_then(|mut st| {
                    st.query_map([], |r| r.get::<_, String>(0).map(PathBuf::from))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("list the recorded sandboxes")
        })
    }

    /// Up to `limit` contexts, most recently updated first.
    pub fn list_contexts(&self, limit: usize) -> Result<Vec<ContextRecord>> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT context_id, agent, session_id, sandbox_root, updated_at, resumable \
                 FROM contexts ORDER BY updated_at DESC, context_id LIMIT ?1",
            )
            .and_then(|mut st| {
                st.query_map([clamp_i64(limit)], from_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .ctx("list contexts")
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_sandbox_is_in_use_and_another_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("db")).unwrap();
        let mut r = record("c1", 1);
        r.sandbox_root = Some(PathBuf::from("/home/x/.legate/sandboxes/warm-abc-123456"));
        store.put_context(&r).unwrap();
        assert!(
            store
                .sandbox_in_use(r.sandbox_root.as_deref().unwrap())
                .unwrap()
        );
        assert!(
            !store
                .sandbox_in_use(std::path::Path::new(
                    "/home/x/.legate/sandboxes/warm-abc-654321"
                ))
                .unwrap()
        );
        store.put_context(&record("c2", 2)).unwrap();
        assert_eq!(
            store.recorded_sandboxes().unwrap(),
            [r.sandbox_root.clone().unwrap()]
        );
    }

    fn record(id: &str, at: i64) -> ContextRecord {
        ContextRecord {
            context_id: id.into(),
            agent: "claude".into(),
            session_id: None,
            sandbox_root: None,
            updated_at: Timestamp(at),
            resumable: None,
        }
    }

    #[test]
    fn put_is_an_upsert_and_list_is_newest_first() {
        let store = Store::open_in_memory().unwrap();
        assert_eq!(store.context("a").unwrap(), None);
        store.put_context(&record("a", 1)).unwrap();
        store.put_context(&record("b", 2)).unwrap();
        let mut a = record("a", 3);
        a.session_id = Some("sess".into());
        a.resumable = Some(true);
        a.sandbox_root = Some("/home/u/.legate/sandboxes/a".into());
        store.put_context(&a).unwrap();
        assert_eq!(store.context("a").unwrap(), Some(a.clone()));
        let ids: Vec<_> = store
            .list_contexts(10)
            .unwrap()
            .into_iter()
            .map(|r| r.context_id)
            .collect();
        assert_eq!(ids, ["a", "b"]);
        assert_eq!(store.list_contexts(1).unwrap(), [a]);
    }
}
