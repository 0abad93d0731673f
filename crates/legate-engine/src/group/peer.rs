//! Peer messages between the nodes of a group (issue 16 §4): wfpeer's module. Until it is
//! built, these are the call sites the scheduler uses, doing nothing: no envelope is taken
//! from an answer and none is ever pending, so no message is delivered or pretended to be.
//!
//! The scheduler calls, in this order: at a node's turn end [`take_envelopes`] on its answer
//! and [`record`] with them (an `Err` pauses the group with the error's code:
//! `PEER_MESSAGE_CONFLICT`, `PEER_LIMIT_EXCEEDED`); before the node counts as finished,
//! [`pending_for`] it, each message delivered as the node's next turn
//! (`Engine::send_message` on its context, the message id given), then [`mark_sent`].

use super::GroupDefinition;
use legate_core::{Result, TaskId};
use legate_store::Store;

/// A message a node's agent asked to send, as found in its answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Envelope {
    /// The sender's stable id for it.
    pub(crate) message_id: String,
    /// The receiving node.
    pub(crate) to_node: String,
    /// What it says.
    pub(crate) text: String,
}

/// A recorded message waiting to be delivered to its recipient.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PeerMessage {
    /// Its id (unique within the group).
    pub(crate) message_id: String,
    /// The sending node.
    pub(crate) from_node: String,
    /// The text the recipient's next turn is prompted with (fenced data).
    pub(crate) text: String,
}

/// The envelopes in a node's answer.
pub(crate) fn take_envelopes(answer: &str) -> Vec<Envelope> {
    let _ = answer;
    Vec::new()
}

/// Records `envelopes` from `from_node` against the definition's routes and limits.
pub(crate) fn record(
    store: &Store,
    group_id: &str,
    definition: &GroupDefinition,
    from_node: &str,
    from_task: &TaskId,
    envelopes: Vec<Envelope>,
) -> Result<()> {
    let _ = (store, group_id, definition, from_node, from_task, envelopes);
    Ok(())
}

/// The recorded messages for `node` not yet sent, oldest first.
pub(crate) fn pending_for(store: &Store, group_id: &str, node: &str) -> Result<Vec<PeerMessage>> {
    let _ = (store, group_id, node);
    Ok(Vec::new())
}

/// Marks a message sent: `task_id` is the turn that carries it.
pub(crate) fn mark_sent(
    store: &Store,
    group_id: &str,
    message_id: &str,
    task_id: &TaskId,
) -> Result<()> {
    let _ = (store, group_id, message_id, task_id);
    Ok(())
}
