//! Reading a group back from the store: its record, definition, nodes and tasks, and the
//! answers built from them (status, summary, progress).
//!
//! Reads only. A stored state string this build does not know is a `STORE_ERROR`, never
//! guessed at.

use super::definition::{GroupDefinition, Hook};
use super::status::{
    Checkpoint, GroupProgress, GroupState, GroupStatus, GroupSummary, NodeState, NodeStatus,
};
use crate::core::Core;
use legate_core::{Error, ErrorCode, Result, Task};
use legate_store::{GroupRecord, NodeRecord};

/// A group as stored, with its tasks.
#[derive(Debug, Clone)]
pub(crate) struct Loaded {
    pub(crate) record: GroupRecord,
    pub(crate) definition: GroupDefinition,
    pub(crate) nodes: Vec<NodeRecord>,
    /// The group's tasks, oldest first: every one, or those of its open nodes (`scope`).
    pub(crate) tasks: Vec<Task>,
    pub(crate) scope: TaskScope,
}

/// Which of a group's tasks a [`Loaded`] holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskScope {
    /// Every task of the group: what an answer about the group (status, messages, result)
    /// reads.
    All,
    /// Only those of its nodes admitting or running (every turn of each): what a
    /// scheduler's step reads, so that a step costs what is open, not everything the group
    /// ever ran. Never for a group with a budget, which counts every task.
    Open,
}

/// The nodes whose tasks a [`TaskScope::Open`] load holds.
fn open_nodes(nodes: &[NodeRecord]) -> Vec<&str> {
    nodes
        .iter()
        .filter(|n| {
            node_state(n).is_ok_and(|s| matches!(s, NodeState::Admitting | NodeState::Running))
        })
        .map(|n| n.node_id.as_str())
        .collect()
}

fn bad(what: &str) -> Error {
    Error::new(
        ErrorCode::StoreError,
        format!("a stored group has an unreadable {what}"),
    )
}

pub(crate) fn not_found(id: &str) -> Error {
    let shown: String = id.chars().take(80).collect();
    Error::new(
        ErrorCode::GroupNotFound,
        format!("no group has the id {shown:?}"),
    )
}

pub(crate) fn group_state(record: &GroupRecord) -> Result<GroupState> {
    GroupState::parse(&record.state).ok_or_else(|| bad("state"))
}

pub(crate) fn node_state(node: &NodeRecord) -> Result<NodeState> {
    NodeState::parse(&node.state).ok_or_else(|| bad("node state"))
}

pub(crate) fn checkpoint(node: &NodeRecord) -> Result<Option<Checkpoint>> {
    node.checkpoint
        .as_deref()
        .map(|c| serde_json::from_str(c).map_err(|_| bad("checkpoint")))
        .transpose()
}

impl Loaded {
    /// The node's tasks, oldest first.
    pub(crate) fn node_tasks<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a Task> + 'a {
        self.tasks
            .iter()
            .filter(move |t| t.controls.group.as_ref().is_some_and(|g| g.node_id == node))
    }

    /// The node's latest task.
    pub(crate) fn latest<'a>(&'a self, node: &'a str) -> Option<&'a Task> {
        self.node_tasks(node).last()
    }

    /// The node's hook (none when the definition has no workflow or no hook for it).
    pub(crate) fn hook(&self, node: &str) -> Hook {
        self.definition
            .workflow
            .as_ref()
            .and_then(|w| w.hooks.get(node).copied())
            .unwrap_or_default()
    }

    /// The stored record of node `id`.
    pub(crate) fn node(&self, id: &str) -> Option<&NodeRecord> {
        self.nodes.iter().find(|n| n.node_id == id)
    }

    pub(crate) fn status(&self) -> Result<GroupStatus> {
        if self.scope != TaskScope::All {
            return Err(Error::internal(
                "a group's status was asked of a load without all its tasks",
            ));
        }
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for def in &self.definition.nodes {
            let Some(rec) = self.node(&def.id) else {
                return Err(bad("node list"));
            };
            nodes.push(NodeStatus {
                id: def.id.clone(),
                state: node_state(rec)?,
                depends_on: def.depends_on.clone(),
                task_id: rec.task_id.clone(),
                task_ids: self.node_tasks(&def.id).map(|t| t.id.clone()).collect(),
                error: rec.error_code.as_deref().and_then(ErrorCode::parse),
                checkpoint: checkpoint(rec)?,
            });
        }
        Ok(GroupStatus {
            group_id: self.record.group_id.clone(),
            definition_sha256: self.record.definition_sha256.clone(),
            title: self.record.title.clone(),
            state: group_state(&self.record)?,
            pause_reason: self
                .record
                .pause_reason
                .as_deref()
                .and_then(ErrorCode::parse),
            pause_message: self.record.pause_message.clone(),
            nodes,
            budget: self
                .definition
                .budget
                .map(|b| super::tokens::figures(b, &self.tasks)),
            created_at: self.record.created_at,
            updated_at: self.record.updated_at,
        })
    }
}

