//! Legate's durable store: tasks, their events, and conversation contexts, in SQLite.
//!
//! The store is the single source of truth. Every state change and event is committed here
//! before any front is told (rule 3, "durable before told"). Several `legate` processes may
//! open one database at once (a CLI reads while a server writes): the database runs in WAL
//! mode with `synchronous=NORMAL`, a 5 s busy timeout and foreign keys on, and every write is
//! one short `BEGIN IMMEDIATE` transaction, so a writer waits for the write lock up front
//! instead of failing half-way with `SQLITE_BUSY`.
//!
//! This crate never decides anything about a task's lifecycle; it records what the engine
//! decided, atomically.
//!
//! Layout:
//! - [`Store`] (this file): opening, pragmas, the connection and its transactions;
//! - `schema`: the versioned migrations;
//! - `tasks`: task rows, lookup by id or prefix, listing;
//! - `events`: the per-task append-only event log (the hot path);
//! - `plans`: plan events stored as what changed, and rebuilt whole for readers;
//! - `recovery`: runners, cancel requests, failing orphaned tasks;
//! - `retention`: pruning finished tasks beyond the newest `retention`, with the
//!   conversations, messages and comparisons no task is left to name;
//! - `handover`: a dead runner's remote tasks, claimed by a live one (compare-and-set);
//! - `contexts`: conversation contexts (agent session and sandbox per context);
//! - `call_tasks`: tool calls answered as MCP tasks (their answers, and background ops);
//! - `reviews`: the review record of each copy task, as JSON the engine owns;
//! - `usage`: token usage added up by task, session and model;
//! - `memory`: private memory entries (per project and specialist) and tasks' snapshots;
//! - `groups`: groups of tasks, their nodes and who drives them;
//! - `messages`: messages sent to a conversation, one per client-chosen id;
//! - `peers`: peer messages between a group's nodes and their receipts;
//! - `approvals`: the approval queue (permission requests waiting for a supervisor);
//! - `decisions`: the audit trail of every permission decision;
//! - `ceilings`: caller-set ceilings (the test ceiling; table `policies`), replaced by
//!   compare-and-set;
//! - `tap`: the wire tap's frames of each tapped task, numbered like its events;
//! - `trace`: a task's W3C trace context, kept from its first turn;
//! - `sql`: mapping SQLite and JSON failures to [`legate_core::Error`].

mod approvals;
mod call_tasks;
mod ceilings;
mod comparisons;
mod contexts;
mod continuations;
mod decisions;
mod delivery;
mod events;
mod groups;
mod handover;
mod memory;
mod messages;
mod metrics;
mod peers;
mod plans;
mod recovery;
mod retention;
mod reviews;
mod schema;
mod sign_ins;
mod sql;
mod tap;
mod tasks;
mod trace;
mod usage;

pub use approvals::{
    Answer, Approval, ApprovalAnswer, ApprovalFilter, ApprovalState, AuditEntry, AuditFilter,
    MIN_APPROVAL_PREFIX, ToolCallSummary,
};
pub use call_tasks::{CallTaskRecord, CallTaskState};
pub use ceilings::{CeilingReplace, StoredCeiling};
pub use contexts::ContextRecord;
pub use delivery::NewMessage;
pub use groups::{GroupInsert, GroupRecord, NodeRecord};
pub use memory::{
    MemoryBounds, MemoryEntry, MemoryMeta, MemoryTotals, MemoryWrite, Snapshot, SnapshotSource,
    SnapshotText,
};
pub use messages::{MessageClaim, MessageRecord};
pub use metrics::{DecisionCount, DecisionTally, PendingApprovals, TaskCount, TokenSums};
pub use peers::{PeerCaps, PeerClaim, PeerMessageRecord, PeerState};
pub use recovery::EndedTasks;
pub use retention::Pruned;
pub use schema::SCHEMA_VERSION;
pub use sign_ins::Spent;
pub use tap::TapTotals;
pub use tasks::TaskFilter;
pub use trace::StoredTrace;
pub use usage::{TaskUsage, UsageFilter, UsageReport, UsageTotals};

use legate_core::{Error, ErrorCode, Result};
use rusqlite::{Connection, Transaction, TransactionBehavior};
use sql::SqlContext;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

/// How long a connection waits for another process's lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many prepared statements each connection keeps.
const STATEMENT_CACHE: usize = 64;

