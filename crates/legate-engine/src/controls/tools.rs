//! Tool kinds and MCP servers a task may use (issue 17, "Tool and MCP controls").
//!
//! `allowedTools` narrows the ACP tool kinds of a task under the configured ceiling
//! (`[controls] allowed_tools`), which applies even when the caller names nothing; a kind
//! outside the ceiling is `TOOL_NOT_ALLOWED`. `mcpServers` selects servers and tools from the
//! configured catalogue (`[[mcp_servers]]`): an unknown server is `MCP_SERVER_NOT_FOUND`, an
//! unknown tool or a tool not marked read-only on a read-only task `TOOL_NOT_ALLOWED`. The
//! result is stored with the task and reaches the supervisor of its session
//! (`legate_supervisor::ToolControls`), which refuses every permission request and `fs/*`
//! call outside it. agy (`Capabilities::copy_tool_controls`) holds them only in a copy, where
//! its backend stages native hooks (`legate_backend::agy::staging`); a backend that cannot
//! enforce them (a remote agent; agy outside a copy) gets the task refused, never run
//! unchecked.
//!
//! This module checks and resolves; it never shows a transport (the catalogue's commands,
//! environments and URLs stay in the configuration and the session request).

use crate::core::Core;
use crate::core::request::{SubmitRequest, WorkspaceRequest};
use legate_core::{
    ControlsConfig, Error, ErrorCode, McpSelection, McpServerSpec, Result, TaskControls, TaskMode,
    ToolKind,
};

/// At most this many servers in one selection (the catalogue's own bound).
const MAX_SELECTIONS: usize = legate_core::catalogue::MAX_MCP_SERVERS;

/// Caller input quoted in an error, bounded and escaped.
fn quoted(s: &str) -> String {
    format!("{:?}", s.chars().take(64).collect::<String>())
}

/// Why `request`'s agent cannot hold its tool controls (`None`: it can): its backend enforces
/// them nowhere, or (agy) only in a copy workspace, by hooks staged there.
fn unenforced(engine: &Core, request: &SubmitRequest) -> Result<Option<String>> {
    let name = request
        .agent
        .clone()
        .unwrap_or_else(|| engine.config().default_agent.clone());
    let (_, capabilities) = engine.agents().runnable(&name)?;
    if capabilities.tool_controls {
        return Ok(None);
    }
    if capabilities.copy_tool_controls {
        if matches!(request.workspace, WorkspaceRequest::Copy { .. }) {
            return Ok(None);
        }
        return Ok(Some(format!(
            "agent `{name}`'s backend enforces them only through hooks staged in a copy of the project, and this task does not run in a copy; run it in a copy (workspace `copy`), or the task is refused rather than run unchecked"
        )));
    }
    Ok(Some(format!(
        "agent `{name}`'s backend cannot enforce them (its tool calls are not asked about here); the task is refused rather than run unchecked"
    )))
}

/// The tool kinds `request` narrows the task to, within the configured ceiling: `None` when
/// neither names any.
pub(super) fn check_tools(engine: &Core, request: &SubmitRequest) -> Result<Option<Vec<ToolKind>>> {
    let ceiling = engine.config().controls.allowed_tools.as_deref();
    let effective = narrow(ceiling, request.allowed_tools.as_deref())?;
    if let Some(kinds) = &effective
        && !ToolKind::ALL.iter().all(|k| kinds.contains(k))
        && let Some(why) = unenforced(engine, request)?
    {
        let whose = if request.allowed_tools.is_some() {
            "allowedTools was given"
        } else {
            "the configuration sets a ceiling of tool kinds ([controls] allowed_tools)"
        };
        return Err(Error::new(
            ErrorCode::ToolNotAllowed,
            format!("{whose}, but {why}"),
        ));
    }
    Ok(effective)
}

