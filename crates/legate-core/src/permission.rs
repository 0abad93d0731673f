//! Permission requests as the supervisor sees them, and its [`Ruling`].
//!
//! These are protocol-neutral: the ACP backend translates `session/request_permission` into
//! a [`PermissionRequest`] and the verdict's `option_id` back into the reply.

use crate::ToolKind;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// What choosing an option means, as ACP's `PermissionOptionKind` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum OptionKind {
    /// Allow this call.
    AllowOnce,
    /// Allow this call and similar ones later.
    AllowAlways,
    /// Refuse this call.
    RejectOnce,
    /// Refuse this call and similar ones later.
    RejectAlways,
}

impl OptionKind {
    /// Whether choosing it lets the tool run.
    pub fn is_allow(self) -> bool {
        matches!(self, Self::AllowOnce | Self::AllowAlways)
    }
}

/// One option the agent offered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PermissionOption {
    /// The id to answer with; only ever one the agent sent.
    pub id: String,
    /// The label the agent gave it.
    pub name: String,
    /// What it means.
    pub kind: OptionKind,
}

/// A request for permission to run one tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionRequest {
    /// The tool call this is about.
    pub tool_call_id: String,
    /// Its title (often the command or the file).
    pub title: String,
    /// Its kind; `Other` when the agent gave none.
    pub tool_kind: ToolKind,
    /// The paths it names, as the agent sent them.
    #[serde(default)]
    pub locations: Vec<PathBuf>,
    /// The tool's raw input, as the agent sent it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<serde_json::Value>,
    /// The options offered, in the agent's order.
    pub options: Vec<PermissionOption>,
}

/// Allow or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Decision {
    /// The tool may run.
    Allow,
    /// The tool may not run.
    Deny,
    /// A supervisor must decide: only a policy rule answers this, and it is never sent to an
    /// agent. The approval queue turns it into `Allow` or `Deny` (by a person, the
    /// supervising agent, or the deadline); without a queue it is refused.
    Ask,
}

crate::wire_enum! {
    /// Who took a permission decision: the audit trail's `decider`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    pub enum Decider {
        /// The built-in rule table.
        #[default]
        Table => "table",
        /// A rule of the configured policy (its id is the ruling's `rule_id`).
        Policy => "policy",
        /// A person, through a named channel (the CLI, the supervisor endpoint, …).
        Human => "human",
        /// The supervising agent.
        Agent => "agent",
        /// Nobody answered before the approval's deadline.
        Deadline => "deadline",
        /// The task's controls (its allowed tool kinds and MCP tools): refused before any
        /// rule or supervisor is asked; the ruling's `rule_id` is the error code.
        Controls => "controls",
    }
}

/// The supervisor's answer to one [`PermissionRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ruling {
    /// Allow or deny.
    pub decision: Decision,
    /// The offered option chosen; `None` means the reply is `cancelled` (nothing fit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub option_id: Option<String>,
    /// One sentence saying why.
    pub reason: String,
    /// Who decided (an event stored before this field existed reads as the table).
    #[serde(default)]
    pub decider: Decider,
    /// The policy rule that decided, or that sent the request to a supervisor; for a
    /// [`Decider::Controls`] refusal, its error code (`TOOL_NOT_ALLOWED`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
}

impl Ruling {
    /// A ruling of the built-in table (`decider: table`, no rule id).
    pub fn new(decision: Decision, option_id: Option<String>, reason: impl Into<String>) -> Self {
        Self {
            decision,
            option_id,
            reason: reason.into(),
            decider: Decider::Table,
            rule_id: None,
        }
    }

    /// Whether the tool may run.
    pub fn is_allow(&self) -> bool {
        self.decision == Decision::Allow
    }
}
