//! Legate's engine: the one API every front calls.
//!
//! It owns a task's life: validation at submit, admission (bounded running and queued),
//! workspace preparation, opening or continuing the context's agent session, the turn itself
//! with its timeout and cancel, storing every event before fanning it out, and recovery of
//! tasks whose process died. Fronts (CLI, MCP, A2A) translate; they never decide.
//!
//! The engine never speaks a protocol itself: backends do, through `legate-backend`.

mod accumulator;
mod admission;
mod adoption;
mod agent_policy;
mod agents;
mod artifacts;
mod budget;
mod compare;
mod config;
mod context_lock;
mod continuation;
mod controls;
mod ending;
mod engine;
mod fanout;
mod forbidden;
mod framing;
mod group;
mod handoff;
mod inbound;
mod integration_recovery;
mod launcher;
mod ledger;
mod leftovers;
mod memory;
mod messages;
mod pool;
mod records;
mod report;
mod request;
mod review;
mod roles;
pub mod runner;
mod sandbox_policy;
pub mod silent;
mod slots;
pub mod supervision;
mod turn;

pub use admission::SessionCounts;
pub use adoption::ATTEMPTS as REATTACH_ATTEMPTS;
pub use agent_policy::{AgentControls, AgentPolicy, Limitation, MODEL_PRECEDENCE, ModelSelection};
pub use agents::preset_for;
pub use artifacts::ArtifactBytes;
pub use compare::{
    Agreement, CompareRequest, CompareTarget, Compared, ComparedReview, Comparison, FindingVariant,
    GroupedFinding, MAX_TARGETS, MIN_TARGETS, StartError,
};
pub use config::{
    DEFAULT_MAX_IDLE_SESSIONS, DEFAULT_SUPERVISING_AGENT_TIMEOUT, DEFAULT_SUPERVISION_DEADLINE,
    EngineConfig, FrontLimits, Paths, SupervisionConfig,
};
pub use continuation::{
    ContinueRequest, Delivery, MAX_MESSAGE_ID_BYTES, MAX_PENDING_PER_CONTEXT, MessageReceipt,
    MessageRequest,
};
pub use ending::{EMPTY_PROMPT_MESSAGE, INPUT_REQUIRED_MESSAGE, REJECTED_MESSAGE};
pub use engine::Engine;
pub use fanout::Subscription;
pub use group::{
    Budget, BudgetState, BudgetStatus, Checkpoint, DEFAULT_MAX_NODES, GroupCreated,
    GroupDefinition, GroupProgress, GroupState, GroupStatus, GroupSummary, GroupWait, Hook,
    MAX_CONTEXT_BYTES, MAX_DEFINITION_BYTES, MAX_GROUPS, MAX_NODES, MAX_RECEIPTS_PAGE, MAX_ROUTES,
    NodeDef, NodeState, NodeStatus, PeerReceipt, PeerReceiptPage, PeerRoute, ReceiptOrigin,
    ReceiptState, Workflow, WorkflowResult,
};
pub use handoff::{
    ContextDecision, ContextPack, ContextReport, ContextTest, DecisionOrigin, HandoffRequest,
    MAX_DECISION_BYTES, MAX_DECISIONS, MAX_REPORTS,
};
pub use inbound::{Delivered, Inbound, Route};
pub use ledger::{MAX_BINDING_BYTES, MAX_REMOTE_ID_BYTES, MAX_REMOTE_URL_BYTES};
/// A saved model choice (an id, or the agent's own default), for fronts that save one.
pub use legate_backend::selection::Choice as ModelChoice;
pub use legate_integration::{Integrated, Outcome};
pub use legate_review::{
    Check, CheckKind, Criterion, CriterionResult, PatchChunk, Review, Verdict, Verification,
};
pub use legate_store::{TaskUsage, UsageFilter, UsageReport, UsageTotals};
pub use legate_testrun::TestCommand;
/// The review pipeline's types, for fronts that speak them.
pub use legate_workspace::{
    BlockReason, BlockedFile, ChangeStatus, CopyLimits, CopyReport, FileChange, PatchSummary,
    Preview, ProjectFile, ProjectFiles, SecretPolicy,
};
/// The copy-workspace extension's received files and the safe-relative-path rule they are
/// checked by, for the A2A front.
pub use legate_workspace::{FileBytes, path_problem};
pub use memory::{
    DEFAULT_MEMORY_PIECE, MAX_MEMORY_PIECE, MEMORY_MAX_BYTES_CEILING, MEMORY_MAX_ENTRIES_CEILING,
    MEMORY_MAX_ENTRY_BYTES_CEILING, MemoryEntryInfo, MemoryLimits, MemoryList, MemoryPiece,
    MemoryRemoved, MemoryWritten, selection::MAX_SELECTED as MAX_MEMORY_SELECTED,
};
pub use records::{ContextRecord, Records, TaskFilter};
pub use report::CONTRACT_HEAD;
pub use request::{MAX_TASK_TIMEOUT, ReceivedFiles, SubmitRequest, WorkspaceRequest};
pub use review::{
    ApprovalMode, CleanupReport, Confirmation, ConfirmationRequest, Confirmer, CopyHandle,
    CopyStatus, IntegrationRecord, IntegrationRecovery, PatchRead, PatchRecord, PreviewReport,
    ReportedTest, ReviewConfig, ReviewRecord, TestEvidence, TestSource, TestStatus,
};
pub use roles::{
    MAX_CUSTOM_ROLES, MAX_ROLE_DESCRIPTION_CHARS, MAX_ROLE_INSTRUCTIONS_CHARS, MAX_ROLE_NAME_CHARS,
    RoleDefaults, RoleInfo, RoleSpec, Roles, valid_role_name,
};
pub use sandbox_policy::{
    DEFAULT_MAX_OUTPUT_CHARS, MAX_OUTPUT_CHARS_CAP, MAX_ROOTS, PolicyChange, PolicyConfirmer,
    ResolvedSelection, SandboxEvidence, SandboxPolicy, SandboxPolicyView, SandboxSelection,
};
pub use slots::SlotCounts;
pub use supervision::{
    Answer, Approval, ApprovalAnswer, ApprovalDesk, ApprovalFilter, ApprovalState, AuditEntry,
    AuditFilter, MIN_APPROVAL_PREFIX, ToolCallSummary, parse_since, seconds_left,
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
    fanout::Fanout::new(1, paths.clone(), None).subscribe(store, task_id, after)
}
