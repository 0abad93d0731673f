//! The shape of a group definition as a caller writes it (JSON, or TOML read into the same
//! types by the CLI): nodes, peer routes, an optional token budget and an optional workflow.
//!
//! This module owns the wire spellings only. It never validates (see `validate`) and never
//! stores anything; every field is hostile input until `validate::check` accepted it.

use legate_review::Criterion;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// A group of tasks: what runs, in which order, from which files, within which budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupDefinition {
    /// The git project every node's copy is made from (absolute).
    pub working_directory: PathBuf,
    /// A short title for listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The nodes, 1 to the configured `max_group_nodes` (32 unless configured, at most 256).
    pub nodes: Vec<NodeDef>,
    /// The directed routes peer messages may take; none by default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peer_routes: Vec<PeerRoute>,
    /// A ceiling on the tokens the group's tasks may be observed to use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// A workflow: the final synthesis node and the hooks that hold a node's output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<Workflow>,
}

/// One node: a task of its own, in its own copy.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NodeDef {
    /// Unique within the definition: 1 to 64 ASCII letters, digits, `-` or `_`.
    pub id: String,
    /// The role (`implementer` when none is named).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// The agent; `None` for the role's or the configured default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
    /// The model; `None` for the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// What to ask.
    pub prompt: String,
    /// Nodes that must finish successfully before this one is admitted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<String>,
    /// A direct dependency whose copy's files this node starts from (a new copy of them);
    /// `None`: a fresh copy of `workingDirectory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file_sources: Option<String>,
    /// Write or read-only; `None` for the role's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<legate_core::TaskMode>,
    /// Acceptance criteria of the node's copy (also spelled `acceptanceCriteria`); every
    /// step of a workflow needs at least one. Their file checks must hold before the node's
    /// dependents are released; a criterion without a check needs a passing `verify`.
    #[serde(
        default,
        alias = "acceptanceCriteria",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub criteria: Vec<Criterion>,
    /// The files or directories of the project its copy is narrowed to; not with
    /// `fileSources`, whose copy keeps its source's selection.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub include_paths: Vec<String>,
    /// Skill packages staged in its copy; not with `fileSources`, whose copy keeps its
    /// source's skills.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<legate_core::SkillPackage>,
    /// Private memory entries it receives (`[]`: none, even from its role or its source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Vec<legate_core::MemorySelection>>,
    /// Its turn's timeout in seconds; `None` for its role's or the configured default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
    /// The tool kinds its agent may use, within the configured ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<legate_core::ToolKind>>,
    /// MCP servers of the configured catalogue handed to its agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_servers: Option<Vec<legate_core::McpSelection>>,
    /// Files of its copy collected when its task ends (hashed into its checkpoint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub artifact_paths: Vec<String>,
}

/// A route a peer message may take, from one node to another.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PeerRoute {
    /// The sending node.
    pub from: String,
    /// The receiving node.
    pub to: String,
}

/// The group's token budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Budget {
    /// New turns are admitted only while the observed total stays under this.
    pub max_total_tokens: u64,
}

/// A workflow over the group: the node whose result is the synthesis, and hooks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Workflow {
    /// The synthesis node; it must depend, directly or not, on every other node.
    pub final_node: String,
    /// Per node: what its output needs before its dependents may start.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hooks: BTreeMap<String, Hook>,
}

/// What a node's output needs before it counts as finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Hook {
    /// A current passing verification of its copy (`verify`).
    #[serde(default)]
    pub require_review: bool,
    /// A current passing test Legate ran itself in its copy (`test`); client-reported
    /// records do not count.
    #[serde(default)]
    pub require_tests: bool,
}
