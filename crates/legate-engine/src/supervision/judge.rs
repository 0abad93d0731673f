//! The supervising agent's hook in the approval chain (`[supervision] agent`).
//!
//! [`ask`] is called once per approval, after it is stored and announced and before the
//! human queue waits. `None` means "no judge, or no valid answer": the approval falls through
//! to the human channel, then to the deadline. This file is owned by the supervising agent's
//! work (s14d); until it lands no agent is asked.
//!
//! It must never be the agent whose request it judges, nor run in that task's context.

use crate::Engine;
use crate::supervision::Approval;
use legate_core::Decision;

/// Asks the supervising agent to decide `approval`: its decision and reason, or `None`.
pub(crate) async fn ask(_engine: &Engine, _approval: &Approval) -> Option<(Decision, String)> {
    None
}
