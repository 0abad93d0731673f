//! The A2A half of `legate serve` (the command itself is `crate::serve`); the `[a2a]` table
//! is `legate_config::a2a`'s.
//!
//! This module wires configuration, the engine and `legate-a2a` together and prints what a
//! person needs to call the server. It never logs the token.

use crate::config::Config;
use crate::front;
use anyhow::Result;
use legate_a2a::{A2aOptions, TokenSource};
use std::net::{IpAddr, SocketAddr};

/// What [`open`] made: the listener, the router, and whether any agent is served.
#[derive(Debug)]
pub struct Opened {
    /// The bound listener.
    pub listener: tokio::net::TcpListener,
    /// Every served agent's routes, behind the allowlist and the token.
    pub router: axum::Router,
    /// Whether at least one agent started (otherwise there is nothing to serve).
    pub any_served: bool,
    /// The TLS identity to serve with (`[a2a] tls_cert_file`, `tls_key_file`), if any.
    pub tls: Option<legate_token::serve::ServerTls>,
}

/// Binds A2A's listener at `host:port`, starts every configured agent once to build its card,
/// adds `/metrics` (`crate::metrics`), puts the routes behind the `Host`/`Origin` allowlist,
/// and prints what a caller needs. The caller serves the router.
pub async fn open(
    config: &Config,
    host: IpAddr,
    port: u16,
    public_url: Option<String>,
    engine: &legate_engine::Engine,
) -> Result<Opened> {
    let settings = &config.a2a;
    let (token, source) = if settings.auth {
        let (t, s) = front::acquire_token(settings.token.as_ref(), &settings.token_file)?;
        (Some(t), Some(s))
    } else {
        (None, None)
    };
    // The caller's token must not be the supervisor's, whichever front is served:
    // `CONFIG_INVALID` before anything listens (the supervisor could delegate otherwise).
    // `/metrics` is behind the caller's token and refuses the supervisor's by name.
    let metrics_gate = match &token {
        Some(t) => {
            let (supervisor, _) = crate::supervise::acquire(config)?;
            Some(
                legate_token::Gate::new(legate_token::Audience::Caller, t.clone())
                    .refusing(legate_token::Audience::Supervisor, supervisor),
            )
        }
        None => None,
    };
    check_bind(host, token.is_some(), settings.allow_remote_without_token)?;
    let public_url = match public_url.or(settings.public_url.clone()) {
        Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => {
            crate::fail!(
                InvalidInput,
                "--public-url must start with http:// or https:// (got {u:?})"
            )
        }
        other => other.map(|u| u.trim_end_matches('/').to_string()),
    };
    // The TLS files are read before anything listens: a bad one stops the start.
    let tls = settings
        .tls
        .as_ref()
        .map(|f| legate_token::serve::ServerTls::from_pem_files(&f.cert, &f.key))
        .transpose()?;
    let (listener, bound) = front::listen(host, port).await?;
    if token.is_some() {
        front::warn_plain_beyond_loopback("a2a", host, tls.is_some())?;
    }
    let allowlist = front::allowlist(
        "a2a",
        settings.allowed_hosts.clone(),
        settings.allowed_origins.clone(),
        &extra_hosts(bound, public_url.as_deref()),
    )?;
    let options = A2aOptions {
        token: token.clone(),
        public_url: public_url.unwrap_or_else(|| {
            let scheme = if tls.is_some() { "https" } else { "http" };
            format!("{scheme}://{bound}")
        }),
        max_body_bytes: settings.max_body_bytes,
        probe_limit: engine.config().fronts.serve_probe_timeout,
        copy_roots: settings.copy_roots.clone(),
        agents: settings.agents.clone(),
    };
    let (router, report) = legate_a2a::boot(engine, &options).await;
    let router = router.merge(crate::metrics::router(engine.clone(), metrics_gate));
    crate::out!("Legate A2A server · {}", options.public_url)?;
    for (name, card) in &report.served {
        crate::out!(
            "  {name:<12} {}/agents/{name}/.well-known/agent-card.json  ({} {})",
            options.public_url,
            card.name,
            card.version
        )?;
    }
    for (name, e) in &report.failed {
        crate::out!(
            "  {name:<12} not served: {}: {}",
            e.code.as_str(),
            e.message
        )?;
    }
    if report.default_at_root {
        crate::out!(
            "default agent {}: {}/.well-known/agent-card.json",
            config.engine.default_agent,
            options.public_url
        )?;
    }
    match (&token, source) {
        (Some(t), Some(source)) => {
            let whence = match source {
                TokenSource::Created => format!("new, saved to {}", settings.token_file.display()),
                TokenSource::File => format!("from {}", settings.token_file.display()),
                TokenSource::Configured => "from LEGATE_A2A_TOKEN".to_string(),
            };
            crate::out!(
                "token ({whence}): send Authorization: Bearer {}",
                t.expose()
            )?;
        }
        _ => crate::out!("no authentication (a2a.auth = \"none\")")?,
    }
    crate::out!(
        "metrics: {}{} (Prometheus text, same token)",
        options.public_url,
        crate::metrics::PATH
    )?;
    crate::out!(
        "answers to Host: {} (a2a.allowed_hosts)",
        allowlist.hosts().join(", ")
    )?;
    Ok(Opened {
        listener,
        router: legate_token::guard::allowlisted(router, allowlist),
        any_served: !report.served.is_empty(),
        tls,
    })
}

/// Host values a front answers to besides the configured or loopback ones: the bound address
/// when it is a specific one, and the public URL's authority.
fn extra_hosts(bound: SocketAddr, public_url: Option<&str>) -> Vec<String> {
    let mut extra = Vec::new();
    if !bound.ip().is_unspecified() && !bound.ip().is_loopback() {
        extra.push(bound.ip().to_string());
    }
    if let Some(a) = public_url.and_then(legate_token::allowlist::url_authority) {
        extra.push(a);
    }
    extra
}

/// A non-loopback bind without a token refuses to start unless explicitly allowed.
fn check_bind(host: IpAddr, token: bool, allow_remote_without_token: bool) -> Result<()> {
    if !token && !host.is_loopback() && !allow_remote_without_token {
        crate::fail!(
            ConfigInvalid,
            "refusing to serve A2A on {host} without a token; set a2a.auth = \"token\", or a2a.allow_remote_without_token = true if you really mean it"
        );
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_remote_bind_without_a_token_is_refused_unless_allowed() {
        let remote: IpAddr = "0.0.0.0".parse().unwrap();
        let local: IpAddr = "127.0.0.1".parse().unwrap();
        let e = check_bind(remote, false, false).unwrap_err().to_string();
        assert!(e.starts_with("CONFIG_INVALID"), "{e}");
        check_bind(remote, false, true).unwrap();
        check_bind(remote, true, false).unwrap();
        check_bind(local, false, false).unwrap();
    }
}
