//! `legate agents`: each configured agent, whether it starts, and how the kernel confines it.
//!
//! Probing is the engine's (`Engine::probe`): it starts the agent for real, in a throwaway
//! directory, then stops it. Nothing is prompted and no task is stored. Confinement is the
//! engine's report too (`Engine::confinement`): fully, partly or not enforced, or
//! `CONFINEMENT_UNAVAILABLE` when the configuration requires it and it cannot be had.

use crate::config::Config;
use anyhow::Result;
use legate_core::AgentKind;
use legate_engine::Engine;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// How long a probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

pub async fn list(config: &Config, engine: Option<&Engine>, json_out: bool) -> Result<ExitCode> {
    let agents = &config.engine.agents;
    if !json_out {
        match &config.file {
            Some(f) => crate::out!("configuration: {}", f.display())?,
            None => crate::out!("configuration: defaults (no legate.toml in $LEGATE_HOME)")?,
        }
    }
    for spec in agents.values() {
        let (starts, detail) = match engine {
            None => (None, "not probed".to_string()),
            Some(_) if spec.kind == AgentKind::Acp && find_program(&spec.command).is_none() => (
                Some(false),
                format!(
                    "does not start: AGENT_START_FAILED: {} is not on PATH",
                    spec.command
                ),
            ),
            Some(engine) => match engine.probe(&spec.name, PROBE_TIMEOUT).await {
                Ok(info) => (
                    Some(true),
                    format!(
                        "starts ({} {}){}",
                        info.name.as_deref().unwrap_or("unnamed"),
                        info.version.as_deref().unwrap_or("?"),
                        if info.capabilities.is_empty() {
                            String::new()
                        } else {
                            format!("; capabilities: {}", info.capabilities.join(", "))
                        }
                    ),
                ),
                Err(e) => (Some(false), format!("does not start: {e}")),
            },
        };
        // How the kernel confines this agent's process: the backend's report through the
        // engine, or (unprobed) what this kernel can enforce at all.
        let confinement = match engine {
            Some(engine) => engine.confinement(&spec.name),
            None => Ok(legate_sandbox::Confinement::probe()),
        };
        let (confinement_wire, confinement_text) = match &confinement {
            Ok(e) => (e.as_str().to_string(), format!("confinement {e}")),
            Err(e) => ("unavailable".to_string(), e.to_string()),
        };
        let default = spec.name == config.engine.default_agent;
        if json_out {
            crate::out!(
                "{}",
                json!({
                    "name": spec.name, "kind": spec.kind.as_str(), "preset": spec.preset,
                    "command": spec.command, "args": spec.args, "default": default,
                    "starts": starts, "detail": detail, "description": spec.description,
                    "confinement": confinement_wire,
                })
            )?;
        } else {
            let mark = if default { "*" } else { " " };
            crate::out!(
                "{mark} {:<10} {:<8} {detail}; {confinement_text}",
                spec.name,
                spec.kind.as_str()
            )?;
            if let Some(d) = &spec.description {
                crate::out!("             {d}")?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Where `command` would be found, as `execvp` looks.
fn find_program(command: &str) -> Option<PathBuf> {
    let p = Path::new(command);
    if p.is_absolute() || command.contains('/') {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(command))
        .find(|c| c.is_file())
}
