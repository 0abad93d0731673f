//! `legate mcp` (MCP on stdio), the MCP half of `legate serve --mcp` (Streamable HTTP; the
//! command itself is `crate::serve`), and the `[mcp]` table of `legate.toml`.
//!
//! This module wires configuration, the engine and `legate-mcp` together and prints what a
//! person needs to register the server. It must never write anything but JSON-RPC to stdout
//! in stdio mode, and never log the token.

use crate::config::Config;
use crate::front::{self, start_engine};
use anyhow::{Context, Result, bail};
use legate_engine::Engine;
use legate_mcp::{
    HttpOptions, LegateMcp, McpOptions, Profile, SUPERVISOR_PATH, SupervisorMcp, Token, TokenSource,
};
use legate_token::Allowlist;
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

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
    let allowlist =
        crate::front::allowlist("mcp", table.allowed_hosts, table.allowed_origins, &[])?;
    let limits = front::serve_limits(
        "mcp",
        table.header_timeout_secs,
        table.body_timeout_secs,
        table.max_connections,
    )?;
    Ok(McpSettings {
        profile,
        host,
        port: table.port.unwrap_or(DEFAULT_PORT),
        token_file,
        token,
        allowlist,
        limits,
    })
}

/// Options of `legate mcp`.
#[derive(Debug, Default, clap::Args)]
pub struct StdioArgs {
    /// The tool profile (default `mcp.profile`): full, query, review, implementation, or
    /// supervisor (needs `LEGATE_SUPERVISOR_TOKEN`; see docs/supervision.md, section 4).
    #[arg(long)]
    pub profile: Option<String>,
}

