//! The scheduler: one driver per group this engine runs, stepping the group from the store.
//!
//! A step settles every node whose latest task's turn is over (peer envelopes recorded,
//! pending peer messages delivered as the node's next turn, else a hook holds its output or
//! its checkpoint is taken), blocks the dependents of a failed or canceled node, admits each
//! pending node whose dependencies all succeeded (under the token budget's gate), and ends
//! the group once every node is settled. Between steps the driver waits for one of the
//! running tasks to end, for a change made through this engine (`nudge`), or a second (a
//! change made by another process).
//!
//! Durable before told: a node's admission is recorded (`admitting`, compare-and-set from
//! `pending`) before its task is submitted, and the task is bound after; a task carries its
//! group and node in its controls, so an admission whose process died between the two is
//! found again (or, when no task exists, is `GROUP_ADMISSION_UNVERIFIED`). A turn cut by the
//! end of its engine pauses the group (`SERVER_RESTARTED`): nothing is re-run silently.
//!
//! Admitting one node is `admit`'s. The scheduler never runs an agent itself and never re-submits a node that has a task.

use super::checkpoint::holding;
use super::load::{Loaded, group_state, node_state};
use super::status::{GroupState, NodeState};
use super::tokens::{Gate, gate};
use super::{Drivers, peer};
use crate::Engine;
use crate::engine::lock;
use legate_core::{Error, ErrorCode, Result, Task, TaskId, TaskState};
use legate_store::NodeRecord;
use std::time::Duration;

/// How often a driver looks at the store when nothing it waits on happened.
const TICK: Duration = Duration::from_secs(1);

/// What a step leaves the driver to do.
pub(crate) enum Next {
    /// Wait for one of these tasks (or a nudge, or a tick), then step again.
    Wait(Vec<TaskId>),
    /// Nothing runs and nothing can be admitted: stop driving.
    Idle,
}

/// A node record moved to `state`, keeping the rest.
pub(crate) fn moved(rec: &NodeRecord, state: NodeState) -> NodeRecord {
    NodeRecord {
        state: state.as_str().to_string(),
        ..rec.clone()
    }
}

/// `rec` in `state` with `error`.
fn with_error(rec: &NodeRecord, state: NodeState, error: Option<ErrorCode>) -> NodeRecord {
    NodeRecord {
        error_code: error.map(|c| c.as_str().to_string()),
        ..moved(rec, state)
    }
}

impl Engine {
    fn drivers(&self) -> &Drivers {
        &self.inner.groups
    }

    /// Tells every waiter and driver in this process that a group changed.
    pub(crate) fn nudge_groups(&self) {
        self.drivers()
            .changed
            .send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that changes whenever a group changes through this engine.
    pub(crate) fn group_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.drivers().changed.subscribe()
    }

    /// Moves node `rec` of `group` from `from` to `to`'s state, writing `to` whole.
    pub(crate) fn put_node(
        &self,
        group: &str,
        from: &[NodeState],
        to: &NodeRecord,
    ) -> Result<bool> {
        let from: Vec<&str> = from.iter().map(|s| s.as_str()).collect();
        self.store().move_node(group, &from, to)
    }

    /// Pauses a running (or paused) group with `error`'s code and sentence.
    pub(crate) fn pause_group(&self, group: &str, error: &Error) -> Result<()> {
        tracing::info!(group, reason = %error.code, "group paused");
        self.store().set_group_state(
            group,
            &[GroupState::Running.as_str(), GroupState::Paused.as_str()],
            GroupState::Paused.as_str(),
            Some(error.code.as_str()),
            Some(&error.message),
        )?;
        Ok(())
    }

