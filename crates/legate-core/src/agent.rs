//! Configured agents.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// How Legate talks to an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum AgentKind {
    /// An ACP agent on stdio, spawned by Legate.
    Acp,
    /// The built-in, model-free ACP agent (`legate agent revisor`).
    Revisor,
    /// The Antigravity CLI (`agy`), driven headless with stream-json, one process per turn.
    Agy,
}

impl AgentKind {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acp => "acp",
            Self::Revisor => "revisor",
            Self::Agy => "agy",
        }
    }
}

/// One configured agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// The name callers use (`revisor`, `claude`, …).
    pub name: String,
    /// The protocol.
    pub kind: AgentKind,
    /// The executable (looked up on `PATH` when not absolute).
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set for it, on top of the filtered environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The preset it follows (`claude`, `codex`, `gemini`), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
    /// Whether execute/fetch/other tools may run in roots Legate does not own.
    #[serde(default)]
    pub allow_execute: bool,
    /// Whether the `terminal` client capability is advertised.
    #[serde(default)]
    pub terminal: bool,
    /// A one-line description for listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The model used when neither the task nor a saved preference names one; `None` leaves
    /// the choice to the agent. Only backends that can select models use it (today: `agy`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Extra variable names inherited from Legate's environment, by exact name, on top of the
    /// backend's allowlist. Loader variables (`NODE_OPTIONS`, `NODE_PATH`, `LD_*`, `DYLD_*`)
    /// are refused here in any case or spacing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inherit_env: Vec<String>,
}