/// Whether a wait on a group in `state` whose nodes are in `nodes` is over: it ended, or it is
/// paused with nothing running.
pub(crate) fn ready(state: GroupState, mut nodes: impl Iterator<Item = NodeState>) -> bool {
    state.is_terminal() || (state == GroupState::Paused && !nodes.any(|n| n == NodeState::Running))
}

/// How many nodes are where.
pub(crate) fn progress(status: &GroupStatus) -> GroupProgress {
    let mut p = GroupProgress {
        total: u32::try_from(status.nodes.len()).unwrap_or(u32::MAX),
        ..GroupProgress::default()
    };
    for n in &status.nodes {
        match n.state {
            NodeState::Succeeded => p.succeeded += 1,
            NodeState::Pending => p.pending += 1,
            NodeState::Admitting
            | NodeState::Running
            | NodeState::Held
            | NodeState::Interrupted => p.running += 1,
            NodeState::Failed | NodeState::Canceled | NodeState::Blocked => p.stopped += 1,
        }
    }
    p
}

pub(crate) fn summary(record: &GroupRecord) -> Result<GroupSummary> {
    let definition: GroupDefinition =
        serde_json::from_str(&record.definition).map_err(|_| bad("definition"))?;
    Ok(GroupSummary {
        group_id: record.group_id.clone(),
        title: record.title.clone(),
        definition_sha256: record.definition_sha256.clone(),
        state: group_state(record)?,
        pause_reason: record.pause_reason.as_deref().and_then(ErrorCode::parse),
        nodes: u32::try_from(definition.nodes.len()).unwrap_or(u32::MAX),
        created_at: record.created_at,
        updated_at: record.updated_at,
    })
}

impl Core {
    /// Whether a wait on the group `id` is over ([`ready`]), from its record and nodes alone
    /// (`GROUP_NOT_FOUND`, `STORE_ERROR` for a state this build does not know).
    pub(crate) fn group_ready(&self, id: &str) -> Result<bool> {
        let store = self.store();
        let record = store.group(id)?.ok_or_else(|| not_found(id))?;
        let nodes = store
            .group_nodes(id)?
            .iter()
            .map(node_state)
            .collect::<Result<Vec<_>>>()?;
        Ok(ready(group_state(&record)?, nodes.into_iter()))
    }

    /// The group `id` as stored, with every task (`GROUP_NOT_FOUND`).
    pub(crate) fn load_group(&self, id: &str) -> Result<Loaded> {
        self.load_group_in(id, TaskScope::All)
    }

    /// The group `id` as a scheduler's step reads it: with its open nodes' tasks only, or
    /// every task when it has a budget (`GROUP_NOT_FOUND`).
    pub(crate) fn load_group_for_step(&self, id: &str) -> Result<Loaded> {
        self.load_group_in(id, TaskScope::Open)
    }

    fn load_group_in(&self, id: &str, scope: TaskScope) -> Result<Loaded> {
        let store = self.store();
        let record = store.group(id)?.ok_or_else(|| not_found(id))?;
        let definition: GroupDefinition =
            serde_json::from_str(&record.definition).map_err(|_| bad("definition"))?;
        let scope = if definition.budget.is_some() {
            TaskScope::All
        } else {
            scope
        };
        let nodes = store.group_nodes(id)?;
        let tasks = self.group_tasks_in(id, &nodes, scope)?;
        Ok(Loaded {
            record,
            definition,
            nodes,
            tasks,
            scope,
        })
    }

