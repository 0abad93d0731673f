//! Groups and workflows: a durable graph of tasks (issue 16 §2, §3, §5).
//!
//! A caller creates a group from a [`GroupDefinition`] (`group_create`: validated, hashed,
//! stored, nothing started), then starts it with the definition's sha256 (`group_start`).
//! The scheduler admits each node once every dependency finished successfully, as a copy task
//! of its own (from the project, or from a dependency's copy: `fileSources`), with
//! `messages` delivery and its predecessors' validated results as fenced data in its prompt.
//! A finished node is checkpointed (hashes of its tree, patch, result and validation); a hook
//! holds its output for a review or a test and pauses the group; the same `group_start`
//! resumes it without repeating finished work. A token budget admits a turn only once the
//! counters of the running ones are in. Every state lives in the store, and any engine takes
//! over a group whose engine died.
//!
//! Layout: `definition` (wire shape), `validate` (checks and the canonical hash), `status`
//! (answers), `scheduler` (steps and turn ends), `admit` (admission), `checkpoint` (hashes,
//! re-validation),
//! `tokens` (the token budget), `restart` (taking over), `resume` (a paused group's nodes at
//! `group_start`), `prompt` (the fenced context),
//! `peer` (peer messages: wfpeer's). The descriptor and process budget is `crate::core::budget`,
//! not this.
//!
//! This module never runs an agent itself (every node is an ordinary task through `submit`
//! or `handoff`), never re-runs a finished node, never estimates a token count, and never
//! lets a node's output authorize integration.

mod admit;
mod checkpoint;
mod definition;
mod load;
mod page;
// wfpeer's: envelopes, routes, limits, receipts and delivery of peer messages.
pub(crate) mod peer;
mod profile;
mod prompt;
mod restart;
mod resume;
mod scheduler;
mod status;
mod tokens;
mod validate;

pub use definition::{Budget, GroupDefinition, Hook, NodeDef, PeerRoute, Workflow};
pub use page::{GroupWaitRequest, MAX_WAIT_MESSAGES, NodeMessage};
pub use peer::{MAX_RECEIPTS_PAGE, PeerReceipt, PeerReceiptPage, ReceiptOrigin, ReceiptState};
pub use status::{
    BudgetState, BudgetStatus, Checkpoint, DroppedPeerMessage, GroupCreated, GroupProgress,
    GroupStarted, GroupState, GroupStatus, GroupSummary, GroupWait, NodeState, NodeStatus,
    WorkflowResult,
};
pub use validate::{DEFAULT_MAX_NODES, MAX_DEFINITION_BYTES, MAX_NODES};

use crate::core::Core;
use legate_core::{Error, ErrorCode, Result, Timestamp};
use legate_store::{GroupInsert, GroupRecord, NodeRecord};
use load::{checkpoint, group_state, node_state};
use scheduler::moved;
use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// At most this many groups are retained; the oldest finished ones go first.
pub const MAX_GROUPS: usize = 100;

/// This engine's group drivers, and the signal that a group changed.
#[derive(Debug)]
pub(crate) struct Drivers {
    /// The groups this engine drives now.
    pub(crate) driving: Mutex<HashSet<String>>,
    /// Bumped whenever a group changes through this engine.
    pub(crate) changed: tokio::sync::watch::Sender<u64>,
}

