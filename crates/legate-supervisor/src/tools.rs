//! The task's tool controls (issue 17, "Tool and MCP controls"): the tool kinds it may use and
//! the MCP tools selected for it, checked before any rule, policy or supervisor is asked.
//!
//! A request outside them is refused with the preferred reject option and a ruling whose
//! `decider` is `controls` and whose `rule_id` is `TOOL_NOT_ALLOWED`. `think` and
//! `switch_mode` are never narrowed: the one acts on nothing, the other is the rule table's
//! (leaving a supervised mode is refused there whatever the list says). An MCP tool call is
//! recognised by the name agents give it (`mcp__<server>__<tool>`, as Claude's adapter titles
//! it, or `<server>__<tool>` / `<server>/<tool>` in `rawInput.tool`); one that is not among the
//! task's selections is refused, and a selected one passes the kind check only with the kind
//! `other` adapters give MCP calls (a name never lets an `edit` through a list without it). A task with no controls (no allowed list and no selection)
//! is left to the rules as before. Pure: no I/O.

use crate::Preset;
use crate::options::pick_reject;
use legate_core::{
    Decider, Decision, ErrorCode, McpSelection, PermissionRequest, Ruling, ToolKind,
};

/// The tool controls of one session (fixed for its context).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ToolControls {
    /// The tool kinds the task may use; `None`: every kind.
    pub allowed: Option<Vec<ToolKind>>,
    /// The MCP servers and tools handed to the agent.
    pub mcp: Vec<McpSelection>,
}

/// An MCP tool a request names: `(server, tool)`.
type McpName<'a> = (&'a str, &'a str);

impl ToolControls {
    /// Whether any control is set (else everything is the rules' to decide).
    pub fn is_set(&self) -> bool {
        self.allowed.is_some() || !self.mcp.is_empty()
    }

    /// Whether a call of `kind` may be asked about at all.
    pub fn allows_kind(&self, kind: ToolKind) -> bool {
        match (&self.allowed, kind) {
            (_, ToolKind::Think | ToolKind::SwitchMode) => true,
            (None, _) => true,
            (Some(kinds), kind) => kinds.contains(&kind),
        }
    }

    /// Whether `(server, tool)` is among the selections.
    pub fn allows_mcp(&self, server: &str, tool: &str) -> bool {
        self.mcp
            .iter()
            .any(|s| s.server_id == server && s.tools.iter().any(|t| t == tool))
    }

    /// The refusal of `request`, when the controls refuse it; `None` leaves it to the rules.
    pub fn refusal(&self, request: &PermissionRequest, preset: &Preset) -> Option<Ruling> {
        if !self.is_set() {
            return None;
        }
        let mcp = mcp_name(request);
        let reason = if let Some((server, tool)) = mcp
            && !self.allows_mcp(server, tool)
        {
            format!("the MCP tool {tool} of server {server} was not selected for this task")
        } else if mcp.is_some() && request.tool_kind == ToolKind::Other {
            // A selected MCP tool, of the kind adapters give MCP calls: the rules decide. Any
            // other kind still needs its kind allowed, so a name cannot smuggle an edit.
            return None;
        } else if !self.allows_kind(request.tool_kind) {
            format!(
                "{} calls are not among the tool kinds this task may use ({})",
                request.tool_kind.as_str(),
                self.allowed_list()
            )
        } else {
            return None;
        };
        let code = ErrorCode::ToolNotAllowed.as_str();
        Some(Ruling {
            decision: Decision::Deny,
            option_id: pick_reject(&request.options, preset).map(|o| o.id.clone()),
            reason: format!("{code}: {reason}"),
            decider: Decider::Controls,
            rule_id: Some(code.to_string()),
        })
    }

    /// The allowed kinds, for a sentence (`every kind` without a list, `none` for `[]`).
    pub fn allowed_list(&self) -> String {
        match &self.allowed {
            None => "every kind".into(),
            Some(k) if k.is_empty() => "none".into(),
            Some(k) => k.iter().map(|k| k.as_str()).collect::<Vec<_>>().join(", "),
        }
    }
}

/// The MCP tool `request` is about, when its title or `rawInput.tool` names one.
pub fn mcp_name(request: &PermissionRequest) -> Option<McpName<'_>> {
    let first = request.title.split_whitespace().next().unwrap_or("");
    if let Some(rest) = first.strip_prefix("mcp__") {
        return split(rest, "__");
    }
    let tool = request
        .raw_input
        .as_ref()
        .and_then(|v| v.get("tool"))
        .and_then(|v| v.as_str())?;
    let tool = tool.strip_prefix("mcp__").unwrap_or(tool);
    split(tool, "__").or_else(|| split(tool, "/"))
}

fn split<'a>(name: &'a str, sep: &str) -> Option<McpName<'a>> {
    let (server, tool) = name.split_once(sep)?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;
