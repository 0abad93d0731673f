//! What the group engine answers: a group's and its nodes' states, their checkpoints, the
//! budget's figures, a wait's progress, a listing's summaries and a workflow's result.
//!
//! These are wire types (camelCase, JSON Schema behind `schema`). They never carry a node's
//! prompt, its answer or an intermediate result: a caller reads those through the tasks'
//! own readers. Only [`WorkflowResult`] carries a result, the final node's.

use legate_core::{ErrorCode, TaskId, Timestamp};
use serde::{Deserialize, Serialize};

legate_core::wire_enum! {
    /// A group's state.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum GroupState {
        /// Stored, not started yet (`group_start` starts it).
        Created => "created",
        /// Nodes are admitted as their dependencies finish.
        Running => "running",
        /// No node is admitted until `group_start` with the same hash resumes it; see
        /// `pauseReason`.
        Paused => "paused",
        /// Every node finished successfully.
        Completed => "completed",
        /// A node failed; its dependents were blocked and nothing else runs.
        Failed => "failed",
        /// `group_cancel`: no new node, running ones canceled.
        Canceled => "canceled",
    }
}

impl GroupState {
    /// Whether nothing will ever run in the group again.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Canceled)
    }
}

legate_core::wire_enum! {
    /// A node's state.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum NodeState {
        /// Waiting for its dependencies.
        Pending => "pending",
        /// Its admission is recorded; its task is being submitted.
        Admitting => "admitting",
        /// Its task (or a continuation of it) runs or waits to.
        Running => "running",
        /// Its turn ended, and its output waits for a review or a test (the hook), a peer
        /// conflict, or its next turn (a peer message) for the group to run again.
        Held => "held",
        /// Finished and checkpointed.
        Succeeded => "succeeded",
        /// Its task failed, or its checkpoint could not be taken.
        Failed => "failed",
        /// Its task was canceled.
        Canceled => "canceled",
        /// Its turn was cut by the end of the engine that ran it (`SERVER_RESTARTED`):
        /// nothing is re-run until `group_start` resumes the group.
        Interrupted => "interrupted",
        /// A dependency failed or was canceled: it will not run.
        Blocked => "blocked",
    }
}

/// The hashes a finished node's output is checked against later.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Checkpoint {
    /// The task whose output it is (the node's latest turn).
    pub task_id: TaskId,
    /// The sha256 of the copy's files (as a handoff would carry them).
    pub tree_sha256: String,
    /// The sha256 of the copy's patch against its baseline.
    pub patch_sha256: String,
    /// The sha256 of the node's result as passed on (canonical JSON).
    pub result_sha256: String,
    /// The sha256 of what was checked: the task's state, report, verification, tests and
    /// collected artifacts (name, state and sha256 of each).
    pub validation_sha256: String,
    /// When it was taken.
    pub taken_at: Timestamp,
}

/// One node as the group sees it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeStatus {
    /// The node's id.
    pub id: String,
    /// Its state.
    pub state: NodeState,
    /// Its dependencies.
    pub depends_on: Vec<String>,
    /// Its first task, once admitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task_id: Option<TaskId>,
    /// Every task of the node (its continuations and peer turns included), oldest first.
    pub task_ids: Vec<TaskId>,
    /// Why it failed, was blocked or is held.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub error: Option<ErrorCode>,
    /// Its checkpoint, once finished.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint: Option<Checkpoint>,
}

/// The budget's figures: observed, never estimated.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BudgetStatus {
    /// The definition's ceiling.
    pub max_total_tokens: u64,
    /// The total over every task of the group; `None` while a task has no counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_total_tokens: Option<u64>,
    /// The total over the tasks whose counters are known.
    pub known_subtotal_tokens: u64,
    /// Finished tasks that reported no token counters.
    pub tasks_without_counters: Vec<TaskId>,
    /// Tasks still running, whose counters are not final.
    pub tasks_running: Vec<TaskId>,
    /// `maxTotalTokens` minus the known subtotal (negative once over).
    pub margin_tokens: i64,
    /// `within`, `exceeded` or `unavailable`.
    pub state: BudgetState,
}

