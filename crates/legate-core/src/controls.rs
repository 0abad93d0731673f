//! What a task was given besides its prompt, fixed when it is stored: the memory snapshots it
//! reads, the skills staged in its copy, how its progress is delivered, the tool kinds and MCP
//! servers it may use, the files collected from it when it ends, and the group or comparison
//! it belongs to.
//!
//! [`TaskControls`] is stored with the task (one column, written once at insert) and carried
//! to every continuation of its context. This module only names the shapes: the engine checks
//! and fills them, and nothing here grants a permission.

use crate::ToolKind;
use serde::{Deserialize, Serialize};

crate::wire_enum! {
    /// How a caller follows a task: every event, or the public messages alone (questions,
    /// blockers and an excerpt of the result).
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub enum DeliveryMode {
        /// Every stored event (the default).
        #[default]
        Events => "events",
        /// Structured public messages only.
        Messages => "messages",
    }
}

crate::wire_enum! {
    /// How much reasoning a caller asks of the agent for a task (agy's `--effort`). Only agents
    /// whose backend takes it accept one; the others refuse it at submit.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum Effort {
        /// The least.
        Low => "low",
        /// Some.
        Medium => "medium",
        /// Much.
        High => "high",
        /// More than high.
        Xhigh => "xhigh",
        /// The most the agent offers.
        Max => "max",
    }
}

/// A memory entry a caller selects for a task: the specialist it belongs to and the sha256 of
/// the version it read.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemorySelection {
    /// The specialist (a role name or another id the caller chose).
    pub specialist: String,
    /// The sha256 (lowercase hex) of the entry's text.
    pub sha256: String,
}

/// A memory entry as a task received it: its metadata. The text is kept by the store beside
/// the task, never in this record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MemorySnapshot {
    /// The specialist.
    pub specialist: String,
    /// The sha256 of the text the task received.
    pub sha256: String,
    /// Its size in UTF-8 bytes.
    pub bytes: u64,
}

/// A skill package a caller sends with `run`: the text of its `SKILL.md` and text resources
/// relative to the skill's directory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SkillPackage {
    /// The skill's declared name (kept as given; its directory is the lowercase form).
    pub name: String,
    /// The text of `SKILL.md`.
    pub content: String,
    /// Further text files, relative to the skill's directory.
    #[serde(default)]
    pub resources: Vec<SkillResource>,
}

/// One text resource of a [`SkillPackage`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SkillResource {
    /// A safe relative path inside the skill's directory.
    pub path: String,
    /// The file's text.
    pub content: String,
}

crate::wire_enum! {
    /// Where a staged skill came from.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum SkillSource {
        /// Sent by the caller with the task.
        Client => "client",
        /// One of Legate's bundled packs (or the configured directory of packs).
        Bundled => "bundled",
    }
}

/// A skill staged in a task's copy: names, paths and hashes, never its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SkillRecord {
    /// The declared name.
    pub name: String,
    /// Its directory relative to the copy's root (`.agents/skills/<lowercase name>`).
    pub dir: String,
    /// The sha256 over its files (paths and contents, canonically ordered).
    pub sha256: String,
    /// How many files it has, `SKILL.md` included.
    pub files: u32,
    /// Their total size in bytes.
    pub bytes: u64,
    /// Where it came from.
    pub source: SkillSource,
}

/// A selection from the configured catalogue of MCP servers: the server's id and the tools of
/// it the task may call.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct McpSelection {
    /// The catalogue id.
    pub server_id: String,
    /// Tool names of that server; each must be in the catalogue.
    pub tools: Vec<String>,
}

/// The node of a group a task runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GroupNode {
    /// The group's id.
    pub group_id: String,
    /// The node's id within the definition.
    pub node_id: String,
}

/// What a task was given besides its prompt (see the module docs). Every field is empty by
/// default, which is a task as Legate ran it before these controls existed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TaskControls {
    /// The memory snapshots the task received, in the caller's order.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub memory: Vec<MemorySnapshot>,
    /// The skills staged in its copy.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<SkillRecord>,
    /// How its progress is delivered.
    #[serde(skip_serializing_if = "is_default_delivery")]
    pub delivery_mode: DeliveryMode,
    /// The tool kinds it may use; `None` for every kind the role and configuration allow.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allowed_tools: Option<Vec<ToolKind>>,
    /// The MCP servers handed to its agent.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub mcp_servers: Vec<McpSelection>,
    /// Files (relative to the workspace) collected when it ends.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub artifact_paths: Vec<String>,
    /// The group node it runs, for a task a group started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupNode>,
    /// The comparison it is a target of.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comparison_id: Option<String>,
    /// The task it continues: one cut by a restart of Legate (`SERVER_RESTARTED`), continued
    /// on the caller's request (`continue`). Not inherited by the context's later turns.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub continued_from: Option<crate::TaskId>,
    /// Whether its protocol frames are recorded (the wire tap): its agent's `tap = true`, or
    /// the caller asked at submit. A reply to the task keeps it; a later task of the context
    /// decides afresh.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tap: bool,
    /// Whether its context was started by an inbound message (an A2A caller, possibly
    /// remote): only such a context may be continued, replied into or read by one, so a
    /// caller over A2A never reaches a conversation the CLI, MCP or a workflow started (a
    /// shared directory's, a copy's outside the A2A roots). Kept by every later turn.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inbound: bool,
}

fn is_default_delivery(mode: &DeliveryMode) -> bool {
    *mode == DeliveryMode::Events
}

impl TaskControls {
    /// Whether nothing was given: a task as it was before controls existed.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn empty_controls_serialize_to_an_empty_object_and_back() {
        let c = TaskControls::default();
        assert_eq!(serde_json::to_string(&c).unwrap(), "{}");
        let back: TaskControls = serde_json::from_str("{}").unwrap();
        assert!(back.is_empty());
    }

    #[test]
    fn controls_round_trip_with_their_wire_names() {
        let c = TaskControls {
            delivery_mode: DeliveryMode::Messages,
            allowed_tools: Some(vec![ToolKind::Read]),
            mcp_servers: vec![McpSelection {
                server_id: "docs".into(),
                tools: vec!["search".into()],
            }],
            group: Some(GroupNode {
                group_id: "g".into(),
                node_id: "n".into(),
            }),
            ..TaskControls::default()
        };
        let json = serde_json::to_value(&c).unwrap();
        assert_eq!(json["deliveryMode"], "messages");
        assert_eq!(json["mcpServers"][0]["serverId"], "docs");
        assert_eq!(json["group"]["nodeId"], "n");
        let back: TaskControls = serde_json::from_value(json).unwrap();
        assert_eq!(back, c);
    }
}
