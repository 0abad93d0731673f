//! What the binary's fronts share at the edge: starting the engine, the bearer token that
//! guards a front (configured, or made in its file on first use), binding its listener, and
//! waiting for a stop signal. Where a front listens and which token it is given are
//! `legate_config::fronts`'.
//!
//! Each front's module (`mcp`, `a2a`) keeps only what is its own. Nothing here decides
//! anything about tasks; it only wires configuration to the engine and the fronts.

use anyhow::{Context, Result};
pub use legate_config::fronts::allowlist;
use legate_engine::{Engine, EngineConfig};
use legate_token::{Token, TokenSource};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;

/// Starts the engine of a one-shot command with this build's backends and the rule-table
/// supervisor. It keeps no warm sessions (`[agents.NAME] warm`): its task would come before
/// one was ready, and the process ends after it. For the same reason it takes over no group
/// whose process died, but the one it waits on, starts or cancels: it would admit a node and
/// end, cutting it.
pub fn start_engine(config: &EngineConfig) -> Result<Engine> {
    let mut config = config.clone();
    config.warm.clear();
    config.take_over_groups = false;
    start_serving_engine(&config)
}

/// Starts the engine of a long-lived front (`serve`, `mcp`), with the warm sessions the
/// configuration asks for.
pub fn start_serving_engine(config: &EngineConfig) -> Result<Engine> {
    Ok(Engine::start(
        config.clone(),
        crate::backends(config.confinement),
        Arc::new(legate_supervisor::Rules),
    )?)
}

/// A listener bound at `host:port`, and the address it got (the port the system chose, for
/// port 0).
pub async fn listen(host: IpAddr, port: u16) -> Result<(tokio::net::TcpListener, SocketAddr)> {
    let addr = SocketAddr::new(host, port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("could not listen on {addr}"))?;
    let bound = listener.local_addr().context("no local address")?;
    Ok((listener, bound))
}

/// Says (on stdout and in the log) that `front` serves its bearer token over plain HTTP on
/// `host`, a non-loopback address, when it has no TLS (`[front] tls_cert_file` and
/// `tls_key_file`): every caller's token then crosses the network in clear.
pub fn warn_plain_beyond_loopback(front: &str, host: IpAddr, tls: bool) -> std::io::Result<()> {
    if tls || host.is_loopback() {
        return Ok(());
    }
    tracing::warn!(front, %host, "serving bearer tokens over plain HTTP beyond loopback");
    crate::out!(
        "warning: {front} listens on {host} over plain HTTP: its bearer token crosses the network in clear; set [{front}] tls_cert_file and tls_key_file, or put a TLS proxy in front"
    )
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
