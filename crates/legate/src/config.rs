//! Configuration: `$LEGATE_HOME/legate.toml`, then environment overrides, validated at start.
//!
//! Every error names the key it is about. Agents come from three places, later ones winning:
//! the built-in `revisor`, the presets `claude`, `codex` and `gemini`, and `[agents.NAME]`
//! tables (which may override a preset's command, args and env).

use anyhow::{Context, Result, bail};
use legate_core::{AgentKind, AgentSpec};
use legate_engine::{EngineConfig, Paths};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The file's shape. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    default_agent: Option<String>,
    max_running: Option<u64>,
    max_queued: Option<u64>,
    task_timeout_secs: Option<u64>,
    idle_timeout_secs: Option<u64>,
    retention: Option<u64>,
    #[serde(default)]
    agents: BTreeMap<String, AgentTable>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentTable {
    command: Option<String>,
    args: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    preset: Option<String>,
    allow_execute: Option<bool>,
    terminal: Option<bool>,
    description: Option<String>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The engine's part.
    pub engine: EngineConfig,
    /// The file it came from, if one existed.
    pub file: Option<PathBuf>,
}

/// `$LEGATE_HOME`, or `~/.legate`.
pub fn home_dir() -> Result<PathBuf> {
    if let Some(h) = std::env::var_os("LEGATE_HOME").filter(|h| !h.is_empty()) {
        let p = PathBuf::from(h);
        if !p.is_absolute() {
            bail!("LEGATE_HOME must be an absolute path (got {})", p.display());
        }
        return Ok(p);
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .context("neither LEGATE_HOME nor HOME is set")?;
    Ok(PathBuf::from(home).join(".legate"))
}

/// Loads and validates the configuration.
pub fn load() -> Result<Config> {
    let home = home_dir()?;
    let path = home.join("legate.toml");
    let file = match std::fs::read_to_string(&path) {
        Ok(text) => Some((
            parse(&text).with_context(|| format!("in {}", path.display()))?,
            path,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("could not read {}", path.display())),
    };
    let (parsed, file_path) = match file {
        Some((f, p)) => (f, Some(p)),
        None => (File::default(), None),
    };
    let engine = resolve(parsed, &home, &|k| std::env::var(k).ok())?;
    Ok(Config {
        engine,
        file: file_path,
    })
}

fn parse(text: &str) -> Result<File> {
    toml::from_str(text).map_err(|e| anyhow::anyhow!("CONFIG_INVALID: {e}"))
}

fn resolve(file: File, home: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<EngineConfig> {
    let mut c = EngineConfig::new(Paths::new(home));
    let number = |key: &str,
                  env_key: &str,
                  from_file: Option<u64>,
                  min: u64,
                  max: u64|
     -> Result<Option<u64>> {
        let (value, origin) = match env(env_key) {
            Some(v) => (
                Some(v.trim().parse::<u64>().map_err(|_| {
                    anyhow::anyhow!("CONFIG_INVALID: {env_key} must be a whole number (got {v:?})")
                })?),
                env_key,
            ),
            None => (from_file, key),
        };
        if let Some(v) = value
            && !(min..=max).contains(&v)
        {
            bail!("CONFIG_INVALID: {origin} must be between {min} and {max} (got {v})");
        }
        Ok(value)
    };
    if let Some(v) = number("max_running", "LEGATE_MAX_RUNNING", file.max_running, 1, 64)? {
        c.max_running = v as usize;
    }
    if let Some(v) = number(
        "max_queued",
        "LEGATE_MAX_QUEUED",
        file.max_queued,
        0,
        10_000,
    )? {
        c.max_queued = v as usize;
    }
    if let Some(v) = number(
        "task_timeout_secs",
        "LEGATE_TASK_TIMEOUT_SECS",
        file.task_timeout_secs,
        1,
        7 * 24 * 3600,
    )? {
        c.default_timeout = Duration::from_secs(v);
    }
    if let Some(v) = number(
        "idle_timeout_secs",
        "LEGATE_IDLE_TIMEOUT_SECS",
        file.idle_timeout_secs,
        1,
        7 * 24 * 3600,
    )? {
        c.idle_timeout = Duration::from_secs(v);
    }
    if let Some(v) = number(
        "retention",
        "LEGATE_RETENTION",
        file.retention,
        1,
        10_000_000,
    )? {
        c.retention = v as usize;
    }

    c.agents = builtin_agents()?;
    for (name, table) in file.agents {
        validate_name(&name).with_context(|| format!("CONFIG_INVALID: agents.{name}"))?;
        let base = c.agents.get(&name).cloned();
        let preset = table
            .preset
            .clone()
            .or_else(|| base.as_ref().and_then(|b| b.preset.clone()));
        if let Some(p) = &preset
            && !["claude", "codex", "gemini"].contains(&p.as_str())
        {
            bail!(
                "CONFIG_INVALID: agents.{name}.preset must be one of claude, codex, gemini (got {p:?})"
            );
        }
        if name == "revisor" && table.command.is_some() {
            bail!("CONFIG_INVALID: agents.revisor.command cannot be changed; revisor is built in");
        }
        let command = match (table.command, &base) {
            (Some(cmd), _) if cmd.trim().is_empty() => {
                bail!("CONFIG_INVALID: agents.{name}.command is empty")
            }
            (Some(cmd), _) => cmd,
            (None, Some(b)) => b.command.clone(),
            (None, None) => bail!("CONFIG_INVALID: agents.{name}.command is required"),
        };
        for key in table.env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                bail!("CONFIG_INVALID: agents.{name}.env has an invalid variable name {key:?}");
            }
        }
        let mut env = base.as_ref().map(|b| b.env.clone()).unwrap_or_default();
        env.extend(table.env);
        let spec = AgentSpec {
            name: name.clone(),
            kind: base.as_ref().map_or(AgentKind::Acp, |b| b.kind),
            command,
            args: table
                .args
                .or_else(|| base.as_ref().map(|b| b.args.clone()))
                .unwrap_or_default(),
            env,
            preset,
            allow_execute: table
                .allow_execute
                .or(base.as_ref().map(|b| b.allow_execute))
                .unwrap_or(false),
            terminal: table
                .terminal
                .or(base.as_ref().map(|b| b.terminal))
                .unwrap_or(false),
            description: table
                .description
                .or_else(|| base.as_ref().and_then(|b| b.description.clone())),
        };
        c.agents.insert(name, spec);
    }

    let default = env("LEGATE_DEFAULT_AGENT")
        .map(|v| (v, "LEGATE_DEFAULT_AGENT"))
        .or(file.default_agent.map(|v| (v, "default_agent")));
    if let Some((name, key)) = default {
        if !c.agents.contains_key(&name) {
            bail!("CONFIG_INVALID: {key} names {name:?}, which is not a configured agent");
        }
        c.default_agent = name;
    }
    Ok(c)
}

fn validate_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        bail!("an agent name must be 1 to 64 letters, digits, '-' or '_'");
    }
    Ok(())
}

