//! The `[a2a]` table of `legate.toml` and its environment override (`LEGATE_A2A_TOKEN`): the
//! A2A front's address, public URL, authentication, body and transfer bounds, allowlist, copy
//! roots and limits.
//!
//! This module only reads and validates these settings; serving A2A is the binary's and
//! `legate-a2a`'s. It never logs the token.

use crate::fronts as front;
use crate::{Error, Result};
use legate_a2a::Token;
use serde::Deserialize;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// The port the A2A front listens on by default.
pub const DEFAULT_PORT: u16 = 8732;
/// The token file, under `$LEGATE_HOME`.
pub const TOKEN_FILE: &str = "a2a-token";
/// The largest `a2a.max_transfer_bytes` accepted: 1 GiB.
pub const MAX_TRANSFER_BYTES: u64 = 1 << 30;

/// `[a2a]` as written in `legate.toml`. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct A2aTable {
    host: Option<String>,
    port: Option<u16>,
    public_url: Option<String>,
    /// `token` (default) or `none`.
    auth: Option<String>,
    token_file: Option<PathBuf>,
    allow_remote_without_token: Option<bool>,
    max_body_bytes: Option<usize>,
    max_transfer_bytes: Option<u64>,
    allowed_hosts: Option<Vec<String>>,
    allowed_origins: Option<Vec<String>>,
    copy_roots: Option<Vec<PathBuf>>,
    header_timeout_secs: Option<u64>,
    body_timeout_secs: Option<u64>,
    max_connections: Option<usize>,
    tls_cert_file: Option<PathBuf>,
    tls_key_file: Option<PathBuf>,
}

/// The A2A front's resolved settings.
#[derive(Debug, Clone)]
pub struct A2aSettings {
    /// The address it binds.
    pub host: IpAddr,
    /// The port it binds.
    pub port: u16,
    /// The URL advertised in cards; `None` for `http://<bound address>`.
    pub public_url: Option<String>,
    /// Whether a bearer token is required.
    pub auth: bool,
    /// Where the token is kept.
    pub token_file: PathBuf,
    /// A token given by `LEGATE_A2A_TOKEN` instead of the file.
    pub token: Option<Token>,
    /// Whether a non-loopback bind without a token may start.
    pub allow_remote_without_token: bool,
    /// The largest request body.
    pub max_body_bytes: usize,
    /// The most bytes of files a message may carry under the copy-workspace extension
    /// (`COPY_TOO_LARGE` past it).
    pub max_transfer_bytes: u64,
    /// Configured `Host` values (loopback when `None`; the bound address and the public URL's
    /// host are added at start).
    pub allowed_hosts: Option<Vec<String>>,
    /// Configured `Origin` values (loopback when `None`).
    pub allowed_origins: Option<Vec<String>>,
    /// Directories (canonical) under which a message may ask for a copy workspace; empty
    /// refuses copies over A2A.
    pub copy_roots: Vec<PathBuf>,
    /// The agents served: those the configuration names in `[agents.*]`, the default agent,
    /// and the built-in `revisor`. Presets nobody named are neither probed nor listed.
    pub agents: Vec<String>,
    /// Read timeouts and the connection cap.
    pub limits: legate_a2a::ServeOptions,
    /// Serve HTTPS with these files instead of plain HTTP (read when the server starts).
    pub tls: Option<front::TlsFiles>,
}

