//! Resuming a paused group: what `group_start` does to each node before the group runs
//! again. First what may fail, changing nothing but the pause it then records: every
//! finished node's checkpoint is checked again, and the patch and hook evidence of each held
//! node that has a task, no peer message waiting and no hold for its own peer envelopes are
//! read. Then, in node order, a node held for its peer envelopes has its answer recorded
//! again (those at fault dropped, and said), a held node is released once its hook's
//! evidence is there, an interrupted one goes back to be admitted. So only a store error can
//! end a resume after it dropped anything. The price: a held node whose copy cannot be read
//! fails the resume even when a message recorded in the second part would have given it
//! another turn first.
//!
//! It never runs a node or finishes a held one itself: the running group's scheduler does.

use super::load::{self, node_state};
use super::scheduler::{self, moved};
use super::status::{DroppedPeerMessage, NodeState};
use super::{checkpoint, peer};
use crate::core::Core;
use legate_core::{Error, ErrorCode, Result};
use legate_store::NodeRecord;
use std::collections::HashMap;

/// What a resume did to a paused group's nodes.
pub(super) struct Resumed {
    /// The reason a node is still held, when one is: the group stays paused.
    pub(super) still: Option<Error>,
    /// The peer messages it dropped, in node order.
    pub(super) dropped: Vec<DroppedPeerMessage>,
}

impl Core {
    /// Prepares a paused group's nodes to go on: [`Resumed::still`] names a node still held,
    /// [`Resumed::dropped`] the peer messages dropped on the way.
    pub(super) async fn resume_nodes(&self, g: &load::Loaded) -> Result<Resumed> {
        let group = g.record.group_id.as_str();
        // Every finished node's checkpoint first, before anything changes: a resume refused
        // for one (`WORKFLOW_CHECKPOINT_CHANGED`) has then recorded, dropped and released
        // nothing, so no drop is made that its failed answer could not list.
        for rec in &g.nodes {
            if node_state(rec)? == NodeState::Succeeded
                && let Some(cp) = load::checkpoint(rec)?
                && let Err(e) = self.recheck(&rec.node_id, &cp, g.hook(&rec.node_id)).await
            {
                self.pause_group(group, &e)?;
                return Err(e);
            }
        }
        // Then what may fail of each held node's release, read before anything changes too:
        // its patch and its hook's evidence (a node with a peer message waiting is not
        // checked, and a message recorded below only adds to those).
        let mut holds = HashMap::new();
        for rec in &g.nodes {
            if node_state(rec)? != NodeState::Held
                || held_for_peers(rec)
                || !peer::pending_for(self.store(), group, &rec.node_id)?.is_empty()
            {
                continue;
            }
            let Some(task) = g.latest(&rec.node_id) else {
                continue;
            };
            // As its turn's end read them while the copy is proven unchanged since.
            let known = self.read_hashes(task).await;
            let patch = self.node_patch(task, &known).await?;
            let hold = checkpoint::holding(self, task, g.hook(&rec.node_id), &patch)?;
            holds.insert(rec.node_id.as_str(), hold);
        }
        let mut still = None;
        let mut dropped = Vec::new();
        for rec in &g.nodes {
            match node_state(rec)? {
                NodeState::Held if held_for_peers(rec) => {
                    // Held for its peer envelopes: they are recorded again, those that
                    // conflict or pass a limit dropped (recording again could never clear
                    // them; the resume is the word to go on without them), and the node goes
                    // back to be settled by the scheduler.
                    let Some(task) = g.latest(&rec.node_id) else {
                        continue;
                    };
                    match self.record_peer_envelopes(g, rec, task, peer::Recording::Resume) {
                        Ok(reasons) => {
                            dropped.extend(reasons.into_iter().map(|reason| DroppedPeerMessage {
                                node_id: rec.node_id.clone(),
                                task_id: task.id.clone(),
                                reason,
                            }));
                            let again = NodeRecord {
                                error_code: None,
                                ..moved(rec, NodeState::Running)
                            };
                            self.put_node(group, &[NodeState::Held], &again)?;
                        }
                        Err(e) => still = still.or(Some(e)),
                    }
                }
                NodeState::Held
                    if !peer::pending_for(self.store(), group, &rec.node_id)?.is_empty() =>
                {
                    // Its turn ended with a peer message waiting (the group paused, its
                    // budget, or the turn refused), or one came while it was held: it is not
                    // finished here. The first step of the running group sends it back to be
                    // settled, and the message is its next turn, under the budget's gate again.
                }
                NodeState::Held => {
                    // Released, it stays held here: the first step of the running group sends
                    // it back and settles it (a message that came meanwhile first, then its
                    // checkpoint), in turn with recording the other nodes' messages.
                    if let Some(Some(hold)) = holds.remove(rec.node_id.as_str()) {
                        still = still.or(Some(hold));
                    }
                }
                NodeState::Interrupted => {
                    // It runs again from its prompt, in a new conversation that has seen
                    // none of the messages sent to it: they are queued again first (a crash
                    // between the two writes finds it interrupted, and queues none twice),
                    // and are its turns again once its first turn ends.
                    let requeued = self.store().requeue_peer_messages_to(group, &rec.node_id)?;
                    if requeued > 0 {
                        tracing::info!(group, node = %rec.node_id, requeued, "peer messages queued again for a node run again");
                    }
                    let again = NodeRecord {
                        error_code: None,
                        task_id: None,
                        ..moved(rec, NodeState::Pending)
                    };
                    self.put_node(group, &[NodeState::Interrupted], &again)?;
                }
                NodeState::Admitting if g.node_tasks(&rec.node_id).next().is_none() => {
                    self.put_node(
                        group,
                        &[NodeState::Admitting],
                        &moved(rec, NodeState::Pending),
                    )?;
                }
                _ => {}
            }
        }
        Ok(Resumed { still, dropped })
    }
}

/// Whether `rec` is held for its peer envelopes (a conflict or a limit at its turn's end).
fn held_for_peers(rec: &NodeRecord) -> bool {
    node_state(rec).is_ok_and(|s| s == NodeState::Held)
        && rec
            .error_code
            .as_deref()
            .and_then(ErrorCode::parse)
            .is_some_and(scheduler::holds_for_peers)
}
