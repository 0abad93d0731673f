//! Configuration: `$LEGATE_HOME/legate.toml`, then environment overrides, validated at start.
//!
//! Every error names the key it is about. Agents come from three places, later ones winning:
//! the built-in `revisor`, the presets `claude`, `codex`, `gemini` and `agy`, and
//! `[agents.NAME]` tables (which may override a preset's command, args and env, and choose the
//! kind: `acp`, the default, or `agy`). The built-in `tck` (the A2A TCK profile, `legate agent
//! tck`) exists only when a table names it: `[agents.tck]`.

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
    /// At most this many idle agent sessions are kept (least recently used stopped first).
    max_idle_sessions: Option<u64>,
    retention: Option<u64>,
    /// `best-effort` (default) or `required`: see `legate_confine::Requirement`.
    confinement: Option<String>,
    #[serde(default)]
    agents: BTreeMap<String, AgentTable>,
    /// `[mcp]`: the MCP front (see `crate::mcp`).
    #[serde(default)]
    mcp: crate::mcp::McpTable,
    /// `[a2a]`: the A2A front (see `crate::a2a`).
    #[serde(default)]
    a2a: crate::a2a::A2aTable,
    /// `[copies]`: copy workspaces and their review (see `crate::review_config`).
    #[serde(default)]
    copies: crate::review_config::CopiesTable,
    /// `[policy]` and `[[policy.rules]]`: the permission policy (see `crate::policy`).
    #[serde(default)]
    policy: legate_supervisor::policy::PolicyTable,
    /// `[roles.NAME]`: configured roles (see `crate::roles_config`).
    #[serde(default)]
    roles: BTreeMap<String, crate::roles_config::RoleTable>,
    /// `[supervision]`: approvals' deadline and the supervising agent (see
    /// `crate::supervision_config`).
    #[serde(default)]
    supervision: crate::supervision_config::SupervisionTable,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AgentTable {
    kind: Option<String>,
    model: Option<String>,
    inherit_env: Option<Vec<String>>,
    command: Option<String>,
    /// Where a remote agent is served, instead of `command` (see `kind_and_transport`).
    url: Option<String>,
    args: Option<Vec<String>>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    preset: Option<String>,
    allow_execute: Option<bool>,
    terminal: Option<bool>,
    description: Option<String>,
    /// The agent's private state directory (its `HOME`), instead of
    /// `$LEGATE_HOME/agents/<name>`. Absolute.
    state_dir: Option<PathBuf>,
}

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The engine's part.
    pub engine: EngineConfig,
    /// The MCP front's part (`[mcp]`).
    pub mcp: crate::mcp::McpSettings,
    /// The A2A front's part (`[a2a]`).
    pub a2a: crate::a2a::A2aSettings,
    /// The supervisor's token (see `crate::supervise`).
    pub supervisor: crate::supervise::SupervisorSettings,
    /// The file it came from, if one existed.
    pub file: Option<PathBuf>,
    /// The policy file `[policy] file` names, if any.
    pub policy_file: Option<PathBuf>,
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

/// Loads and validates the configuration (secrets given in the environment come from
/// `crate::harden`, which took them out of it).
pub fn load() -> Result<Config> {
    load_in(&home_dir()?, &crate::harden::var)
}

