//! Where an agent may work.
//!
//! A [`Boundary`] is asserted by whoever created the workspace, never inferred from a path:
//! `owned` is the whole trust model in one bit (seed `000`, "The boundary").

use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// The directory an agent works in and what that directory is allowed to mean.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Boundary {
    /// Absolute, symlinks resolved.
    pub root: PathBuf,
    /// True only when Legate created this directory itself (a sandbox or a copy).
    pub owned: bool,
    /// Whether shell commands, fetches and other opaque tools may run in a root Legate does
    /// not own.
    pub allow_execute: bool,
}

crate::wire_enum! {
    /// The kinds of workspace an agent can be given.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum WorkspaceKind {
        /// An empty directory Legate made under `$LEGATE_HOME/sandboxes/`, one per context.
        Sandbox => "sandbox",
        /// A directory the user named. Not owned.
        Shared => "shared",
        /// A copy of a git project's eligible files under `$LEGATE_HOME/copies/<task>/`, with a
        /// private baseline under `$LEGATE_HOME/baselines/<task>/`. Owned.
        Copy => "copy",
    }
}
