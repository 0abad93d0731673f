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
    /// Every task of the group, oldest first.
    pub(crate) tasks: Vec<Task>,
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
    /// The group `id` as stored (`GROUP_NOT_FOUND`).
    pub(crate) fn load_group(&self, id: &str) -> Result<Loaded> {
        let store = self.store();
        let record = store.group(id)?.ok_or_else(|| not_found(id))?;
        let definition: GroupDefinition =
            serde_json::from_str(&record.definition).map_err(|_| bad("definition"))?;
        let nodes = store.group_nodes(id)?;
        let tasks = store.group_tasks(id)?;
        Ok(Loaded {
            record,
            definition,
            nodes,
            tasks,
        })
    }

    /// `g` read again after a change: its record and nodes, and its tasks only when `tasks`
    /// (a change that stored no task leaves them as they were read; their states may have
    /// moved on since, as after any read). The definition never changes.
    pub(crate) fn reload_group(&self, g: Loaded, tasks: bool) -> Result<Loaded> {
        let store = self.store();
        let id = g.record.group_id.as_str();
        let record = store.group(id)?.ok_or_else(|| not_found(id))?;
        let nodes = store.group_nodes(id)?;
        let tasks = if tasks {
            store.group_tasks(id)?
        } else {
            g.tasks
        };
        Ok(Loaded {
            record,
            definition: g.definition,
            nodes,
            tasks,
        })
    }
}
