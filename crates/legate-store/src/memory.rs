//! Private memory (issue 17): one text per project (its canonical git root) and specialist
//! id, and the snapshots of those texts each task was given.
//!
//! This module owns the two tables and their transactions: a write or a removal is a
//! compare-and-swap on the entry's sha256 inside one `BEGIN IMMEDIATE` transaction, so two
//! processes on one database never both win, and the limits (entries and bytes, over the
//! whole store) are checked in that same transaction. A snapshot copies texts into
//! `memory_snapshots` under the task's id, from the entries or from another task's
//! snapshots, so that replacing or removing an entry never changes what a task was given.
//!
//! It never hashes, validates or judges a text (the engine does: ids, sizes, credentials,
//! the sha256 it passes in), and never puts a text into an error.

use crate::Store;
use crate::sql::{SqlContext, to_i64, to_u64};
use legate_core::{Result, TaskId, Timestamp};
use rusqlite::{OptionalExtension, Row, Transaction, params};

/// An entry's metadata: everything but its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryMeta {
    /// The canonical git root it belongs to.
    pub project: String,
    /// The specialist id.
    pub specialist: String,
    /// The sha256 (lowercase hex) of its text, as written.
    pub sha256: String,
    /// The text's size in UTF-8 bytes.
    pub bytes: u64,
    /// When it was first written.
    pub created_at: Timestamp,
    /// When its text last changed.
    pub updated_at: Timestamp,
}

/// An entry with its text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryEntry {
    /// Its metadata.
    pub meta: MemoryMeta,
    /// The text.
    pub text: String,
}

/// How much the whole store holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MemoryTotals {
    /// Entries, over every project.
    pub entries: u64,
    /// Their texts' UTF-8 bytes.
    pub bytes: u64,
}

/// The ceilings a write is checked against, in its transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryBounds {
    /// Entries over the whole store.
    pub max_entries: u64,
    /// UTF-8 bytes over the whole store.
    pub max_bytes: u64,
}

/// What a compare-and-swap write found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemoryWrite {
    /// The text is stored.
    Written,
    /// The entry is not at the expected version: its current sha256 (`None`: no entry).
    /// Nothing changed.
    Changed {
        /// The sha256 stored now, if any.
        current: Option<String>,
    },
    /// A new entry would pass the entry limit. Nothing changed.
    TooManyEntries {
        /// Entries stored now.
        entries: u64,
    },
    /// The store's texts would pass the byte limit. Nothing changed.
    TooManyBytes {
        /// The total the write would make.
        total: u64,
    },
}

/// Where a task's snapshots come from.
#[derive(Debug, Clone, Copy)]
pub enum SnapshotSource<'a> {
    /// The current entries of `project`, each named by specialist and the sha256 the caller
    /// read.
    Entries {
        /// The canonical git root.
        project: &'a str,
        /// `(specialist, sha256)` pairs, in the caller's order.
        selection: &'a [(String, String)],
    },
    /// Another task's snapshots, unchanged (a continuation, a handoff that inherits).
    Task(&'a TaskId),
}

/// A text a task was given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotText {
    /// The specialist.
    pub specialist: String,
    /// The sha256 of the text when it was taken.
    pub sha256: String,
    /// Its UTF-8 size.
    pub bytes: u64,
    /// The text.
    pub text: String,
}

/// What [`Store::snapshot_memory`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    /// The texts were stored under the task, in order.
    Taken(Vec<SnapshotText>),
    /// Entry `index` of the selection is not (or no longer) at that sha256. Nothing stored.
    Missing {
        /// Its position in the selection.
        index: usize,
    },
}

const META: &str = "project, specialist, sha256, bytes, created_at, updated_at";

fn meta_row(r: &Row<'_>) -> rusqlite::Result<(MemoryMeta, i64)> {
    let bytes: i64 = r.get(3)?;
    Ok((
        MemoryMeta {
            project: r.get(0)?,
            specialist: r.get(1)?,
            sha256: r.get(2)?,
            bytes: 0,
            created_at: Timestamp(r.get(4)?),
            updated_at: Timestamp(r.get(5)?),
        },
        bytes,
    ))
}

fn with_bytes((mut meta, bytes): (MemoryMeta, i64)) -> Result<MemoryMeta> {
    meta.bytes = to_u64(bytes, "memory size")?;
    Ok(meta)
}

fn current_sha(tx: &Transaction<'_>, project: &str, specialist: &str) -> Result<Option<String>> {
    tx.prepare_cached("SELECT sha256 FROM memory_entries WHERE project = ?1 AND specialist = ?2")
        .and_then(|mut st| {
            st.query_row(params![project, specialist], |r| r.get(0))
                .optional()
        })
        .ctx("read a memory entry")
}

