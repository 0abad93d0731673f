//! The supervisor: decides every permission request an agent makes.
//!
//! The caller is never the supervisor (seed `000`): decisions come from the rule table here,
//! behind the [`Supervisor`] trait, and from the declarative [`policy`] above it
//! ([`Policed`]: the first matching rule, else the table). The [`network`] rules decide
//! which destinations the egress proxy lets an agent connect to.
//!
//! Everything here is pure except [`containment`], which resolves symlinks as far as a path
//! exists. Nothing here may perform I/O beyond that, spawn, or talk to a protocol.

pub mod containment;
pub mod network;
pub mod options;
pub mod policy;
pub mod preset;
pub mod rules;
pub mod tools;
pub mod version;

pub use containment::{Outside, resolve_within};
pub use network::{
    Destination, Host, HostRule, HostRuleError, NetworkConfig, NetworkRules, NetworkRuling,
    Otherwise, Special, special,
};
pub use options::{pick_allow, pick_reject};
pub use policy::{Explanation, Policed, Policy, PolicyError};
pub use preset::{PlanExit, Preset};
pub use rules::Rules;
pub use tools::ToolControls;
pub use version::{Verified, Version, VersionCheck};

use legate_core::{Boundary, PermissionRequest, Ruling, TaskMode, WorkspaceKind};
use std::fmt::Debug;

/// The inputs the rules need besides the request itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervision {
    /// Where the agent may work.
    pub boundary: Boundary,
    /// Read-only tasks get every change refused.
    pub mode: TaskMode,
    /// What Legate knows about this agent's options and modes.
    pub preset: Preset,
    /// The kind of workspace (with `boundary.owned`, what a policy's `workspace` matches).
    pub workspace: WorkspaceKind,
    /// The configured agent's name.
    pub agent: String,
    /// The role's name (`implementer` for a task without one).
    pub role: String,
    /// The task's allowed tool kinds and MCP tools ([`tools`]), checked before any rule.
    pub tools: ToolControls,
}

impl Supervision {
    /// Supervision for an agent with no name yet, playing the default role: the workspace kind
    /// is a sandbox when the root is owned and a shared root otherwise. Tests and probes start
    /// here; the engine fills `agent`, `role` and `workspace` from the task.
    pub fn new(boundary: Boundary, mode: TaskMode, preset: Preset) -> Self {
        let workspace = if boundary.owned {
            WorkspaceKind::Sandbox
        } else {
            WorkspaceKind::Shared
        };
        Self {
            boundary,
            mode,
            preset,
            workspace,
            agent: String::new(),
            role: legate_core::RoleBase::Implementer.as_str().to_string(),
            tools: ToolControls::default(),
        }
    }
}

/// Answers permission requests.
pub trait Supervisor: Send + Sync + Debug {
    /// Decides one request. The verdict's `option_id` is always one of `request.options`'
    /// ids, or `None` (answered as `cancelled`) when nothing offered fits. A
    /// [`legate_core::Decision::Ask`] ruling (a policy's) carries no option: the caller puts
    /// it to a supervision channel, or refuses it.
    fn decide(&self, supervision: &Supervision, request: &PermissionRequest) -> Ruling;
}

/// A shared supervisor supervises as the one it shares (the engine holds an
/// `Arc<dyn Supervisor>`, and a policy may sit above it).
impl<S: Supervisor + ?Sized> Supervisor for std::sync::Arc<S> {
    fn decide(&self, supervision: &Supervision, request: &PermissionRequest) -> Ruling {
        (**self).decide(supervision, request)
    }
}
