//! The nouns every Legate crate shares: tasks and their states, events, agent specs,
//! boundaries, permission requests and verdicts, and the error type with stable codes.
//!
//! This crate does no I/O. It must never learn about a protocol (ACP, MCP, A2A) or a
//! storage engine: fronts and backends translate their own shapes into these types.

pub mod agent;
pub mod boundary;
pub mod catalogue;
pub mod connection;
pub mod controls;
pub mod delivery;
pub mod error;
pub mod event;
pub mod limits;
pub mod permission;
pub mod plan_change;
pub mod proc_stat;
pub mod remote;
pub mod report;
pub mod role;
pub mod runtime;
pub mod tap;
pub mod task;
pub mod text;
pub mod time;
pub mod wire;
pub mod wire_skip;

pub use agent::{
    AgentCredentials, AgentKind, AgentSpec, DEFAULT_MAX_TRANSFER_BYTES, LocalCommand,
    RemoteEndpoint, TokenRef, Transport,
};
pub use boundary::{Boundary, WorkspaceKind};
pub use catalogue::{ControlsConfig, McpServerPublic, McpServerSpec, McpToolSpec, McpTransport};
pub use connection::ConnectionEvent;
pub use controls::{
    DeliveryMode, Effort, GroupNode, McpSelection, MemorySelection, MemorySnapshot, SkillPackage,
    SkillRecord, SkillResource, SkillSource, TaskControls,
};
pub use delivery::{
    Artifact, ArtifactState, MessageKind, MessageOrigin, MessagePage, PublicMessage,
};
pub use error::{Error, ErrorCode, Result};
pub use event::{
    Attachment, Event, EventKind, PlanEntry, ToolCallEvent, ToolCallUpdateEvent, ToolKind,
    ToolStatus,
};
pub use limits::ProcessLimits;
pub use permission::{Decider, Decision, OptionKind, PermissionOption, PermissionRequest, Ruling};
pub use plan_change::{PlanHunk, PlanMisfit, PlanTrail, plan_apply, plan_diff};
pub use remote::RemoteRef;
pub use report::{
    Finding, PlanReport, PlanStep, Report, ReportBody, ReportOrigin, ReviewReport, Severity,
};
pub use role::{RoleBase, TaskRole};
pub use runtime::{AgentRuntime, PodSettings};
pub use tap::{NewTapFrame, TapDirection, TapFrame, TapProtocol};
pub use task::{
    AUTO_MODEL, DEFAULT_TASK_TIMEOUT_SECS, NOTICE_SILENT_TURN, Refusal,
    STRUCTURED_OUTPUT_ATTACHMENT, Task, TaskId, TaskMode, TaskNotice, TaskResult, TaskState, Usage,
    UsageCounters, UsageSource,
};
pub use time::Timestamp;