/// A handle on one SQLite database. Cheap to clone; clones share one connection.
///
/// Calls from threads of one process are serialized on that connection; other processes
/// open their own `Store` on the same file.
#[derive(Clone)]
pub struct Store {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    /// A second connection used only by [`Store::checkpoint`], opened on first use, so that
    /// checkpoints never hold the connection that writes events.
    checkpointer: Mutex<Option<Connection>>,
    path: Option<PathBuf>,
    /// Each task's last plan, for appending the next as what changed.
    plans: plans::PlanCache,
}

impl fmt::Debug for Store {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Store")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Opens (creating if needed) the database at `path` and brings its schema up to date.
    ///
    /// A missing parent directory is created with mode 0700; the database file is created
    /// with mode 0600 (an existing file readable by others is tightened to 0600).
    pub fn open(path: &Path) -> Result<Store> {
        prepare_file(path)?;
        let conn = Connection::open(path).map_err(|e| {
            let before = format!("the store could not open {}: ", path.display());
            Error::quoting_between(ErrorCode::StoreError, before, e, ".")
        })?;
        Self::setup(conn, Some(path.to_path_buf()))
    }

    /// Opens a private database in memory, for tests.
    pub fn open_in_memory() -> Result<Store> {
        let conn = Connection::open_in_memory().ctx("open an in-memory database")?;
        Self::setup(conn, None)
    }

    /// The file this store was opened on; `None` in memory.
    pub fn path(&self) -> Option<&Path> {
        self.inner.path.as_deref()
    }

