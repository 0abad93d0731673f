//! The approvals (permission requests the supervisor's rules answered `ask`): the durable
//! approval queue (`queue`), the supervising agent's hook (`judge`) and its per-question
//! directories (`judge_dirs`), the audit trail,
//! and the reads and answers fronts call ([`Approvals::list`], [`Approvals::answer`],
//! [`Approvals::audit`], and the same on [`Records`](crate::Records) for a process with no
//! engine running).
//!
//! This module owns the order in which an `ask` is decided (an earlier allow-for-task, the
//! supervising agent, any answer from a process on the same home, the deadline) and what an
//! answer means for the agent (an offered option id, by `pick_allow` / `pick_reject`). It
//! never decides a task's state and never lets a request wait without a deadline.

mod desk;
pub(crate) mod judge;
mod judge_answer;
pub(crate) mod judge_dirs;
pub(crate) mod queue;
mod summary;

pub use desk::{ApprovalDesk, parse_since, seconds_left};
pub use legate_store::{
    Answer, Approval, ApprovalAnswer, ApprovalFilter, ApprovalState, AuditEntry, AuditFilter,
    MIN_APPROVAL_PREFIX, ToolCallSummary,
};

use crate::core::Core;
use legate_core::{Error, Result, TaskId};

/// The longest reason an answer may carry, in bytes.
pub const MAX_ANSWER_REASON_BYTES: usize = 4096;

/// Refuses an answer a front must not pass on: an empty channel, an over-long reason.
pub(crate) fn check_answer(answer: &ApprovalAnswer) -> Result<()> {
    if answer.channel.trim().is_empty() || answer.channel.len() > 128 {
        return Err(Error::invalid_input(
            "an answer names its channel (1 to 128 bytes): cli, mcp, dashboard or agent:NAME.",
        ));
    }
    if answer
        .reason
        .as_ref()
        .is_some_and(|r| r.len() > MAX_ANSWER_REASON_BYTES)
    {
        return Err(Error::invalid_input(format!(
            "an answer's reason is at most {MAX_ANSWER_REASON_BYTES} bytes."
        )));
    }
    Ok(())
}

/// The approval queue, seen from a supervisor: list, find and answer approvals, the
/// audit of past rulings, and the signal that the queue changed.
/// Handed out by [`Approvals::list`](crate::Approvals::list).
#[derive(Debug, Clone)]
pub struct Approvals {
    pub(crate) core: Core,
}

impl Core {
    /// Approvals, newest first.
    pub(crate) fn approvals(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>> {
        self.store().approvals(filter)
    }

    /// Answers a pending approval: `APPROVAL_NOT_FOUND` for an unknown id, `APPROVAL_CLOSED`
    /// when it was already answered or expired (the first answer stands). The waiting agent
    /// is answered at once.
    pub(crate) fn answer_approval(&self, id: &str, answer: ApprovalAnswer) -> Result<Approval> {
        check_answer(&answer)?;
        self.inner.queue.answer(id, &answer)
    }

    /// The whole approval id `given` names: the id itself, or the one id it is a prefix of
    /// (at least [`MIN_APPROVAL_PREFIX`] characters). `APPROVAL_NOT_FOUND` for none,
    /// `INVALID_INPUT` for a malformed id or a prefix of several.
    pub(crate) fn find_approval(&self, given: &str) -> Result<String> {
        self.store().find_approval(given)
    }

    /// Permission decisions, newest first.
    pub(crate) fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>> {
        self.store().audit(filter)
    }
}

impl Approvals {
    /// Approvals, newest first.
    pub fn list(&self, filter: &ApprovalFilter) -> Result<Vec<Approval>> {
        self.core.approvals(filter)
    }

    /// Answers a pending approval: `APPROVAL_NOT_FOUND` for an unknown id, `APPROVAL_CLOSED`
    /// when it was already answered or expired (the first answer stands). The waiting agent
    /// is answered at once.
    pub fn answer(&self, id: &str, answer: ApprovalAnswer) -> Result<Approval> {
        self.core.answer_approval(id, answer)
    }

    /// The whole approval id `given` names: the id itself, or the one id it is a prefix of
    /// (at least [`MIN_APPROVAL_PREFIX`] characters). `APPROVAL_NOT_FOUND` for none,
    /// `INVALID_INPUT` for a malformed id or a prefix of several.
    pub fn find(&self, given: &str) -> Result<String> {
        self.core.find_approval(given)
    }

    /// Permission decisions, newest first.
    pub fn audit(&self, filter: &AuditFilter) -> Result<Vec<AuditEntry>> {
        self.core.audit(filter)
    }

    /// A receiver whose value changes whenever an approval of a task this engine runs is
    /// stored or closed (answered, expired): what a live view of the queue waits on instead
    /// of polling. Approvals of tasks another process runs are not announced here.
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.core.inner.queue.changes()
    }

    /// The pending approvals of one task, newest first (what `wait` and `status` report).
    pub fn pending(&self, task_id: &TaskId) -> Result<Vec<Approval>> {
        self.core.approvals(&ApprovalFilter {
            task_id: Some(task_id.clone()),
            pending_only: true,
            limit: 100,
        })
    }
}
