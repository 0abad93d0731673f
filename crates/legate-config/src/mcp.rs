//! The `[mcp]` table of `legate.toml` and its environment overrides (`LEGATE_MCP_PROFILE`,
//! `LEGATE_MCP_TOKEN`): the MCP front's tool profile, address, token file, allowlist and limits.
//!
//! This module only reads and validates these settings; serving MCP is the binary's and
//! `legate-mcp`'s. It never logs the token.

use crate::Result;
use crate::fronts as front;
use legate_mcp::{Profile, Token};
use legate_token::Allowlist;
use serde::Deserialize;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// The port `legate serve --mcp` listens on by default.
pub const DEFAULT_PORT: u16 = 8731;
/// The token file, under `$LEGATE_HOME`.
pub const TOKEN_FILE: &str = "mcp-token";

/// `[mcp]` as written in `legate.toml`. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpTable {
    profile: Option<String>,
    host: Option<String>,
    port: Option<u16>,
    token_file: Option<PathBuf>,
    allowed_hosts: Option<Vec<String>>,
    allowed_origins: Option<Vec<String>>,
    header_timeout_secs: Option<u64>,
    body_timeout_secs: Option<u64>,
    max_connections: Option<usize>,
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
}

/// The MCP front's resolved settings.
#[derive(Debug, Clone)]
pub struct McpSettings {
    /// The tool profile.
    pub profile: Profile,
    /// The address `serve --mcp` binds.
    pub host: IpAddr,
    /// The port it binds.
    pub port: u16,
    /// Where the token is kept.
    pub token_file: PathBuf,
    /// A token given by `LEGATE_MCP_TOKEN` instead of the file.
    pub token: Option<Token>,
    /// The `Host` and `Origin` values the endpoint answers to.
    pub allowlist: Allowlist,
    /// Read timeouts and the connection cap of `serve --mcp`.
    pub limits: legate_mcp::ServeOptions,
    /// Serve HTTPS with these files instead of plain HTTP (read when the server starts).
    pub tls: Option<front::TlsFiles>,
}

/// Resolves `[mcp]` and its environment overrides (`LEGATE_MCP_PROFILE`, `LEGATE_MCP_TOKEN`).
pub fn resolve(
    table: McpTable,
    home: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<McpSettings> {
    let profile = match env("LEGATE_MCP_PROFILE")
        .map(|v| (v, "LEGATE_MCP_PROFILE"))
        .or(table.profile.map(|v| (v, "mcp.profile")))
    {
        Some((value, key)) => Profile::parse(value.trim()).map_err(|mut e| {
            // The same error, naming where the value came from; its cause kept.
            e.message = e.message.replace("mcp.profile", key);
            e
        })?,
        None => Profile::default(),
    };
    let host = front::listen_host(table.host, "mcp.host")?;
    let token_file = front::token_file(table.token_file, "mcp.token_file", home, TOKEN_FILE)?;
    let token = front::env_token(env, "LEGATE_MCP_TOKEN")?;
    let allowlist = front::allowlist("mcp", table.allowed_hosts, table.allowed_origins, &[])?;
    let limits = front::serve_limits(
        "mcp",
        table.header_timeout_secs,
        table.body_timeout_secs,
        table.max_connections,
    )?;
    let tls = front::tls_files("mcp", table.tls_cert_file, table.tls_key_file)?;
    Ok(McpSettings {
        profile,
        host,
        port: table.port.unwrap_or(DEFAULT_PORT),
        token_file,
        token,
        allowlist,
        limits,
        tls,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn resolve_text(text: &str, env: &[(&str, &str)]) -> Result<McpSettings> {
        #[derive(Deserialize)]
        struct Wrapper {
            #[serde(default)]
            mcp: McpTable,
        }
        let w: Wrapper = crate::config::parse(text)?;
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(w.mcp, Path::new("/tmp/lh"), &|k| env.get(k).cloned())
    }

    #[test]
    fn defaults_are_loopback_full_and_a_token_file_in_home() {
        let s = resolve_text("", &[]).unwrap();
        assert_eq!(s.profile, Profile::Full);
        assert_eq!(s.host.to_string(), "127.0.0.1");
        assert_eq!(s.port, DEFAULT_PORT);
        assert_eq!(s.token_file, Path::new("/tmp/lh/mcp-token"));
        assert!(s.token.is_none());
        assert_eq!(s.allowlist.hosts(), ["localhost", "127.0.0.1", "::1"]);
        assert_eq!(s.limits, legate_mcp::ServeOptions::default());
        let s = resolve_text(
            "[mcp]\nheader_timeout_secs = 3\nbody_timeout_secs = 4\nmax_connections = 5\n",
            &[],
        )
        .unwrap();
        assert_eq!(s.limits.header_timeout, std::time::Duration::from_secs(3));
        assert_eq!(s.limits.body_timeout, std::time::Duration::from_secs(4));
        assert_eq!(s.limits.max_connections, 5);
    }

    #[test]
    fn the_table_and_the_environment_are_read_and_checked() {
        let s = resolve_text(
            "[mcp]\nprofile = \"query\"\nport = 9000\nallowed_hosts = [\"legate.lan\"]\n",
            &[("LEGATE_MCP_TOKEN", &"k".repeat(40))],
        )
        .unwrap();
        assert_eq!(s.profile, Profile::Query);
        assert_eq!(s.port, 9000);
        assert_eq!(s.allowlist.hosts(), ["legate.lan"]);
        assert!(s.token.unwrap().matches(&"k".repeat(40)));
        let s = resolve_text(
            "[mcp]\nprofile = \"query\"\n",
            &[("LEGATE_MCP_PROFILE", "review")],
        )
        .unwrap();
        assert_eq!(s.profile, Profile::Review);
        for (text, env, key) in [
            ("[mcp]\nprofile = \"admin\"\n", vec![], "mcp.profile"),
            (
                "",
                vec![("LEGATE_MCP_PROFILE", "admin")],
                "LEGATE_MCP_PROFILE",
            ),
            ("[mcp]\nhost = \"localhost\"\n", vec![], "mcp.host"),
            ("[mcp]\ntoken_file = \"rel\"\n", vec![], "mcp.token_file"),
            (
                "[mcp]\nallowed_origins = [\"localhost\"]\n",
                vec![],
                "mcp.allowed_origins",
            ),
            ("", vec![("LEGATE_MCP_TOKEN", "short")], "LEGATE_MCP_TOKEN"),
            ("[mcp]\nprofil = \"full\"\n", vec![], "profil"),
            (
                "[mcp]\nheader_timeout_secs = 0\n",
                vec![],
                "mcp.header_timeout_secs",
            ),
            (
                "[mcp]\nmax_connections = 0\n",
                vec![],
                "mcp.max_connections",
            ),
        ] {
            let e = resolve_text(text, &env).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
