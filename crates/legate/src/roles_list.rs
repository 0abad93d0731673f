//! `legate roles`: the roles a task may play, built in and configured.
//!
//! The catalog and its checks are the engine's (`legate_engine::Roles`); this module only
//! prints it, without starting an engine or an agent. It never prints a role's instructions,
//! only their length (`legate roles --json` carries the defaults too).

use crate::config::Config;
use anyhow::Result;
use legate_engine::Roles;
use std::process::ExitCode;

/// Prints every role: a table, or with `json` one JSON array.
pub fn print(config: &Config, json: bool) -> Result<ExitCode> {
    let roles = Roles::new(
        config.engine.roles.clone(),
        config.engine.agents.keys().map(String::as_str),
    )?;
    let list = roles.list();
    if json {
        crate::out!("{}", crate::json_out::pretty(&list)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    for r in &list {
        let kind = if r.builtin { "built-in" } else { "configured" };
        let access = if r.read_only { "read-only" } else { "write" };
        crate::out!(
            "{:<20} {:<12} {:<10} {:<9} {}",
            r.name,
            r.base.as_str(),
            kind,
            access,
            r.description
        )?;
        if r.instructions_chars > 0 {
            crate::out!(
                "{:<20} instructions: {} characters",
                "",
                r.instructions_chars
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
