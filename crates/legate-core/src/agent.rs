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
}

impl AgentKind {
    /// The wire form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Acp => "acp",
            Self::Revisor => "revisor",
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
}
