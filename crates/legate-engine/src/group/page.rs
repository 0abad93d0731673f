//! A group wait's page of its nodes' public messages: the questions and blockers of every
//! task of the group (its nodes' turns, continuations and peer turns), at most
//! [`MAX_WAIT_MESSAGES`] in all and one per task, each read after the caller's cursor for
//! that task, with the cursors to pass to the next wait.
//!
//! This module owns the page's bounds and the checking of the caller's cursors (a task of
//! another group, a cursor past a task's last message, a limit out of range are
//! `INVALID_INPUT`, and nothing is read). It never returns a result message (an intermediate
//! node's answer stays behind `read_result`), a prompt or an event, and never changes a task.

use super::load::Loaded;
use crate::core::Core;
use legate_core::delivery::MAX_MESSAGES_PER_TASK;
use legate_core::{Error, MessageKind, PublicMessage, Result, TaskId};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most messages one group wait answers with (one per task at most).
pub const MAX_WAIT_MESSAGES: u32 = 4;

/// Which of its nodes' messages a group wait answers with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupWaitRequest {
    /// Per task id, the last message number already read: the `cursors` of the previous
    /// wait's answer. A task not named is read from its first message.
    pub cursors: BTreeMap<String, u64>,
    /// At most this many messages, 1 to [`MAX_WAIT_MESSAGES`]; `None` for the most.
    pub limit: Option<u32>,
}

/// One question or blocker of a node's task, with where that task's messages stand.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeMessage {
    /// The node.
    pub node: String,
    /// The task of the node that said it.
    pub task_id: TaskId,
    /// The message (a question or a blocker; agent-reported or observed by Legate).
    pub message: PublicMessage,
    /// The cursor of this task after this message (also in `cursors`).
    pub next_cursor: u64,
    /// The number of this task's oldest message still kept.
    pub oldest_available: u64,
    /// Whether messages of this task after your cursor were dropped before you read them
    /// (each task keeps its newest 100).
    pub truncated: bool,
    /// Whether this task has more questions or blockers after this one.
    pub has_more: bool,
}

/// The page itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Page {
    pub(crate) messages: Vec<NodeMessage>,
    pub(crate) cursors: BTreeMap<String, u64>,
    pub(crate) has_more_messages: bool,
}

/// `request` checked against group `g`: the limit it names, in range.
pub(crate) fn check(g: &Loaded, request: &GroupWaitRequest) -> Result<usize> {
    let limit = request.limit.unwrap_or(MAX_WAIT_MESSAGES);
    if !(1..=MAX_WAIT_MESSAGES).contains(&limit) {
        return Err(Error::invalid_input(format!(
            "limit must be 1 to {MAX_WAIT_MESSAGES}; it is {limit}"
        )));
    }
    if let Some(stray) = request
        .cursors
        .keys()
        .find(|id| !g.tasks.iter().any(|t| t.id.as_str() == id.as_str()))
    {
        return Err(Error::invalid_input(format!(
            "cursors names {:?}, which is not a task of group {}",
            stray.chars().take(64).collect::<String>(),
            g.record.group_id
        )));
    }
    Ok(limit as usize)
}

impl Core {
    /// The page of group `g`'s messages after `request`'s cursors (see the module docs).
    pub(crate) fn group_messages(&self, g: &Loaded, request: &GroupWaitRequest) -> Result<Page> {
        let limit = check(g, request)?;
        let mut page = Page::default();
        for def in &g.definition.nodes {
            for task in g.node_tasks(&def.id) {
                let after = request.cursors.get(task.id.as_str()).copied().unwrap_or(0);
                self.derive_messages(task)?;
                let kept = self
                    .store()
                    .public_messages(&task.id, after, MAX_MESSAGES_PER_TASK)?;
                if after > kept.last_seq {
                    return Err(Error::invalid_input(format!(
                        "the cursor for task {} is {after}, but it has {} messages",
                        task.id, kept.last_seq
                    )));
                }
                let mut wanted = kept
                    .messages
                    .iter()
                    .filter(|m| matches!(m.kind, MessageKind::Question | MessageKind::Blocker));
                let next = match wanted.next() {
                    Some(m) if page.messages.len() < limit => {
                        let has_more = wanted.next().is_some();
                        page.messages.push(NodeMessage {
                            node: def.id.clone(),
                            task_id: task.id.clone(),
                            message: m.clone(),
                            next_cursor: m.seq,
                            oldest_available: kept.oldest_available,
                            truncated: kept.oldest_available > after + 1,
                            has_more,
                        });
                        page.has_more_messages |= has_more;
                        m.seq
                    }
                    // Over the page's limit: this task's cursor stays for the next wait.
                    Some(_) => {
                        page.has_more_messages = true;
                        after
                    }
                    // Only results (an answer's excerpt, read through `read_result`).
                    None => kept.messages.last().map_or(after, |m| m.seq),
                };
                page.cursors.insert(task.id.to_string(), next);
            }
        }
        Ok(page)
    }
}