/// Loads and validates the configuration of `home` (its `legate.toml`, if any) with `env` as
/// the environment.
pub fn load_in(home: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
    let path = home.join("legate.toml");
    let file = match std::fs::read_to_string(&path) {
        Ok(text) => Some((
            parse(&text).with_context(|| format!("in {}", path.display()))?,
            path,
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("could not read {}", path.display())),
    };
    let (mut parsed, file_path) = match file {
        Some((f, p)) => (f, Some(p)),
        None => (File::default(), None),
    };
    let mcp = crate::mcp::resolve(std::mem::take(&mut parsed.mcp), home, env)?;
    let mut a2a = crate::a2a::resolve(std::mem::take(&mut parsed.a2a), home, env)?;
    let (policy, policy_file) = crate::policy::resolve(std::mem::take(&mut parsed.policy), home)?;
    let supervisor = crate::supervise::resolve(home, env)?;
    if let Some(s) = &supervisor.token {
        // The caller's and the supervisor's secrets are kept apart (see `crate::supervise`).
        let mut named = vec![(legate_token::bearer::SUPERVISOR_TOKEN_ENV, s)];
        named.extend(mcp.token.as_ref().map(|t| ("LEGATE_MCP_TOKEN", t)));
        named.extend(a2a.token.as_ref().map(|t| ("LEGATE_A2A_TOKEN", t)));
        legate_token::bearer::separate(&named)?;
    }
    let named: std::collections::BTreeSet<String> = parsed.agents.keys().cloned().collect();
    let supervision = std::mem::take(&mut parsed.supervision);
    let mut engine = resolve(parsed, home, env)?;
    engine.policy = policy;
    crate::supervision_config::apply(supervision, &mut engine)?;
    a2a.agents = engine
        .agents
        .keys()
        .filter(|n| named.contains(*n) || **n == engine.default_agent || *n == "revisor")
        .cloned()
        .collect();
    // Agents must never read a token, wherever it is configured, nor the configuration.
    engine.hidden.extend(
        [&mcp.token_file, &a2a.token_file, &supervisor.token_file]
            .into_iter()
            .cloned()
            .chain(file_path.clone())
            .chain(policy_file.clone()),
    );
    Ok(Config {
        engine,
        mcp,
        a2a,
        supervisor,
        file: file_path,
        policy_file,
    })
}

fn parse(text: &str) -> Result<File> {
    Ok(toml::from_str(text).map_err(|e| {
        legate_core::Error::caused_by(legate_core::ErrorCode::ConfigInvalid, e.to_string(), e)
    })?)
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
        legate_engine::MAX_TASK_TIMEOUT.as_secs(),
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
        "max_idle_sessions",
        "LEGATE_MAX_IDLE_SESSIONS",
        file.max_idle_sessions,
        0,
        4096,
    )? {
        c.max_idle_sessions = v as usize;
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

    let confinement = env("LEGATE_CONFINEMENT")
        .map(|v| (v, "LEGATE_CONFINEMENT"))
        .or(file.confinement.map(|v| (v, "confinement")));
    if let Some((value, key)) = confinement {
        c.confinement = legate_confine::Requirement::parse(value.trim()).with_context(|| {
            format!("CONFIG_INVALID: {key} must be \"best-effort\" or \"required\" (got {value:?})")
        })?;
    }

    crate::review_config::resolve(file.copies, env, &mut c.review)?;

    c.agents = builtin_agents()?;
    for (name, table) in file.agents {
        validate_name(&name).with_context(|| format!("CONFIG_INVALID: agents.{name}"))?;
        if let Some(dir) = &table.state_dir {
            if !dir.is_absolute() {
                bail!(
                    "CONFIG_INVALID: agents.{name}.state_dir must be an absolute path (got {})",
                    dir.display()
                );
            }
            c.state_dirs.insert(name.clone(), dir.clone());
        }
        let base = match c.agents.get(&name) {
            Some(b) => Some(b.clone()),
            None if name == "tck" => Some(tck_agent()?),
            None => None,
        };
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
        if (name == "revisor" || name == "tck") && table.command.is_some() {
            bail!("CONFIG_INVALID: agents.{name}.command cannot be changed; {name} is built in");
        }
        if name == "revisor" && table.kind.is_some() {
            bail!("CONFIG_INVALID: agents.revisor.kind cannot be changed; revisor is built in");
        }
        let kind = kind_of(&name, table.kind.as_deref(), base.as_ref())?;
        if let Some(url) = &table.url {
            url_refused(&name, &kind, url, table.command.is_some())?;
        }
        let command = match (table.command, &base) {
            (Some(cmd), _) if cmd.trim().is_empty() => {
                bail!("CONFIG_INVALID: agents.{name}.command is empty")
            }
            (Some(cmd), _) => cmd,
            (None, Some(b)) => b
                .local_command()
                .map(|c| c.command.clone())
                .unwrap_or_default(),
            (None, None) => bail!("CONFIG_INVALID: agents.{name}.command is required"),
        };
        for key in table.env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                bail!("CONFIG_INVALID: agents.{name}.env has an invalid variable name {key:?}");
            }
        }
        let base_local = base.as_ref().and_then(AgentSpec::local_command);
        let mut env = base_local.map(|b| b.env.clone()).unwrap_or_default();
        env.extend(table.env);
        if kind == AgentKind::AGY {
            if preset.is_some() {
                bail!(
                    "CONFIG_INVALID: agents.{name}.preset applies to ACP agents, not to kind agy"
                );
            }
            if command.contains('/') && !Path::new(&command).is_absolute() {
                bail!(
                    "CONFIG_INVALID: agents.{name}.command must be `agy` (found on PATH) or an absolute path (got {command:?})"
                );
            }
        }
        if let Some(m) = &table.model
            && (m.trim().is_empty() || m.len() > 128 || m.chars().any(char::is_whitespace))
        {
            bail!("CONFIG_INVALID: agents.{name}.model must be a model id or \"auto\" (got {m:?})");
        }
        let inherit_env = match table.inherit_env {
            Some(names) => {
                if let Err(e) = legate_backend::env::check_opt_ins(&names) {
                    bail!("CONFIG_INVALID: agents.{name}.inherit_env: {}", e.message);
                }
                names
            }
            None => base_local
                .map(|b| b.inherit_env.clone())
                .unwrap_or_default(),
        };
        let mut spec = AgentSpec::command(name.clone(), kind, command)
            .args(
                table
                    .args
                    .or_else(|| base_local.map(|b| b.args.clone()))
                    .unwrap_or_default(),
            )
            .envs(env)
            .inherit_env(inherit_env)
            .allow_execute(
                table
                    .allow_execute
                    .or(base.as_ref().map(|b| b.allow_execute))
                    .unwrap_or(false),
            )
            .terminal(
                table
                    .terminal
                    .or(base.as_ref().map(|b| b.terminal))
                    .unwrap_or(false),
            );
        spec.preset = preset;
        spec.description = table
            .description
            .or_else(|| base.as_ref().and_then(|b| b.description.clone()));
        spec.model = table
            .model
            .or_else(|| base.as_ref().and_then(|b| b.model.clone()));
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
    c.roles = crate::roles_config::resolve(file.roles, c.agents.keys().map(String::as_str))?;
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

/// The kinds a configured agent may name: every kind this build's registry serves, except
/// `revisor` (the built-in agent's own).
fn configurable_kinds() -> Vec<AgentKind> {
    legate_backend::Registry::builtin(legate_confine::Requirement::BestEffort)
        .kinds()
        .filter(|k| **k != AgentKind::REVISOR)
        .cloned()
        .collect()
}

/// `agents.NAME.kind`: the table's, else the preset's, else `acp`; `CONFIG_INVALID` unless
/// a backend of this build serves it.
fn kind_of(name: &str, kind: Option<&str>, base: Option<&AgentSpec>) -> Result<AgentKind> {
    let Some(kind) = kind else {
        return Ok(base.map_or(AgentKind::ACP, |b| b.kind.clone()));
    };
    let kinds = configurable_kinds();
    // The value is the configuration's, and may be anything: shown as a bounded excerpt.
    let shown: String = kind.chars().take(64).collect();
    match AgentKind::new(kind) {
        Ok(k) if kinds.contains(&k) => Ok(k),
        _ => bail!(
            "CONFIG_INVALID: agents.{name}.kind must be {} (got {shown:?})",
            kinds
                .iter()
                .map(AgentKind::as_str)
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    }
}

/// `agents.NAME.url` parses, but no backend of this build serves an agent at a URL (the
/// remote A2A backend will): always `CONFIG_INVALID`, saying why.
fn url_refused(name: &str, kind: &AgentKind, url: &str, with_command: bool) -> Result<()> {
    if with_command {
        bail!("CONFIG_INVALID: agents.{name} sets both command and url; an agent has one");
    }
    let shown: String = url.chars().take(200).collect();
    bail!(
        "CONFIG_INVALID: agents.{name}.url ({shown:?}): kind {kind} runs a local command, and no backend of this build serves an agent at a URL"
    )
}

/// The TCK profile (`legate agent tck`): an agent that behaves as the A2A TCK expects of its
/// system under test. Only configured agents named `tck` get it.
fn tck_agent() -> Result<AgentSpec> {
    let exe = std::env::current_exe().context("could not find the legate executable")?;
    Ok(
        AgentSpec::command("tck", AgentKind::ACP, exe.to_string_lossy().into_owned())
            .args(["agent", "tck"])
            .description(
                "built-in, no model: the A2A TCK profile (behaviours chosen by messageId prefix)",
            ),
    )
}

/// How to install the adapter a preset runs: the current npm package, which installs the
/// preset's default command. `None` for anything else.
pub fn install_hint(preset: &str) -> Option<&'static str> {
    match preset {
        "claude" => Some("npm install -g @agentclientprotocol/claude-agent-acp@0.101"),
        "codex" => Some("npm install -g @agentclientprotocol/codex-acp@2.6"),
        "gemini" => Some("npm install -g @google/gemini-cli@0.61"),
        _ => None,
    }
}

/// `revisor` plus the three presets, with the commands their npm packages install.
fn builtin_agents() -> Result<BTreeMap<String, AgentSpec>> {
    let exe = std::env::current_exe().context("could not find the legate executable")?;
    let mut agents = BTreeMap::new();
    agents.insert(
        "revisor".to_string(),
        AgentSpec::command(
            "revisor",
            AgentKind::REVISOR,
            exe.to_string_lossy().into_owned(),
        )
        .args(["agent", "revisor"])
        .description("built-in, no model: reads, summarises and follows simple instructions"),
    );
    let preset = |name: &str, command: &str, args: &[&str], description: &str| {
        AgentSpec::command(name, AgentKind::ACP, command)
            .args(args.iter().copied())
            .preset(name)
            .description(description)
    };
    agents.insert(
        "claude".into(),
        preset(
            "claude",
            "claude-agent-acp",
            &[],
            "Claude Code through @agentclientprotocol/claude-agent-acp (0.101; @zed-industries/claude-agent-acp 0.23 still works)",
        ),
    );
    agents.insert(
        "codex".into(),
        preset(
            "codex",
            "codex-acp",
            &[],
            "Codex through @agentclientprotocol/codex-acp (2.6; @zed-industries/codex-acp 0.16 still works)",
        ),
    );
    agents.insert(
        "gemini".into(),
        preset(
            "gemini",
            "gemini",
            &["--acp"],
            "Gemini CLI in ACP mode (@google/gemini-cli 0.61)",
        ),
    );
    agents.insert(
        "agy".into(),
        AgentSpec {
            kind: AgentKind::AGY,
            preset: None,
            ..preset(
                "agy",
                "agy",
                &[],
                "Antigravity CLI, headless stream-json (one process per turn)",
            )
        },
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
    fn presets_name_the_current_packages() {
        let c = resolve_text("", &[]).unwrap();
        for (name, package) in [
            ("claude", "@agentclientprotocol/claude-agent-acp"),
            ("codex", "@agentclientprotocol/codex-acp"),
            ("gemini", "@google/gemini-cli"),
        ] {
            let description = c.agents[name].description.as_deref().unwrap();
            assert!(description.contains(package), "{description}");
            assert!(install_hint(name).unwrap().contains(package));
        }
        assert_eq!(c.agents["claude"].target(), "claude-agent-acp");
        assert_eq!(c.agents["codex"].target(), "codex-acp");
        assert_eq!(install_hint("revisor"), None);
    }

    #[test]
    fn defaults_have_revisor_and_the_presets() {
        let c = resolve_text("", &[]).unwrap();
        assert_eq!(c.default_agent, "revisor");
        assert_eq!(c.max_running, 2);
        assert_eq!(c.max_queued, 20);
        assert_eq!(c.default_timeout, Duration::from_secs(1800));
        for name in ["revisor", "claude", "codex", "gemini", "agy"] {
            assert!(c.agents.contains_key(name), "{name}");
        }
        assert_eq!(c.agents["gemini"].local_command().unwrap().args, ["--acp"]);
        assert!(!c.agents.contains_key("tck"), "tck only when configured");
    }

    #[test]
    fn a2a_serves_the_named_agents_the_default_and_revisor_only() {
        let dir = tempfile::tempdir().unwrap();
        let load = |text: &str| {
            std::fs::write(dir.path().join("legate.toml"), text).unwrap();
            load_in(dir.path(), &|_| None).unwrap().a2a.agents
        };
        assert_eq!(load(""), ["revisor"]);
        assert_eq!(load("[agents.claude]\n"), ["claude", "revisor"]);
        assert_eq!(
            load("default_agent = \"tck\"\n[agents.tck]\n[agents.mine]\ncommand = \"/bin/true\"\n"),
            ["mine", "revisor", "tck"]
        );
    }

    #[test]
    fn the_tck_profile_is_built_in_when_named() {
        let c = resolve_text("default_agent = \"tck\"\n[agents.tck]\n", &[]).unwrap();
        assert_eq!(c.default_agent, "tck");
        let tck = &c.agents["tck"];
        assert_eq!(tck.kind, AgentKind::ACP);
        assert_eq!(tck.local_command().unwrap().args, ["agent", "tck"]);
        assert_eq!(tck.preset, None);
        assert!(tck.description.as_deref().unwrap().contains("TCK"));
        let e = resolve_text("[agents.tck]\ncommand = \"/bin/true\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.tck.command"), "{e}");
    }

    #[test]
    fn confinement_and_state_dirs() {
        let c = resolve_text("", &[]).unwrap();
        assert_eq!(c.confinement, legate_confine::Requirement::BestEffort);
        assert_eq!(c.state_dir("claude"), Path::new("/tmp/lh/agents/claude"));
        let c = resolve_text(
            "confinement = \"required\"\n[agents.claude]\nstate_dir = \"/srv/claude-home\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.confinement, legate_confine::Requirement::Required);
        assert_eq!(c.state_dir("claude"), Path::new("/srv/claude-home"));
        assert_eq!(c.state_dir("codex"), Path::new("/tmp/lh/agents/codex"));
        let c = resolve_text(
            "confinement = \"required\"",
            &[("LEGATE_CONFINEMENT", "best-effort")],
        )
        .unwrap();
        assert_eq!(c.confinement, legate_confine::Requirement::BestEffort);
        let e = resolve_text("confinement = \"strict\"", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("confinement"), "{e}");
        let e = resolve_text("[agents.claude]\nstate_dir = \"rel\"", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.claude.state_dir"), "{e}");
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
    fn the_idle_session_cap_comes_from_the_file_or_the_environment() {
        assert_eq!(resolve_text("", &[]).unwrap().max_idle_sessions, 16);
        let c = resolve_text("max_idle_sessions = 0", &[]).unwrap();
        assert_eq!(c.max_idle_sessions, 0);
        let c = resolve_text(
            "max_idle_sessions = 3",
            &[("LEGATE_MAX_IDLE_SESSIONS", "7")],
        )
        .unwrap();
        assert_eq!(c.max_idle_sessions, 7);
        let e = resolve_text("max_idle_sessions = 5000", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("max_idle_sessions"), "{e}");
    }

    #[test]
    fn env_overrides_the_file_and_tables_override_presets() {
        let c = resolve_text(
            "max_running = 3\n[agents.claude]\ncommand = \"/opt/claude-acp\"\nenv = { A = \"1\" }\n[agents.mine]\ncommand = \"my-agent\"\nargs = [\"--acp\"]\n",
            &[("LEGATE_MAX_RUNNING", "5")],
        )
        .unwrap();
        assert_eq!(c.max_running, 5);
        assert_eq!(
            c.agents["claude"].local_command().unwrap().command,
            "/opt/claude-acp"
        );
        assert_eq!(c.agents["claude"].preset.as_deref(), Some("claude"));
        assert_eq!(c.agents["claude"].local_command().unwrap().env["A"], "1");
        assert_eq!(c.agents["mine"].kind, AgentKind::ACP);
        assert_eq!(c.agents["mine"].local_command().unwrap().args, ["--acp"]);
    }

    #[test]
    fn agy_agents_take_a_kind_a_model_and_opt_ins() {
        let c = resolve_text(
            "[agents.agy]\ncommand = \"/opt/agy/bin/agy\"\nmodel = \"mock-pro\"\ninherit_env = [\"MY_TOOL_SETTING\"]\n[agents.other]\nkind = \"agy\"\ncommand = \"agy\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.agents["agy"].kind, AgentKind::AGY);
        assert_eq!(
            c.agents["agy"].local_command().unwrap().command,
            "/opt/agy/bin/agy"
        );
        assert_eq!(c.agents["agy"].model.as_deref(), Some("mock-pro"));
        assert_eq!(
            c.agents["agy"].local_command().unwrap().inherit_env,
            ["MY_TOOL_SETTING"]
        );
        assert_eq!(c.agents["other"].kind, AgentKind::AGY);
        let e = resolve_text("[agents.x]\nkind = \"agy\"\ncommand = \"bin/agy\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.x.command"), "{e}");
        let e = resolve_text("[agents.x]\nkind = \"a2a\"\ncommand = \"agy\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.x.kind"), "{e}");
        assert!(e.contains("acp or agy"), "{e}");
        for kind in ["revisor", "ACP", "../acp", ""] {
            let e = resolve_text(
                &format!("[agents.x]\nkind = {kind:?}\ncommand = \"a\"\n"),
                &[],
            )
            .unwrap_err()
            .to_string();
            assert!(e.contains("agents.x.kind"), "{kind}: {e}");
        }
        for bad in [
            "NODE_OPTIONS",
            " node_options ",
            "LD_PRELOAD",
            "dyld_insert_libraries",
        ] {
            let e = resolve_text(&format!("[agents.agy]\ninherit_env = [\"{bad}\"]\n"), &[])
                .unwrap_err()
                .to_string();
            assert!(e.contains("agents.agy.inherit_env"), "{e}");
            assert!(e.contains(bad.trim()), "{e}");
        }
    }

    proptest::proptest! {
        /// A hostile `kind` (any text, of any length) is `CONFIG_INVALID` naming the field,
        /// and the error shows a bounded, escaped excerpt of it, never the whole value.
        #[test]
        fn a_hostile_kind_is_refused_with_a_bounded_excerpt(
            kind in r"[^\x00]{0,40}|[a-z]{4000,5000}|.{0,8}\n\x1b\[2J.{0,8}"
        ) {
            proptest::prop_assume!(!["acp", "agy"].contains(&kind.as_str()));
            let text = format!(
                "[agents.x]\nkind = {}\ncommand = \"a\"\n",
                toml::Value::String(kind.clone())
            );
            let e = resolve_text(&text, &[]).unwrap_err().to_string();
            proptest::prop_assert!(e.starts_with("CONFIG_INVALID: agents.x.kind"), "{}", e);
            proptest::prop_assert!(e.len() < 400, "{} bytes", e.len());
            proptest::prop_assert!(!e.contains('\n') && !e.contains('\u{1b}'), "{:?}", e);
        }
    }

    #[test]
    fn a_url_parses_and_no_backend_of_this_build_serves_it() {
        let e = resolve_text("[agents.r]\nurl = \"https://agents.example/r\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("CONFIG_INVALID: agents.r.url"), "{e}");
        assert!(e.contains("no backend of this build serves"), "{e}");
        let e = resolve_text(
            "[agents.r]\ncommand = \"x\"\nurl = \"https://agents.example/r\"\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("both command and url"), "{e}");
    }
}