impl Default for Drivers {
    fn default() -> Self {
        Self {
            driving: Mutex::default(),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

const FINISHED: [&str; 3] = ["completed", "failed", "canceled"];

fn closed(id: &str, state: GroupState) -> Error {
    Error::new(
        ErrorCode::GroupClosed,
        format!("group {id} is {state}; it takes no new turns"),
    )
}

/// Groups of tasks run as one workflow: create, start, follow, wait for and cancel a
/// group, its workflow result and its peers' message receipts.
/// Handed out by [`Groups::list`](crate::Groups::list).
#[derive(Debug, Clone)]
pub struct Groups {
    pub(crate) core: Core,
}

impl Core {
    /// The group's state, nodes and budget.
    pub(crate) fn group_status(&self, group_id: &str) -> Result<GroupStatus> {
        self.load_group(group_id)?.status()
    }

    /// Every retained group, newest first.
    pub(crate) fn groups(&self) -> Result<Vec<GroupSummary>> {
        self.store()
            .groups(MAX_GROUPS)?
            .iter()
            .map(load::summary)
            .collect()
    }
}

impl Groups {
    /// Validates `definition`, stores it under `group_id` (a new UUID when `None`) and
    /// returns its sha256. Idempotent: the same id with the same definition answers the
    /// stored group; another definition under that id is `GROUP_CONFLICT`. Starts nothing.
    ///
    /// Errors: `WORKFLOW_INVALID` (the checks of `validate`), `WORKFLOW_CONTEXT_TOO_LARGE`
    /// (a prompt over 64 KiB), the project's and agents' errors, `QUEUE_FULL` when
    /// `MAX_GROUPS` unfinished groups are retained.
    pub fn create(
        &self,
        group_id: Option<String>,
        mut definition: GroupDefinition,
    ) -> Result<GroupCreated> {
        let group_id = match group_id {
            Some(id) => {
                validate::check_group_id(&id)?;
                id
            }
            None => uuid::Uuid::new_v4().to_string(),
        };
        validate::check(&definition, self.core.config().max_group_nodes)?;
        // Every node copies the one project: it is selected (its root resolved, its files
        // listed against the copy limits) once per distinct set of include paths, not once
        // per node; each node's own criteria and include paths are still checked.
        let mut checked: Vec<(&[String], PathBuf)> = Vec::new();
        for node in &definition.nodes {
            let source = match checked
                .iter()
                .find(|(i, _)| *i == node.include_paths.as_slice())
            {
                Some((_, source)) => {
                    self.core
                        .check_copy_request_shape(&node.include_paths, &node.criteria)?;
                    source.clone()
                }
                None => {
                    let (source, _) = self.core.check_copy_request(
                        &definition.working_directory,
                        &node.include_paths,
                        &node.criteria,
                    )?;
                    checked.push((&node.include_paths, source.clone()));
                    source
                }
            };
            crate::controls::artifacts::check_paths(
                &node.artifact_paths,
                &self.core.config().review.secrets,
            )?;
            // A node naming none gets its role's or the default agent when admitted, where
            // the same check (`AGENT_RESERVED` for the supervising agent) is made again.
            if let Some(agent) = &node.agent {
                self.core.task_agent(agent)?;
            }
            if let Some(role) = &node.role {
                self.core.roles().resolve(role)?;
            }
            definition.working_directory = source;
        }
        let canonical = validate::canonical(&definition)?;
        let sha = legate_core::remote::sha256_hex(canonical.as_bytes());
        let store = self.core.store();
        if store.group(&group_id)?.is_none() {
            store.prune_groups(MAX_GROUPS - 1, &FINISHED)?;
            if store.group_count()? >= MAX_GROUPS {
                return Err(Error::new(
                    ErrorCode::QueueFull,
                    format!(
                        "{MAX_GROUPS} unfinished groups are retained; cancel or finish one first"
                    ),
                ));
            }
        }
        let now = Timestamp::now();
        let record = GroupRecord {
            group_id: group_id.clone(),
            definition: canonical,
            definition_sha256: sha.clone(),
            title: definition.title.clone(),
            state: GroupState::Created.as_str().to_string(),
            pause_reason: None,
            pause_message: None,
            runner: None,
            created_at: now,
            updated_at: now,
        };
        let nodes: Vec<NodeRecord> = definition
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| NodeRecord {
                node_id: n.id.clone(),
                position: u32::try_from(i).unwrap_or(u32::MAX),
                state: NodeState::Pending.as_str().to_string(),
                task_id: None,
                error_code: None,
                checkpoint: None,
                updated_at: now,
            })
            .collect();
        match store.insert_group(&record, &nodes)? {
            GroupInsert::Inserted => {
                tracing::info!(group = %group_id, nodes = nodes.len(), "group created");
                Ok(GroupCreated {
                    group_id,
                    definition_sha256: sha,
                    existing: false,
                })
            }
            GroupInsert::Existing(stored) if stored.definition_sha256 == sha => Ok(GroupCreated {
                group_id,
                definition_sha256: sha,
                existing: true,
            }),
            GroupInsert::Existing(stored) => Err(Error::new(
                ErrorCode::GroupConflict,
                format!(
                    "group {group_id} exists with another definition ({}); use another id",
                    stored.definition_sha256
                ),
            )),
        }
    }

    /// Starts a created group, or resumes a paused one, when `definition_sha256` is its
    /// definition's (`GROUP_CONFLICT` otherwise). Finished nodes are not re-run: each
    /// checkpoint is checked again (`WORKFLOW_CHECKPOINT_CHANGED`), a held node is released
    /// once its hook's evidence is there, an interrupted node is admitted again (the
    /// caller's explicit resume), and a node held for its peer messages goes on without those
    /// at fault, which the answer lists. `GROUP_CLOSED` for a group that ended.
    pub async fn start(&self, group_id: &str, definition_sha256: &str) -> Result<GroupStarted> {
        let g = self.core.load_group(group_id)?;
        if g.record.definition_sha256 != definition_sha256 {
            return Err(Error::new(
                ErrorCode::GroupConflict,
                format!(
                    "group {group_id}'s definition is {}, not the {definition_sha256} you named",
                    g.record.definition_sha256
                ),
            ));
        }
        let state = group_state(&g.record)?;
        if state.is_terminal() {
            return Err(closed(group_id, state));
        }
        // Claimed before its state changes: an engine that starts meanwhile (any `legate`
        // command) takes over a running group nobody drives, and would run its nodes.
        let driving = self.core.claim(group_id, g.record.runner.as_deref());
        let drive = || {
            if driving {
                self.core.ensure_driver(group_id);
            }
        };
        let answer = |dropped_peer_messages| {
            Ok(GroupStarted {
                status: self.core.group_status(group_id)?,
                dropped_peer_messages,
            })
        };
        if let Some(changed) = self.core.profile_changed(group_id, &g.definition)? {
            if state != GroupState::Created {
                self.core.pause_group(group_id, &changed)?;
                drive();
                self.core.nudge_groups();
                return answer(Vec::new());
            }
            return Err(changed);
        }
        let mut dropped = Vec::new();
        match state {
            GroupState::Completed | GroupState::Failed | GroupState::Canceled => {
                return Err(closed(group_id, state));
            }
            GroupState::Created | GroupState::Running => {}
            GroupState::Paused => {
                let resumed = self.core.resume_nodes(&g).await?;
                dropped = resumed.dropped;
                if let Some(still) = resumed.still {
                    self.core.pause_group(group_id, &still)?;
                    drive();
                    self.core.nudge_groups();
                    return answer(dropped);
                }
            }
        }
        self.core.store().set_group_state(
            group_id,
            &[
                GroupState::Created.as_str(),
                GroupState::Paused.as_str(),
                GroupState::Running.as_str(),
            ],
            GroupState::Running.as_str(),
            None,
            None,
        )?;
        tracing::info!(group = group_id, dropped = dropped.len(), "group started");
        drive();
        self.core.nudge_groups();
        answer(dropped)
    }

    /// The group's state, nodes and budget.
    pub fn status(&self, group_id: &str) -> Result<GroupStatus> {
        self.core.group_status(group_id)
    }

    /// Waits until the group ends or pauses with nothing running, at most `timeout`;
    /// answers its progress (never a prompt, an answer or an intermediate result); a node's
    /// question or blocker does not end it (see [`Self::wait_for`]).
    pub async fn wait(&self, group_id: &str, timeout: Duration) -> Result<GroupWait> {
        self.waiting(group_id, timeout, &GroupWaitRequest::default(), false)
            .await
    }

    /// Waits until the group ends or pauses with nothing running, or one of its nodes has a
    /// question or blocker after `request`'s cursors, at most `timeout`; answers its progress
    /// and that page of messages (`INVALID_INPUT` for a bad cursor or limit, before waiting).
    pub async fn wait_for(
        &self,
        group_id: &str,
        timeout: Duration,
        request: &GroupWaitRequest,
    ) -> Result<GroupWait> {
        self.waiting(group_id, timeout, request, true).await
    }

    async fn waiting(
        &self,
        group_id: &str,
        timeout: Duration,
        request: &GroupWaitRequest,
        on_messages: bool,
    ) -> Result<GroupWait> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.core.group_changes();
        loop {
            changes.borrow_and_update();
            // A group whose process died is continued by the one waiting on it.
            self.core.continue_group(group_id);
            // Waiting for the end alone, the whole answer (every task of the group, read at
            // each change of any group) is read only once there is one to give.
            let settled = on_messages
                || tokio::time::Instant::now() >= deadline
                || self.core.group_ready(group_id)?;
            if settled {
                let answer = self.current(group_id, request)?;
                if answer.ready
                    || (on_messages && !answer.messages.is_empty())
                    || tokio::time::Instant::now() >= deadline
                {
                    return Ok(answer);
                }
            }
            // A group another process drives changes only in the store: look again soon.
            tokio::select! {
                _ = changes.changed() => {}
                () = tokio::time::sleep(Duration::from_millis(250)) => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// What a wait would answer now, without waiting: `ready` when the group ended or
    /// paused with nothing running.
    pub fn current(&self, group_id: &str, request: &GroupWaitRequest) -> Result<GroupWait> {
        let g = self.core.load_group(group_id)?;
        let status = g.status()?;
        let page = self.core.group_messages(&g, request)?;
        let progress = load::progress(&status);
        let ready = load::ready(status.state, status.nodes.iter().map(|n| n.state));
        Ok(GroupWait {
            ready,
            progress,
            status,
            messages: page.messages,
            cursors: page.cursors,
            has_more_messages: page.has_more_messages,
        })
    }

    /// Admits no further node and cancels the running ones. `GROUP_CLOSED` for a group that
    /// ended already.
    pub fn cancel(&self, group_id: &str) -> Result<GroupStatus> {
        let g = self.core.load_group(group_id)?;
        let state = group_state(&g.record)?;
        if state.is_terminal() {
            return Err(closed(group_id, state));
        }
        let changed = self.core.store().set_group_state(
            group_id,
            &[
                GroupState::Created.as_str(),
                GroupState::Running.as_str(),
                GroupState::Paused.as_str(),
            ],
            GroupState::Canceled.as_str(),
            None,
            None,
        )?;
        if !changed {
            let now = group_state(&self.core.load_group(group_id)?.record)?;
            return Err(closed(group_id, now));
        }
        for rec in &g.nodes {
            match node_state(rec)? {
                NodeState::Pending
                | NodeState::Held
                | NodeState::Interrupted
                | NodeState::Admitting => {
                    let from = [node_state(rec)?];
                    self.core
                        .put_node(group_id, &from, &moved(rec, NodeState::Canceled))?;
                }
                NodeState::Running => {
                    for t in g.node_tasks(&rec.node_id).filter(|t| !t.is_terminal()) {
                        if let Err(e) = self.core.cancel(t.id.as_str()) {
                            tracing::debug!(task = %t.id, error = %e, "a group task ended before its cancel");
                        }
                    }
                }
                _ => {}
            }
        }
        tracing::info!(group = group_id, "group canceled");
        // Its running nodes' ends are recorded by a driver.
        self.core.take_over(group_id, g.record.runner.as_deref());
        self.core.nudge_groups();
        self.core.group_status(group_id)
    }

    /// Every retained group, newest first.
    pub fn list(&self) -> Result<Vec<GroupSummary>> {
        self.core.groups()
    }

    /// The final node's synthesis of a completed workflow, after checking every checkpoint
    /// again (`WORKFLOW_CHECKPOINT_CHANGED`); `WORKFLOW_RESULT_UNAVAILABLE` when the group
    /// has no workflow, has not completed, or a later run of a node failed.
    pub async fn workflow_result(&self, group_id: &str) -> Result<WorkflowResult> {
        let g = self.core.load_group(group_id)?;
        let unavailable = |why: String| Error::new(ErrorCode::WorkflowResultUnavailable, why);
        let Some(wf) = &g.definition.workflow else {
            return Err(unavailable(format!(
                "group {group_id} declares no workflow"
            )));
        };
        let state = group_state(&g.record)?;
        if state != GroupState::Completed {
            return Err(unavailable(format!(
                "group {group_id} is {state}; a synthesis is offered only for a completed workflow"
            )));
        }
        let mut reference = Vec::new();
        let mut last = None;
        for def in &g.definition.nodes {
            let rec = g
                .node(&def.id)
                .ok_or_else(|| Error::internal("a node is missing"))?;
            let cp = checkpoint(rec)?
                .ok_or_else(|| unavailable(format!("node {} has no checkpoint", def.id)))?;
            if let Some(latest) = g.latest(&def.id)
                && latest.id != cp.task_id
            {
                return Err(if latest.state == legate_core::TaskState::Completed {
                    Error::new(
                        ErrorCode::WorkflowCheckpointChanged,
                        format!(
                            "node {} ran again after its checkpoint (task {})",
                            def.id, latest.id
                        ),
                    )
                } else {
                    unavailable(format!(
                        "a later run of node {} (task {}) is {}; the synthesis is not currently valid",
                        def.id, latest.id, latest.state
                    ))
                });
            }
            self.core.recheck(&def.id, &cp, g.hook(&def.id)).await?;
            if def.id == wf.final_node {
                last = Some(cp.clone());
            }
            reference.push(serde_json::json!({"node": def.id, "checkpoint": cp}));
        }
        let cp = last.ok_or_else(|| Error::internal("the final node is missing"))?;
        let task = self.core.task(cp.task_id.as_str())?;
        let reference = serde_json::json!({
            "groupId": group_id,
            "definitionSha256": g.record.definition_sha256,
            "nodes": reference,
        });
        Ok(WorkflowResult {
            group_id: group_id.to_string(),
            definition_sha256: g.record.definition_sha256.clone(),
            final_node: wf.final_node.clone(),
            task_id: task.id.clone(),
            synthesis: checkpoint::node_result(&task),
            result_sha256: cp.result_sha256,
            reference_sha256: legate_core::remote::sha256_hex(
                validate::sort_keys(reference).to_string().as_bytes(),
            ),
        })
    }
}

/// Whether this engine drives `group` now.
pub(crate) fn scheduler_driving(engine: &Core, group: &str) -> bool {
    crate::core::lock(&engine.inner.groups.driving).contains(group)
}
