//! Legate's engine: the one API every front calls.
//!
//! It owns a task's life: validation at submit, admission (bounded running and queued),
//! workspace preparation, opening or continuing the context's agent session, the turn itself
//! with its timeout and cancel, storing every event before fanning it out, and recovery of
//! tasks whose process died. Fronts (CLI, MCP, A2A) translate; they never decide.
//!
//! The engine never speaks a protocol itself: backends do, through `legate-backend`.

mod agents;
pub mod approvals;
mod artifacts;
mod call_tasks;
mod compare;
mod config;
mod controls;
mod core;
mod engine;
mod fence;
mod group;
mod handoff;
mod memory;
mod messages;
pub mod metrics;
mod records;
mod report;
mod review;
mod roles;
mod test_ceiling;

pub use crate::core::{runner, silent};

// What fronts name, grouped by the part of the engine that speaks it.

pub use crate::core::adoption::ATTEMPTS as REATTACH_ATTEMPTS;
/// `engine.messages()` and a conversation's next turn.
pub use crate::core::continuation::{
    ContinueRequest, Delivery, MAX_MESSAGE_ID_BYTES, MAX_PENDING_PER_CONTEXT, MessageReceipt,
    MessageRequest,
};
pub use crate::core::ending::EMPTY_PROMPT_MESSAGE;
pub use crate::core::fanout::Subscription;
pub use crate::core::inbound::{Delivered, Inbound, Route};
pub use crate::core::joint_wait::{JointWait, MAX_WAIT_MANY, WaitMode, Waited};
pub use crate::core::ledger::MAX_REMOTE_ID_BYTES;
pub use crate::core::request::{
    DEFAULT_MAX_PROMPT_CHARS, MAX_TASK_TIMEOUT, ReceivedFiles, SubmitRequest, WorkspaceRequest,
};
pub use crate::core::slots::SlotCounts;
pub use agents::Agents;
/// `engine.agents()`.
pub use agents::SessionCounts;
pub use agents::overview::{AgentControls, ControlsOverview, Limitation, ModelSelection};
/// `engine.approvals()`.
pub use approvals::{
    Answer, Approval, ApprovalAnswer, ApprovalDesk, ApprovalFilter, ApprovalState, Approvals,
    AuditEntry, AuditFilter, MIN_APPROVAL_PREFIX, ToolCallSummary, parse_since, seconds_left,
};
/// `engine.artifacts()`.
pub use artifacts::{ArtifactBytes, Artifacts};
pub use call_tasks::{CallTask, CallTasks, OpAnswer, OpConfirmer};
/// `engine.comparisons()`.
pub use compare::{
    Agreement, CompareRequest, CompareTarget, Compared, ComparedReview, Comparison, Comparisons,
    FindingVariant, GroupedFinding, StartError,
};
/// The engine's configuration and its defaults.
pub use config::{
    ApprovalsConfig, DEFAULT_APPROVAL_DEADLINE, DEFAULT_MAX_IDLE_SESSIONS,
    DEFAULT_SUPERVISING_AGENT_TIMEOUT, EngineConfig, FrontLimits, MAX_WARM, OutputLimits, Paths,
    TapLimits,
};
/// The engine and a task's life.
pub use engine::Engine;
/// `engine.groups()`.
pub use group::{
    Budget, BudgetState, BudgetStatus, Checkpoint, DEFAULT_MAX_NODES, DroppedPeerMessage,
    GroupCreated, GroupDefinition, GroupProgress, GroupStarted, GroupState, GroupStatus,
    GroupSummary, GroupWait, GroupWaitRequest, Groups, Hook, MAX_DEFINITION_BYTES, MAX_NODES,
    MAX_RECEIPTS_PAGE, MAX_WAIT_MESSAGES, NodeDef, NodeMessage, NodeState, NodeStatus, PeerReceipt,
    PeerReceiptPage, PeerRoute, ReceiptOrigin, ReceiptState, Workflow, WorkflowResult,
};
/// `engine.handoffs()`.
pub use handoff::{
    ContextDecision, ContextPack, ContextReport, ContextTest, DecisionOrigin, HandoffRequest,
    Handoffs,
};
/// A saved model choice (an id, or the agent's own default), for fronts that save one.
pub use legate_backend::selection::Choice as ModelChoice;
/// `engine.records()` and the read-only door.
/// The integration and review types, for fronts that speak them.
pub use legate_integration::{Integrated, Outcome};
pub use legate_review::{
    Check, CheckKind, Criterion, CriterionResult, PatchChunk, Review, Verdict, Verification,
};
pub use legate_store::Spent;
pub use legate_store::{CallTaskRecord, CallTaskState};
pub use legate_store::{TaskUsage, UsageFilter, UsageReport, UsageTotals};
pub use legate_testrun::TestCommand;
/// A copy's disk use, measured now, for `legate show`.
pub use legate_workspace::disk::{CopyDisk, copy_disk};
/// The review pipeline's types, for fronts that speak them.
pub use legate_workspace::{
    BlockReason, BlockedFile, ChangeStatus, CopyLimits, CopyReport, FileChange, PatchSummary,
    Preview, ProjectFile, ProjectFiles, SecretPatterns,
};
/// The copy-workspace extension's received files and the safe-relative-path rule they are
/// checked by, for the A2A front.
pub use legate_workspace::{FileBytes, path_problem};
/// `engine.memory()`.
pub use memory::{
    MEMORY_MAX_BYTES_CEILING, MEMORY_MAX_ENTRIES_CEILING, MEMORY_MAX_ENTRY_BYTES_CEILING, Memory,
    MemoryEntryInfo, MemoryLimits, MemoryList, MemoryPiece, MemoryRemoved, MemoryWritten,
};
pub use messages::Messages;
pub use metrics::{HistogramSnapshot, Metrics, MetricsSnapshot, WarmGauge};
pub use records::{ContextRecord, Records, TaskFilter};
/// The report contract's first line, for fronts that show it.
pub use report::CONTRACT_HEAD;
/// `engine.reviews()`.
pub use review::{
    ApprovalMode, CleanupReport, Confirmation, ConfirmationRequest, Confirmer, CopyHandle,
    CopyStatus, IntegrationRecord, IntegrationRecovery, MAX_TEST_RETRIES, PatchRead, PatchRecord,
    PreviewReport, ReportedTest, RetriesState, RetryAttempt, ReviewConfig, ReviewRecord, Reviews,
    TestEvidence, TestRetries, TestRun, TestSource, TestStatus,
};
/// `engine.roles()`.
pub use roles::{RoleDefaults, RoleInfo, RoleSpec, Roles};
/// `engine.test_ceiling()`.
pub use test_ceiling::{
    CeilingChange, CeilingConfirmer, ResolvedSelection, SandboxEvidence, SandboxSelection,
    TestCeiling, TestCeilingView, TestCeilings,
};

/// Follows a task's events from the store alone, polling; for tasks run by another process.
/// `paths` locates the runners' locks: a task whose runner died is recovered (`failed` with
/// `SERVER_RESTARTED`, its copy settled) and the subscription ends with that status.
pub fn follow(
    store: legate_store::Store,
    paths: &Paths,
    task_id: legate_core::TaskId,
    after: u64,
) -> Subscription {
    crate::core::fanout::Fanout::new(1, paths.clone(), None).subscribe(store, task_id, after)
}
