//! Groups of tasks (issue 16): each group's canonical definition and its hash, its state and
//! pause reason, the runner that drives it, and one row per node (state, bound task,
//! checkpoint as JSON the engine owns).
//!
//! A group's id is the primary key, so a create is atomic across processes: the first insert
//! wins and a repeated one reads the stored row back. The driving runner changes only by
//! compare-and-set ([`Store::claim_group`]), like a remote task's; a node's state likewise
//! ([`Store::move_node`]), so that an admission is recorded exactly once before its task is
//! submitted. This module records; every decision (what a state means, when a node may run)
//! is the engine's.

use crate::Store;
use crate::sql::{SqlContext, clamp_i64};
use crate::tasks::{RawTask, TASK_COLUMNS};
use legate_core::{Result, Task, TaskId, Timestamp};
use rusqlite::{OptionalExtension, Row, params};

/// The query of a group's tasks, oldest first, through the index `tasks_group` (schema V22), whose
/// expression and condition these must stay.
fn group_tasks_sql() -> String {
    format!(
        "SELECT {TASK_COLUMNS} FROM tasks WHERE controls IS NOT NULL \
         AND json_extract(controls, '$.group.groupId') = ?1 ORDER BY created_at, rowid"
    )
}

/// The query of the tasks of some of a group's nodes (a JSON array of node ids), oldest first,
/// through the index `tasks_group_node` (schema V23), whose expressions and condition these
/// must stay: only those nodes' rows are read.
fn group_node_tasks_sql() -> String {
    format!(
        "SELECT {TASK_COLUMNS} FROM tasks INDEXED BY tasks_group_node \
         WHERE controls IS NOT NULL \
         AND json_extract(controls, '$.group.groupId') = ?1 \
         AND json_extract(controls, '$.group.nodeId') IN (SELECT value FROM json_each(?2)) \
         ORDER BY created_at, rowid"
    )
}

/// One group, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRecord {
    /// The caller's id (or a UUID).
    pub group_id: String,
    /// The canonical definition (JSON).
    pub definition: String,
    /// Its sha256.
    pub definition_sha256: String,
    /// The title, for listings.
    pub title: Option<String>,
    /// The engine's state string.
    pub state: String,
    /// Why it is paused (an error code string).
    pub pause_reason: Option<String>,
    /// One sentence about that reason.
    pub pause_message: Option<String>,
    /// The runner that drives it, while one does.
    pub runner: Option<String>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// One node of a group, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRecord {
    /// The node's id.
    pub node_id: String,
    /// Its place in the definition.
    pub position: u32,
    /// The engine's state string.
    pub state: String,
    /// Its first task, once bound.
    pub task_id: Option<TaskId>,
    /// Why it failed or is held (an error code string).
    pub error_code: Option<String>,
    /// Its checkpoint (JSON the engine owns).
    pub checkpoint: Option<String>,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// What [`Store::insert_group`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupInsert {
    /// Stored now.
    Inserted,
    /// The id was taken; here is what is stored under it.
    Existing(Box<GroupRecord>),
}

const GROUP_COLUMNS: &str = "group_id, definition, definition_sha256, title, state, \
     pause_reason, pause_message, runner, created_at, updated_at";
const NODE_COLUMNS: &str = "node_id, position, state, task_id, error_code, checkpoint, updated_at";

fn group_row(r: &Row<'_>) -> rusqlite::Result<GroupRecord> {
    Ok(GroupRecord {
        group_id: r.get(0)?,
        definition: r.get(1)?,
        definition_sha256: r.get(2)?,
        title: r.get(3)?,
        state: r.get(4)?,
        pause_reason: r.get(5)?,
        pause_message: r.get(6)?,
        runner: r.get(7)?,
        created_at: Timestamp(r.get(8)?),
        updated_at: Timestamp(r.get(9)?),
    })
}

fn node_row(r: &Row<'_>) -> rusqlite::Result<NodeRecord> {
    Ok(NodeRecord {
        node_id: r.get(0)?,
        position: r.get(1)?,
        state: r.get(2)?,
        task_id: r.get::<_, Option<String>>(3)?.map(TaskId),
        error_code: r.get(4)?,
        checkpoint: r.get(5)?,
        updated_at: Timestamp(r.get(6)?),
    })
}