    fn setup(mut conn: Connection, path: Option<PathBuf>) -> Result<Store> {
        configure(&conn, path.is_some())?;
        schema::migrate(&mut conn)?;
        Ok(Store {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                checkpointer: Mutex::new(None),
                path,
                plans: plans::PlanCache::default(),
            }),
        })
    }

    /// Copies committed pages from the write-ahead log into the database (a `PASSIVE`
    /// checkpoint: it never waits for readers or writers), on a connection of its own.
    ///
    /// SQLite would otherwise checkpoint inside whichever commit crosses the threshold,
    /// fsyncs included, and that commit's events would reach subscribers milliseconds late.
    /// Writers therefore only checkpoint once the log is large ([`AUTOCHECKPOINT_PAGES`]); a
    /// long-running process calls this from a background thread every second or so. A no-op
    /// in memory.
    pub fn checkpoint(&self) -> Result<()> {
        let Some(path) = &self.inner.path else {
            return Ok(());
        };
        let mut slot = self
            .inner
            .checkpointer
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if slot.is_none() {
            let conn = Connection::open(path).ctx("open the checkpoint connection")?;
            conn.busy_timeout(BUSY_TIMEOUT)
                .ctx("set the busy timeout")?;
            *slot = Some(conn);
        }
        if let Some(conn) = slot.as_ref() {
            conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
                .ctx("checkpoint the write-ahead log")?;
        }
        Ok(())
    }

    /// The connection. A panic in another thread cannot leave it mid-transaction (a dropped
    /// `Transaction` rolls back), so a poisoned lock is safe to take over.
    fn lock(&self) -> MutexGuard<'_, Connection> {
        self.inner
            .conn
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Runs `f` on the connection without taking the write lock.
    pub(crate) fn read<T>(&self, f: impl FnOnce(&Connection) -> Result<T>) -> Result<T> {
        let conn = self.lock();
        f(&conn)
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction; commits if it returns `Ok`, rolls back
    /// otherwise. `what` completes "the store could not …".
    pub(crate) fn write<T>(
        &self,
        what: &str,
        f: impl FnOnce(&Transaction<'_>) -> Result<T>,
    ) -> Result<T> {
        let mut conn = self.lock();
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .ctx(what)?;
        let out = f(&tx)?;
        tx.commit().ctx(what)?;
        Ok(out)
    }
}

/// Creates the parent directory (0700) and the file (0600) before SQLite opens it, so the
/// database never exists with a looser mode. SQLite gives `-wal` and `-shm` the file's mode.
fn prepare_file(path: &Path) -> Result<()> {
    let fail = |what: &str, e: std::io::Error| {
        Error::new(
            ErrorCode::StoreError,
            format!("the store could not {what} {}: {e}.", path.display()),
        )
    };
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.exists()
    {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder
            .create(parent)
            .map_err(|e| fail("create the directory for", e))?;
    }
    let mut options = std::fs::OpenOptions::new();
    options.read(true).write(true).create(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let file = options.open(path).map_err(|e| fail("create", e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = file.metadata().map_err(|e| fail("inspect", e))?;
        if meta.permissions().mode() & 0o077 != 0 {
            file.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(|e| fail("restrict the mode of", e))?;
        }
    }
    drop(file);
    Ok(())
}

/// Pages the write-ahead log may hold before a commit checkpoints it itself (about 40 MiB).
/// Below that, checkpoints are [`Store::checkpoint`]'s job, off the write path.
pub const AUTOCHECKPOINT_PAGES: i64 = 10_000;

/// Per-connection settings. The busy timeout comes first so that the others wait too.
fn configure(conn: &Connection, on_disk: bool) -> Result<()> {
    conn.busy_timeout(BUSY_TIMEOUT)
        .ctx("set the busy timeout")?;
    if on_disk {
        let mode = switch_to_wal(conn)?;
        if !mode.eq_ignore_ascii_case("wal") {
            tracing::warn!(journal_mode = %mode, "the store could not use WAL mode");
        }
    }
    conn.pragma_update(None, "synchronous", "NORMAL")
        .ctx("set synchronous mode")?;
    if on_disk {
        conn.pragma_update(None, "wal_autocheckpoint", AUTOCHECKPOINT_PAGES)
            .ctx("set the checkpoint threshold")?;
    }
    conn.pragma_update(None, "foreign_keys", "ON")
        .ctx("turn on foreign keys")?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(())
}

/// Switches to WAL. SQLite does not run the busy handler for this switch when another
/// connection is opening the same fresh file at that instant, so "database is locked" is
/// retried here, within the busy timeout.
fn switch_to_wal(conn: &Connection) -> Result<String> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get::<_, String>(0)) {
            Ok(mode) => return Ok(mode),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if matches!(
                    e.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(std::time::Duration::from_millis(50));
            }
            Err(e) => return Err(e).ctx("switch to WAL mode"),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn assert_send_sync_clone<T: Send + Sync + Clone + 'static>() {}

    #[test]
    fn store_is_clone_send_sync() {
        assert_send_sync_clone::<Store>();
    }

    #[test]
    fn pragmas_are_set_on_a_file_database() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("a/b/legate.db")).unwrap();
        store
            .read(|c| {
                let mode: String = c
                    .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(mode, "wal");
                let sync: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0)).unwrap();
                assert_eq!(sync, 1, "NORMAL");
                let fk: i64 = c
                    .query_row("PRAGMA foreign_keys", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(fk, 1);
                let busy: i64 = c
                    .query_row("PRAGMA busy_timeout", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(busy, 5000);
                let pages: i64 = c
                    .query_row("PRAGMA wal_autocheckpoint", [], |r| r.get(0))
                    .unwrap();
                assert_eq!(pages, AUTOCHECKPOINT_PAGES);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn a_checkpoint_moves_the_log_into_the_database_off_the_write_connection() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("legate.db");
        let store = Store::open(&path).unwrap();
        store
            .write("create a table", |tx| {
                tx.execute_batch("CREATE TABLE t(x INTEGER); INSERT INTO t VALUES (1), (2), (3);")
                    .ctx("fill it")
            })
            .unwrap();
        store.checkpoint().unwrap();
        // Everything committed is now in the main file: a log-free read sees it.
        let (busy, log, done): (i64, i64, i64) = store
            .read(|c| {
                c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                })
                .ctx("ask")
            })
            .unwrap();
        assert_eq!(busy, 0);
        assert_eq!(log, done, "every frame of the log was checkpointed");
        assert!(Store::open_in_memory().unwrap().checkpoint().is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn file_is_0600_and_new_parent_is_0700() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("home/legate.db");
        let _store = Store::open(&path).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&path), 0o600);
        assert_eq!(mode(&dir.path().join("home")), 0o700);
    }

    #[cfg(unix)]
    #[test]
    fn an_existing_loose_file_is_tightened() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("legate.db");
        std::fs::write(&path, b"").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let _store = Store::open(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_failed_write_rolls_back() {
        let store = Store::open_in_memory().unwrap();
        let err = store
            .write("test", |tx| {
                tx.execute(
                    "INSERT INTO contexts (context_id, agent, updated_at) VALUES ('c', 'a', 1)",
                    [],
                )
                .ctx("insert")?;
                Err::<(), _>(Error::internal("stop"))
            })
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::Internal);
        assert!(store.context("c").unwrap().is_none());
    }
}
