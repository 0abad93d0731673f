//! The scheduler: one driver per group this engine runs, stepping the group from the store.
//!
//! A step settles every node whose latest task's turn is over (peer envelopes recorded,
//! pending peer messages delivered as the node's next turn, else a hook holds its output or
//! its checkpoint is taken; a node whose message turn may not start, the group paused, the
//! budget's gate shut or the turn refused, is held until the group runs again, when the
//! step's first act sends it back), blocks the dependents of a failed or canceled node, admits each
//! pending node whose dependencies all succeeded (under the token budget's gate), and ends
//! the group once every node is settled. Between steps the driver waits for one of the
//! running tasks to end (heard on the engine's live channel, which it listens to before the
//! step looks), for a change made through this engine (`nudge`), or a second (a change made
//! by another process). Ready nodes the queue cannot take yet wait for a later step.
//!
//! Durable before told: a node's admission is recorded (`admitting`, compare-and-set from
//! `pending`) before its task is submitted, and the task is bound after; a task carries its
//! group and node in its controls, so an admission whose process died between the two is
//! found again (or, when no task exists, is `GROUP_ADMISSION_UNVERIFIED`). A turn cut by the
//! end of its engine pauses the group (`SERVER_RESTARTED`): nothing is re-run silently.
//!
//! Admitting one node is `admit`'s. The scheduler never runs an agent itself and never re-submits a node that has a task.

use super::checkpoint::{Known, holding};
use super::load::{Loaded, group_state, node_state};
use super::status::{GroupState, NodeState};
use super::tokens::{Gate, gate};
use super::{Drivers, peer};
use crate::core::Core;
use crate::core::lock;
use legate_core::{Error, ErrorCode, Event, EventKind, Result, Task, TaskId, TaskState};
use legate_store::NodeRecord;
use std::collections::HashSet;
use std::time::Duration;

/// How often a driver looks at the store when nothing it waits on happened.
const TICK: Duration = Duration::from_secs(1);

/// At most this many ended copies are read at once while settling (each read is a walk of
/// one copy on a blocking thread).
const SETTLE_READS: usize = 8;

/// What a step leaves the driver to do.
pub(crate) enum Next {
    /// Wait for a turn of one of these tasks to end (or a nudge, or a tick), then step
    /// again.
    Wait(HashSet<TaskId>),
    /// Nothing runs and nothing can be admitted: stop driving.
    Idle,
}

/// Returns once one of `tasks` ends or waits for input, as this engine stores it (or the
/// live channel lagged, when it may have); never for tasks another process runs, which the
/// driver's tick finds. One receiver for every task, instead of a subscription per task
/// replaying each one's events at every step.
async fn until_a_turn_ends(
    live: &mut tokio::sync::broadcast::Receiver<Event>,
    tasks: &HashSet<TaskId>,
) {
    use tokio::sync::broadcast::error::RecvError;
    if tasks.is_empty() {
        return std::future::pending().await;
    }
    loop {
        match live.recv().await {
            Ok(e) => {
                if let EventKind::Status { state, .. } = &e.kind
                    && (state.is_terminal() || *state == TaskState::InputRequired)
                    && tasks.contains(&e.task_id)
                {
                    return;
                }
            }
            Err(RecvError::Lagged(_)) => return,
            Err(RecvError::Closed) => return std::future::pending().await,
        }
    }
}

/// A node record moved to `state`, keeping the rest.
pub(crate) fn moved(rec: &NodeRecord, state: NodeState) -> NodeRecord {
    NodeRecord {
        state: state.as_str().to_string(),
        ..rec.clone()
    }
}

/// Whether a node whose answer's peer envelopes failed with `code` is held for it (its
/// turn ended; the group pauses until a resume finds the envelopes acceptable).
pub(crate) fn holds_for_peers(code: ErrorCode) -> bool {
    matches!(
        code,
        ErrorCode::PeerMessageConflict | ErrorCode::PeerLimitExceeded
    )
}

/// `rec` in `state` with `error`.
fn with_error(rec: &NodeRecord, state: NodeState, error: Option<ErrorCode>) -> NodeRecord {
    NodeRecord {
        error_code: error.map(|c| c.as_str().to_string()),
        ..moved(rec, state)
    }
}

