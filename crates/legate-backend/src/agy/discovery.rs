//! Discovery: finding `agy`, probing `--version` and `--help`, and reading its capabilities.
//!
//! The executable is `agy` from `PATH` or an absolute path. Both probes run at once, each in
//! its own process group, with a timeout and bounded output; both must exit 0 with non-empty
//! output, and the help must announce `stream-json` (with `--output-format`) and `--sandbox`.
//! Failures are `AGY_NOT_FOUND`, `AGY_PERMISSION_DENIED`, `AGY_PROBE_FAILED` or
//! `AGY_INCOMPATIBLE`. Capabilities are substrings of the help text (stdout and stderr).
//!
//! This module only reads what the CLI prints; it never runs a prompt.

use crate::acp::sys;
use crate::spawn::AgentCommand;
use legate_core::{Error, ErrorCode, Result};
use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt};

/// The most output kept from one probe stream.
const PROBE_OUTPUT_LIMIT: usize = 256 * 1024;

/// What the help text announces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `stream-json` and `--output-format` (required).
    pub streaming: bool,
    /// `--sandbox` (required).
    pub sandbox: bool,
    /// `--mode` with `plan`: read-only turns.
    pub plan_mode: bool,
    /// `--mode` with `accept-edits`.
    pub accept_edits: bool,
    /// The `models` subcommand.
    pub models: bool,
    /// `--model`.
    pub model_flag: bool,
    /// `--conversation`: resume.
    pub conversation: bool,
    /// `--json-schema`.
    pub json_schema: bool,
    /// `--add-dir`.
    pub add_dir: bool,
    /// `--new-project`.
    pub new_project: bool,
    /// `--effort`.
    pub effort: bool,
}

impl Capabilities {
    /// Reads the capabilities out of the help text.
    pub fn from_help(help: &str) -> Self {
        let has = |s: &str| help.contains(s);
        Self {
            streaming: has("stream-json") && has("--output-format"),
            sandbox: has("--sandbox"),
            plan_mode: has("--mode") && has("plan"),
            accept_edits: has("--mode") && has("accept-edits"),
            models: has("models"),
            model_flag: has("--model"),
            conversation: has("--conversation"),
            json_schema: has("--json-schema"),
            add_dir: has("--add-dir"),
            new_project: has("--new-project"),
            effort: has("--effort"),
        }
    }

    /// The announced capabilities, by name, for health listings.
    pub fn names(&self) -> Vec<String> {
        [
            (self.streaming, "stream-json"),
            (self.sandbox, "sandbox"),
            (self.plan_mode, "mode-plan"),
            (self.accept_edits, "mode-accept-edits"),
            (self.models, "models"),
            (self.model_flag, "model"),
            (self.conversation, "conversation"),
            (self.json_schema, "json-schema"),
            (self.add_dir, "add-dir"),
            (self.new_project, "new-project"),
            (self.effort, "effort"),
        ]
        .into_iter()
        .filter(|(on, _)| *on)
        .map(|(_, n)| n.to_string())
        .collect()
    }
}

/// What discovery found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discovery {
    /// The executable, resolved.
    pub executable: PathBuf,
    /// `--version`'s answer, trimmed.
    pub version: String,
    /// What `--help` announces.
    pub capabilities: Capabilities,
}

/// Where `command` is: itself when absolute, else the first match on `path` (the `PATH` the
/// process will get). `AGY_NOT_FOUND` when it is nowhere; `AGY_PERMISSION_DENIED` when it
/// exists but is not executable.
pub fn resolve_executable(command: &str, path: Option<&OsStr>) -> Result<PathBuf> {
    const INSTALL: &str = "; install it or set the agent's `command` to its absolute path";
    let not_found = |detail: String| {
        Error::new(
            ErrorCode::AgyNotFound,
            format!("the Antigravity CLI was not found: {detail}{INSTALL}"),
        )
    };
    let p = Path::new(command);
    let found = if p.is_absolute() {
        if !p.exists() {
            return Err(not_found(format!("{} does not exist", p.display())));
        }
        p.to_path_buf()
    } else if command.contains('/') || command.is_empty() {
        return Err(not_found(format!(
            "`{command}` is neither a name on PATH nor an absolute path"
        )));
    } else {
        let dirs: Vec<PathBuf> = path
            .map(|v| std::env::split_paths(v).collect())
            .unwrap_or_default();
        match dirs
            .iter()
            .filter(|d| d.is_absolute())
            .map(|d| d.join(command))
            .find(|c| c.is_file())
        {
            Some(c) => c,
            None => return Err(not_found(format!("`{command}` is not on PATH"))),
        }
    };
    let meta = std::fs::metadata(&found).map_err(|e| {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            permission_denied_by(&found, e)
        } else {
            let before = format!("the Antigravity CLI was not found: {}: ", found.display());
            Error::quoting_between(ErrorCode::AgyNotFound, before, e, INSTALL)
        }
    })?;
    if !meta.is_file() {
        return Err(not_found(format!("{} is not a file", found.display())));
    }
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(permission_denied(&found, "it is not executable"));
    }
    Ok(found)
}