    /// Starts this engine's driver of `group` unless one runs.
    pub(crate) fn ensure_driver(&self, group: &str) {
        if *self.shutdown_signal().borrow() {
            return;
        }
        if !lock(&self.drivers().driving).insert(group.to_string()) {
            return;
        }
        let weak = self.downgrade();
        let id = group.to_string();
        let mut shutdown = self.shutdown_signal();
        let mut changes = self.group_changes();
        self.track(async move {
            loop {
                let Some(engine) = weak.upgrade() else { return };
                if *shutdown.borrow() {
                    break;
                }
                let next = engine.step(&id).await;
                engine.nudge_groups();
                let ids = match next {
                    Ok(Next::Idle) => break,
                    Ok(Next::Wait(ids)) => ids,
                    Err(e) => {
                        tracing::warn!(group = %id, error = %e, "a group step failed; pausing it");
                        if let Err(p) = engine.pause_group(&id, &e) {
                            tracing::error!(group = %id, error = %p, "could not pause a group");
                        }
                        break;
                    }
                };
                changes.borrow_and_update();
                let waits: Vec<_> = ids.iter().map(|t| Box::pin(engine.wait(t))).collect();
                let any = async {
                    if waits.is_empty() {
                        std::future::pending::<()>().await;
                    } else {
                        let _ = futures::future::select_all(waits).await;
                    }
                };
                tokio::select! {
                    () = any => {}
                    () = tokio::time::sleep(TICK) => {}
                    _ = changes.changed() => {}
                    _ = shutdown.changed() => break,
                }
            }
            if let Some(engine) = weak.upgrade() {
                lock(&engine.drivers().driving).remove(&id);
                let own = engine.runner_id().to_string();
                if !*shutdown.borrow()
                    && let Err(e) = engine.store().claim_group(&id, Some(&own), None)
                {
                    tracing::warn!(group = %id, error = %e, "could not release a group");
                }
                engine.nudge_groups();
            }
        });
    }

    /// One step of `group` (see the module docs).
    pub(crate) async fn step(&self, group: &str) -> Result<Next> {
        let g = self.load_group(group)?;
        let state = group_state(&g.record)?;
        for rec in &g.nodes {
            match node_state(rec)? {
                NodeState::Admitting => match g.node_tasks(&rec.node_id).next() {
                    Some(t) => {
                        let bound = NodeRecord {
                            task_id: Some(t.id.clone()),
                            ..moved(rec, NodeState::Running)
                        };
                        self.put_node(group, &[NodeState::Admitting], &bound)?;
                    }
                    None if state == GroupState::Running => {
                        self.pause_group(group, &Error::new(
                                ErrorCode::GroupAdmissionUnverified,
                                format!("node {}'s admission was recorded but no task of it was stored; nothing was started again: group_start resumes it", rec.node_id),
                            ))?;
                        return Ok(Next::Wait(Vec::new()));
                    }
                    None => {}
                },
                NodeState::Running => {
                    let Some(task) = g.latest(&rec.node_id) else {
                        continue;
                    };
                    if !task.is_terminal() {
                        continue;
                    }
                    let task = task.clone();
                    self.settle_node(&g, state, rec, &task).await?;
                }
                _ => {}
            }
        }
        // Settling changed the store: read it again before admitting.
        let g = self.load_group(group)?;
        self.block_dependents(&g)?;
        let g = self.load_group(group)?;
        let state = group_state(&g.record)?;
        // The budget's gate waits for running turns itself.
        if state == GroupState::Running {
            self.admit_ready(&g).await?;
        }
        let g = self.load_group(group)?;
        let state = group_state(&g.record)?;
        let mut running = Vec::new();
        let mut open = false;
        let mut all_ok = true;
        let mut first_failure = None;
        for rec in &g.nodes {
            match node_state(rec)? {
                NodeState::Succeeded => {}
                NodeState::Failed | NodeState::Canceled | NodeState::Blocked => {
                    all_ok = false;
                    if first_failure.is_none() && node_state(rec)? != NodeState::Blocked {
                        first_failure = rec.error_code.clone();
                    }
                }
                NodeState::Running | NodeState::Admitting => {
                    open = true;
                    if let Some(t) = g.latest(&rec.node_id)
                        && !t.is_terminal()
                        && t.state != TaskState::InputRequired
                    {
                        running.push(t.id.clone());
                    }
                }
                NodeState::Pending | NodeState::Held | NodeState::Interrupted => open = true,
            }
        }
        if !open && !state.is_terminal() {
            let (to, reason) = if all_ok {
                (GroupState::Completed, None)
            } else {
                (GroupState::Failed, first_failure)
            };
            self.store().set_group_state(
                group,
                &[GroupState::Running.as_str(), GroupState::Paused.as_str()],
                to.as_str(),
                reason.as_deref(),
                None,
            )?;
            tracing::info!(group, state = %to, "group ended");
            return Ok(Next::Idle);
        }
        let any_running = g
            .nodes
            .iter()
            .any(|n| node_state(n).is_ok_and(|s| s == NodeState::Running));
        if state == GroupState::Running || any_running {
            Ok(Next::Wait(running))
        } else {
            Ok(Next::Idle)
        }
    }

