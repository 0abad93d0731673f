//! The supervisor: decides every permission request an agent makes.
//!
//! The caller is never the supervisor (seed `000`): decisions come from the rule table here,
//! behind the [`Supervisor`] trait so that a declarative policy or a separate channel can
//! replace it without the rest of Legate noticing.
//!
//! Everything here is pure except [`containment`], which resolves symlinks as far as a path
//! exists. Nothing here may perform I/O beyond that, spawn, or talk to a protocol.

pub mod containment;
pub mod options;
pub mod preset;
pub mod rules;
pub mod version;

pub use containment::{Outside, resolve_within};
pub use options::{pick_allow, pick_reject};
pub use preset::{PlanExit, Preset};
pub use rules::Rules;
pub use version::{Verified, Version, VersionCheck};

use legate_core::{Boundary, PermissionRequest, Ruling, TaskMode};
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
}

/// Answers permission requests.
pub trait Supervisor: Send + Sync + Debug {
    /// Decides one request. The verdict's `option_id` is always one of `request.options`'
    /// ids, or `None` (answered as `cancelled`) when nothing offered fits.
    fn decide(&self, supervision: &Supervision, request: &PermissionRequest) -> Ruling;
}
