//! Retention: deleting the finished tasks beyond the newest `keep` and everything only they
//! kept, in one transaction: their events, memory snapshots and tap frames (their review
//! records, approvals, public messages and artifact rows go by foreign key); the
//! conversations no task is left in (`contexts`) and their messages; the comparisons no task
//! is left of; the calls answered as tasks whose work is gone; ended ops beyond the newest
//! `keep`. A row no task names but that may be about to get one (a message being queued, a
//! comparison whose reviews are being started) goes only once it is older than the oldest
//! finished task kept.
//!
//! Which tasks go is two steps, so that the engine can spare the ones it still holds (a copy
//! another operation has locked, an integration not yet recovered): [`Store::prunable`] lists
//! the candidates, [`Store::prune_tasks`] deletes those of them that are still prunable. A
//! task is prunable when it is finished, beyond the newest `keep` finished tasks, is not
//! a copy task whose conversation has an unfinished task (that task's turn continues the
//! copy the finished ones made), and is not a node's task of a group that has not ended (its
//! admission, checkpoints and token budget read them). The audit (`decisions`) and peer
//! messages are never pruned.
//!
//! This module must never delete an unfinished task or a row a remaining task names, and
//! never touches a file: the sandboxes the deleted conversations recorded are handed back
//! for the caller to remove, after their rows are gone.

use crate::Store;
use crate::recovery::states;
use crate::sql::{SqlContext, clamp_i64};
use legate_core::{Result, TaskId, WorkspaceKind};
use rusqlite::{OptionalExtension, Transaction, params};
use std::collections::BTreeSet;
use std::path::PathBuf;

/// What one [`Store::prune_tasks`] deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Tasks, with their events, snapshots and tap frames.
    pub tasks: usize,
    /// Conversations no task was left in.
    pub contexts: usize,
    /// Messages sent to those conversations.
    pub messages: usize,
    /// Comparisons no task was left of.
    pub comparisons: usize,
    /// The sandboxes the deleted conversations recorded, for the caller to remove now that
    /// no row names them.
    pub sandboxes: Vec<PathBuf>,
}

/// The states a group ends in (`legate_engine`'s group status): a task of a group in any
/// other state (created, running, paused) is one of its nodes' history, which the group's
/// admission, checkpoints and token budget read.
const GROUP_ENDED: &str = "'completed', 'failed', 'canceled'";

/// The node states still being settled (an ended group, a canceled one above all, settles
/// them from its tasks when an engine continues it).
const NODE_OPEN: &str = "'admitting', 'running', 'held'";

/// The condition on task `t` that makes it prunable, whatever its age.
fn prunable_task() -> String {
    format!(
        "t.state IN ({finished}) AND NOT (t.workspace = '{copy}' AND EXISTS (\
         SELECT 1 FROM tasks o WHERE o.context_id = t.context_id AND o.state IN ({open}))) \
         AND NOT (t.controls IS NOT NULL AND EXISTS (SELECT 1 FROM groups g \
         WHERE g.group_id = json_extract(t.controls, '$.group.groupId') \
         AND (g.state NOT IN ({GROUP_ENDED}) OR EXISTS (SELECT 1 FROM group_nodes n \
         WHERE n.group_id = g.group_id AND n.state IN ({NODE_OPEN})))))",
        finished = states(true),
        copy = WorkspaceKind::Copy.as_str(),
        open = states(false),
    )
}

/// Conversations no task is in.
const EMPTY_CONTEXT: &str = "NOT EXISTS (SELECT 1 FROM tasks t WHERE t.context_id = c.context_id)";

