//! The configured catalogue of trusted MCP servers a task may be handed (issue 17, "Tool and
//! MCP controls"), and the ceiling of tool kinds every task runs under.
//!
//! An entry is trusted configuration, written by the person who runs Legate: a stdio command
//! (absolute, with arguments and environment) or a loopback `http://` URL, and the tools of it
//! a task may select, each marked read-only or not. This module owns the shapes and their
//! validation (pure, no I/O). It must never print a transport: an entry's environment values
//! and URL may carry credentials, so `Debug` shows neither, and [`McpServerSpec::public`] is the
//! only view a caller or an agent's prompt ever gets.

use crate::{Error, ErrorCode, Result, ToolKind};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

/// At most this many servers in the catalogue (the seed's bound).
pub const MAX_MCP_SERVERS: usize = 20;
/// At most this many tools per server.
pub const MAX_MCP_TOOLS: usize = 64;
/// Longest server id or tool name, in bytes.
pub const MAX_MCP_NAME: usize = 64;
/// Longest URL, in bytes.
pub const MAX_MCP_URL: usize = 2048;

/// One tool of a catalogued server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct McpToolSpec {
    /// The tool's name, as the server lists it.
    pub name: String,
    /// Whether it only reads: only such tools may be selected for a read-only task.
    pub read_only: bool,
}

/// How the agent reaches a catalogued server.
#[derive(Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A program the agent starts (inside the agent's own confinement), speaking MCP on stdio.
    Stdio {
        /// Absolute path of the program.
        command: PathBuf,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables (values may be credentials: never shown).
        env: BTreeMap<String, String>,
    },
    /// A server on this machine's loopback interface, over MCP's HTTP transport.
    Http {
        /// `http://127.0.0.1…`, `http://[::1]…` or `http://localhost…`.
        url: String,
    },
}

impl std::fmt::Debug for McpTransport {
    // Neither environment values nor the URL are printed: either may carry a credential.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Stdio { args, env, .. } => f
                .debug_struct("Stdio")
                .field("args", &args.len())
                .field("env", &env.keys().collect::<Vec<_>>())
                .finish_non_exhaustive(),
            Self::Http { .. } => f.debug_struct("Http").finish_non_exhaustive(),
        }
    }
}

/// One catalogued server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerSpec {
    /// Its id: what `run`'s `mcpServers[].serverId` names and the name the agent is given.
    pub id: String,
    /// How it is reached.
    pub transport: McpTransport,
    /// The tools a task may select.
    pub tools: Vec<McpToolSpec>,
}

/// What a caller may see of a catalogued server: its id, its transport's kind and its tools.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct McpServerPublic {
    /// The id.
    pub id: String,
    /// `stdio` or `http`.
    pub transport: String,
    /// Its tools.
    pub tools: Vec<McpToolSpec>,
}

impl McpServerSpec {
    /// The caller's view: never the command, arguments, environment or URL.
    pub fn public(&self) -> McpServerPublic {
        McpServerPublic {
            id: self.id.clone(),
            transport: match self.transport {
                McpTransport::Stdio { .. } => "stdio",
                McpTransport::Http { .. } => "http",
            }
            .to_string(),
            tools: self.tools.clone(),
        }
    }

    /// The tool named `name`, if catalogued.
    pub fn tool(&self, name: &str) -> Option<&McpToolSpec> {
        self.tools.iter().find(|t| t.name == name)
    }
}

/// The controls the configuration sets for every task: the ceiling of tool kinds and the MCP
/// catalogue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ControlsConfig {
    /// The tool kinds any task may use at most; `None`: every kind (no ceiling).
    pub allowed_tools: Option<Vec<ToolKind>>,
    /// The trusted MCP servers, at most [`MAX_MCP_SERVERS`].
    pub mcp_servers: Vec<McpServerSpec>,
}

impl ControlsConfig {
    /// The catalogued server `id`.
    pub fn server(&self, id: &str) -> Option<&McpServerSpec> {
        self.mcp_servers.iter().find(|s| s.id == id)
    }

    /// Checks the whole configuration: the catalogue's size, unique ids, and every entry.
    /// Errors are `CONFIG_INVALID` and never quote an environment value or a URL.
    pub fn validate(&self) -> Result<()> {
        if self.mcp_servers.len() > MAX_MCP_SERVERS {
            return Err(config(format!(
                "mcp_servers lists {} servers; at most {MAX_MCP_SERVERS}",
                self.mcp_servers.len()
            )));
        }
        let mut ids = BTreeSet::new();
        for server in &self.mcp_servers {
            validate_server(server)?;
            if !ids.insert(server.id.as_str()) {
                return Err(config(format!(
                    "mcp_servers: id {:?} appears twice",
                    server.id
                )));
            }
        }
        Ok(())
    }
}

