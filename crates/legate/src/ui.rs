//! The dashboard in the binary (its `[ui]` table is `legate_config::fronts`'): the dashboard half of
//! `legate serve --ui` (binding, the run file, the `dashboard: <url>` line), and `legate ui`
//! (a fresh one-time URL for the running server, opened with `xdg-open` or printed).
//!
//! The running server is found through `$LEGATE_HOME/run/ui.json` (`{"url", "pid"}`), written
//! mode 0600 once the dashboard listens and removed when it stops; a file whose process is
//! gone is ignored. A one-time URL is minted here with the same token file the server reads,
//! so the server accepts it (see `legate_ui::auth`).
//!
//! Which token a URL carries follows the CLI's rule for answering approvals
//! (`crate::supervise`): the supervisor's when a person is at the terminal or
//! `LEGATE_SUPERVISOR_TOKEN` holds the supervisor token, else the caller's (MCP's token:
//! that session sees everything but answers nothing). This module never prints or logs a
//! token; a one-time URL is printed only to the person who asked for it.

use crate::config::Config;
use crate::errors::{CliCode, CliError};
use crate::front;
use anyhow::{Context, Result, bail};
use legate_engine::Engine;
use legate_ui::{Audience, Dashboard, Token, UiOptions};
use serde::Deserialize;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

/// The run file's name, under `$LEGATE_HOME/run/`.
pub const RUN_FILE: &str = "ui.json";

/// The caller's token the dashboard accepts: MCP's (configured or on file, made on first use).
fn caller_token(config: &Config) -> Result<Token> {
    Ok(front::acquire_token(config.mcp.token.as_ref(), &config.mcp.token_file)?.0)
}

/// Whose one-time URL this process may print: the supervisor's for a person at a terminal or
/// a holder of the supervisor token, else the caller's.
fn audience(config: &Config) -> Audience {
    if crate::supervise::require_answerer(config, "the dashboard").is_ok() {
        Audience::Supervisor
    } else {
        Audience::Caller
    }
}

/// A bound dashboard: what `serve` runs.
pub struct Opened {
    /// The listener.
    pub listener: tokio::net::TcpListener,
    /// The application.
    pub router: axum::Router,
    /// The run file (removed when dropped).
    pub run_file: RunFile,
}

/// Binds the dashboard at `host:port`, writes the run file,
/// and prints `dashboard: <one-time url>` on a line of its own.
pub async fn open(
    config: &Config,
    host: IpAddr,
    port: u16,
    engine: &Engine,
    shutdown: &CancellationToken,
) -> Result<Opened> {
    let caller = caller_token(config)?;
    let (supervisor, _) = crate::supervise::acquire(config)?;
    let (listener, bound) = front::listen(host, port).await?;
    let ui = Dashboard::new(
        engine.clone(),
        UiOptions {
            caller,
            supervisor,
            // Its own origin only: a page on another local port is another site's.
            allowlist: config.ui.allowlist.clone().pinned_to(bound.port()),
        },
        shutdown.clone(),
    );
    let base = base_url(bound);
    let run_file = RunFile::write(&config.engine.paths.run(), &base)?;
    let who = audience(config);
    let url = ui
        .one_time_url(&base, who)
        .map_err(|e| crate::coded!(Internal, "{e}"))?;
    crate::out!(
        "Legate dashboard · {base} · one-time URL for the {who} (expires in {} s):",
        legate_ui::CODE_TTL.as_secs()
    )?;
    crate::out!("dashboard: {url}")?;
    crate::out!()?;
    tracing::info!(address = %bound, "serving the dashboard");
    Ok(Opened {
        listener,
        router: ui.router(),
        run_file,
    })
}

/// `http://<addr>`, with `127.0.0.1` for an unspecified bind (the allowlist answers to it).
fn base_url(bound: SocketAddr) -> String {
    let ip = if bound.ip().is_unspecified() {
        IpAddr::from([127, 0, 0, 1])
    } else {
        bound.ip()
    };
    format!("http://{}", SocketAddr::new(ip, bound.port()))
}