/// The allowed kinds under `ceiling` (`None`: no ceiling) for `requested` (`None`: the
/// ceiling itself). Duplicates are dropped; the order is the caller's.
pub(crate) fn narrow(
    ceiling: Option<&[ToolKind]>,
    requested: Option<&[ToolKind]>,
) -> Result<Option<Vec<ToolKind>>> {
    let Some(requested) = requested else {
        return Ok(ceiling.map(<[ToolKind]>::to_vec));
    };
    let mut kinds = Vec::new();
    for kind in requested {
        if let Some(ceiling) = ceiling
            && !ceiling.contains(kind)
        {
            let allowed: Vec<&str> = ceiling.iter().map(|k| k.as_str()).collect();
            return Err(Error::new(
                ErrorCode::ToolNotAllowed,
                format!(
                    "allowedTools names {}, which the configured ceiling leaves out (it allows: {})",
                    kind.as_str(),
                    if allowed.is_empty() {
                        "none".to_string()
                    } else {
                        allowed.join(", ")
                    }
                ),
            ));
        }
        if !kinds.contains(kind) {
            kinds.push(*kind);
        }
    }
    Ok(Some(kinds))
}

/// The MCP servers `request` selects from the configured catalogue.
pub(super) fn check_mcp(engine: &Core, request: &SubmitRequest) -> Result<Vec<McpSelection>> {
    let selections = match &request.mcp_servers {
        Some(s) if !s.is_empty() => s,
        _ => return Ok(Vec::new()),
    };
    let mode = request.mode.unwrap_or_default();
    let checked = select(&engine.config().controls, selections, mode)?;
    if let Some(why) = unenforced(engine, request)? {
        return Err(Error::new(
            ErrorCode::ToolNotAllowed,
            format!("mcpServers was given, but {why}"),
        ));
    }
    Ok(checked)
}

/// `selections` checked against `catalogue` for a task of `mode`.
pub(crate) fn select(
    catalogue: &ControlsConfig,
    selections: &[McpSelection],
    mode: TaskMode,
) -> Result<Vec<McpSelection>> {
    if selections.len() > MAX_SELECTIONS {
        return Err(Error::invalid_input(format!(
            "mcpServers selects {} servers; at most {MAX_SELECTIONS}",
            selections.len()
        )));
    }
    let mut out: Vec<McpSelection> = Vec::new();
    for selection in selections {
        let id = &selection.server_id;
        let Some(server) = catalogue.server(id) else {
            return Err(Error::new(
                ErrorCode::McpServerNotFound,
                format!(
                    "no MCP server {} in the configured catalogue (get_agent_policy lists them)",
                    quoted(id)
                ),
            ));
        };
        if out.iter().any(|s| &s.server_id == id) {
            return Err(Error::invalid_input(format!(
                "mcpServers selects server {} twice",
                quoted(id)
            )));
        }
        if selection.tools.is_empty() {
            return Err(Error::invalid_input(format!(
                "mcpServers: select at least one tool of server {}",
                quoted(id)
            )));
        }
        let mut tools = Vec::new();
        for name in &selection.tools {
            let Some(tool) = server.tool(name) else {
                return Err(Error::new(
                    ErrorCode::ToolNotAllowed,
                    format!(
                        "MCP server {} has no catalogued tool {}",
                        quoted(id),
                        quoted(name)
                    ),
                ));
            };
            if mode == TaskMode::ReadOnly && !tool.read_only {
                return Err(Error::new(
                    ErrorCode::ToolNotAllowed,
                    format!(
                        "MCP tool {} of server {} is not marked read-only, and the task is read-only",
                        quoted(name),
                        quoted(id)
                    ),
                ));
            }
            if !tools.contains(name) {
                tools.push(name.clone());
            }
        }
        out.push(McpSelection {
            server_id: id.clone(),
            tools,
        });
    }
    Ok(out)
}

/// The catalogue entries of `controls`' selections, to hand to the agent. A server removed
/// from the configuration since the context started is not handed over (its tools stay
/// refused by the supervisor, which knows only the selection).
pub(crate) fn catalogued(
    catalogue: &ControlsConfig,
    controls: &TaskControls,
) -> Vec<McpServerSpec> {
    controls
        .mcp_servers
        .iter()
        .filter_map(|s| catalogue.server(&s.server_id).cloned())
        .collect()
}

#[cfg(test)]
#[path = "tools_tests.rs"]
mod tests;
