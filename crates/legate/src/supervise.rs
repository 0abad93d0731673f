//! The supervisor's credentials in the binary: where the supervisor token lives
//! (`$LEGATE_HOME/supervisor-token`, or `LEGATE_SUPERVISOR_TOKEN`), the check that it is not
//! the caller's, and who may answer an approval from this process (stdio `legate mcp --profile
//! supervisor`, and the CLI's `approve`, `deny` and `approvals --follow`).
//!
//! The rule is the same everywhere: answering needs the supervisor token, and a caller's token
//! is never one. The CLI also accepts a person at a terminal (stdin and stderr both a TTY),
//! since that is what a human channel is; a caller agent's shell tool has no terminal.
//!
//! This module never logs or prints a token; the token itself is `legate_token::bearer`'s.

use crate::errors::{CliCode, CliError};
use anyhow::Result;
use legate_token::bearer::{self, Audience, Gate, SUPERVISOR_TOKEN_ENV};
use legate_token::{Token, TokenSource};
use std::io::IsTerminal;

/// The tokens the caller holds that exist now (configured, or in a file already made),
/// named for errors. Reading never creates a file.
fn caller_tokens(config: &crate::config::Config) -> Vec<(String, Token)> {
    let mut found = Vec::new();
    let sources = [
        (
            "LEGATE_MCP_TOKEN",
            &config.mcp.token,
            &config.mcp.token_file,
        ),
        (
            "LEGATE_A2A_TOKEN",
            &config.a2a.token,
            &config.a2a.token_file,
        ),
    ];
    for (var, configured, file) in sources {
        if let Some(t) = configured {
            found.push((var.to_string(), t.clone()));
        } else if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(t) = Token::configured(&text)
        {
            found.push((file.display().to_string(), t));
        }
    }
    found
}

/// The supervisor token (made on first use), checked to differ from every caller token:
/// `CONFIG_INVALID` otherwise, before anything listens.
pub fn acquire(config: &crate::config::Config) -> Result<(Token, TokenSource)> {
    let settings = &config.supervisor;
    let (token, source) = bearer::supervisor_token(settings.token.as_ref(), &settings.token_file)?;
    let name = match source {
        TokenSource::Configured => SUPERVISOR_TOKEN_ENV.to_string(),
        _ => settings.token_file.display().to_string(),
    };
    apart_from_callers(config, &name, &token)?;
    Ok((token, source))
}

/// `CONFIG_INVALID` when `token` (known as `name`) is one of the caller's tokens.
fn apart_from_callers(config: &crate::config::Config, name: &str, token: &Token) -> Result<()> {
    let callers = caller_tokens(config);
    let mut named: Vec<(&str, &Token)> = vec![(name, token)];
    named.extend(callers.iter().map(|(n, t)| (n.as_str(), t)));
    bearer::separate(&named)?;
    Ok(())
}

/// The gate a process answering as the supervisor passes: the supervisor token on file
/// (made if missing), refusing every caller token by name.
fn gate(config: &crate::config::Config) -> Result<Gate> {
    // The file, not the environment: the variable is what is being checked.
    let (stored, _) = bearer::supervisor_token(None, &config.supervisor.token_file)?;
    let mut gate = Gate::new(Audience::Supervisor, stored);
    for (_, t) in caller_tokens(config) {
        gate = gate.refusing(Audience::Caller, t);
    }
    Ok(gate)
}

/// Checks that this process may answer as the supervisor without a terminal:
/// `LEGATE_SUPERVISOR_TOKEN` must hold the token in `$LEGATE_HOME/supervisor-token`.
/// `UNAUTHORIZED` otherwise, naming what is missing (never the token).
pub fn require_token(config: &crate::config::Config, what: &str) -> Result<()> {
    let Some(presented) = config.supervisor.token.as_ref() else {
        return Err(CliError::new(
            CliCode::Unauthorized,
            format!(
                "{what} answers for the supervisor and needs {SUPERVISOR_TOKEN_ENV} set to the token in {} (a caller's token is never accepted)",
                config.supervisor.token_file.display()
            ),
        )
        .into());
    };
    match gate(config)?.check_token(presented.expose()) {
        Ok(()) => Ok(()),
        Err(denied) => Err(CliError::new(
            CliCode::Unauthorized,
            format!(
                "{what}: {SUPERVISOR_TOKEN_ENV}: {}; see {}",
                denied.message(Audience::Supervisor),
                config.supervisor.token_file.display()
            ),
        )
        .into()),
    }
}