impl Core {
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
                // Listening starts before the step looks, so a task that ends while it
                // steps wakes the next one.
                let mut live = engine.live_events();
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
                let any = until_a_turn_ends(&mut live, &ids);
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
        let g = self.load_group_for_step(group)?;
        let g = if group_state(&g.record)? == GroupState::Running && self.mend_holds(&g)? {
            self.reload_group(g, true)?
        } else {
            g
        };
        let state = group_state(&g.record)?;
        let mut ended: Vec<(&NodeRecord, Task)> = Vec::new();
        let mut bound_any = false;
        for rec in &g.nodes {
            match node_state(rec)? {
                NodeState::Admitting => match g.node_tasks(&rec.node_id).next() {
                    Some(t) => {
                        let bound = NodeRecord {
                            task_id: Some(t.id.clone()),
                            ..moved(rec, NodeState::Running)
                        };
                        self.put_node(group, &[NodeState::Admitting], &bound)?;
                        bound_any = true;
                    }
                    None if state == GroupState::Running => {
                        self.pause_group(group, &Error::new(
                                ErrorCode::GroupAdmissionUnverified,
                                format!("node {}'s admission was recorded but no task of it was stored; nothing was started again: group_start resumes it", rec.node_id),
                            ))?;
                        return Ok(Next::Wait(HashSet::new()));
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
                    ended.push((rec, task.clone()));
                }
                _ => {}
            }
        }
        // Reading an ended copy's hashes is most of settling it; the copies are read side by
        // side (each reads only its own copy), then settled one by one in definition order.
        let mut known: Vec<Known> = Vec::with_capacity(ended.len());
        for chunk in ended.chunks(SETTLE_READS) {
            let reads: Vec<_> = chunk.iter().map(|(_, t)| self.read_ended(t)).collect();
            known.extend(futures::future::join_all(reads).await);
        }
        let mut turned = false;
        for ((rec, task), known) in ended.iter().zip(known) {
            turned |= self.settle_node(&g, state, rec, task, known).await?;
        }
        // Settling changed the store: read it again before admitting (its tasks only when a
        // node's next turn was queued). What this step did not change is not read again.
        let g = if bound_any || !ended.is_empty() {
            self.reload_group(g, turned)?
        } else {
            g
        };
        let g = if self.block_dependents(&g)? {
            self.reload_group(g, false)?
        } else {
            g
        };
        let state = group_state(&g.record)?;
        // The budget's gate waits for running turns itself.
        let admitted = state == GroupState::Running && self.admit_ready(&g).await?;
        let g = if admitted {
            self.reload_group(g, true)?
        } else {
            g
        };
        let state = group_state(&g.record)?;
        if state == GroupState::Canceled {
            // A cancel that raced this step (it read a node held, this step sent it back to
            // be settled, and settling held it again) left a hold in a canceled group.
            for rec in &g.nodes {
                if node_state(rec)? == NodeState::Held {
                    self.put_node(group, &[NodeState::Held], &moved(rec, NodeState::Canceled))?;
                }
            }
        }
        let mut latest = HashSet::new();
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
                    // Every node's latest task, ended or not: one that ended after the
                    // settling looked has its event waiting in the driver's receiver already.
                    if let Some(t) = g.latest(&rec.node_id) {
                        latest.insert(t.id.clone());
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
            Ok(Next::Wait(latest))
        } else {
            Ok(Next::Idle)
        }
    }

    /// The budget's gate for one more turn of `g`, over its tasks as stored now (a turn
    /// started since `g` was read counts); without a budget it is open, and nothing is read.
    fn gate_now(&self, g: &Loaded) -> Result<Gate> {
        if g.definition.budget.is_none() {
            return Ok(gate(None, &[]));
        }
        let fresh = self.load_group(&g.record.group_id)?;
        Ok(gate(fresh.definition.budget, &fresh.tasks))
    }