fn permission_denied(path: &Path, why: &str) -> Error {
    Error::new(
        ErrorCode::AgyPermissionDenied,
        format!("{}: {why}", may_not_run(path)),
    )
}

/// [`permission_denied`] with the OS's refusal as its cause.
fn permission_denied_by(path: &Path, e: std::io::Error) -> Error {
    Error::quoting(ErrorCode::AgyPermissionDenied, may_not_run(path), e)
}

fn may_not_run(path: &Path) -> String {
    format!("the Antigravity CLI at {} may not be run", path.display())
}

/// How one short-lived CLI invocation ended.
#[derive(Debug)]
pub(crate) struct Probe {
    pub(crate) code: Option<i32>,
    pub(crate) stdout: String,
    pub(crate) stderr: String,
}

/// What a spawned `agy` may write: the confinement and whether it is required. `None` runs
/// it unconfined.
pub type Fenced<'a> = Option<(&'a legate_confine::Confinement, legate_confine::Requirement)>;

/// Runs `exe args` in `cwd` with `env`, in its own process group, stdin closed, confined by
/// `fence`, for at most `limit`; the group is killed on timeout. Spawn failures map to `AGY_NOT_FOUND` or
/// `AGY_PERMISSION_DENIED`; a timeout is `AGY_PROBE_FAILED`.
pub(crate) async fn probe(
    exe: &Path,
    args: &[&str],
    env: &[(OsString, OsString)],
    cwd: &Path,
    limit: Duration,
    fence: Fenced<'_>,
) -> Result<Probe> {
    let prepared = match fence {
        Some((confinement, requirement)) => Some(confinement.prepare(requirement)?),
        None => None,
    };
    let spawned = AgentCommand::new(exe, args, cwd, env.iter().cloned())
        .no_stdin()
        .spawn(prepared);
    let what = format!("`agy {}`", args.join(" "));
    let mut child = spawned.map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => Error::quoting(
            ErrorCode::AgyNotFound,
            format!(
                "the Antigravity CLI at {} could not be started",
                exe.display()
            ),
            e,
        ),
        std::io::ErrorKind::PermissionDenied => permission_denied_by(exe, e),
        _ => Error::quoting(
            ErrorCode::AgyProbeFailed,
            format!("{what} could not be started"),
            e,
        ),
    })?;
    let pgid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .unwrap_or(0);
    let (Some(out), Some(err)) = (child.stdout.take(), child.stderr.take()) else {
        return Err(Error::internal("the probe's pipes were not set up"));
    };
    let work = async {
        let (stdout, stderr, status) =
            tokio::join!(read_bounded(out), read_bounded(err), child.wait());
        (stdout, stderr, status)
    };
    match tokio::time::timeout(limit, work).await {
        Ok((stdout, stderr, status)) => {
            sys::signal_group(pgid, sys::SIGKILL);
            let status = status.map_err(|e| {
                let sentence = format!("{what} could not be waited for");
                Error::quoting(ErrorCode::AgyProbeFailed, sentence, e)
            })?;
            Ok(Probe {
                code: status.code(),
                stdout: String::from_utf8_lossy(&stdout).into_owned(),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            })
        }
        Err(_) => {
            sys::signal_group(pgid, sys::SIGKILL);
            Err(Error::new(
                ErrorCode::AgyProbeFailed,
                format!("{what} did not finish within {} s", limit.as_secs_f64()),
            ))
        }
    }
}