/// Resolves `[a2a]` and its environment override (`LEGATE_A2A_TOKEN`).
pub fn resolve(
    table: A2aTable,
    home: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<A2aSettings> {
    let host = front::listen_host(table.host, "a2a.host")?;
    let public_url = match table.public_url {
        Some(u) if !(u.starts_with("http://") || u.starts_with("https://")) => {
            return Err(Error::invalid(format!(
                "a2a.public_url must start with http:// or https:// (got {u:?})"
            )));
        }
        Some(u) => Some(u.trim_end_matches('/').to_string()),
        None => None,
    };
    let auth = match table.auth.as_deref() {
        None | Some("token") => true,
        Some("none") => false,
        Some(other) => {
            return Err(Error::invalid(format!(
                "a2a.auth must be \"token\" or \"none\" (got {other:?})"
            )));
        }
    };
    let token_file = front::token_file(table.token_file, "a2a.token_file", home, TOKEN_FILE)?;
    let token = front::env_token(env, "LEGATE_A2A_TOKEN")?;
    let max_transfer_bytes = table
        .max_transfer_bytes
        .unwrap_or(legate_core::remote::DEFAULT_MAX_TRANSFER_BYTES);
    if !(1..=MAX_TRANSFER_BYTES).contains(&max_transfer_bytes) {
        return Err(Error::invalid(format!(
            "a2a.max_transfer_bytes must be between 1 and {MAX_TRANSFER_BYTES}"
        )));
    }
    // By default a body holds a whole transfer: its files in base64 (4 bytes for 3), plus
    // the prompt and the JSON around them.
    let max_body_bytes = table.max_body_bytes.unwrap_or_else(|| {
        let transfer = max_transfer_bytes.div_ceil(3).saturating_mul(4);
        usize::try_from(transfer)
            .unwrap_or(usize::MAX)
            .saturating_add(legate_a2a::DEFAULT_MAX_BODY_BYTES)
    });
    if max_body_bytes < 1024 {
        return Err(Error::invalid("a2a.max_body_bytes must be at least 1024"));
    }
    // Checked now, so a typo fails at start-up with its key.
    front::allowlist(
        "a2a",
        table.allowed_hosts.clone(),
        table.allowed_origins.clone(),
        &[],
    )?;
    let limits = front::serve_limits(
        "a2a",
        table.header_timeout_secs,
        table.body_timeout_secs,
        table.max_connections,
    )?;
    let tls = front::tls_files("a2a", table.tls_cert_file, table.tls_key_file)?;
    let mut copy_roots = Vec::new();
    for root in table.copy_roots.unwrap_or_default() {
        if !root.is_absolute() {
            return Err(Error::invalid(format!(
                "a2a.copy_roots entries must be absolute paths (got {})",
                root.display()
            )));
        }
        let resolved = root.canonicalize().map_err(|e| {
            Error::invalid_because(
                format!("a2a.copy_roots entry {} cannot be opened", root.display()),
                e,
            )
        })?;
        if !resolved.is_dir() {
            return Err(Error::invalid(format!(
                "a2a.copy_roots entry {} is not a directory",
                root.display()
            )));
        }
        copy_roots.push(resolved);
    }
    Ok(A2aSettings {
        host,
        port: table.port.unwrap_or(DEFAULT_PORT),
        public_url,
        auth,
        token_file,
        token,
        allow_remote_without_token: table.allow_remote_without_token.unwrap_or(false),
        max_body_bytes,
        max_transfer_bytes,
        allowed_hosts: table.allowed_hosts,
        allowed_origins: table.allowed_origins,
        copy_roots,
        // Filled by `config::load_in` once the agents are known.
        agents: Vec::new(),
        limits,
        tls,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn resolve_text(text: &str, env: &[(&str, &str)]) -> Result<A2aSettings> {
        #[derive(Deserialize)]
        struct Wrapper {
            #[serde(default)]
            a2a: A2aTable,
        }
        let w: Wrapper = crate::config::parse(text)?;
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(w.a2a, Path::new("/tmp/lh"), &|k| env.get(k).cloned())
    }

    #[test]
    fn tls_takes_both_files_as_absolute_paths() {
        let s = resolve_text(
            "[a2a]\ntls_cert_file = \"/etc/legate/cert.pem\"\ntls_key_file = \"/etc/legate/key.pem\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            s.tls,
            Some(front::TlsFiles {
                cert: "/etc/legate/cert.pem".into(),
                key: "/etc/legate/key.pem".into()
            })
        );
        assert!(resolve_text("", &[]).unwrap().tls.is_none());
        for (text, wanted) in [
            ("[a2a]\ntls_cert_file = \"/c.pem\"\n", "go together"),
            ("[a2a]\ntls_key_file = \"/k.pem\"\n", "go together"),
            (
                "[a2a]\ntls_cert_file = \"c.pem\"\ntls_key_file = \"/k.pem\"\n",
                "a2a.tls_cert_file must be an absolute path",
            ),
        ] {
            let e = resolve_text(text, &[]).unwrap_err().to_string();
            assert!(e.contains(wanted), "{text}: {e}");
        }
    }

    #[test]
    fn defaults_are_loopback_with_a_token_file_in_home() {
        let s = resolve_text("", &[]).unwrap();
        assert_eq!(s.host.to_string(), "127.0.0.1");
        assert_eq!(s.port, DEFAULT_PORT);
        assert!(s.auth);
        assert_eq!(s.token_file, Path::new("/tmp/lh/a2a-token"));
        assert!(s.public_url.is_none());
        assert!(!s.allow_remote_without_token);
        assert_eq!(s.limits, legate_a2a::ServeOptions::default());
        assert_eq!(s.max_transfer_bytes, 64 << 20);
        assert!(
            s.max_body_bytes > (64 << 20) * 4 / 3,
            "a default body holds a whole transfer in base64"
        );
        let s = resolve_text("[a2a]\nmax_transfer_bytes = 1000\n", &[]).unwrap();
        assert_eq!(s.max_transfer_bytes, 1000);
        assert!(resolve_text("[a2a]\nmax_transfer_bytes = 0\n", &[]).is_err());
        let s = resolve_text("[a2a]\nmax_connections = 7\nheader_timeout_secs = 2\n", &[]).unwrap();
        assert_eq!(s.limits.max_connections, 7);
        assert_eq!(s.limits.header_timeout, std::time::Duration::from_secs(2));
    }

    #[test]
    fn the_table_and_the_environment_are_read_and_checked() {
        let s = resolve_text(
            "[a2a]\nport = 9000\npublic_url = \"https://legate.example/\"\nauth = \"none\"\n",
            &[("LEGATE_A2A_TOKEN", &"k".repeat(40))],
        )
        .unwrap();
        assert_eq!(s.port, 9000);
        assert_eq!(s.public_url.as_deref(), Some("https://legate.example"));
        assert!(!s.auth);
        assert!(s.token.unwrap().matches(&"k".repeat(40)));
        for (text, env, key) in [
            ("[a2a]\nhost = \"localhost\"\n", vec![], "a2a.host"),
            (
                "[a2a]\npublic_url = \"ftp://x\"\n",
                vec![],
                "a2a.public_url",
            ),
            ("[a2a]\nauth = \"basic\"\n", vec![], "a2a.auth"),
            ("[a2a]\ntoken_file = \"rel\"\n", vec![], "a2a.token_file"),
            ("[a2a]\nmax_body_bytes = 10\n", vec![], "a2a.max_body_bytes"),
            ("[a2a]\ncopy_roots = [\"rel\"]\n", vec![], "a2a.copy_roots"),
            (
                "[a2a]\ncopy_roots = [\"/nonexistent-legate-root\"]\n",
                vec![],
                "a2a.copy_roots",
            ),
            ("", vec![("LEGATE_A2A_TOKEN", "short")], "LEGATE_A2A_TOKEN"),
            ("[a2a]\nprot = 1\n", vec![], "prot"),
            (
                "[a2a]\nbody_timeout_secs = 0\n",
                vec![],
                "a2a.body_timeout_secs",
            ),
            (
                "[a2a]\nmax_connections = 0\n",
                vec![],
                "a2a.max_connections",
            ),
        ] {
            let e = resolve_text(text, &env).unwrap_err().to_string();
            assert!(e.contains(key), "{key}: {e}");
        }
    }
}
