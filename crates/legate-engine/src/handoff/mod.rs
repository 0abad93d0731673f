//! Context and handoff: what a finished copy task leaves for the next role, and starting that
//! role in a fresh copy of the copy's current files.
//!
//! [`Handoffs::context`] gathers a finished copy task's [`ContextPack`]: its criteria, up to
//! [`MAX_REPORTS`] planning or review reports of its chain (this task and the tasks it was
//! handed off from, newest first), its test evidence, the caller's decisions carried by the
//! handoffs, the copy's `treeSha256`, and one `contextSha256` over a canonical serialization
//! of all of it. [`Handoffs::handoff`] checks that hash when it accepts a handoff and again when
//! the new copy is made (the task may have waited in the queue), on the bytes actually copied;
//! a mismatch is `CONTEXT_CHANGED`. The new copy keeps the original project's baseline, so its
//! patch accumulates against the original; the source copy is never changed.
//!
//! Trust: reports are `agent-reported` (Legate checked their shape and a review's citations,
//! never their judgement), decisions are `client-reported`, test evidence keeps its own
//! source. The context reaches the next agent as data to check, fenced and escaped so that no
//! string in it can close the fence, and never as instructions that outrank its task.
//! Nothing here authorizes integration: verify, test and integrate decide that, on the patch.
//!
//! This module never cuts a context to fit (`CONTEXT_TOO_LARGE`), never changes the source
//! copy, and never reads a file except through `legate-workspace`.

mod block;
mod context;
mod controls;
mod start;

pub(crate) use block::context_block;
pub(crate) use context::closed;
pub(crate) use start::{changed, framed_len, remove_made};

use crate::core::Core;
use legate_core::{Report, TaskId, Timestamp};
use legate_review::Criterion;
use legate_testrun::TestCommand;
use serde::{Deserialize, Serialize};

pub use start::HandoffRequest;

/// At most this many planning or review reports travel in a context.
pub const MAX_REPORTS: usize = 8;
/// How many handoffs back a context looks for reports.
const MAX_CHAIN: usize = 64;

/// What a finished copy task leaves for the next role (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ContextPack {
    /// The task.
    pub task_id: TaskId,
    /// The agent that ran it.
    pub agent: String,
    /// Its role (`implementer` when none was named).
    pub role: String,
    /// The acceptance criteria, fixed at the first submit and carried by every handoff.
    pub criteria: Vec<Criterion>,
    /// Up to [`MAX_REPORTS`] planning or review reports of the chain, newest first.
    // The text above is this field's description in the pinned MCP schemas, link brackets
    // and all, so it stays as it is; the constant it names is private to the crate.
    #[allow(rustdoc::private_intra_doc_links)]
    pub reports: Vec<ContextReport>,
    /// This copy's test records, oldest first, each with its source.
    pub tests: Vec<ContextTest>,
    /// The caller's decisions given at the handoffs of the chain, newest first.
    pub decisions: Vec<ContextDecision>,
    /// The sha256 of the copy's files now (paths, executable bits, contents), over the
    /// files a handoff would carry.
    pub tree_sha256: String,
    /// The sha256 of everything above, serialized canonically: what a handoff names.
    pub context_sha256: String,
}

/// A report of the chain and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ContextReport {
    /// The task that reported it.
    pub task_id: TaskId,
    /// Its agent.
    pub agent: String,
    /// Its role.
    pub role: String,
    /// The report as Legate accepted it: its `origin` is `agent-reported` (the agent said
    /// it; Legate checked the shape and, for a review, the citations), and
    /// `citationsChecked` attests that every finding's file, line and quote stood in that
    /// task's copy; it attests citations, not judgement.
    #[serde(flatten)]
    pub report: Report,
}

legate_core::wire_enum! {
    /// Who a decision comes from.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum DecisionOrigin {
        /// The caller wrote it when it handed off; Legate checked only its size and that it
        /// holds no credential pattern.
        #[default]
        ClientReported => "client-reported",
    }
}

/// A decision the caller gave at a handoff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ContextDecision {
    /// The text.
    pub text: String,
    /// `client-reported`.
    pub origin: DecisionOrigin,
    /// The task that handoff was made from.
    pub handed_off_from: TaskId,
}

/// One test record of the copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ContextTest {
    /// 1-based within the task.
    pub id: u32,
    /// `legate-executor` (Legate ran and observed it) or `client-reported`.
    pub source: crate::TestSource,
    /// The command.
    pub command: TestCommand,
    /// Its exit code, when it exited.
    pub exit_code: Option<i32>,
    /// Whether it passed when recorded.
    pub passed: bool,
    /// The patch sha256 it ran against (after the run).
    pub patch_sha256: String,
    /// When it was recorded.
    pub recorded_at: Timestamp,
}

/// What a handoff task remembers of its source, kept in its review record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HandoffSource {
    /// The task handed off from.
    pub source_task_id: TaskId,
    /// The context hash the caller named and Legate checked at accept.
    pub context_sha256: String,
    /// The caller's decisions.
    #[serde(default)]
    pub decisions: Vec<String>,
    /// The context block the agent is given, built at accept from the checked context.
    pub block: String,
    /// For a comparison's target: the copy already made (with every other target's, from
    /// one reading of the source) before any target started; the turn records it instead
    /// of copying again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prepared: Option<legate_workspace::CopyReport>,
}

/// Handoffs: a copy task's work carried to another agent, and the context pack it gets.
/// Handed out by [`Engine::handoffs`](crate::Engine::handoffs).
#[derive(Debug, Clone)]
pub struct Handoffs {
    pub(crate) core: Core,
}
