//! What the binary's fronts share at the edge: starting the engine, resolving where an HTTP
//! front listens and which bearer token guards it, and waiting for a stop signal.
//!
//! Each front's module (`mcp`, `a2a`) keeps only what is its own. Nothing here decides
//! anything about tasks; it only wires configuration to the engine and the fronts.

use anyhow::{Context, Result, bail};
use legate_engine::{Engine, EngineConfig};
use legate_token::serve::ServeOptions;
use legate_token::{Allowlist, Token, TokenSource};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// The address HTTP fronts listen on unless configured otherwise.
pub const DEFAULT_HOST: &str = "127.0.0.1";

/// Starts the engine with this build's backends and the rule-table supervisor.
pub fn start_engine(config: &EngineConfig) -> Result<Engine> {
    Ok(Engine::start(
        config.clone(),
        crate::backends(config.confinement),
        Arc::new(legate_supervisor::Rules),
    )?)
}

/// The configured listen address (`key` names it in errors), or [`DEFAULT_HOST`].
pub fn listen_host(configured: Option<String>, key: &str) -> Result<IpAddr> {
    match configured {
        Some(h) => h.parse().map_err(|_| {
            anyhow::anyhow!("CONFIG_INVALID: {key} must be an IP address (got {h:?})")
        }),
        None => DEFAULT_HOST
            .parse()
            .context("the default host is not an address"),
    }
}

/// The configured token file (absolute; `key` names it in errors), or `home/default_name`.
pub fn token_file(
    configured: Option<PathBuf>,
    key: &str,
    home: &Path,
    default_name: &str,
) -> Result<PathBuf> {
    match configured {
        Some(p) if !p.is_absolute() => bail!(
            "CONFIG_INVALID: {key} must be an absolute path (got {})",
            p.display()
        ),
        Some(p) => Ok(p),
        None => Ok(home.join(default_name)),
    }
}

/// The token set in the environment variable `var`, validated, if any.
pub fn env_token(env: &dyn Fn(&str) -> Option<String>, var: &str) -> Result<Option<Token>> {
    env(var)
        .map(|t| Token::configured(&t))
        .transpose()
        .map_err(|mut e| {
            // The same error, its sentence naming the variable; its cause kept.
            e.message = format!("{var}: {}", e.message);
            e.into()
        })
}

/// The configured token, or the one in `file` (made there, mode 0600, on first use).
pub fn acquire_token(configured: Option<&Token>, file: &Path) -> Result<(Token, TokenSource)> {
    if let Some(t) = configured {
        return Ok((t.clone(), TokenSource::Configured));
    }
    if let Some(dir) = file.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("could not create {}", dir.display()))?;
    }
    Ok(Token::load_or_create(file)?)
}

/// A front's `Host`/`Origin` allowlist: the configured lists (`front.allowed_hosts`,
/// `front.allowed_origins`) or loopback, plus `extra_hosts` (the authority of an advertised
/// public URL, say). A bad entry is `CONFIG_INVALID` naming its key.
pub fn allowlist(
    front: &'static str,
    hosts: Option<Vec<String>>,
    origins: Option<Vec<String>>,
    extra_hosts: &[String],
) -> Result<Allowlist> {
    let loopback = Allowlist::loopback(front);
    let mut hosts = hosts.unwrap_or_else(|| loopback.hosts().to_vec());
    for h in extra_hosts {
        if !hosts.contains(h) {
            hosts.push(h.clone());
        }
    }
    let origins = origins.unwrap_or_else(|| loopback.origins().to_vec());
    Ok(Allowlist::new(front, hosts, origins)?)
}

/// A front's read timeouts and connection cap: `front.header_timeout_secs`,
/// `front.body_timeout_secs` and `front.max_connections` when set (each at least 1, else
/// `CONFIG_INVALID` naming its key), the defaults of `legate_token::serve` otherwise.
pub fn serve_limits(
    front: &str,
    header_timeout_secs: Option<u64>,
    body_timeout_secs: Option<u64>,
    max_connections: Option<usize>,
) -> Result<ServeOptions> {
    let defaults = ServeOptions::default();
    let positive = |value: Option<u64>, key: &str| -> Result<Option<u64>> {
        match value {
            Some(0) => bail!("CONFIG_INVALID: {front}.{key} must be at least 1"),
            other => Ok(other),
        }
    };
    let header = positive(header_timeout_secs, "header_timeout_secs")?;
    let body = positive(body_timeout_secs, "body_timeout_secs")?;
    if max_connections == Some(0) {
        bail!("CONFIG_INVALID: {front}.max_connections must be at least 1");
    }
    Ok(ServeOptions {
        header_timeout: header.map_or(defaults.header_timeout, Duration::from_secs),
        body_timeout: body.map_or(defaults.body_timeout, Duration::from_secs),
        max_connections: max_connections.unwrap_or(defaults.max_connections),
        eviction_grace: defaults.eviction_grace,
    })
}

/// Resolves when the process is asked to stop (Ctrl-C or SIGTERM). The handlers are installed
/// when this is called, not when the future is first polled, so a server that announced itself
/// after calling it is already listening for the signal.
pub fn stop_signal() -> impl std::future::Future<Output = ()> {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    async move {
        let wait = |s: std::io::Result<tokio::signal::unix::Signal>| async move {
            match s {
                Ok(mut s) => {
                    s.recv().await;
                }
                Err(_) => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = wait(int) => {}
            _ = wait(term) => {}
        }
    }
}