legate_core::wire_enum! {
    /// Where a group stands against its budget.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum BudgetState {
        /// Under the ceiling, every finished task counted.
        Within => "within",
        /// The observed total reached the ceiling.
        Exceeded => "exceeded",
        /// A finished task has no counters: nothing more is admitted.
        Unavailable => "unavailable",
    }
}

/// A group's state, its nodes and its budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupStatus {
    /// The group's id.
    pub group_id: String,
    /// The sha256 of its canonical definition.
    pub definition_sha256: String,
    /// Its title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Its state.
    pub state: GroupState,
    /// Why it is paused (or why it failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub pause_reason: Option<ErrorCode>,
    /// One sentence about that reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause_message: Option<String>,
    /// The nodes, in definition order.
    pub nodes: Vec<NodeStatus>,
    /// The budget, when the definition has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<BudgetStatus>,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// What [`crate::Groups::start`] answers: the group's status, and what a resume dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupStarted {
    /// The group as the start left it.
    #[serde(flatten)]
    pub status: GroupStatus,
    /// At a resume: the peer messages in held nodes' answers that it dropped instead of
    /// pausing the group again (each conflicts with a stored message or passes a limit), in
    /// node order. Each also stays as a `peer-message-dropped` notice on the task that sent
    /// it. Absent when there were none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped_peer_messages: Vec<DroppedPeerMessage>,
}

/// A peer message a resume dropped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DroppedPeerMessage {
    /// The node whose answer carried it.
    pub node_id: String,
    /// That answer's task.
    pub task_id: TaskId,
    /// Why, for a person: it names the message's id, never its text.
    pub reason: String,
}

/// What [`crate::Groups::create`] answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupCreated {
    /// The group's id (the caller's, or a new UUID).
    pub group_id: String,
    /// The sha256 of the canonical definition: what `group_start` names.
    pub definition_sha256: String,
    /// Whether this id and definition were stored already (a repeated create).
    pub existing: bool,
}

/// How many nodes are where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupProgress {
    /// Every node.
    pub total: u32,
    /// Finished and checkpointed.
    pub succeeded: u32,
    /// Admitted and not finished (held ones included).
    pub running: u32,
    /// Not admitted yet.
    pub pending: u32,
    /// Failed, canceled or blocked.
    pub stopped: u32,
}

/// What [`crate::Groups::wait`] answers: the status, and whether the wait ended
/// because the group can go no further without the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupWait {
    /// `true` when the group ended or paused; `false` when the wait timed out first or
    /// ended on a node's question or blocker (see `messages`).
    pub ready: bool,
    /// The nodes' counts.
    pub progress: GroupProgress,
    /// The status (no prompts, answers or intermediate results).
    pub status: GroupStatus,
    /// The nodes' questions and blockers after your cursors, oldest task first: at most
    /// 4 (the `limit`), one per task. Results are left out (read them with `read_result`).
    pub messages: Vec<super::page::NodeMessage>,
    /// Per task id of the group, the last message number read: pass this whole map as
    /// `cursors` to the next wait.
    pub cursors: std::collections::BTreeMap<String, u64>,
    /// Whether questions or blockers remain unread after this page (even when `ready`).
    pub has_more_messages: bool,
}

/// One group in a listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupSummary {
    /// The group's id.
    pub group_id: String,
    /// Its title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The sha256 of its definition.
    pub definition_sha256: String,
    /// Its state.
    pub state: GroupState,
    /// Why it is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "Option<String>"))]
    pub pause_reason: Option<ErrorCode>,
    /// How many nodes it has.
    pub nodes: u32,
    /// When it was created.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

/// A workflow's final synthesis, after every checkpoint was checked again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WorkflowResult {
    /// The group.
    pub group_id: String,
    /// Its definition's sha256.
    pub definition_sha256: String,
    /// The final node.
    pub final_node: String,
    /// The final node's task.
    pub task_id: TaskId,
    /// Its public result: the JSON object its answer ended with, or `{"summary": answer}`.
    /// Agent-reported: Legate checked its shape and hashes, not its judgement.
    pub synthesis: serde_json::Value,
    /// The sha256 of `synthesis` (canonical JSON), as its checkpoint holds it.
    pub result_sha256: String,
    /// The sha256 over every node's checkpoint: the reference to cite.
    pub reference_sha256: String,
}