    /// Mends the holds of the running group `g`; whether it changed anything. A node is
    /// held under a paused group, or under a running one until that group's next step: after
    /// a resume (which checks which holds still hold, settling a peer conflict's or limit's
    /// hold by dropping what conflicts or passes a limit), after a step's hold that raced a
    /// resume (the step read the group paused; the resume ran before its write), or after a
    /// crash between a hold and its group's pause (a test's, a review's or a peer conflict's
    /// node is held first). Each goes back to be settled again as its turn's end settled
    /// it: held again, and its group paused, if what held it still holds; a waiting peer
    /// message its next turn. A held node whose task is gone (pruned, or never bound) cannot
    /// be settled: the group pauses with its code, and nothing is moved.
    fn mend_holds(&self, g: &Loaded) -> Result<bool> {
        let group = g.record.group_id.as_str();
        let mut held = Vec::new();
        for rec in &g.nodes {
            if node_state(rec)? != NodeState::Held {
                continue;
            }
            let stored = match &rec.task_id {
                Some(id) => self.store().task(id)?.is_some(),
                None => false,
            };
            if !stored {
                let code = rec.error_code.as_deref().and_then(ErrorCode::parse);
                self.pause_group(
                    group,
                    &Error::new(
                        code.unwrap_or(ErrorCode::Internal),
                        format!(
                            "node {} is held and its task is gone, so it cannot be settled; cancel the group",
                            rec.node_id
                        ),
                    ),
                )?;
                return Ok(true);
            }
            held.push(rec);
        }
        let mut changed = false;
        for rec in held {
            tracing::info!(group, node = %rec.node_id, "a held node of a running group is settled again");
            let again = NodeRecord {
                error_code: None,
                ..moved(rec, NodeState::Running)
            };
            changed |= self.put_node(group, &[NodeState::Held], &again)?;
        }
        Ok(changed)
    }