/// Reads a stream to its end, keeping at most [`PROBE_OUTPUT_LIMIT`] bytes.
async fn read_bounded(mut r: impl AsyncRead + Unpin) -> Vec<u8> {
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return kept,
            Ok(n) => {
                let room = PROBE_OUTPUT_LIMIT.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Probes `exe` with `--version` and `--help` at once, each within `limit`, each confined by
/// `fence`.
pub async fn discover(
    exe: &Path,
    env: &[(OsString, OsString)],
    cwd: &Path,
    limit: Duration,
    fence: Fenced<'_>,
) -> Result<Discovery> {
    let (version, help) = tokio::join!(
        probe(exe, &["--version"], env, cwd, limit, fence),
        probe(exe, &["--help"], env, cwd, limit, fence)
    );
    let (version, help) = (version?, help?);
    let check = |p: &Probe, what: &str| -> Result<()> {
        if p.code != Some(0) {
            let code = p
                .code
                .map_or_else(|| "a signal".to_string(), |c| format!("code {c}"));
            return Err(Error::new(
                ErrorCode::AgyProbeFailed,
                format!(
                    "`agy {what}` exited with {code}{}",
                    first_line(&p.stderr)
                        .map(|l| format!(": {l}"))
                        .unwrap_or_default()
                ),
            ));
        }
        if p.stdout.trim().is_empty() && p.stderr.trim().is_empty() {
            return Err(Error::new(
                ErrorCode::AgyProbeFailed,
                format!("`agy {what}` printed nothing"),
            ));
        }
        Ok(())
    };
    check(&version, "--version")?;
    check(&help, "--help")?;
    let version_text = if version.stdout.trim().is_empty() {
        version.stderr.trim()
    } else {
        version.stdout.trim()
    };
    let capabilities = Capabilities::from_help(&format!("{}\n{}", help.stdout, help.stderr));
    let mut missing = Vec::new();
    if !capabilities.streaming {
        missing.push("stream-json (--output-format)");
    }
    if !capabilities.sandbox {
        missing.push("--sandbox");
    }
    if !missing.is_empty() {
        return Err(Error::new(
            ErrorCode::AgyIncompatible,
            format!(
                "agy {} does not announce {}, which Legate requires",
                super::translate::truncate(version_text, 80),
                missing.join(" or ")
            ),
        ));
    }
    Ok(Discovery {
        executable: exe.to_path_buf(),
        version: super::translate::truncate(version_text, 200),
        capabilities,
    })
}

fn first_line(s: &str) -> Option<String> {
    s.lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| super::translate::truncate(l, 300))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn capabilities_are_substrings_of_the_help() {
        let c = Capabilities::from_help(
            "Usage: agy [--sandbox] --output-format stream-json --mode plan|accept-edits --model X --conversation ID models",
        );
        assert!(c.streaming && c.sandbox && c.plan_mode && c.accept_edits);
        assert!(c.models && c.model_flag && c.conversation);
        assert!(!c.json_schema && !c.add_dir && !c.new_project && !c.effort);
        assert!(c.names().contains(&"mode-plan".to_string()));
        let c = Capabilities::from_help("stream-json without the flag");
        assert!(!c.streaming);
    }

    #[test]
    fn executables_come_from_path_or_an_absolute_path() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("agy");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths([Path::new("/nonexistent"), dir.path()]).unwrap();
        assert_eq!(resolve_executable("agy", Some(&path)).unwrap(), exe);
        assert_eq!(
            resolve_executable(exe.to_str().unwrap(), None).unwrap(),
            exe
        );
        let e = resolve_executable("agy", Some(OsStr::new("/nonexistent"))).unwrap_err();
        assert_eq!(e.code, ErrorCode::AgyNotFound);
        let e = resolve_executable("bin/agy", Some(&path)).unwrap_err();
        assert_eq!(e.code, ErrorCode::AgyNotFound);
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = resolve_executable(exe.to_str().unwrap(), None).unwrap_err();
        assert_eq!(e.code, ErrorCode::AgyPermissionDenied);
    }
}