/// `legate mcp`: MCP on stdin/stdout until the client leaves, then the tasks it started run to
/// their end before the process exits (Ctrl-C or SIGTERM stops them instead).
///
/// With the `supervisor` profile the client is whoever spawned this process, which may well
/// be the caller: it is served only when `LEGATE_SUPERVISOR_TOKEN` holds the supervisor token
/// on file, and it answers through the store (`Records`), starting no engine and no agent.
pub async fn stdio(config: Config, args: StdioArgs) -> Result<ExitCode> {
    let profile = match args.profile.as_deref() {
        Some(p) => Profile::parse(p.trim()).map_err(|mut e| {
            e.message = e.message.replace("mcp.profile", "--profile");
            e
        })?,
        None => config.mcp.profile,
    };
    if profile.is_supervisor() {
        crate::supervise::require_token(&config, "legate mcp --profile supervisor")?;
        let records = legate_engine::Records::open_or_empty(&config.engine.paths)?;
        let server = SupervisorMcp::new(legate_engine::ApprovalDesk::Records(records));
        tracing::info!(profile = %profile, "serving the supervisor profile on stdio");
        tokio::select! {
            r = legate_mcp::serve_stdio_with(server) => r?,
            _ = front::stop_signal() => return Ok(ExitCode::from(130)),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let engine = start_engine(&config.engine)?;
    let server = LegateMcp::new(
        engine.clone(),
        McpOptions {
            profile,
            ..McpOptions::default()
        },
    );
    tracing::info!(profile = %profile, "serving MCP on stdio");
    tokio::select! {
        r = legate_mcp::serve_stdio(server.clone()) => r?,
        _ = front::stop_signal() => {
            engine.shutdown().await;
            return Ok(ExitCode::from(130));
        }
    }
    let pending = server.unfinished();
    if !pending.is_empty() {
        tracing::warn!(
            tasks = pending.len(),
            "the MCP client left; finishing its tasks before exiting (Ctrl-C or SIGTERM stops them)"
        );
        tokio::select! {
            _ = legate_mcp::finish(&server) => {}
            _ = front::stop_signal() => {}
        }
    }
    engine.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

/// Binds MCP's listener for `legate serve --mcp` at `host:port`, builds `/mcp` over `engine`,
/// and prints the ready-to-paste client configuration. The caller serves the router.
pub async fn open(
    config: &Config,
    host: IpAddr,
    port: u16,
    engine: &Engine,
    shutdown: &CancellationToken,
) -> Result<(tokio::net::TcpListener, axum::Router)> {
    let settings = &config.mcp;
    if settings.profile.is_supervisor() {
        bail!(
            "CONFIG_INVALID: mcp.profile names the caller's profile at /mcp; the supervisor profile is served at {SUPERVISOR_PATH} behind its own token"
        );
    }
    let (token, source) = front::acquire_token(settings.token.as_ref(), &settings.token_file)?;
    // After the caller's token exists, so that the two are checked apart.
    let (supervisor_token, supervisor_source) = crate::supervise::acquire(config)?;
    let addr = SocketAddr::new(host, port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("could not listen on {addr}"))?;
    let bound = listener.local_addr().context("no local address")?;
    let server = LegateMcp::new(
        engine.clone(),
        McpOptions {
            profile: settings.profile,
            ..McpOptions::default()
        },
    );
    let options = HttpOptions {
        token: token.clone(),
        allowlist: settings.allowlist.clone(),
        supervisor_token: Some(supervisor_token),
    };
    let supervisor = SupervisorMcp::new(legate_engine::ApprovalDesk::Engine(engine.clone()));
    let router = legate_mcp::http::router_with_supervisor(
        server,
        Some(supervisor),
        options,
        shutdown.clone(),
    );
    print_client_config(config, bound, &token, source)?;
    print_supervisor(config, bound, supervisor_source)?;
    tracing::info!(address = %bound, profile = %settings.profile, "serving MCP over HTTP");
    Ok((listener, router))
}

/// Where the supervisor endpoint is and where its token is kept; never the token itself (who
/// started the server may be the caller).
fn print_supervisor(
    config: &Config,
    bound: SocketAddr,
    source: TokenSource,
) -> std::io::Result<()> {
    let whence = match source {
        TokenSource::Created => format!("new, saved to {}", config.supervisor.token_file.display()),
        TokenSource::File => format!("in {}", config.supervisor.token_file.display()),
        TokenSource::Configured => "from LEGATE_SUPERVISOR_TOKEN".to_string(),
    };
    crate::out!("Legate supervisor endpoint · http://{bound}{SUPERVISOR_PATH}")?;
    crate::out!("supervisor token: {whence} (not printed; the caller's token is refused there)")?;
    crate::out!()?;
    use std::io::Write as _;
    std::io::stdout().flush()
}

fn print_client_config(
    config: &Config,
    bound: SocketAddr,
    token: &Token,
    source: TokenSource,
) -> std::io::Result<()> {
    let url = format!("http://{bound}/mcp");
    let secret = token.expose();
    let whence = match source {
        TokenSource::Created => format!("new, saved to {}", config.mcp.token_file.display()),
        TokenSource::File => format!("from {}", config.mcp.token_file.display()),
        TokenSource::Configured => "from LEGATE_MCP_TOKEN".to_string(),
    };
    crate::out!("Legate MCP server · profile {} · {url}", config.mcp.profile)?;
    crate::out!("token: {whence}")?;
    crate::out!()?;
    crate::out!("Claude Code:")?;
    crate::out!(
        "  claude mcp add --transport http legate {url} --header \"Authorization: Bearer {secret}\""
    )?;
    crate::out!()?;
    crate::out!(
        "Codex (~/.codex/config.toml; export LEGATE_MCP_TOKEN={secret} where Codex runs):"
    )?;
    crate::out!("  [mcp_servers.legate]")?;
    crate::out!("  url = \"{url}\"")?;
    crate::out!("  bearer_token_env_var = \"LEGATE_MCP_TOKEN\"")?;
    crate::out!("  tool_timeout_sec = 90")?;
    crate::out!()?;
    crate::out!("Any MCP client (JSON):")?;
    crate::out!(
        "  {{\"mcpServers\": {{\"legate\": {{\"type\": \"http\", \"url\": \"{url}\", \"headers\": {{\"Authorization\": \"Bearer {secret}\"}}}}}}}}"
    )?;
    crate::out!()?;
    use std::io::Write as _;
    std::io::stdout().flush()
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
        let w: Wrapper = toml::from_str(text)?;
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
