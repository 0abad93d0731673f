//! The features' own configuration: the review of copies (`[review]`), the project memory's
//! limits (`[memory]`), the configured roles (`[roles.NAME]`) and the size of a group.
//!
//! This module holds the shapes and their defaults, so that the configuration imports no
//! feature; the features read them, and their rules (a role's limits, a group's checks)
//! stay with them.

use legate_core::{Error, ErrorCode, Result, RoleBase, TaskMode};
use legate_workspace::{CopyLimits, SecretPatterns};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// At most this many nodes in a group unless configured otherwise (`max_group_nodes`): the
/// seed's limit.
pub const DEFAULT_MAX_NODES: usize = 32;
/// The most nodes a configuration may allow in a group. The definition's 4 MiB and each
/// node's 64 KiB context still bound it; past a few hundred nodes a listing of the group's
/// status stops being readable.
pub const MAX_NODES: usize = 256;

legate_core::wire_enum! {
    /// Whether integration asks the caller first.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub enum ApprovalMode {
        /// Integrate once every check passes (the default). No check is relaxed.
        #[default]
        Auto => "auto",
        /// Also require the confirmer's explicit `accept` with `confirm: true`.
        Ask => "ask",
    }
}

/// The configuration of copies and their review.
#[derive(Debug, Clone)]
pub struct ReviewConfig {
    /// Copy and change limits.
    pub limits: CopyLimits,
    /// Secret exclusions and exceptions.
    pub secrets: SecretPatterns,
    /// Finished copies older than this are removed by the sweep.
    pub retention: Duration,
    /// `auto` or `ask`.
    pub approval: ApprovalMode,
    /// Whether integration also needs a current passing test run by Legate.
    pub require_tests: bool,
    /// Whether that test must have run in a fresh tree of the patch (`legate test --fresh`),
    /// so that nothing the copy holds beside the patch can have passed it. Implies
    /// `require_tests`.
    pub require_fresh_tests: bool,
    /// Default timeout of `test`.
    pub test_timeout: Duration,
    /// Bound on each captured output stream of a test, in bytes.
    pub max_test_output: usize,
    /// Whether the copy of a task interrupted by the death of its process (marked
    /// `SERVER_RESTARTED` at recovery) is kept for inspection until the retention sweep,
    /// instead of being removed at recovery. Recorded with each task when it is submitted.
    pub keep_interrupted_copies: bool,
}

impl Default for ReviewConfig {
    fn default() -> Self {
        Self {
            limits: CopyLimits::default(),
            secrets: SecretPatterns::default(),
            retention: Duration::from_secs(168 * 3600),
            approval: ApprovalMode::Auto,
            require_tests: false,
            require_fresh_tests: false,
            test_timeout: legate_testrun::DEFAULT_TIMEOUT,
            max_test_output: legate_testrun::DEFAULT_MAX_OUTPUT,
            keep_interrupted_copies: false,
        }
    }
}

/// The seed's ceiling on [`MemoryLimits::max_entries`].
pub const MEMORY_MAX_ENTRIES_CEILING: u64 = 10_000;
/// The seed's ceiling on [`MemoryLimits::max_bytes`]: 64 MiB.
pub const MEMORY_MAX_BYTES_CEILING: u64 = 64 << 20;
/// The seed's ceiling on [`MemoryLimits::max_entry_bytes`]: 1 MiB.
pub const MEMORY_MAX_ENTRY_BYTES_CEILING: u64 = 1 << 20;

/// How much private memory the store keeps, over every project (`[memory]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemoryLimits {
    /// Entries (default 100, at most 10,000).
    pub max_entries: u64,
    /// UTF-8 bytes of text (default 1 MiB, at most 64 MiB).
    pub max_bytes: u64,
    /// UTF-8 bytes of one entry (default 64 KiB, at most 1 MiB and at most `max_bytes`).
    pub max_entry_bytes: u64,
}

impl Default for MemoryLimits {
    fn default() -> Self {
        Self {
            max_entries: 100,
            max_bytes: 1 << 20,
            max_entry_bytes: 64 << 10,
        }
    }
}

impl MemoryLimits {
    /// `CONFIG_INVALID` unless every limit is at least 1 and within the seed's bounds, and one
    /// entry may not pass the total.
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::new(ErrorCode::ConfigInvalid, m));
        if !(1..=MEMORY_MAX_ENTRIES_CEILING).contains(&self.max_entries) {
            return bad(format!(
                "memory.max_entries must be between 1 and {MEMORY_MAX_ENTRIES_CEILING} (got {})",
                self.max_entries
            ));
        }
        if !(1..=MEMORY_MAX_BYTES_CEILING).contains(&self.max_bytes) {
            return bad(format!(
                "memory.max_bytes must be between 1 and {MEMORY_MAX_BYTES_CEILING} (got {})",
                self.max_bytes
            ));
        }
        let entry_max = MEMORY_MAX_ENTRY_BYTES_CEILING.min(self.max_bytes);
        if !(1..=entry_max).contains(&self.max_entry_bytes) {
            return bad(format!(
                "memory.max_entry_bytes must be between 1 and {entry_max} (1 MiB, and no more than memory.max_bytes; got {})",
                self.max_entry_bytes
            ));
        }
        Ok(())
    }
}

/// A configured role, as `[roles.NAME]` declares it.
#[derive(Debug, Clone, PartialEq)]
pub struct RoleSpec {
    /// Its name: 1 to 32 lowercase letters, digits and hyphens, not a built-in name.
    pub name: String,
    /// The built-in role it is built on.
    pub base: RoleBase,
    /// What it is for (at most 500 characters).
    pub description: Option<String>,
    /// Its instructions to the agent (non-empty, at most 8,000 characters).
    pub instructions: String,
    /// What it fills in.
    pub defaults: RoleDefaults,
}

/// What a configured role fills in when a request leaves a field out. Each field replaces
/// the request's whole field only when the request has none; a list is never merged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RoleDefaults {
    /// The agent, for a new conversation that names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The model (an id, or `auto` for the agent's own choice).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The files or directories a copy workspace is narrowed to, when the request names a
    /// copy without any (for another workspace there is nothing to narrow).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_paths: Option<Vec<String>>,
    /// The turn's timeout, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// The mode; only `read-only` for a planner or reviewer base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<TaskMode>,
    /// A JSON Schema the answer must follow (structured output); only for an implementer
    /// base, since planners and reviewers keep their own report contracts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<serde_json::Value>,
    /// The reasoning effort asked of the agent (`low`, `medium`, `high`, `xhigh` or `max`),
    /// when the request names none; an agent that takes no effort refuses the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effort: Option<String>,
    /// Skill packages staged in a copy workspace, when the request sends none (for another
    /// workspace there is nothing to stage).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub skills: Option<Vec<legate_core::SkillPackage>>,
    /// Files of the workspace collected when the task ends, when the request names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_paths: Option<Vec<String>>,
    /// `events` or `messages`, when the request names none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery_mode: Option<legate_core::DeliveryMode>,
    /// The tool kinds the agent may use, when the request names none; the configured
    /// ceiling still bounds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<legate_core::ToolKind>>,
    /// MCP servers of the configured catalogue handed to the agent, when the request names
    /// none; checked against the catalogue at each submit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<legate_core::McpSelection>>,
    /// Private memory entries the agent receives, when the request names none (an empty
    /// list in the request replaces them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Vec<legate_core::MemorySelection>>,
}
