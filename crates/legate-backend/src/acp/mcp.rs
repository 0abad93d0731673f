//! The catalogued MCP servers a task's context was given, as ACP's `mcpServers` of
//! `session/new`, `session/load` and `session/resume`.
//!
//! The servers are trusted configuration (`[[mcp_servers]]`): a stdio program the agent starts
//! inside its own confinement, or a loopback HTTP URL, sent only to an agent that announced
//! `mcpCapabilities.http`. A session is per context, so the list is fixed for the context.
//! This module never logs a transport: environment values and URLs may carry credentials.

use agent_client_protocol::v1::schema as acp;
use legate_core::{Error, ErrorCode, McpServerSpec, McpTransport, Result};

/// `servers` in ACP's shape, for an agent whose MCP capabilities are `caps`. An HTTP server
/// for an agent that cannot take one is refused (`TOOL_NOT_ALLOWED`): the task was promised
/// the server, and a session without it would run on silently.
pub(crate) fn servers(
    agent: &str,
    servers: &[McpServerSpec],
    caps: &acp::McpCapabilities,
) -> Result<Vec<acp::McpServer>> {
    servers
        .iter()
        .map(|s| match &s.transport {
            McpTransport::Stdio { command, args, env } => Ok(acp::McpServer::Stdio(
                acp::McpServerStdio::new(s.id.clone(), command.clone())
                    .args(args.clone())
                    .env(
                        env.iter()
                            .map(|(k, v)| acp::EnvVariable::new(k.clone(), v.clone()))
                            .collect(),
                    ),
            )),
            McpTransport::Http { url } if caps.http => Ok(acp::McpServer::Http(
                acp::McpServerHttp::new(s.id.clone(), url.clone()),
            )),
            McpTransport::Http { .. } => Err(Error::new(
                ErrorCode::ToolNotAllowed,
                format!(
                    "agent `{agent}` does not announce MCP over HTTP (mcpCapabilities.http), so the selected server {} cannot be handed to it",
                    s.id
                ),
            )),
        })
        .collect()
}
