//! `legate mcp` (MCP on stdio), the MCP half of `legate serve --mcp` (Streamable HTTP; the
//! command itself is `crate::serve`); the `[mcp]` table is `legate_config::mcp`'s.
//!
//! This module wires configuration, the engine and `legate-mcp` together and prints what a
//! person needs to register the server. It must never write anything but JSON-RPC to stdout
//! in stdio mode, and never log the token.

use crate::config::Config;
use crate::front;
use anyhow::Result;
use legate_engine::Engine;
use legate_mcp::{
    ApprovalsMcp, HttpOptions, LegateMcp, McpOptions, Profile, SUPERVISOR_PATH, Token, TokenSource,
};
use std::net::{IpAddr, SocketAddr};
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

/// Options of `legate mcp`.
#[derive(Debug, Default, clap::Args)]
pub struct StdioArgs {
    /// The tool profile (default `mcp.profile`): full, query, review, implementation, or
    /// supervisor (needs `LEGATE_SUPERVISOR_TOKEN`; see docs/supervision.md, section 4).
    #[arg(long)]
    pub profile: Option<String>,
    /// Do not declare the MCP Tasks extension: every tool is answered as a plain result, as
    /// for a client that does not declare it.
    #[arg(long)]
    pub no_tasks: bool,
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
        let server = ApprovalsMcp::new(legate_engine::ApprovalDesk::Records(records));
        tracing::info!(profile = %profile, "serving the supervisor profile on stdio");
        tokio::select! {
            r = legate_mcp::serve_stdio_with(server) => r?,
            _ = front::stop_signal() => return Ok(ExitCode::from(130)),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let engine = crate::front::start_serving_engine(&config.engine)?;
    let server = LegateMcp::new(
        engine.clone(),
        McpOptions {
            profile,
            tasks: !args.no_tasks,
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
    if !pending.is_empty() || engine.call_tasks().busy() {
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

/// Binds MCP's listener for `legate serve --mcp` at `host:port`, builds `/mcp` over `engine`
/// (declaring the Tasks extension when `tasks`) with `/metrics` beside it (`crate::metrics`,
/// behind the same allowlist and caller token), and prints the ready-to-paste client
/// configuration. The caller serves the router, over TLS with the identity returned when
/// `[mcp] tls_cert_file` and `tls_key_file` name one.
pub async fn open(
    config: &Config,
    host: IpAddr,
    port: u16,
    tasks: bool,
    engine: &Engine,
    shutdown: &CancellationToken,
) -> Result<(
    tokio::net::TcpListener,
    axum::Router,
    Option<legate_token::serve::ServerTls>,
)> {
    let settings = &config.mcp;
    if settings.profile.is_supervisor() {
        crate::fail!(
            ConfigInvalid,
            "mcp.profile names the caller's profile at /mcp; the supervisor profile is served at {SUPERVISOR_PATH} behind its own token"
        );
    }
    let (token, source) = front::acquire_token(settings.token.as_ref(), &settings.token_file)?;
    // After the caller's token exists, so that the two are checked apart.
    let (supervisor_token, supervisor_source) = crate::supervise::acquire(config)?;
    // The TLS files are read before anything listens: a bad one stops the start.
    let tls = settings
        .tls
        .as_ref()
        .map(|f| legate_token::serve::ServerTls::from_pem_files(&f.cert, &f.key))
        .transpose()?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let (listener, bound) = front::listen(host, port).await?;
    front::warn_plain_beyond_loopback("mcp", host, tls.is_some())?;
    let server = LegateMcp::new(
        engine.clone(),
        McpOptions {
            profile: settings.profile,
            tasks,
            ..McpOptions::default()
        },
    );
    let options = HttpOptions {
        token: token.clone(),
        allowlist: settings.allowlist.clone(),
        supervisor_token: Some(supervisor_token),
    };
    let supervisor = ApprovalsMcp::new(legate_engine::ApprovalDesk::Engine(engine.clone()));
    let metrics = legate_mcp::http::Beside::new(
        crate::metrics::routes(engine.clone()),
        &[crate::metrics::PATH],
    );
    let router = legate_mcp::http::router_beside(
        server,
        Some(supervisor),
        metrics,
        options,
        shutdown.clone(),
    );
    print_client_config(config, scheme, bound, &token, source)?;
    print_supervisor(config, scheme, bound, supervisor_source)?;
    tracing::info!(address = %bound, profile = %settings.profile, tls = tls.is_some(), "serving MCP over HTTP");
    Ok((listener, router, tls))
}

/// Where the supervisor endpoint is and where its token is kept; never the token itself (who
/// started the server may be the caller).
fn print_supervisor(
    config: &Config,
    scheme: &str,
    bound: SocketAddr,
    source: TokenSource,
) -> std::io::Result<()> {
    let whence = match source {
        TokenSource::Created => format!("new, saved to {}", config.supervisor.token_file.display()),
        TokenSource::File => format!("in {}", config.supervisor.token_file.display()),
        TokenSource::Configured => "from LEGATE_SUPERVISOR_TOKEN".to_string(),
    };
    crate::out!("Legate supervisor endpoint · {scheme}://{bound}{SUPERVISOR_PATH}")?;
    crate::out!("supervisor token: {whence} (not printed; the caller's token is refused there)")?;
    crate::out!()?;
    use std::io::Write as _;
    std::io::stdout().flush()
}

fn print_client_config(
    config: &Config,
    scheme: &str,
    bound: SocketAddr,
    token: &Token,
    source: TokenSource,
) -> std::io::Result<()> {
    let url = format!("{scheme}://{bound}/mcp");
    let secret = token.expose();
    let whence = match source {
        TokenSource::Created => format!("new, saved to {}", config.mcp.token_file.display()),
        TokenSource::File => format!("from {}", config.mcp.token_file.display()),
        TokenSource::Configured => "from LEGATE_MCP_TOKEN".to_string(),
    };
    crate::out!("Legate MCP server · profile {} · {url}", config.mcp.profile)?;
    crate::out!("token: {whence}")?;
    crate::out!(
        "metrics: {scheme}://{bound}{} (Prometheus text, same token)",
        crate::metrics::PATH
    )?;
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