impl Store {
    /// The finished tasks beyond the newest `keep` (by creation time) that may be pruned,
    /// oldest first.
    pub fn prunable(&self, keep: usize) -> Result<Vec<TaskId>> {
        let sql = format!(
            "SELECT t.id FROM tasks t WHERE t.id IN (SELECT id FROM tasks WHERE state IN ({}) \
             ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?1) AND {} \
             ORDER BY t.created_at, t.id",
            states(true),
            prunable_task()
        );
        self.read(|conn| {
            conn.prepare_cached(&sql)
                .and_then(|mut st| {
                    st.query_map([clamp_i64(keep)], |r| r.get::<_, String>(0))?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("list the tasks retention may prune")
                .map(|ids| ids.into_iter().map(TaskId).collect())
        })
    }

    /// In one transaction, deletes the tasks of `ids` that are still prunable (see the
    /// module docs; a task that is not, or is gone, is skipped), with their events, memory
    /// snapshots and tap frames; then what no task is left to name:
    ///
    /// - the conversation (`contexts` row) of a task it deleted once no task is left in it,
    ///   and any other conversation no task is in that last changed before the oldest
    ///   finished task kept (one an earlier prune left behind);
    /// - every message sent to a conversation no task is in: a message not yet bound to its
    ///   task only when older than the oldest finished task kept (one claimed a moment ago
    ///   is being queued);
    /// - every comparison whose source task and reviews are all gone, when it is older than
    ///   the oldest finished task kept (a comparison is stored a moment before its reviews);
    /// - the calls answered as tasks whose task, group or comparison is gone, and ended ops
    ///   beyond the newest `keep`.
    ///
    /// With no finished task left, only the conversations of the tasks it deleted go, and no
    /// unbound message and no comparison. The
    /// sandboxes of the deleted conversations are in the answer; nothing on disk is touched.
    pub fn prune_tasks(&self, ids: &[TaskId], keep: usize) -> Result<Pruned> {
        const WHAT: &str = "prune finished tasks";
        let still = format!(
            "SELECT t.context_id FROM tasks t WHERE t.id = ?1 AND {}",
            prunable_task()
        );
        // The oldest of the newest `keep` finished tasks: not of every finished task left,
        // which one task spared for good (a held copy, a paused group) would pin forever.
        let horizon = format!(
            "SELECT MIN(created_at) FROM (SELECT created_at FROM tasks WHERE state IN ({}) \
             ORDER BY created_at DESC, id DESC LIMIT ?1)",
            states(true)
        );
        self.write(WHAT, |tx| {
            let mut pruned = Pruned::default();
            let mut emptied = BTreeSet::new();
            for id in ids {
                if let Some(context) = delete_task(tx, &still, id.as_str())? {
                    pruned.tasks += 1;
                    emptied.insert(context);
                }
            }
            let horizon: Option<i64> = tx
                .query_row(&horizon, [clamp_i64(keep)], |r| r.get(0))
                .ctx(WHAT)?;
            for (context, sandbox) in empty_contexts(tx, &emptied, horizon)? {
                tx.prepare_cached("DELETE FROM contexts WHERE context_id = ?1")
                    .and_then(|mut st| st.execute([&context]))
                    .ctx(WHAT)?;
                pruned.contexts += 1;
                pruned.sandboxes.extend(sandbox.map(PathBuf::from));
            }
            pruned.messages = tx
                .execute(
                    &format!(
                        "DELETE FROM messages AS c WHERE {EMPTY_CONTEXT} \
                         AND (c.task_id IS NOT NULL OR c.created_at < ?1)"
                    ),
                    [horizon],
                )
                .ctx(WHAT)?;
            pruned.comparisons = tx.execute(PRUNE_COMPARISONS, [horizon]).ctx(WHAT)?;
            // After the comparisons: a `compare` call whose comparison just went goes too.
            tx.execute(PRUNE_CALL_TASKS, []).ctx(WHAT)?;
            tx.execute(PRUNE_ENDED_OPS, [clamp_i64(keep)]).ctx(WHAT)?;
            Ok(pruned)
        })
    }

    /// Deletes finished tasks beyond the newest `keep` and what only they kept
    /// ([`Store::prunable`], then [`Store::prune_tasks`]), sparing nothing else. Returns how
    /// many tasks were deleted. The engine prunes through `legate_engine`'s retention pass,
    /// which also spares the copies it holds and removes the pruned conversations' sandboxes.
    pub fn prune_finished(&self, keep: usize) -> Result<usize> {
        let ids = self.prunable(keep)?;
        self.prune_tasks(&ids, keep).map(|p| p.tasks)
    }
}

/// Deletes task `id` with its events, memory snapshots and tap frames when `still` (its
/// prunable condition) holds. Its conversation when it did.
fn delete_task(tx: &Transaction<'_>, still: &str, id: &str) -> Result<Option<String>> {
    const WHAT: &str = "prune a finished task";
    let Some(context) = tx
        .prepare_cached(still)
        .and_then(|mut st| st.query_row([id], |r| r.get::<_, String>(0)).optional())
        .ctx(WHAT)?
    else {
        return Ok(None);
    };
    // A pruned task's memory snapshots (see `memory`) and its wire tap (see `tap`) go with
    // it; its review record, approvals, public messages and artifact rows by foreign key.
    for sql in [
        "DELETE FROM events WHERE task_id = ?1",
        "DELETE FROM memory_snapshots WHERE task_id = ?1",
        "DELETE FROM tap_frames WHERE task_id = ?1",
        "DELETE FROM tasks WHERE id = ?1",
    ] {
        tx.prepare_cached(sql)
            .and_then(|mut st| st.execute(params![id]))
            .ctx(WHAT)?;
    }
    Ok(Some(context))
}

/// The conversations to delete, each with the sandbox it records: those of `emptied` (the
/// conversations of the tasks just deleted) no task is left in, and any other no task is in
/// that last changed before `horizon` (one an earlier prune left behind). A conversation no
/// task is in that changed since is not retention's to judge.
fn empty_contexts(
    tx: &Transaction<'_>,
    emptied: &BTreeSet<String>,
    horizon: Option<i64>,
) -> Result<Vec<(String, Option<String>)>> {
    const WHAT: &str = "find the conversations no task is left in";
    let mut found = Vec::new();
    for context in emptied {
        let sandbox = tx
            .prepare_cached(&format!(
                "SELECT sandbox_root FROM contexts c WHERE c.context_id = ?1 AND {EMPTY_CONTEXT}"
            ))
            .and_then(|mut st| {
                st.query_row([context], |r| r.get::<_, Option<String>>(0))
                    .optional()
            })
            .ctx(WHAT)?;
        if let Some(sandbox) = sandbox {
            found.push((context.clone(), sandbox));
        }
    }
    let left = tx
        .prepare_cached(&format!(
            "SELECT context_id, sandbox_root FROM contexts c WHERE {EMPTY_CONTEXT} \
             AND c.updated_at < ?1 ORDER BY context_id"
        ))
        .and_then(|mut st| {
            st.query_map([horizon], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<rusqlite::Result<Vec<(String, Option<String>)>>>()
        })
        .ctx(WHAT)?;
    found.extend(left.into_iter().filter(|(c, _)| !emptied.contains(c)));
    Ok(found)
}

/// Deletes the comparisons older than `?1` (the oldest finished task kept) whose source task
/// is gone and that no task's controls name (their reviews are gone too).
const PRUNE_COMPARISONS: &str = "DELETE FROM comparisons WHERE created_at < ?1 \
     AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = comparisons.source_task_id) \
     AND id NOT IN (SELECT json_extract(controls, '$.comparisonId') FROM tasks \
         WHERE controls IS NOT NULL AND json_extract(controls, '$.comparisonId') IS NOT NULL)";

/// Deletes the calls answered as tasks whose task, group or comparison no longer exists.
const PRUNE_CALL_TASKS: &str = "DELETE FROM call_tasks WHERE \
     (tool IN ('run', 'resume', 'continue', 'handoff', 'send_message') \
      AND id NOT IN (SELECT id FROM tasks)) \
     OR (tool = 'group_start' AND id NOT IN (SELECT group_id FROM groups)) \
     OR (tool = 'compare' AND id NOT IN (SELECT id FROM comparisons))";

/// Deletes the ended ops (`test`, `integrate`) beyond the newest `?1`.
const PRUNE_ENDED_OPS: &str = "DELETE FROM call_tasks WHERE id IN (\
     SELECT id FROM call_tasks WHERE tool IN ('test', 'integrate') AND state <> 'running' \
     ORDER BY created_at DESC, id DESC LIMIT -1 OFFSET ?1)";

#[cfg(test)]
#[path = "retention_tests.rs"]
mod tests;