/// `revisor` plus the three presets, with the commands their npm packages install.
fn builtin_agents() -> Result<BTreeMap<String, AgentSpec>> {
    let exe = std::env::current_exe().context("could not find the legate executable")?;
    let mut agents = BTreeMap::new();
    agents.insert(
        "revisor".to_string(),
        AgentSpec {
            name: "revisor".into(),
            kind: AgentKind::Revisor,
            command: exe.to_string_lossy().into_owned(),
            args: vec!["agent".into(), "revisor".into()],
            env: BTreeMap::new(),
            preset: None,
            allow_execute: false,
            terminal: false,
            description: Some(
                "built-in, no model: reads, summarises and follows simple instructions".into(),
            ),
        },
    );
    let preset = |name: &str, command: &str, args: &[&str], description: &str| AgentSpec {
        name: name.into(),
        kind: AgentKind::Acp,
        command: command.into(),
        args: args.iter().map(|a| a.to_string()).collect(),
        env: BTreeMap::new(),
        preset: Some(name.into()),
        allow_execute: false,
        terminal: false,
        description: Some(description.into()),
    };
    agents.insert(
        "claude".into(),
        preset(
            "claude",
            "claude-agent-acp",
            &[],
            "Claude Code through @zed-industries/claude-agent-acp",
        ),
    );
    agents.insert(
        "codex".into(),
        preset(
            "codex",
            "codex-acp",
            &[],
            "Codex through @zed-industries/codex-acp",
        ),
    );
    agents.insert(
        "gemini".into(),
        preset(
            "gemini",
            "gemini",
            &["--acp"],
            "Gemini CLI in ACP mode (@google/gemini-cli)",
        ),
    );
    Ok(agents)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn resolve_text(text: &str, env: &[(&str, &str)]) -> Result<EngineConfig> {
        let env: BTreeMap<String, String> = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        resolve(parse(text)?, Path::new("/tmp/lh"), &|k| env.get(k).cloned())
    }

    #[test]
    fn defaults_have_revisor_and_the_presets() {
        let c = resolve_text("", &[]).unwrap();
        assert_eq!(c.default_agent, "revisor");
        assert_eq!(c.max_running, 2);
        assert_eq!(c.max_queued, 20);
        assert_eq!(c.default_timeout, Duration::from_secs(1800));
        for name in ["revisor", "claude", "codex", "gemini"] {
            assert!(c.agents.contains_key(name), "{name}");
        }
        assert_eq!(c.agents["gemini"].args, ["--acp"]);
    }

    #[test]
    fn errors_name_the_key() {
        let e = resolve_text("max_running = 0", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_running"), "{e}");
        let e = resolve_text("bogus = 1", &[]).unwrap_err().to_string();
        assert!(e.contains("bogus"), "{e}");
        let e = resolve_text("[agents.x]\nargs = []", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.x.command"), "{e}");
        let e = resolve_text("", &[("LEGATE_MAX_QUEUED", "many")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("LEGATE_MAX_QUEUED"), "{e}");
        let e = resolve_text("default_agent = \"nobody\"", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("default_agent"), "{e}");
        let e = resolve_text("[agents.\"a b\"]\ncommand = \"x\"", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.a b"), "{e}");
    }

    #[test]
    fn env_overrides_the_file_and_tables_override_presets() {
        let c = resolve_text(
            "max_running = 3\n[agents.claude]\ncommand = \"/opt/claude-acp\"\nenv = { A = \"1\" }\n[agents.mine]\ncommand = \"my-agent\"\nargs = [\"--acp\"]\n",
            &[("LEGATE_MAX_RUNNING", "5")],
        )
        .unwrap();
        assert_eq!(c.max_running, 5);
        assert_eq!(c.agents["claude"].command, "/opt/claude-acp");
        assert_eq!(c.agents["claude"].preset.as_deref(), Some("claude"));
        assert_eq!(c.agents["claude"].env["A"], "1");
        assert_eq!(c.agents["mine"].kind, AgentKind::Acp);
        assert_eq!(c.agents["mine"].args, ["--acp"]);
    }
}
