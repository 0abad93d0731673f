//! `legate doctor`: what holds on this machine, each problem with its fix.
//!
//! The checks are `legate_doctor`'s (the kernel, the home, the token files), one per agent,
//! started as `legate agents` starts it (`--no-probe` leaves them out), and one of the warm
//! sessions asked for, when any is. An invalid `legate.toml`
//! is itself a failed check, so the doctor still says what it can. This module only gathers
//! and prints; it decides nothing. Exit 0 when nothing failed, 1 otherwise.

use anyhow::Result;
use legate_doctor::Check;
use std::path::PathBuf;
use std::process::ExitCode;

/// Runs the checks and prints them (JSON lines with `json`).
pub async fn doctor(no_probe: bool, json: bool) -> Result<ExitCode> {
    let mut checks = Vec::new();
    let home = legate_config::home_dir()?;
    match crate::config::load() {
        Ok(config) => {
            checks.push(Check::ok(
                "configuration",
                match &config.file {
                    Some(f) => format!("{} is valid", f.display()),
                    None => "defaults (no legate.toml in the home)".to_string(),
                },
            ));
            checks.extend(legate_doctor::machine(&home, &token_files(&config)));
            let mut starts = std::collections::BTreeMap::new();
            if !no_probe {
                checks.extend(agents(&config, &mut starts).await?);
            }
            let warm: Vec<legate_doctor::WarmAgent> = config
                .engine
                .warm
                .iter()
                .map(|(name, &warm)| legate_doctor::WarmAgent {
                    name: name.clone(),
                    warm,
                    starts: starts.get(name).copied(),
                })
                .collect();
            checks.extend(Check::warm(&warm, config.engine.max_idle_sessions));
        }
        Err(e) => {
            checks.push(Check::problem(
                legate_doctor::Status::Fail,
                "configuration",
                e.to_string(),
                "fix legate.toml (docs/configuration.md); the agents are not checked until it loads",
            ));
            checks.extend(legate_doctor::machine(&home, &[]));
        }
    }
    for check in &checks {
        if json {
            crate::out!("{}", crate::json_out::line(check)?)?;
        } else {
            crate::out!(
                "{} {}: {}",
                check.status.mark(),
                check.name,
                crate::render::terminal_text(&check.found)
            )?;
            if let Some(fix) = &check.fix {
                crate::out!("    fix: {}", crate::render::terminal_text(fix))?;
            }
        }
    }
    Ok(if legate_doctor::healthy(&checks) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The token files the configuration names: the fronts' and the remote agents'.
fn token_files(config: &crate::config::Config) -> Vec<(String, PathBuf)> {
    let mut files = vec![
        ("mcp".to_string(), config.mcp.token_file.clone()),
        ("a2a".to_string(), config.a2a.token_file.clone()),
        (
            "supervisor".to_string(),
            config.supervisor.token_file.clone(),
        ),
    ];
    for spec in config.engine.agents.values() {
        if let Some(legate_core::TokenRef::File(path)) =
            spec.remote().and_then(|r| r.token.as_ref())
        {
            files.push((format!("of agent {}", spec.name), path.clone()));
        }
    }
    files
}

/// One check per agent, each started for real as `legate agents` starts it; whether each
/// started goes into `starts`.
async fn agents(
    config: &crate::config::Config,
    starts: &mut std::collections::BTreeMap<String, bool>,
) -> Result<Vec<Check>> {
    let engine = crate::front::start_engine(&config.engine)?;
    let mut checks = Vec::new();
    for spec in config.engine.agents.values() {
        let row = crate::agents::row(spec, Some(&engine)).await;
        starts.insert(spec.name.clone(), row.starts == Some(true));
        let started = match row.starts {
            Some(true) => Ok(row.detail),
            _ => Err(row.detail),
        };
        checks.push(Check::agent(
            &spec.name,
            spec.name == config.engine.default_agent,
            started,
            row.warning,
            spec.preset.as_deref().and_then(legate_config::install_hint),
        ));
    }
    engine.shutdown().await;
    Ok(checks)
}