    /// The hashes settling the ended `task` will need: none for a task that did not
    /// complete (its node fails or is interrupted without its copy being read).
    async fn read_ended(&self, task: &Task) -> Known {
        if task.state == TaskState::Completed {
            self.read_hashes(task).await
        } else {
            Known::default()
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
        known: Known,
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
            if let Err(e) = self.record_peer_envelopes(g, rec, task, peer::Recording::TurnEnd) {
                if holds_for_peers(e.code) {
                    // The node's turn is over: it is held, not running, until resumed.
                    self.put_node(
                        group,
                        &[NodeState::Running],
                        &with_error(rec, NodeState::Held, Some(e.code)),
                    )?;
                }
                self.pause_group(group, &e)?;
                return Ok(false);
            }
            let pending = peer::pending_for(self.store(), group, &rec.node_id)?;
            if !pending.is_empty() {
                // A message waits to be the node's next turn. Whether that turn may start is
                // read now, not from the step's load: a node settled before this one in the
                // same step may have paused the group, or (under a budget) started a turn.
                let record = self
                    .store()
                    .group(group)?
                    .ok_or_else(|| super::load::not_found(group))?;
                let hold = match group_state(&record)? {
                    GroupState::Running => match self.gate_now(g)? {
                        Gate::Open => None,
                        Gate::Wait => return Ok(true),
                        Gate::Pause(e) => {
                            self.pause_group(group, &e)?;
                            Some(Some(e.code))
                        }
                    },
                    // Paused by the budget's gate (a crash may have come between that
                    // pause and this node's hold): its code; for another node's reason,
                    // this node carries none of its own.
                    GroupState::Paused => Some(
                        record
                            .pause_reason
                            .as_deref()
                            .and_then(ErrorCode::parse)
                            .filter(|c| {
                                matches!(
                                    c,
                                    ErrorCode::GroupBudgetExceeded
                                        | ErrorCode::GroupUsageUnavailable
                                )
                            }),
                    ),
                    _ => return Ok(false),
                };
                // When the turn may not start, the node is held: its turn is over, nothing
                // of it runs, and a resume (or a step that finds its group running again)
                // sends it back here. The group is paused first, so a crash between the two
                // writes leaves the node running under a paused group, which the next step
                // settles again.
                if let Some(code) = hold {
                    self.put_node(
                        group,
                        &[NodeState::Running],
                        &with_error(rec, NodeState::Held, code),
                    )?;
                    return Ok(false);
                }
                let carried = match self.deliver_peer_messages(
                    group,
                    &rec.node_id,
                    &task.context_id,
                ) {
                    Ok(carried) => carried,
                    // No place for the turn now: it waits for one (a task ending, or the
                    // next tick), as an admission does, rather than pausing the group. A
                    // message already sent is marked so; the rest are sent after.
                    Err(e) if e.code == ErrorCode::QueueFull && self.will_have_room() => {
                        tracing::debug!(group, node = %rec.node_id, "no place for a message turn yet; it waits");
                        return Ok(true);
                    }
                    // Refused otherwise, before any turn was accepted (its copy discarded
                    // meanwhile, its agent gone from the configuration): the node's turn is
                    // over and it cannot take the next, so it is held with the refusal's
                    // code, then its group paused. A kill between the two leaves a hold in a
                    // running group, which the next step settles again (refused again, code
                    // and all). A resume tries the message again.
                    Err(e) => {
                        tracing::info!(group, node = %rec.node_id, error = %e.code, "a peer message turn was refused; the node is held");
                        let code = e.code;
                        let refused = Error::caused_by(
                            code,
                            format!(
                                "node {}'s next turn, a peer message, was refused ({code}); group_start tries it again, group_cancel ends the group",
                                rec.node_id
                            ),
                            e,
                        );
                        self.put_node(
                            group,
                            &[NodeState::Running],
                            &with_error(rec, NodeState::Held, Some(code)),
                        )?;
                        self.pause_group(group, &refused)?;
                        return Ok(false);
                    }
                };
                tracing::info!(group, node = %rec.node_id, turns = carried.len(), "peer messages delivered as the node's next turns");
                return Ok(true);
            }
        }
        let hook = g.hook(&rec.node_id);
        let patch = match self.node_patch(task, &known).await {
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
        let known = Known {
            patch: Some(patch),
            ..known
        };
        self.finish_node(group, rec, task, hook, known).await?;
        Ok(false)
    }

    /// Records the peer envelopes in the answer of node `rec`'s ended `task` (see
    /// `peer::record`); the error is the group's pause reason. Recording an answer again
    /// finds its stored messages again, and the same conflict or limit again, until a resume
    /// records it (`recording`) and drops those: what it dropped is returned, each for a
    /// person.
    pub(crate) fn record_peer_envelopes(
        &self,
        g: &Loaded,
        rec: &NodeRecord,
        task: &Task,
        recording: peer::Recording,
    ) -> Result<Vec<String>> {
        let answer = task.result.as_ref().map_or("", |r| r.text.as_str());
        let found = peer::take_envelopes(answer);
        // Which nodes take more turns, as stored now: a recipient settled earlier in this
        // step is read as it is, never as the step's load saw it. A held or interrupted node
        // takes more once resumed (a held one takes its messages first).
        let nodes = if found.is_empty() {
            Vec::new()
        } else {
            self.store().group_nodes(&g.record.group_id)?
        };
        let open = |node: &str| {
            nodes.iter().find(|n| n.node_id == node).is_some_and(|n| {
                node_state(n).is_ok_and(|s| {
                    matches!(
                        s,
                        NodeState::Pending
                            | NodeState::Admitting
                            | NodeState::Running
                            | NodeState::Held
                            | NodeState::Interrupted
                    )
                })
            })
        };
        peer::record(
            self.store(),
            &g.record.group_id,
            &g.definition,
            &rec.node_id,
            &task.id,
            found,
            &open,
            recording,
        )
    }

    /// Takes `task`'s checkpoint and marks node `rec` succeeded (or failed with the
    /// checkpoint's error), from `running`, with the copy's hashes already `known`.
    pub(crate) async fn finish_node(
        &self,
        group: &str,
        rec: &NodeRecord,
        task: &Task,
        hook: super::Hook,
        known: Known,
    ) -> Result<()> {
        let to = match self.take_checkpoint(task, hook, known).await {
            Ok(cp) => NodeRecord {
                checkpoint: Some(serde_json::to_string(&cp).map_err(|e| {
                    Error::caused_by(ErrorCode::Internal, "a checkpoint could not be encoded", e)
                })?),
                ..with_error(rec, NodeState::Succeeded, None)
            },
            Err(e) => with_error(rec, NodeState::Failed, Some(e.code)),
        };
        tracing::info!(group, node = %rec.node_id, task = %task.id, state = %to.state, "group node finished");
        self.put_node(group, &[NodeState::Running], &to)?;
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

    /// Marks every pending node with a failed, canceled or blocked dependency `blocked`;
    /// whether it marked any.
    fn block_dependents(&self, g: &Loaded) -> Result<bool> {
        let mut any = false;
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
                    any = true;
                }
            }
            if !more {
                return Ok(any);
            }
        }
    }
}
