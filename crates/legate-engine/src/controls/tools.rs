//! Tool kinds and MCP servers a task may use (issue 17): owned by the controls engineer.

use super::not_yet;
use crate::engine::Engine;
use crate::request::SubmitRequest;
use legate_core::{McpSelection, Result, ToolKind};

/// The tool kinds `request` narrows the task to, within the configured ceiling.
pub(super) fn check_tools(
    _engine: &Engine,
    request: &SubmitRequest,
) -> Result<Option<Vec<ToolKind>>> {
    match &request.allowed_tools {
        Some(_) => Err(not_yet("allowedTools")),
        None => Ok(None),
    }
}

/// The MCP servers `request` selects from the configured catalogue.
pub(super) fn check_mcp(_engine: &Engine, request: &SubmitRequest) -> Result<Vec<McpSelection>> {
    match &request.mcp_servers {
        Some(s) if !s.is_empty() => Err(not_yet("mcpServers")),
        _ => Ok(Vec::new()),
    }
}