    /// Settles node `rec`, whose latest task `task` ended. Returns whether a new turn of it
    /// was queued (a peer message).
    async fn settle_node(
        &self,
        g: &Loaded,
        state: GroupState,
        rec: &NodeRecord,
        task: &Task,
    ) -> Result<bool> {
        let group = g.record.group_id.as_str();
        match task.state {
            TaskState::Completed => {}
            TaskState::Canceled
                if self.store().cancel_requested_at(&task.id)?.is_some()
                    || state == GroupState::Canceled =>
            {
                self.put_node(
                    group,
                    &[NodeState::Running],
                    &with_error(rec, NodeState::Canceled, Some(ErrorCode::TaskCanceled)),
                )?;
                return Ok(false);
            }
            TaskState::Canceled => {
                // Canceled by no caller: the engine that ran it shut down under it.
                return self.interrupted(group, rec, task).map(|()| false);
            }
            _ => {
                let code = task.error_code();
                if code == Some(ErrorCode::ServerRestarted) {
                    return self.interrupted(group, rec, task).map(|()| false);
                }
                let code = code.unwrap_or(ErrorCode::Internal);
                tracing::info!(group, node = %rec.node_id, task = %task.id, error = %code, "group node failed");
                self.put_node(
                    group,
                    &[NodeState::Running],
                    &with_error(rec, NodeState::Failed, Some(code)),
                )?;
                return Ok(false);
            }
        }
        if !state.is_terminal() {
            let answer = task.result.as_ref().map_or("", |r| r.text.as_str());
            let found = peer::take_envelopes(answer);
            let open = |node: &str| {
                g.node(node).is_some_and(|n| {
                    node_state(n).is_ok_and(|s| {
                        matches!(
                            s,
                            NodeState::Pending | NodeState::Admitting | NodeState::Running
                        )
                    })
                })
            };
            if let Err(e) = peer::record(
                self.store(),
                group,
                &g.definition,
                &rec.node_id,
                &task.id,
                found,
                &open,
            ) {
                self.pause_group(group, &e)?;
                return Ok(false);
            }
            let pending = peer::pending_for(self.store(), group, &rec.node_id)?;
            if !pending.is_empty() {
                if state != GroupState::Running {
                    return Ok(false);
                }
                match gate(g.definition.budget, &g.tasks) {
                    Gate::Open => {}
                    Gate::Wait => return Ok(true),
                    Gate::Pause(e) => {
                        self.pause_group(group, &e)?;
                        return Ok(false);
                    }
                }
                let carried = self.deliver_peer_messages(group, &rec.node_id, &task.context_id)?;
                tracing::info!(group, node = %rec.node_id, turns = carried.len(), "peer messages delivered as the node's next turns");
                return Ok(true);
            }
        }
        let hook = g.hook(&rec.node_id);
        let patch = match self.node_patch(task).await {
            Ok(p) => p,
            Err(e) => {
                self.put_node(
                    group,
                    &[NodeState::Running],
                    &with_error(rec, NodeState::Failed, Some(e.code)),
                )?;
                return Ok(false);
            }
        };
        if let Some(hold) = holding(self, task, hook, &patch)? {
            self.put_node(
                group,
                &[NodeState::Running],
                &with_error(rec, NodeState::Held, Some(hold.code)),
            )?;
            if !state.is_terminal() {
                self.pause_group(group, &hold)?;
            }
            return Ok(false);
        }
        self.finish_node(group, NodeState::Running, rec, task, hook)
            .await?;
        Ok(false)
    }