impl Store {
    /// Stores `group` with its `nodes` unless its id is taken; then returns the stored group
    /// instead, unchanged. One transaction.
    pub fn insert_group(&self, group: &GroupRecord, nodes: &[NodeRecord]) -> Result<GroupInsert> {
        self.write("store a group", |tx| {
            let inserted = tx
                .prepare_cached(&format!(
                    "INSERT INTO groups ({GROUP_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) \
                     ON CONFLICT (group_id) DO NOTHING"
                ))
                .and_then(|mut st| {
                    st.execute(params![
                        group.group_id,
                        group.definition,
                        group.definition_sha256,
                        group.title,
                        group.state,
                        group.pause_reason,
                        group.pause_message,
                        group.runner,
                        group.created_at.0,
                        group.updated_at.0,
                    ])
                })
                .ctx("store a group")?;
            if inserted == 0 {
                return tx
                    .prepare_cached(&format!(
                        "SELECT {GROUP_COLUMNS} FROM groups WHERE group_id = ?1"
                    ))
                    .and_then(|mut st| st.query_row([&group.group_id], group_row))
                    .ctx("read a group")
                    .map(|r| GroupInsert::Existing(Box::new(r)));
            }
            for n in nodes {
                tx.prepare_cached(&format!(
                    "INSERT INTO group_nodes (group_id, {NODE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                ))
                .and_then(|mut st| {
                    st.execute(params![
                        group.group_id,
                        n.node_id,
                        n.position,
                        n.state,
                        n.task_id.as_ref().map(TaskId::as_str),
                        n.error_code,
                        n.checkpoint,
                        n.updated_at.0,
                    ])
                })
                .ctx("store a group's node")?;
            }
            Ok(GroupInsert::Inserted)
        })
    }

    /// The group stored under `group_id`.
    pub fn group(&self, group_id: &str) -> Result<Option<GroupRecord>> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {GROUP_COLUMNS} FROM groups WHERE group_id = ?1"
            ))
            .and_then(|mut st| st.query_row([group_id], group_row).optional())
            .ctx("read a group")
        })
    }

    /// Every group, newest first, at most `limit`.
    pub fn groups(&self, limit: usize) -> Result<Vec<GroupRecord>> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {GROUP_COLUMNS} FROM groups ORDER BY created_at DESC, group_id DESC LIMIT ?1"
            ))
            .and_then(|mut st| {
                st.query_map([clamp_i64(limit)], group_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .ctx("list groups")
        })
    }

    /// How many groups are stored.
    pub fn group_count(&self) -> Result<usize> {
        self.read(|conn| {
            conn.query_row("SELECT COUNT(*) FROM groups", [], |r| r.get::<_, i64>(0))
                .ctx("count groups")
                .map(|n| usize::try_from(n).unwrap_or(0))
        })
    }

    /// Removes the oldest groups whose state is one of `finished` until at most `keep`
    /// groups remain (their nodes with them; their tasks stay). Returns how many went.
    pub fn prune_groups(&self, keep: usize, finished: &[&str]) -> Result<usize> {
        let list = finished
            .iter()
            .map(|s| format!("'{}'", s.replace('\'', "")))
            .collect::<Vec<_>>()
            .join(", ");
        self.write("prune groups", |tx| {
            let total: i64 = tx
                .query_row("SELECT COUNT(*) FROM groups", [], |r| r.get(0))
                .ctx("count groups")?;
            let over = total - clamp_i64(keep);
            if over <= 0 || list.is_empty() {
                return Ok(0);
            }
            let sql = format!(
                "DELETE FROM groups WHERE group_id IN (SELECT group_id FROM groups \
                 WHERE state IN ({list}) ORDER BY updated_at, group_id LIMIT ?1)"
            );
            tx.prepare_cached(&sql)
                .and_then(|mut st| st.execute([over]))
                .ctx("prune groups")
        })
    }

    /// Sets a group's state and pause reason when its state is one of `from` (any state when
    /// `from` is empty). Returns whether it did.
    pub fn set_group_state(
        &self,
        group_id: &str,
        from: &[&str],
        state: &str,
        pause_reason: Option<&str>,
        pause_message: Option<&str>,
    ) -> Result<bool> {
        self.write("change a group's state", |tx| {
            let current: Option<String> = tx
                .prepare_cached("SELECT state FROM groups WHERE group_id = ?1")
                .and_then(|mut st| st.query_row([group_id], |r| r.get(0)).optional())
                .ctx("read a group's state")?;
            let Some(current) = current else {
                return Ok(false);
            };
            if !from.is_empty() && !from.contains(&current.as_str()) {
                return Ok(false);
            }
            tx.prepare_cached(
                "UPDATE groups SET state = ?2, pause_reason = ?3, pause_message = ?4, \
                 updated_at = ?5 WHERE group_id = ?1",
            )
            .and_then(|mut st| {
                st.execute(params![
                    group_id,
                    state,
                    pause_reason,
                    pause_message,
                    Timestamp::now().0
                ])
            })
            .ctx("change a group's state")
            .map(|n| n == 1)
        })
    }

    /// Records `sha256` as the hash of the role definitions group `group_id` started with,
    /// unless one is recorded already, and returns the one recorded (`None` for an unknown
    /// group).
    pub fn record_group_roles(&self, group_id: &str, sha256: &str) -> Result<Option<String>> {
        self.write("record a group's roles", |tx| {
            tx.prepare_cached(
                "UPDATE groups SET roles_sha256 = ?2 WHERE group_id = ?1 AND roles_sha256 IS NULL",
            )
            .and_then(|mut st| st.execute(params![group_id, sha256]))
            .ctx("record a group's roles")?;
            tx.prepare_cached("SELECT roles_sha256 FROM groups WHERE group_id = ?1")
                .and_then(|mut st| {
                    st.query_row([group_id], |r| r.get::<_, Option<String>>(0))
                        .optional()
                })
                .ctx("read a group's roles")
                .map(Option::flatten)
        })
    }

    /// Moves the group's driving runner from `from` (`None`: none) to `to`, if `from` still
    /// drives it. Of several processes claiming one group from the same runner, one wins.
    pub fn claim_group(
        &self,
        group_id: &str,
        from: Option<&str>,
        to: Option<&str>,
    ) -> Result<bool> {
        self.write("claim a group", |tx| {
            tx.prepare_cached("UPDATE groups SET runner = ?3 WHERE group_id = ?1 AND runner IS ?2")
                .and_then(|mut st| st.execute(params![group_id, from, to]))
                .ctx("claim a group")
                .map(|n| n == 1)
        })
    }

    /// The groups in `state` and the runner driving each (for taking over).
    pub fn groups_in(&self, state: &str) -> Result<Vec<(String, Option<String>)>> {
        self.read(|conn| {
            conn.prepare_cached(
                "SELECT group_id, runner FROM groups WHERE state = ?1 ORDER BY created_at",
            )
            .and_then(|mut st| {
                st.query_map([state], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .ctx("list groups by state")
        })
    }

    /// A group's nodes, in definition order.
    pub fn group_nodes(&self, group_id: &str) -> Result<Vec<NodeRecord>> {
        self.read(|conn| {
            conn.prepare_cached(&format!(
                "SELECT {NODE_COLUMNS} FROM group_nodes WHERE group_id = ?1 ORDER BY position"
            ))
            .and_then(|mut st| {
                st.query_map([group_id], node_row)?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .ctx("read a group's nodes")
        })
    }

    /// Moves a node from one of the states `from` to `node.state`, writing its task, error and
    /// checkpoint as given. Returns whether it did (`false`: the node was not in `from`).
    pub fn move_node(&self, group_id: &str, from: &[&str], node: &NodeRecord) -> Result<bool> {
        self.write("change a group's node", |tx| {
            let current: Option<String> = tx
                .prepare_cached(
                    "SELECT state FROM group_nodes WHERE group_id = ?1 AND node_id = ?2",
                )
                .and_then(|mut st| {
                    st.query_row([group_id, node.node_id.as_str()], |r| r.get(0))
                        .optional()
                })
                .ctx("read a node's state")?;
            let Some(current) = current else {
                return Ok(false);
            };
            if !from.contains(&current.as_str()) {
                return Ok(false);
            }
            tx.prepare_cached(
                "UPDATE group_nodes SET state = ?3, task_id = ?4, error_code = ?5, \
                 checkpoint = ?6, updated_at = ?7 WHERE group_id = ?1 AND node_id = ?2",
            )
            .and_then(|mut st| {
                st.execute(params![
                    group_id,
                    node.node_id,
                    node.state,
                    node.task_id.as_ref().map(TaskId::as_str),
                    node.error_code,
                    node.checkpoint,
                    Timestamp::now().0,
                ])
            })
            .ctx("change a group's node")?;
            tx.prepare_cached("UPDATE groups SET updated_at = ?2 WHERE group_id = ?1")
                .and_then(|mut st| st.execute(params![group_id, Timestamp::now().0]))
                .ctx("touch a group")?;
            Ok(true)
        })
    }

    /// Every task whose controls name `group_id` (continuations included), oldest first.
    pub fn group_tasks(&self, group_id: &str) -> Result<Vec<Task>> {
        self.read(|conn| {
            conn.prepare_cached(&group_tasks_sql())
                .and_then(|mut st| {
                    st.query_map([group_id], RawTask::from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("list a group's tasks")?
                .into_iter()
                .map(RawTask::decode)
                .collect()
        })
    }

    /// The tasks of `group_id` whose node is one of `nodes` (continuations included), oldest
    /// first: what [`Store::group_tasks`] answers, narrowed to those nodes, for a reader
    /// that needs only them (a group's scheduler, whose step would otherwise read every
    /// finished node's tasks again, a cost growing with the group).
    pub fn group_node_tasks(&self, group_id: &str, nodes: &[&str]) -> Result<Vec<Task>> {
        if nodes.is_empty() {
            return Ok(Vec::new());
        }
        let nodes = serde_json::to_string(nodes).map_err(|e| {
            legate_core::Error::caused_by(
                legate_core::ErrorCode::Internal,
                "a list of node ids could not be encoded",
                e,
            )
        })?;
        self.read(|conn| {
            conn.prepare_cached(&group_node_tasks_sql())
                .and_then(|mut st| {
                    st.query_map(params![group_id, nodes], RawTask::from_row)?
                        .collect::<rusqlite::Result<Vec<_>>>()
                })
                .ctx("list a group's nodes' tasks")?
                .into_iter()
                .map(RawTask::decode)
                .collect()
        })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn group(id: &str) -> GroupRecord {
        GroupRecord {
            group_id: id.into(),
            definition: "{}".into(),
            definition_sha256: "a".repeat(64),
            title: None,
            state: "created".into(),
            pause_reason: None,
            pause_message: None,
            runner: None,
            created_at: Timestamp(1),
            updated_at: Timestamp(1),
        }
    }

    pub(crate) fn node(id: &str, position: u32) -> NodeRecord {
        NodeRecord {
            node_id: id.into(),
            position,
            state: "pending".into(),
            task_id: None,
            error_code: None,
            checkpoint: None,
            updated_at: Timestamp(1),
        }
    }

    #[test]
    fn a_group_id_is_stored_once_and_read_back() {
        let s = Store::open_in_memory().unwrap();
        let g = group("g1");
        assert_eq!(
            s.insert_group(&g, &[node("a", 0), node("b", 1)]).unwrap(),
            GroupInsert::Inserted
        );
        let mut other = group("g1");
        other.definition_sha256 = "b".repeat(64);
        assert_eq!(
            s.insert_group(&other, &[node("x", 0)]).unwrap(),
            GroupInsert::Existing(Box::new(g.clone()))
        );
        let nodes = s.group_nodes("g1").unwrap();
        assert_eq!(
            nodes.iter().map(|n| n.node_id.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }

    #[test]
    fn a_node_moves_only_from_a_named_state_and_a_group_is_claimed_once() {
        let s = Store::open_in_memory().unwrap();
        s.insert_group(&group("g"), &[node("a", 0)]).unwrap();
        let mut admitting = node("a", 0);
        admitting.state = "admitting".into();
        assert!(s.move_node("g", &["pending"], &admitting).unwrap());
        assert!(!s.move_node("g", &["pending"], &admitting).unwrap());
        assert!(s.claim_group("g", None, Some("r1")).unwrap());
        assert!(!s.claim_group("g", None, Some("r2")).unwrap());
        assert!(s.claim_group("g", Some("r1"), Some("r2")).unwrap());
        assert!(
            s.set_group_state("g", &["created"], "running", None, None)
                .unwrap()
        );
        assert!(
            !s.set_group_state("g", &["created"], "paused", None, None)
                .unwrap()
        );
        assert_eq!(
            s.groups_in("running").unwrap(),
            [("g".to_string(), Some("r2".to_string()))]
        );
    }

    #[test]
    fn pruning_removes_only_the_oldest_finished_groups() {
        let s = Store::open_in_memory().unwrap();
        for (i, state) in ["completed", "running", "failed"].iter().enumerate() {
            let mut g = group(&format!("g{i}"));
            g.state = (*state).into();
            s.insert_group(&g, &[node("a", 0)]).unwrap();
        }
        assert_eq!(s.prune_groups(1, &["completed", "failed"]).unwrap(), 2);
        let left: Vec<_> = s
            .groups(10)
            .unwrap()
            .into_iter()
            .map(|g| g.group_id)
            .collect();
        assert_eq!(left, ["g1"]);
        assert!(s.group_nodes("g0").unwrap().is_empty());
    }

    #[test]
    fn a_groups_tasks_are_found_through_their_index_oldest_first() {
        let s = Store::open_in_memory().unwrap();
        let in_group = |id: &str, at: i64, group: Option<&str>| {
            let mut t = crate::tasks::tests::task(id, at);
            t.controls.group = group.map(|g| legate_core::GroupNode {
                group_id: g.into(),
                node_id: format!("n-{id}"),
            });
            s.insert_task(&t, &crate::tasks::tests::submitted())
                .unwrap();
        };
        in_group("t3", 3, Some("g1"));
        in_group("t1", 1, Some("g1"));
        in_group("t2", 2, Some("g2"));
        in_group("t4", 4, None);
        let ids: Vec<String> = s
            .group_tasks("g1")
            .unwrap()
            .into_iter()
            .map(|t| t.id.to_string())
            .collect();
        assert_eq!(ids, ["t1", "t3"]);
        assert!(s.group_tasks("g3").unwrap().is_empty());
        // The lookup is the index's, not a scan of every task (which grows with the store).
        uses_the_index(&s, "tasks_group", &group_tasks_sql(), params!["g1"]);
    }

    /// Asserts that SQLite plans `sql` with `params` through the index `index`.
    fn uses_the_index(s: &Store, index: &str, sql: &str, params: &[&dyn rusqlite::ToSql]) {
        let plan: Vec<String> = s
            .read(|conn| {
                let mut st = conn
                    .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .ctx("explain")?;
                st.query_map(params, |r| r.get::<_, String>(3))
                    .and_then(|rows| rows.collect::<rusqlite::Result<Vec<_>>>())
                    .ctx("explain")
            })
            .unwrap();
        // A search of the index by its leading expressions, never a scan of it or of the table.
        let search = format!("SEARCH tasks USING INDEX {index} (");
        assert!(plan.iter().any(|p| p.starts_with(&search)), "{plan:?}");
    }

    #[test]
    fn the_tasks_of_some_nodes_are_those_of_the_whole_group_narrowed_to_them() {
        let s = Store::open_in_memory().unwrap();
        let in_group = |id: &str, at: i64, group: &str, node: &str| {
            let mut t = crate::tasks::tests::task(id, at);
            t.controls.group = Some(legate_core::GroupNode {
                group_id: group.into(),
                node_id: node.into(),
            });
            s.insert_task(&t, &crate::tasks::tests::submitted())
                .unwrap();
        };
        // Node `a` has two turns; `b` and `c` one each; another group reuses the name `a`.
        in_group("t3", 3, "g1", "a");
        in_group("t1", 1, "g1", "a");
        in_group("t2", 2, "g1", "b");
        in_group("t4", 4, "g1", "c");
        in_group("t5", 5, "g2", "a");
        let ids = |nodes: &[&str]| -> Vec<String> {
            s.group_node_tasks("g1", nodes)
                .unwrap()
                .into_iter()
                .map(|t| t.id.to_string())
                .collect()
        };
        assert_eq!(ids(&["a"]), ["t1", "t3"]);
        assert_eq!(ids(&["c", "a"]), ["t1", "t3", "t4"]);
        assert_eq!(ids(&["a", "b", "c"]), ["t1", "t2", "t3", "t4"]);
        assert!(ids(&[]).is_empty());
        assert!(ids(&["x"]).is_empty());
        // A node id that is not plain text stays a value, never SQL or JSON of the query's.
        assert!(ids(&["a') OR 1=1 --", "\"\\", "]"]).is_empty());
        let every: Vec<String> = s
            .group_tasks("g1")
            .unwrap()
            .into_iter()
            .map(|t| t.id.to_string())
            .collect();
        assert_eq!(ids(&["a", "b", "c"]), every);
        // Found through the index of the group's nodes: no other row of the group is read.
        uses_the_index(
            &s,
            "tasks_group_node",
            &group_node_tasks_sql(),
            params!["g1", "[\"a\"]"],
        );
    }
}