/// `legate supervisor-token`: makes the supervisor token on file (mode 0600) if it is
/// missing, checked to differ from every caller token, and prints the file's path, never the
/// token. Only a person at a terminal may: a caller agent's shell has none, and the token is
/// what keeps a caller from answering its own agents' requests.
pub fn make_token(config: &crate::config::Config) -> Result<std::process::ExitCode> {
    if !at_a_terminal() {
        return Err(CliError::new(
            CliCode::Unauthorized,
            "legate supervisor-token makes the supervisor's credential and runs only at a person's terminal (stdin and stderr both a terminal)",
        )
        .into());
    }
    let settings = &config.supervisor;
    // The file is what a script reads, whatever the variable holds.
    let made = !settings.token_file.exists();
    let (token, _) = bearer::supervisor_token(None, &settings.token_file)?;
    apart_from_callers(config, &settings.token_file.display().to_string(), &token)?;
    eprintln!(
        "{} the supervisor token (mode 0600); a script answers approvals with LEGATE_SUPERVISOR_TOKEN set to its contents",
        if made { "made" } else { "kept" }
    );
    crate::out!("{}", settings.token_file.display())?;
    Ok(std::process::ExitCode::SUCCESS)
}

/// Whether a person is at this process's terminal: stdin and stderr both TTYs.
pub fn at_a_terminal() -> bool {
    std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
}

/// Checks that this CLI process may answer an approval: a person at a terminal, or the
/// supervisor token in `LEGATE_SUPERVISOR_TOKEN`.
pub fn require_answerer(config: &crate::config::Config, what: &str) -> Result<()> {
    if config.supervisor.token.is_none() && at_a_terminal() {
        return Ok(());
    }
    require_token(config, what)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::Path;

    fn load(home: &Path, env: &[(&str, String)]) -> Result<crate::config::Config> {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect();
        Ok(crate::config::load_in(home, &|k| env.get(k).cloned())?)
    }

    #[test]
    fn the_token_file_is_hidden_and_the_token_must_not_be_the_callers() {
        let home = tempfile::tempdir().unwrap();
        let c = load(home.path(), &[]).unwrap();
        assert_eq!(
            c.supervisor.token_file,
            home.path().join("supervisor-token")
        );
        assert!(c.engine.hidden_paths().contains(&c.supervisor.token_file));
        let (t, source) = acquire(&c).unwrap();
        assert_eq!(source, TokenSource::Created);
        // A caller token file holding the same secret: refused.
        std::fs::write(home.path().join("mcp-token"), t.expose()).unwrap();
        let e = acquire(&c).unwrap_err().to_string();
        assert!(e.starts_with("CONFIG_INVALID"), "{e}");
        assert!(e.contains("mcp-token"), "{e}");
        assert!(!e.contains(t.expose()));
        // The same secret in both variables: refused when configuration loads.
        let same = "q".repeat(40);
        let e = load(
            home.path(),
            &[
                ("LEGATE_MCP_TOKEN", same.clone()),
                ("LEGATE_SUPERVISOR_TOKEN", same.clone()),
            ],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("CONFIG_INVALID"), "{e}");
    }

    #[test]
    fn answering_without_a_terminal_needs_the_stored_supervisor_token() {
        let home = tempfile::tempdir().unwrap();
        let c = load(home.path(), &[]).unwrap();
        let e = require_token(&c, "legate approve").unwrap_err().to_string();
        assert!(e.starts_with("UNAUTHORIZED"), "{e}");
        assert!(e.contains("LEGATE_SUPERVISOR_TOKEN"), "{e}");
        // A made-up token of the right shape is not the stored one.
        let c = load(home.path(), &[("LEGATE_SUPERVISOR_TOKEN", "m".repeat(40))]).unwrap();
        let e = require_token(&c, "legate approve").unwrap_err().to_string();
        assert!(e.starts_with("UNAUTHORIZED"), "{e}");
        // The caller's token is refused by name.
        let caller = "c".repeat(40);
        std::fs::write(home.path().join("mcp-token"), &caller).unwrap();
        let c = load(home.path(), &[("LEGATE_SUPERVISOR_TOKEN", caller.clone())]).unwrap();
        let e = require_token(&c, "legate approve").unwrap_err().to_string();
        assert!(e.contains("caller token is refused"), "{e}");
        assert!(!e.contains(&caller));
        // The stored one passes.
        let stored = std::fs::read_to_string(home.path().join("supervisor-token")).unwrap();
        let c = load(
            home.path(),
            &[("LEGATE_SUPERVISOR_TOKEN", stored.trim().to_string())],
        )
        .unwrap();
        require_token(&c, "legate approve").unwrap();
    }
}