/// `$LEGATE_HOME/run/ui.json` while a dashboard listens.
#[derive(Debug)]
pub struct RunFile {
    path: PathBuf,
    written: String,
}

#[derive(Debug, serde::Serialize, Deserialize)]
struct Running {
    url: String,
    pid: u32,
}

impl RunFile {
    fn write(run: &Path, base: &str) -> Result<Self> {
        std::fs::create_dir_all(run)
            .with_context(|| format!("could not create {}", run.display()))?;
        let path = run.join(RUN_FILE);
        let written = serde_json::to_string(&Running {
            url: base.to_string(),
            pid: std::process::id(),
        })?;
        let tmp = run.join(format!("{RUN_FILE}.{}", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        {
            use std::io::Write as _;
            let mut f = options
                .open(&tmp)
                .with_context(|| format!("could not write {}", tmp.display()))?;
            f.write_all(written.as_bytes())?;
        }
        std::fs::rename(&tmp, &path)
            .with_context(|| format!("could not write {}", path.display()))?;
        Ok(Self { path, written })
    }
}

impl Drop for RunFile {
    fn drop(&mut self) {
        // Only our own: another server may have started on the same home since.
        if std::fs::read_to_string(&self.path).is_ok_and(|t| t == self.written) {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}

/// The running dashboard's base URL, if one runs on this home.
fn running(run: &Path) -> Result<String> {
    let path = run.join(RUN_FILE);
    let none = || {
        anyhow::Error::from(CliError::new(
            CliCode::Unavailable,
            "no dashboard is running on this home (start one with `legate serve --ui`)",
        ))
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(none()),
        Err(e) => return Err(e).with_context(|| format!("could not read {}", path.display())),
    };
    let r: Running = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a dashboard's run file", path.display()))?;
    if !Path::new(&format!("/proc/{}", r.pid)).exists() {
        return Err(none());
    }
    if !(r.url.starts_with("http://")
        && r.url.len() < 100
        && r.url.bytes().all(|b| b.is_ascii_graphic()))
    {
        bail!("{} holds no dashboard URL", path.display());
    }
    Ok(r.url)
}

/// Options of `legate ui`.
#[derive(Debug, clap::Args)]
pub struct UiArgs {
    /// Print a fresh one-time URL for the running server instead of opening a browser.
    #[arg(long)]
    pub print_url: bool,
}

/// `legate ui`: a fresh one-time URL for the dashboard running on this home, opened in the
/// browser (`xdg-open`) or printed (`--print-url`).
pub fn ui(config: Config, args: UiArgs) -> Result<ExitCode> {
    let base = running(&config.engine.paths.run())?;
    let who = audience(&config);
    let token = match who {
        Audience::Supervisor => crate::supervise::acquire(&config)?.0,
        Audience::Caller => caller_token(&config)?,
    };
    let code = legate_ui::mint_code(&token, who, legate_core::Timestamp::now().0)
        .map_err(|e| crate::coded!(Internal, "{e}"))?;
    let url = legate_ui::login_url(&base, &code);
    if args.print_url {
        crate::out!("{url}")?;
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("opening the dashboard ({who}'s session) at {base}");
    let status = std::process::Command::new("xdg-open")
        .arg(&url)
        .stdin(std::process::Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => Ok(ExitCode::SUCCESS),
        _ => {
            eprintln!("could not open a browser; open this one-time URL yourself:");
            crate::out!("{url}")?;
            Ok(ExitCode::from(1))
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_run_file_is_ours_to_remove_and_a_dead_one_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let f = RunFile::write(dir.path(), "http://127.0.0.1:9").unwrap();
        assert_eq!(running(dir.path()).unwrap(), "http://127.0.0.1:9");
        drop(f);
        assert!(
            running(dir.path())
                .unwrap_err()
                .to_string()
                .starts_with("UNAVAILABLE")
        );
        std::fs::write(
            dir.path().join(RUN_FILE),
            r#"{"url":"http://127.0.0.1:9","pid":4294967295}"#,
        )
        .unwrap();
        assert!(running(dir.path()).is_err());
    }
}
