//! What the fronts' tables share, and the two small fronts: where an HTTP front listens
//! (`host`), which token file guards it, a token given in the environment, the `Host`/`Origin`
//! allowlist and the read limits; the `[ui]` table; and the supervisor's token settings.
//!
//! This module only reads and validates settings; it never binds, serves or creates a token
//! file (the binary does), and never logs a token. Every error is `CONFIG_INVALID` naming its
//! key, or the token's own error naming its variable.

use crate::{Result, invalid, refuse};
use legate_token::bearer::{SUPERVISOR_TOKEN_ENV, SUPERVISOR_TOKEN_FILE};
use legate_token::serve::ServeOptions;
use legate_token::{Allowlist, Token};
use serde::Deserialize;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The address HTTP fronts listen on unless configured otherwise.
pub const DEFAULT_HOST: &str = "127.0.0.1";

/// The configured listen address (`key` names it in errors), or [`DEFAULT_HOST`].
pub fn listen_host(configured: Option<String>, key: &str) -> Result<IpAddr> {
    match configured {
        Some(h) => h
            .parse()
            .map_err(|_| invalid!("{key} must be an IP address (got {h:?})")),
        None => Ok(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
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
        Some(p) if !p.is_absolute() => {
            refuse!("{key} must be an absolute path (got {})", p.display())
        }
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
            Some(0) => refuse!("{front}.{key} must be at least 1"),
            other => Ok(other),
        }
    };
    let header = positive(header_timeout_secs, "header_timeout_secs")?;
    let body = positive(body_timeout_secs, "body_timeout_secs")?;
    if max_connections == Some(0) {
        refuse!("{front}.max_connections must be at least 1");
    }
    Ok(ServeOptions {
        header_timeout: header.map_or(defaults.header_timeout, Duration::from_secs),
        body_timeout: body.map_or(defaults.body_timeout, Duration::from_secs),
        max_connections: max_connections.unwrap_or(defaults.max_connections),
        eviction_grace: defaults.eviction_grace,
    })
}

/// The certificate chain and private key (PEM files) a front serves TLS with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The chain, the server's certificate first.
    pub cert: PathBuf,
    /// The private key (not readable by every user).
    pub key: PathBuf,
}

/// `front.tls_cert_file` and `front.tls_key_file`: both (absolute paths) or neither, else
/// `CONFIG_INVALID` naming the key. The files are read when the server starts.
pub fn tls_files(
    front: &str,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
) -> Result<Option<TlsFiles>> {
    match (cert, key) {
        (None, None) => Ok(None),
        (Some(cert), Some(key)) => {
            for (name, path) in [("tls_cert_file", &cert), ("tls_key_file", &key)] {
                if !path.is_absolute() {
                    refuse!(
                        "{front}.{name} must be an absolute path (got {})",
                        path.display()
                    );
                }
            }
            Ok(Some(TlsFiles { cert, key }))
        }
        _ => refuse!(
            "{front}.tls_cert_file and {front}.tls_key_file go together: set both, or neither"
        ),
    }
}

/// `[ui]` as written in `legate.toml`. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiTable {
    host: Option<String>,
    port: Option<u16>,
    allowed_hosts: Option<Vec<String>>,
    allowed_origins: Option<Vec<String>>,
    header_timeout_secs: Option<u64>,
    body_timeout_secs: Option<u64>,
    max_connections: Option<usize>,
}

/// The dashboard's resolved settings.
#[derive(Debug, Clone)]
pub struct UiSettings {
    /// The address `serve --ui` binds (loopback by default).
    pub host: IpAddr,
    /// Its port.
    pub port: u16,
    /// The `Host` and `Origin` values it answers to.
    pub allowlist: legate_ui::Allowlist,
    /// Read timeouts and the connection cap.
    pub limits: legate_ui::ServeOptions,
}

/// Resolves `[ui]`.
pub fn resolve_ui(table: UiTable) -> Result<UiSettings> {
    Ok(UiSettings {
        host: listen_host(table.host, "ui.host")?,
        port: table.port.unwrap_or(legate_ui::DEFAULT_PORT),
        allowlist: allowlist("ui", table.allowed_hosts, table.allowed_origins, &[])?,
        limits: serve_limits(
            "ui",
            table.header_timeout_secs,
            table.body_timeout_secs,
            table.max_connections,
        )?,
    })
}

/// The supervisor's resolved settings.
#[derive(Debug, Clone)]
pub struct SupervisorSettings {
    /// Where the token is kept: `$LEGATE_HOME/supervisor-token`.
    pub token_file: PathBuf,
    /// A token given by `LEGATE_SUPERVISOR_TOKEN` instead of the file.
    pub token: Option<Token>,
}

/// Resolves the supervisor's settings from `home` and `LEGATE_SUPERVISOR_TOKEN`.
pub fn resolve_supervisor(
    home: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<SupervisorSettings> {
    Ok(SupervisorSettings {
        token_file: home.join(SUPERVISOR_TOKEN_FILE),
        token: env_token(env, SUPERVISOR_TOKEN_ENV)?,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The token in an environment variable that is not a valid token: the token's own error,
    /// its sentence naming the variable, and the value nowhere in the chain.
    #[test]
    fn a_bad_env_token_is_the_tokens_error_naming_the_variable() {
        let env = |_: &str| Some("short".to_string());
        let e = env_token(&env, "LEGATE_MCP_TOKEN").unwrap_err();
        let crate::Error::Invalid(legate) = &e else {
            panic!("{e}")
        };
        assert!(legate.message.starts_with("LEGATE_MCP_TOKEN: "), "{legate}");
        let mut cause: Option<&dyn std::error::Error> = Some(&e);
        while let Some(c) = cause {
            assert!(!c.to_string().contains("short"), "{c}");
            cause = c.source();
        }
    }
}
