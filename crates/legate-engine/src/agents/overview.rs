//! What a caller may know about the controls and models of the agents before choosing them
//! (issue 17, "Tool and MCP controls" and "Models and health"): the ceiling of tool kinds,
//! the catalogue's ids and tools, each backend's limitations, and which model a task naming
//! none runs with.
//!
//! Every front shows these the same way because they come from here. This module never shows
//! a transport (a catalogued server's command, arguments, environment or URL) nor anything
//! read from a credential; it changes nothing except the saved model preference, through
//! `legate_backend::selection`.

use crate::agents::Agents;
use legate_backend::Continuation;
use legate_backend::selection::{Choice, choose};
use legate_core::{McpServerPublic, Result, ToolKind};
use serde::Serialize;

/// `get_agent_policy`: the ceilings and the catalogue, never a transport or a credential.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(rename = "AgentPolicy"))]
pub struct ControlsOverview {
    /// The configured ceiling of tool kinds (`[controls] allowed_tools`); null: none, every
    /// kind may be named.
    pub allowed_tools: Option<Vec<ToolKind>>,
    /// The kinds a task naming no `allowedTools` gets: the ceiling, or null for every kind.
    pub default_allowed_tools: Option<Vec<ToolKind>>,
    /// The catalogue of trusted MCP servers: ids, transport kinds and tools.
    pub mcp_servers: Vec<McpServerPublic>,
    /// Each configured agent: whether its backend enforces these controls.
    pub agents: Vec<AgentControls>,
}

/// Whether one agent's tasks may carry tool controls.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct AgentControls {
    /// The agent's name.
    pub name: String,
    /// Whether `allowedTools`, a ceiling and `mcpServers` are enforced for it (an ACP agent:
    /// on every permission request and `fs/*` call). False: a task carrying any of them is
    /// refused with `TOOL_NOT_ALLOWED`.
    pub tool_controls: bool,
}

/// Something a backend cannot do, said before a caller relies on it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Limitation {
    /// A stable name: `interactiveReplies`, `preflightTokenCount`, `toolControls`,
    /// `localSupervision`, `supervisingAgent`.
    pub name: String,
    /// Always false here: only what is unavailable is listed.
    pub available: bool,
    /// One sentence saying what that means and what to do instead.
    pub detail: String,
}

fn limitation(name: &str, detail: &str) -> Limitation {
    Limitation {
        name: name.to_string(),
        available: false,
        detail: detail.to_string(),
    }
}

/// How agent `name`'s model is chosen for a task naming none, and what it will be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ModelSelection {
    /// The agent.
    pub agent: String,
    /// The saved preference: an id, `auto` for a saved "the agent's own default", or null
    /// when none is saved.
    pub saved: Option<String>,
    /// The configured `model` of the agent, if any.
    pub configured: Option<String>,
    /// What a task naming no model runs with: an id, or null for the agent's own default.
    pub effective: Option<String>,
    /// Where `effective` came from: `saved`, `configured` or `agent` (its own default).
    pub source: String,
    /// The order every front applies.
    pub precedence: String,
}

/// The order of precedence, in one sentence every front shows.
pub const MODEL_PRECEDENCE: &str = "the task's model, else the saved preference (set_model / legate model), else the agent's configured model, else the agent's own default";

impl Agents {
    /// The tool controls' overview: ceilings, the catalogue's public view, and which agents
    /// enforce them.
    pub fn controls_overview(&self) -> ControlsOverview {
        let controls = &self.core.config().controls;
        ControlsOverview {
            allowed_tools: controls.allowed_tools.clone(),
            default_allowed_tools: controls.allowed_tools.clone(),
            mcp_servers: controls.mcp_servers.iter().map(|s| s.public()).collect(),
            agents: self
                .core
                .config()
                .agents
                .values()
                .map(|a| AgentControls {
                    name: a.name.clone(),
                    tool_controls: self
                        .core
                        .agents()
                        .runnable(&a.name)
                        .is_ok_and(|(_, c)| c.tool_controls),
                })
                .collect(),
        }
    }

    /// What agent `name`'s backend cannot do, from its capabilities.
    pub fn limitations(&self, name: &str) -> Result<Vec<Limitation>> {
        let (_, caps) = self.core.agents().runnable(name)?;
        let mut out = Vec::new();
        if self.reserved(name) {
            out.push(limitation(
                "supervisingAgent",
                "it is the supervising agent ([supervision] agent): it only answers approvals, so a task on it or a choice of its model is refused with AGENT_RESERVED",
            ));
        }
        if caps.continuation == Continuation::ProcessPerTurn {
            out.push(limitation(
                "interactiveReplies",
                "the agent's headless CLI refuses in-band control requests, so a permission prompt cannot be answered during a turn and a message is a new turn (resume or send_message)",
            ));
        }
        out.push(limitation(
            "preflightTokenCount",
            "no command of the agent counts tokens before a run; usage is what the agent reports after it, and a prompt's size in characters is not a token count",
        ));
        if caps.copy_tool_controls && !caps.tool_controls {
            out.push(limitation(
                "toolControls",
                "allowedTools, a configured ceiling of tool kinds and mcpServers are enforced only in a copy workspace, by PreToolUse hooks Legate stages there; such a task in a sandbox or a shared directory is refused with TOOL_NOT_ALLOWED",
            ));
        } else if !caps.tool_controls {
            out.push(limitation(
                "toolControls",
                "its tool calls are not asked about here, so allowedTools, a configured ceiling of tool kinds and mcpServers cannot be enforced: such a task is refused with TOOL_NOT_ALLOWED",
            ));
        }
        if caps.reattach || !caps.local_process {
            out.push(limitation(
                "localSupervision",
                "the agent runs on a remote server: its tool calls are supervised there, not by this Legate's rules, policy or approval queue, and its process is not confined here",
            ));
        }
        Ok(out)
    }

    /// How agent `name`'s model is chosen when a task names none (the one rule of
    /// `legate_backend::selection::choose`).
    pub fn model_selection(&self, name: &str) -> Result<ModelSelection> {
        let saved = self.model_preference(name)?;
        let configured = self.agent(name)?.model.clone();
        let source = match (&saved, &configured) {
            (Some(_), _) => "saved",
            (None, Some(c)) if Choice::parse(c) != Choice::Auto => "configured",
            _ => "agent",
        };
        let effective = choose(None, saved.clone(), configured.as_deref());
        Ok(ModelSelection {
            agent: name.to_string(),
            saved: saved.map(|c| {
                c.id()
                    .map_or_else(|| legate_core::AUTO_MODEL.to_string(), str::to_owned)
            }),
            configured,
            effective: effective.id().map(str::to_owned),
            source: source.to_string(),
            precedence: MODEL_PRECEDENCE.to_string(),
        })
    }
}