fn totals_in(conn: &rusqlite::Connection) -> Result<MemoryTotals> {
    let (entries, bytes): (i64, i64) = conn
        .prepare_cached("SELECT COUNT(*), COALESCE(SUM(bytes), 0) FROM memory_entries")
        .and_then(|mut st| st.query_row([], |r| Ok((r.get(0)?, r.get(1)?))))
        .ctx("count memory entries")?;
    Ok(MemoryTotals {
        entries: to_u64(entries, "memory count")?,
        bytes: to_u64(bytes, "memory size")?,
    })
}

impl Store {
    /// The entries of `project` (of one specialist, when given), by specialist: metadata
    /// only.
    pub fn memory_list(&self, project: &str, specialist: Option<&str>) -> Result<Vec<MemoryMeta>> {
        self.read(|conn| {
            let rows: Vec<(MemoryMeta, i64)> = conn
                .prepare_cached(&format!(
                    "SELECT {META} FROM memory_entries WHERE project = ?1 \
                     AND (?2 IS NULL OR specialist = ?2) ORDER BY specialist"
                ))
                .and_then(|mut st| {
                    st.query_map(params![project, specialist], meta_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("list memory entries")?;
            rows.into_iter().map(with_bytes).collect()
        })
    }

    /// Entries and bytes over the whole store.
    pub fn memory_totals(&self) -> Result<MemoryTotals> {
        self.read(totals_in)
    }

    /// The entry of `project` and `specialist`, with its text.
    pub fn memory_entry(&self, project: &str, specialist: &str) -> Result<Option<MemoryEntry>> {
        self.read(|conn| {
            let row = conn
                .prepare_cached(&format!(
                    "SELECT {META}, text FROM memory_entries WHERE project = ?1 AND specialist = ?2"
                ))
                .and_then(|mut st| {
                    st.query_row(params![project, specialist], |r| {
                        Ok((meta_row(r)?, r.get::<_, String>(6)?))
                    })
                    .optional()
                })
                .ctx("read a memory entry")?;
            row.map(|(meta, text)| {
                Ok(MemoryEntry {
                    meta: with_bytes(meta)?,
                    text,
                })
            })
            .transpose()
        })
    }

    /// Writes `text` (whose sha256 is `sha256`) as the entry of `project` and `specialist`,
    /// if the entry is at `expected`: `None` creates (no entry may exist), a sha256 replaces
    /// that version. The store-wide `bounds` are checked in the same transaction.
    pub fn memory_write(
        &self,
        project: &str,
        specialist: &str,
        text: &str,
        sha256: &str,
        expected: Option<&str>,
        bounds: MemoryBounds,
    ) -> Result<MemoryWrite> {
        let bytes = text.len() as u64;
        let stored_bytes = to_i64(bytes, "a memory text")?;
        self.write("write a memory entry", |tx| {
            let current = current_sha(tx, project, specialist)?;
            if current.as_deref() != expected {
                return Ok(MemoryWrite::Changed { current });
            }
            let totals = totals_in(tx)?;
            let replaced: u64 = match expected {
                None => {
                    if totals.entries >= bounds.max_entries {
                        return Ok(MemoryWrite::TooManyEntries {
                            entries: totals.entries,
                        });
                    }
                    0
                }
                Some(_) => {
                    let old: i64 = tx
                        .prepare_cached(
                            "SELECT bytes FROM memory_entries WHERE project = ?1 AND specialist = ?2",
                        )
                        .and_then(|mut st| {
                            st.query_row(params![project, specialist], |r| r.get(0))
                        })
                        .ctx("read a memory entry")?;
                    to_u64(old, "memory size")?
                }
            };
            let total = totals.bytes.saturating_sub(replaced).saturating_add(bytes);
            if total > bounds.max_bytes {
                return Ok(MemoryWrite::TooManyBytes { total });
            }
            let now = Timestamp::now().0;
            tx.prepare_cached(
                "INSERT INTO memory_entries (project, specialist, sha256, bytes, text, created_at, updated_at) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6) \
                 ON CONFLICT (project, specialist) DO UPDATE SET \
                 sha256 = excluded.sha256, bytes = excluded.bytes, text = excluded.text, \
                 updated_at = excluded.updated_at",
            )
            .and_then(|mut st| {
                st.execute(params![
                    project,
                    specialist,
                    sha256,
                    stored_bytes,
                    text,
                    now
                ])
            })
            .ctx("write a memory entry")?;
            Ok(MemoryWrite::Written)
        })
    }

    /// Removes the entry of `project` and `specialist` if it is at `expected`. `Written`
    /// when removed; `Changed` (with the current sha256, or `None` for no entry) otherwise.
    /// Snapshots tasks took are kept.
    pub fn memory_remove(
        &self,
        project: &str,
        specialist: &str,
        expected: &str,
    ) -> Result<MemoryWrite> {
        self.write("remove a memory entry", |tx| {
            let current = current_sha(tx, project, specialist)?;
            if current.as_deref() != Some(expected) {
                return Ok(MemoryWrite::Changed { current });
            }
            tx.prepare_cached(
                "DELETE FROM memory_entries WHERE project = ?1 AND specialist = ?2 AND sha256 = ?3",
            )
            .and_then(|mut st| st.execute(params![project, specialist, expected]))
            .ctx("remove a memory entry")?;
            Ok(MemoryWrite::Written)
        })
    }

    /// Stores the snapshots `task_id` is given, from `source`, in one transaction: every
    /// selected entry must be at its sha256 (else [`Snapshot::Missing`] and nothing is
    /// stored). A task's earlier snapshots are replaced.
    pub fn snapshot_memory(
        &self,
        task_id: &TaskId,
        source: SnapshotSource<'_>,
    ) -> Result<Snapshot> {
        self.write("store memory snapshots", |tx| {
            let texts = match source {
                SnapshotSource::Entries { project, selection } => {
                    let mut texts = Vec::with_capacity(selection.len());
                    for (index, (specialist, sha256)) in selection.iter().enumerate() {
                        let row: Option<(i64, String)> = tx
                            .prepare_cached(
                                "SELECT bytes, text FROM memory_entries \
                                 WHERE project = ?1 AND specialist = ?2 AND sha256 = ?3",
                            )
                            .and_then(|mut st| {
                                st.query_row(params![project, specialist, sha256], |r| {
                                    Ok((r.get(0)?, r.get(1)?))
                                })
                                .optional()
                            })
                            .ctx("read a memory entry")?;
                        let Some((bytes, text)) = row else {
                            return Ok(Snapshot::Missing { index });
                        };
                        texts.push(SnapshotText {
                            specialist: specialist.clone(),
                            sha256: sha256.clone(),
                            bytes: to_u64(bytes, "memory size")?,
                            text,
                        });
                    }
                    texts
                }
                SnapshotSource::Task(from) => snapshots_in(tx, from)?,
            };
            tx.prepare_cached("DELETE FROM memory_snapshots WHERE task_id = ?1")
                .and_then(|mut st| st.execute([task_id.as_str()]))
                .ctx("store memory snapshots")?;
            for (position, s) in texts.iter().enumerate() {
                let bytes = to_i64(s.bytes, "a memory text")?;
                let position = to_i64(position as u64, "a snapshot position")?;
                tx.prepare_cached(
                    "INSERT INTO memory_snapshots (task_id, position, specialist, sha256, bytes, text) \
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                )
                .and_then(|mut st| {
                    st.execute(params![
                        task_id.as_str(),
                        position,
                        s.specialist,
                        s.sha256,
                        bytes,
                        s.text
                    ])
                })
                .ctx("store memory snapshots")?;
            }
            Ok(Snapshot::Taken(texts))
        })
    }

    /// The snapshots `task_id` was given, in order.
    pub fn memory_snapshots(&self, task_id: &TaskId) -> Result<Vec<SnapshotText>> {
        self.read(|conn| snapshots_in(conn, task_id))
    }

    /// Forgets the snapshots of a task that was never stored (its submission failed after
    /// they were taken).
    pub fn forget_memory_snapshots(&self, task_id: &TaskId) -> Result<()> {
        self.write("forget memory snapshots", |tx| {
            tx.prepare_cached("DELETE FROM memory_snapshots WHERE task_id = ?1")
                .and_then(|mut st| st.execute([task_id.as_str()]))
                .ctx("forget memory snapshots")?;
            Ok(())
        })
    }
}

fn snapshots_in(conn: &rusqlite::Connection, task_id: &TaskId) -> Result<Vec<SnapshotText>> {
    let rows: Vec<(String, String, i64, String)> = conn
        .prepare_cached(
            "SELECT specialist, sha256, bytes, text FROM memory_snapshots \
             WHERE task_id = ?1 ORDER BY position",
        )
        .and_then(|mut st| {
            st.query_map([task_id.as_str()], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()
        })
        .ctx("read memory snapshots")?;
    rows.into_iter()
        .map(|(specialist, sha256, bytes, text)| {
            Ok(SnapshotText {
                specialist,
                sha256,
                bytes: to_u64(bytes, "memory size")?,
                text,
            })
        })
        .collect()
}

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