    /// Takes `task`'s checkpoint and marks node `rec` succeeded (or failed with the
    /// checkpoint's error), from state `from`.
    pub(crate) async fn finish_node(
        &self,
        group: &str,
        from: NodeState,
        rec: &NodeRecord,
        task: &Task,
        hook: super::Hook,
    ) -> Result<()> {
        let to = match self.take_checkpoint(task, hook).await {
            Ok(cp) => NodeRecord {
                checkpoint: Some(serde_json::to_string(&cp).map_err(|e| {
                    Error::internal(format!("a checkpoint could not be encoded: {e}"))
                })?),
                ..with_error(rec, NodeState::Succeeded, None)
            },
            Err(e) => with_error(rec, NodeState::Failed, Some(e.code)),
        };
        tracing::info!(group, node = %rec.node_id, task = %task.id, state = %to.state, "group node finished");
        self.put_node(group, &[from], &to)?;
        Ok(())
    }

    fn interrupted(&self, group: &str, rec: &NodeRecord, task: &Task) -> Result<()> {
        self.put_node(
            group,
            &[NodeState::Running],
            &with_error(
                rec,
                NodeState::Interrupted,
                Some(ErrorCode::ServerRestarted),
            ),
        )?;
        self.pause_group(group, &Error::new(
            ErrorCode::ServerRestarted,
            format!("node {}'s task {} was cut when the engine running it stopped; nothing is re-run until group_start resumes the group", rec.node_id, task.id),
        ))
    }

    /// Marks every pending node with a failed, canceled or blocked dependency `blocked`.
    fn block_dependents(&self, g: &Loaded) -> Result<()> {
        let mut stopped: std::collections::HashSet<String> = g
            .nodes
            .iter()
            .filter(|n| {
                node_state(n).is_ok_and(|s| {
                    matches!(
                        s,
                        NodeState::Failed | NodeState::Canceled | NodeState::Blocked
                    )
                })
            })
            .map(|n| n.node_id.clone())
            .collect();
        loop {
            let mut more = false;
            for def in &g.definition.nodes {
                if stopped.contains(&def.id) || !def.depends_on.iter().any(|d| stopped.contains(d))
                {
                    continue;
                }
                if let Some(rec) = g.node(&def.id)
                    && node_state(rec)? == NodeState::Pending
                {
                    self.put_node(
                        &g.record.group_id,
                        &[NodeState::Pending],
                        &moved(rec, NodeState::Blocked),
                    )?;
                    stopped.insert(def.id.clone());
                    more = true;
                }
            }
            if !more {
                return Ok(());
            }
        }
    }

    /// Admits every pending node whose dependencies all succeeded (one, under a budget).
    async fn admit_ready(&self, g: &Loaded) -> Result<()> {
        let group = g.record.group_id.as_str();
        for def in &g.definition.nodes {
            let Some(rec) = g.node(&def.id) else { continue };
            if node_state(rec)? != NodeState::Pending {
                continue;
            }
            let ready = def.depends_on.iter().all(|d| {
                g.node(d)
                    .is_some_and(|n| node_state(n).is_ok_and(|s| s == NodeState::Succeeded))
            });
            if !ready {
                continue;
            }
            let fresh = self.load_group(group)?;
            if group_state(&fresh.record)? != GroupState::Running {
                return Ok(());
            }
            match gate(fresh.definition.budget, &fresh.tasks) {
                Gate::Open => {}
                Gate::Wait => return Ok(()),
                Gate::Pause(e) => return self.pause_group(group, &e),
            }
            if let Err(e) = self.admit_node(&fresh, rec).await {
                tracing::warn!(group, node = %def.id, error = %e, "a group node could not be admitted");
                return self.pause_group(group, &e);
            }
        }
        Ok(())
    }
}
