//! `[controls]` and `[[mcp_servers]]`: the ceiling of tool kinds every task runs under and the
//! catalogue of trusted MCP servers a task may select from (issue 17, "Tool and MCP
//! controls").
//!
//! ```toml
//! [controls]
//! allowed_tools = ["read", "search", "edit"]   # omitted: no ceiling
//!
//! [[mcp_servers]]
//! id = "docs"
//! command = "/usr/local/bin/docs-mcp"          # absolute; or url = "http://127.0.0.1:8931/mcp"
//! args = ["--stdio"]
//! env = { DOCS_TOKEN = "…" }
//! tools = [{ name = "search", read_only = true }]
//! ```
//!
//! This module only parses the tables into `legate_core::ControlsConfig`, whose `validate`
//! holds the rules. Errors name keys, never an environment value or a URL. `cwd` is refused:
//! ACP's stdio MCP transport has no working directory to hand the agent.

use crate::{Result, invalid, refuse};
use legate_core::{ControlsConfig, McpServerSpec, McpToolSpec, McpTransport, ToolKind};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// `[controls]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlsTable {
    /// The ceiling of ACP tool kinds.
    allowed_tools: Option<Vec<String>>,
}

/// One `[[mcp_servers]]` entry.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerTable {
    id: String,
    command: Option<PathBuf>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    url: Option<String>,
    #[serde(default)]
    tools: Vec<McpToolTable>,
}

impl std::fmt::Debug for McpServerTable {
    // Environment values and URLs may be credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServerTable")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// One tool of an entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct McpToolTable {
    name: String,
    read_only: bool,
}

/// The engine's controls from the two tables.
pub fn resolve(table: ControlsTable, servers: Vec<McpServerTable>) -> Result<ControlsConfig> {
    let allowed_tools = match table.allowed_tools {
        None => None,
        Some(names) => Some(
            names
                .iter()
                .map(|n| {
                    ToolKind::parse(n).ok_or_else(|| {
                        invalid!("controls.allowed_tools: {n:?} is not a tool kind (read, edit, delete, move, search, execute, think, fetch, switch_mode, other)"
                        )
                    })
                })
                .collect::<Result<Vec<_>>>()?,
        ),
    };
    let mut mcp_servers = Vec::new();
    for s in servers {
        let id = s.id.chars().take(64).collect::<String>();
        if s.cwd.is_some() {
            refuse!(
                "mcp_servers.{id}.cwd: ACP hands an agent a stdio server's command, args and env only, so a working directory cannot be honoured; remove it (or wrap the command)"
            );
        }
        let transport = match (s.command, s.url) {
            (Some(command), None) => McpTransport::Stdio {
                command,
                args: s.args,
                env: s.env,
            },
            (None, Some(url)) if s.args.is_empty() && s.env.is_empty() => {
                McpTransport::Http { url }
            }
            (None, Some(_)) => {
                refuse!("mcp_servers.{id}: args and env belong to a command, not a url")
            }
            _ => refuse!("mcp_servers.{id}: give exactly one of command or url"),
        };
        mcp_servers.push(McpServerSpec {
            id: s.id,
            transport,
            tools: s
                .tools
                .into_iter()
                .map(|t| McpToolSpec {
                    name: t.name,
                    read_only: t.read_only,
                })
                .collect(),
        });
    }
    let controls = ControlsConfig {
        allowed_tools,
        mcp_servers,
    };
    controls.validate()?;
    Ok(controls)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Deserialize)]
    struct F {
        #[serde(default)]
        controls: ControlsTable,
        #[serde(default)]
        mcp_servers: Vec<McpServerTable>,
    }

    fn load(text: &str) -> Result<ControlsConfig> {
        let f: F = crate::config::parse(text)?;
        resolve(f.controls, f.mcp_servers)
    }

    #[test]
    fn a_ceiling_and_a_catalogue_parse() {
        let c = load(
            r#"
[controls]
allowed_tools = ["read", "search"]
[[mcp_servers]]
id = "docs"
command = "/usr/bin/docs"
env = { TOKEN = "s3cr3t-value" }
tools = [{ name = "search", read_only = true }]
[[mcp_servers]]
id = "web"
url = "http://127.0.0.1:9/mcp"
tools = [{ name = "get", read_only = true }, { name = "post", read_only = false }]
"#,
        )
        .unwrap();
        assert_eq!(
            c.allowed_tools,
            Some(vec![ToolKind::Read, ToolKind::Search])
        );
        assert_eq!(c.mcp_servers.len(), 2);
        assert!(!c.server("web").unwrap().tool("post").unwrap().read_only);
    }

    #[test]
    fn bad_entries_are_refused_without_their_secrets() {
        for (bad, key) in [
            ("[controls]\nallowed_tools = [\"telepathy\"]", "telepathy"),
            ("[[mcp_servers]]\nid = \"a\"\ntools = []", "exactly one"),
            (
                "[[mcp_servers]]\nid = \"a\"\ncommand = \"/x\"\ncwd = \"/tmp\"\ntools = []",
                "cwd",
            ),
            (
                "[[mcp_servers]]\nid = \"a\"\nurl = \"https://s3cr3t@example.com/\"\ntools = []",
                "url",
            ),
        ] {
            let e = load(bad).unwrap_err().to_string();
            assert!(e.contains(key), "{e}");
            assert!(!e.contains("s3cr3t"), "{e}");
        }
    }
}
