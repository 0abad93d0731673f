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
//! (answers), `scheduler` (admission and turn ends), `checkpoint` (hashes, re-validation),
//! `tokens` (the token budget), `restart` (taking over), `prompt` (the fenced context),
//! `peer` (peer messages: wfpeer's). The descriptor and process budget is `crate::budget`,
//! not this.
//!
//! This module never runs an agent itself (every node is an ordinary task through `submit`
//! or `handoff`), never re-runs a finished node, never estimates a token count, and never
//! lets a node's output authorize integration.

mod definition;
// The hooks are called by the scheduler once it lands (wfcore's).
#[allow(dead_code)]
pub(crate) mod peer;
mod status;

pub use definition::{Budget, GroupDefinition, Hook, NodeDef, PeerRoute, Workflow};
pub use peer::{MAX_RECEIPTS_PAGE, PeerReceipt, PeerReceiptPage, ReceiptOrigin, ReceiptState};
pub use status::{
    BudgetState, BudgetStatus, Checkpoint, GroupCreated, GroupProgress, GroupState, GroupStatus,
    GroupSummary, GroupWait, NodeState, NodeStatus, WorkflowResult,
};

use crate::Engine;
use legate_core::{Error, ErrorCode, Result};
use std::time::Duration;

fn not_built(what: &str) -> Error {
    Error::new(
        ErrorCode::Internal,
        format!("{what} is not built yet in this build of Legate"),
    )
}

impl Engine {
    /// Validates `definition`, stores it under `group_id` (a new UUID when `None`) and
    /// returns its sha256. Idempotent: the same id with the same definition answers the
    /// stored group; another definition under that id is `GROUP_CONFLICT`. Starts nothing.
    pub fn group_create(
        &self,
        group_id: Option<String>,
        definition: GroupDefinition,
    ) -> Result<GroupCreated> {
        let _ = (group_id, definition);
        Err(not_built("group_create"))
    }

    /// Starts a created group, or resumes a paused one, when `definition_sha256` is its
    /// definition's (`GROUP_CONFLICT` otherwise). Finished nodes are not re-run; a
    /// checkpoint whose data changed is `WORKFLOW_CHECKPOINT_CHANGED`.
    pub fn group_start(&self, group_id: &str, definition_sha256: &str) -> Result<GroupStatus> {
        let _ = (group_id, definition_sha256);
        Err(not_built("group_start"))
    }

    /// The group's state, nodes and budget.
    pub fn group_status(&self, group_id: &str) -> Result<GroupStatus> {
        let _ = group_id;
        Err(not_built("group_status"))
    }

    /// Waits until the group ends or pauses, at most `timeout`; answers its progress.
    pub async fn group_wait(&self, group_id: &str, timeout: Duration) -> Result<GroupWait> {
        let _ = (group_id, timeout);
        Err(not_built("group_wait"))
    }

    /// Admits no further node and cancels the running ones.
    pub fn group_cancel(&self, group_id: &str) -> Result<GroupStatus> {
        let _ = group_id;
        Err(not_built("group_cancel"))
    }

    /// Every retained group, newest first.
    pub fn groups(&self) -> Result<Vec<GroupSummary>> {
        Err(not_built("groups"))
    }

    /// The final node's synthesis of a completed workflow, after checking every checkpoint
    /// again (`WORKFLOW_CHECKPOINT_CHANGED`); `WORKFLOW_RESULT_UNAVAILABLE` when the group
    /// has no workflow, has not completed, or a later run failed.
    pub async fn workflow_result(&self, group_id: &str) -> Result<WorkflowResult> {
        let _ = group_id;
        Err(not_built("workflow_result"))
    }
}