fn config(message: String) -> Error {
    Error::new(ErrorCode::ConfigInvalid, message)
}

/// Whether `name` is a valid server id or tool name: 1 to [`MAX_MCP_NAME`] bytes of ASCII
/// letters, digits, `_`, `-` and `.`, starting with a letter or digit, with no `__` (the
/// separator agents put between a server's and a tool's names).
pub fn valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_MCP_NAME
        && bytes[0].is_ascii_alphanumeric()
        && bytes
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && !name.contains("__")
}

fn validate_server(server: &McpServerSpec) -> Result<()> {
    if !valid_name(&server.id) {
        return Err(config(format!(
            "mcp_servers: id {:?} must be 1-{MAX_MCP_NAME} letters, digits, '_', '-' or '.', starting with a letter or digit, without '__'",
            server.id.chars().take(80).collect::<String>()
        )));
    }
    let id = &server.id;
    if server.tools.len() > MAX_MCP_TOOLS {
        return Err(config(format!(
            "mcp_servers.{id}: {} tools; at most {MAX_MCP_TOOLS}",
            server.tools.len()
        )));
    }
    let mut names = BTreeSet::new();
    for tool in &server.tools {
        if !valid_name(&tool.name) {
            return Err(config(format!(
                "mcp_servers.{id}: tool name {:?} must be 1-{MAX_MCP_NAME} letters, digits, '_', '-' or '.', without '__'",
                tool.name.chars().take(80).collect::<String>()
            )));
        }
        if !names.insert(tool.name.as_str()) {
            return Err(config(format!(
                "mcp_servers.{id}: tool {:?} appears twice",
                tool.name
            )));
        }
    }
    match &server.transport {
        McpTransport::Stdio { command, args, env } => {
            if !command.is_absolute() {
                return Err(config(format!(
                    "mcp_servers.{id}: command must be an absolute path"
                )));
            }
            let nul = |s: &str| s.contains('\0');
            if command.to_str().is_none_or(nul) || args.iter().any(|a| nul(a)) {
                return Err(config(format!(
                    "mcp_servers.{id}: command and args must be UTF-8 without NUL"
                )));
            }
            for (name, value) in env {
                let ok_name = !name.is_empty()
                    && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
                    && !name.as_bytes()[0].is_ascii_digit();
                if !ok_name || nul(value) {
                    // The name is configuration, the value may be a secret: only the name.
                    return Err(config(format!(
                        "mcp_servers.{id}: env variable {:?} must be a name of letters, digits and '_' with a value without NUL",
                        name.chars().take(80).collect::<String>()
                    )));
                }
            }
        }
        McpTransport::Http { url } => {
            if let Err(why) = loopback_http(url) {
                return Err(config(format!("mcp_servers.{id}: url {why}")));
            }
        }
    }
    Ok(())
}

/// Checks that `url` is a plain `http://` URL whose host is this machine's loopback interface
/// (`127.0.0.1`, `[::1]`, `localhost`), with no user information, an optional port, and no
/// whitespace or control characters. The reason never quotes the URL.
pub fn loopback_http(url: &str) -> std::result::Result<(), &'static str> {
    if url.len() > MAX_MCP_URL {
        return Err("is too long");
    }
    if url.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err("must not contain spaces or control characters");
    }
    let Some(rest) = url.strip_prefix("http://") else {
        return Err("must start with http:// (loopback HTTP only)");
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    if authority.contains('@') {
        return Err("must not carry user information");
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        match v6.split_once(']') {
            Some((h, tail)) => (h, tail),
            None => return Err("has an unclosed IPv6 bracket"),
        }
    } else {
        let h = authority.split(':').next().unwrap_or(authority);
        (h, &authority[h.len()..])
    };
    if !matches!(host, "127.0.0.1" | "::1" | "localhost") {
        return Err("must name 127.0.0.1, [::1] or localhost");
    }
    if !port.is_empty() {
        let Some(digits) = port.strip_prefix(':') else {
            return Err("has text after its host");
        };
        match digits.parse::<u16>() {
            Ok(p) if p > 0 && digits.len() <= 5 => {}
            _ => return Err("has an invalid port"),
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "catalogue_tests.rs"]
mod tests;