    fn group_tasks_in(
        &self,
        id: &str,
        nodes: &[NodeRecord],
        scope: TaskScope,
    ) -> Result<Vec<Task>> {
        match scope {
            TaskScope::All => self.store().group_tasks(id),
            TaskScope::Open => self.store().group_node_tasks(id, &open_nodes(nodes)),
        }
    }

    /// `g` read again after a change: its record and nodes, and its tasks (in `g`'s scope,
    /// of the nodes open now) only when `tasks` (a change that stored no task leaves them as
    /// they were read; their states may have moved on since, as after any read). The
    /// definition never changes.
    pub(crate) fn reload_group(&self, g: Loaded, tasks: bool) -> Result<Loaded> {
        let store = self.store();
        let id = g.record.group_id.as_str();
        let record = store.group(id)?.ok_or_else(|| not_found(id))?;
        let nodes = store.group_nodes(id)?;
        let tasks = if tasks {
            self.group_tasks_in(id, &nodes, g.scope)?
        } else {
            g.tasks
        };
        Ok(Loaded {
            record,
            definition: g.definition,
            nodes,
            tasks,
            scope: g.scope,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(id: &str, state: NodeState) -> NodeRecord {
        NodeRecord {
            node_id: id.into(),
            position: 0,
            state: state.as_str().into(),
            task_id: None,
            error_code: None,
            checkpoint: None,
            updated_at: legate_core::Timestamp(0),
        }
    }

    #[test]
    fn a_step_reads_the_tasks_of_admitting_and_running_nodes_only() {
        let nodes = [
            rec("done", NodeState::Succeeded),
            rec("admitting", NodeState::Admitting),
            rec("pending", NodeState::Pending),
            rec("running", NodeState::Running),
            rec("failed", NodeState::Failed),
            rec("held", NodeState::Held),
            rec("interrupted", NodeState::Interrupted),
            rec("canceled", NodeState::Canceled),
            rec("blocked", NodeState::Blocked),
        ];
        assert_eq!(open_nodes(&nodes), ["admitting", "running"]);
        // A state this build does not know is no open node (the step meets it as an error).
        let mut odd = rec("odd", NodeState::Running);
        odd.state = "sideways".into();
        assert!(open_nodes(&[odd]).is_empty());
    }

    #[test]
    fn a_status_is_refused_from_a_load_without_every_task() {
        let record = GroupRecord {
            group_id: "g".into(),
            definition: String::new(),
            definition_sha256: "0".repeat(64),
            title: None,
            state: GroupState::Running.as_str().into(),
            pause_reason: None,
            pause_message: None,
            runner: None,
            created_at: legate_core::Timestamp(0),
            updated_at: legate_core::Timestamp(0),
        };
        let definition = GroupDefinition {
            working_directory: "/p".into(),
            title: None,
            nodes: vec![super::super::NodeDef {
                id: "a".into(),
                prompt: "p".into(),
                ..super::super::NodeDef::default()
            }],
            peer_routes: vec![],
            budget: None,
            workflow: None,
        };
        let mut g = Loaded {
            record,
            definition,
            nodes: vec![rec("a", NodeState::Running)],
            tasks: vec![],
            scope: TaskScope::Open,
        };
        // A step's load lacks finished nodes' tasks: an answer built from it would list
        // fewer tasks than the group ran.
        let err = g.status().unwrap_err();
        assert_eq!(err.code, ErrorCode::Internal);
        g.scope = TaskScope::All;
        assert_eq!(g.status().unwrap().nodes.len(), 1);
    }

    #[test]
    fn a_wait_is_over_when_the_group_ended_or_is_paused_with_nothing_running() {
        use GroupState as G;
        use NodeState as N;
        assert!(ready(G::Completed, [N::Running].into_iter()));
        assert!(ready(G::Failed, [].into_iter()));
        assert!(ready(G::Canceled, [N::Pending].into_iter()));
        assert!(ready(
            G::Paused,
            [N::Held, N::Pending, N::Succeeded].into_iter()
        ));
        assert!(!ready(G::Paused, [N::Held, N::Running].into_iter()));
        assert!(!ready(G::Running, [N::Pending].into_iter()));
        assert!(!ready(G::Created, [].into_iter()));
    }
}
