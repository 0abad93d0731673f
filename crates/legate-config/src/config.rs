//! Configuration: `$LEGATE_HOME/legate.toml`, then environment overrides, validated at start.
//!
//! Owns the file's shape (unknown keys are errors), reading it, the engine's numbers and
//! confinement, and assembling the parts each front resolves itself (`[mcp]`, `[a2a]`,
//! `[policy]`, `[copies]`, `[roles]`, `[supervision]`, `[memory]`, `[output]`, `[tap]`, `[skills]`, `[controls]`,
//! `[network]` and `[[mcp_servers]]`). Every error names the key it is
//! about. Agents come from `crate::agents` (the built-in `revisor`, the presets, and
//! `[agents.NAME]` tables); this module never builds an `AgentSpec` itself. Agents must never
//! read the configuration or a token: every such file is added to the engine's hidden paths.

use crate::{Error, Result, invalid, refuse};
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
    /// At most this many nodes in a new group (default 32, the seed's limit).
    max_group_nodes: Option<u64>,
    /// The largest prompt the agent reads, in characters (default 50,000, the seed's).
    max_prompt_chars: Option<u64>,
    /// `best-effort` (default) or `required`: see `legate_confine::Requirement`.
    confinement: Option<String>,
    #[serde(default)]
    agents: BTreeMap<String, crate::agents::AgentTable>,
    /// `[mcp]`: the MCP front (see `crate::mcp`).
    #[serde(default)]
    mcp: crate::mcp::McpTable,
    /// `[a2a]`: the A2A front (see `crate::a2a`).
    #[serde(default)]
    a2a: crate::a2a::A2aTable,
    /// `[ui]`: the dashboard (see `crate::fronts`).
    #[serde(default)]
    ui: crate::fronts::UiTable,
    /// `[copies]`: copy workspaces and their review (see `crate::review`).
    #[serde(default)]
    copies: crate::review::CopiesTable,
    /// `[policy]` and `[[policy.rules]]`: the permission policy (see `crate::policy`).
    #[serde(default)]
    policy: legate_supervisor::policy::PolicyTable,
    /// `[roles.NAME]`: configured roles (see `crate::roles`).
    #[serde(default)]
    roles: BTreeMap<String, crate::roles::RoleTable>,
    /// `[supervision]`: approvals' deadline and the supervising agent (see
    /// `crate::supervision`).
    #[serde(default)]
    supervision: crate::supervision::SupervisionTable,
    /// `[memory]`: private memory limits (see `crate::memory`).
    #[serde(default)]
    memory: crate::memory::MemoryTable,
    /// `[output]`: how much of its agent's output one task keeps (see `crate::output`).
    #[serde(default)]
    output: crate::output::OutputTable,
    /// Directories that are never a workspace, copy source or test root.
    forbidden_directories: Option<Vec<String>>,
    /// `[skills]`: the bundled skill packs, or another directory of packs (see
    /// `crate::skills`).
    #[serde(default)]
    skills: crate::skills::SkillsTable,
    /// `[controls]`: the ceiling of tool kinds (see `crate::controls`).
    #[serde(default)]
    controls: crate::controls::ControlsTable,
    /// `[[mcp_servers]]`: the catalogue of trusted MCP servers (see `crate::controls`).
    #[serde(default)]
    mcp_servers: Vec<crate::controls::McpServerTable>,
    /// `[network]`: the egress policy (see `crate::network`).
    #[serde(default)]
    network: legate_supervisor::network::NetworkConfig,
    /// `[kubernetes]`: the cluster agents with `runtime = "kubernetes"` run in (see
    /// `crate::kubernetes`).
    #[serde(default)]
    kubernetes: crate::kubernetes::KubernetesTable,
    /// `[logs]`: the log files' bounds and level (see `crate::logs`).
    #[serde(default)]
    logs: crate::logs::LogsTable,
    /// `[tap]`: how much of a tapped task's wire is kept (see `crate::tap`).
    #[serde(default)]
    tap: crate::tap::TapTable,
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
    /// The dashboard's part (`[ui]`).
    pub ui: crate::fronts::UiSettings,
    /// The supervisor's token (see `crate::fronts`).
    pub supervisor: crate::fronts::SupervisorSettings,
    /// The file it came from, if one existed.
    pub file: Option<PathBuf>,
    /// The policy file `[policy] file` names, if any.
    pub policy_file: Option<PathBuf>,
    /// The log files (`[logs]`).
    pub logs: crate::logs::LogSettings,
}

/// `$LEGATE_HOME`, or `~/.legate`.
pub fn home_dir() -> Result<PathBuf> {
    if let Some(h) = std::env::var_os("LEGATE_HOME").filter(|h| !h.is_empty()) {
        let p = PathBuf::from(h);
        if !p.is_absolute() {
            return Err(Error::RelativeHome(p));
        }
        return Ok(p);
    }
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .ok_or(Error::NoHome)?;
    Ok(PathBuf::from(home).join(".legate"))
}

/// Loads and validates the configuration of `home` (its `legate.toml`, if any) with `env` as
/// the environment (the binary passes the secrets it took out of its own).
pub fn load_in(home: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
    let path = home.join("legate.toml");
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let parsed = parse(&text).map_err(|e| Error::In {
                path: path.clone(),
                source: e,
            })?;
            assemble(parsed, Some(path), home, env)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            assemble(File::default(), None, home, env)
        }
        Err(source) => Err(Error::Read { path, source }),
    }
}

/// Validates `text` as the configuration of `home` (as if it were `home/legate.toml`, but
/// read from no file) with `env` as the environment.
pub fn from_toml(text: &str, home: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<Config> {
    assemble(parse(text)?, None, home, env)
}

/// Resolves every part of a parsed file into the configuration.
fn assemble(
    mut parsed: File,
    file_path: Option<PathBuf>,
    home: &Path,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config> {
    let mcp = crate::mcp::resolve(std::mem::take(&mut parsed.mcp), home, env)?;
    let mut a2a = crate::a2a::resolve(std::mem::take(&mut parsed.a2a), home, env)?;
    let ui = crate::fronts::resolve_ui(std::mem::take(&mut parsed.ui))?;
    let (policy, policy_file) = crate::policy::resolve(std::mem::take(&mut parsed.policy), home)?;
    let supervisor = crate::fronts::resolve_supervisor(home, env)?;
    let logs = crate::logs::resolve(std::mem::take(&mut parsed.logs))?;
    if let Some(s) = &supervisor.token {
        // The caller's and the supervisor's secrets are kept apart (see `crate::fronts`).
        let mut named = vec![(legate_token::bearer::SUPERVISOR_TOKEN_ENV, s)];
        named.extend(mcp.token.as_ref().map(|t| ("LEGATE_MCP_TOKEN", t)));
        named.extend(a2a.token.as_ref().map(|t| ("LEGATE_A2A_TOKEN", t)));
        legate_token::bearer::separate(&named)?;
    }
    let named: std::collections::BTreeSet<String> = parsed.agents.keys().cloned().collect();
    let supervision = std::mem::take(&mut parsed.supervision);
    let controls = crate::controls::resolve(
        std::mem::take(&mut parsed.controls),
        std::mem::take(&mut parsed.mcp_servers),
    )?;
    let mut engine = resolve(parsed, home, env)?;
    engine.controls = controls;
    engine.policy = policy;
    crate::supervision::apply(supervision, &mut engine)?;
    // The copy-workspace extension's bound is the A2A front's setting, applied by the engine.
    engine.fronts.max_transfer_bytes = a2a.max_transfer_bytes;
    a2a.agents = engine
        .agents
        .keys()
        .filter(|n| named.contains(*n) || **n == engine.default_agent || *n == "revisor")
        .cloned()
        .collect();
    // Agents must never read a token, wherever it is configured (a remote agent's own
    // `token_file` too), a TLS private key, nor the configuration.
    let remote_tokens: Vec<PathBuf> = engine
        .agents
        .values()
        .filter_map(|a| match &a.remote()?.token {
            Some(legate_core::TokenRef::File(path)) => Some(path.clone()),
            _ => None,
        })
        .collect();
    engine.hidden.extend(
        [&mcp.token_file, &a2a.token_file, &supervisor.token_file]
            .into_iter()
            .cloned()
            .chain(remote_tokens)
            .chain(a2a.tls.as_ref().map(|t| t.key.clone()))
            .chain(mcp.tls.as_ref().map(|t| t.key.clone()))
            .chain(file_path.clone())
            .chain(policy_file.clone()),
    );
    Ok(Config {
        engine,
        mcp,
        a2a,
        ui,
        supervisor,
        file: file_path,
        policy_file,
        logs,
    })
}

/// `text` as TOML of shape `T`: `CONFIG_INVALID` with the parser's own sentence, its error kept.
pub(crate) fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Result<T, legate_core::Error> {
    toml::from_str(text).map_err(|e| {
        // The parser's sentence is the message (the code goes before it); its error is kept.
        legate_core::Error::caused_by(legate_core::ErrorCode::ConfigInvalid, e.to_string(), e)
    })
}

/// The range of `max_prompt_chars`: room for a role's instructions and Legate's framing, and
/// at most a million characters (4 MiB of UTF-8 at worst).
const MIN_PROMPT_CHARS: u64 = 1_000;
const MAX_PROMPT_CHARS: u64 = 1_000_000;

fn resolve(file: File, home: &Path, env: &dyn Fn(&str) -> Option<String>) -> Result<EngineConfig> {
    let mut c = EngineConfig::new(Paths::new(home));
    let number = |key: &str, env_key: &str, from_file: Option<u64>, min: u64, max: u64| {
        number(env, key, env_key, from_file, min, max)
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
    if let Some(v) = number(
        "max_group_nodes",
        "LEGATE_MAX_GROUP_NODES",
        file.max_group_nodes,
        1,
        legate_engine::MAX_NODES as u64,
    )? {
        c.max_group_nodes = v as usize;
    }
    if let Some(v) = number(
        "max_prompt_chars",
        "LEGATE_MAX_PROMPT_CHARS",
        file.max_prompt_chars,
        MIN_PROMPT_CHARS,
        MAX_PROMPT_CHARS,
    )? {
        c.max_prompt_chars = v as usize;
    }

    let confinement = env("LEGATE_CONFINEMENT")
        .map(|v| (v, "LEGATE_CONFINEMENT"))
        .or(file.confinement.map(|v| (v, "confinement")));
    if let Some((value, key)) = confinement {
        c.confinement = legate_confine::Requirement::parse(value.trim()).ok_or_else(|| {
            invalid!("{key} must be \"best-effort\" or \"required\" (got {value:?})")
        })?;
    }

    crate::review::resolve(file.copies, env, &mut c.review)?;
    crate::memory::apply(file.memory, file.forbidden_directories, env, &mut c)?;
    crate::output::apply(file.output, &mut c)?;
    crate::tap::apply(file.tap, &mut c)?;
    crate::skills::apply(file.skills, &mut c)?;

    let agent_networks = file
        .agents
        .iter()
        .filter_map(|(name, table)| table.network().map(|n| (name.clone(), n.clone())))
        .collect();
    crate::network::apply(&file.network, agent_networks, &mut c);
    crate::agents::resolve(file.agents, &file.kubernetes, &mut c)?;

    let default = env("LEGATE_DEFAULT_AGENT")
        .map(|v| (v, "LEGATE_DEFAULT_AGENT"))
        .or(file.default_agent.map(|v| (v, "default_agent")));
    if let Some((name, key)) = default {
        if !c.agents.contains_key(&name) {
            refuse!("{key} names {name:?}, which is not a configured agent");
        }
        c.default_agent = name;
    }
    c.roles = crate::roles::resolve(file.roles, c.agents.keys().map(String::as_str))?;
    Ok(c)
}

/// A whole number from `env_key` in the environment, else the file's value (`key`), checked
/// to lie in `min..=max`; `CONFIG_INVALID` naming where it came from otherwise.
pub(crate) fn number(
    env: &dyn Fn(&str) -> Option<String>,
    key: &str,
    env_key: &str,
    from_file: Option<u64>,
    min: u64,
    max: u64,
) -> Result<Option<u64>> {
    let (value, origin) = match env(env_key) {
        Some(v) => (
            Some(
                v.trim()
                    .parse::<u64>()
                    .map_err(|_| invalid!("{env_key} must be a whole number (got {v:?})"))?,
            ),
            env_key,
        ),
        None => (from_file, key),
    };
    if let Some(v) = value
        && !(min..=max).contains(&v)
    {
        refuse!("{origin} must be between {min} and {max} (got {v})");
    }
    Ok(value)
}

/// The engine's configuration `text` resolves to, with `env` as the environment and
/// `/tmp/lh` as `$LEGATE_HOME` (for the tests of this module and `crate::agents`).
#[cfg(test)]
pub(crate) fn resolve_text(text: &str, env: &[(&str, &str)]) -> Result<EngineConfig> {
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    resolve(parse(text)?, Path::new("/tmp/lh"), &|k| env.get(k).cloned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use legate_core::AgentKind;

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
    fn a_remote_agents_token_file_and_the_tls_key_are_hidden_from_agents() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("legate.toml"),
            "[a2a]\ntls_cert_file = \"/etc/legate/cert.pem\"\ntls_key_file = \"/etc/legate/key.pem\"\n\
             [agents.far]\nurl = \"https://build-1.example/\"\ntoken_file = \"/etc/legate/far.token\"\n\
             [agents.near]\nurl = \"https://build-2.example/\"\ntoken_env = \"NEAR_TOKEN\"\n",
        )
        .unwrap();
        let hidden = load_in(dir.path(), &|_| None)
            .unwrap()
            .engine
            .hidden_paths();
        for secret in ["/etc/legate/far.token", "/etc/legate/key.pem"] {
            assert!(
                hidden.contains(&PathBuf::from(secret)),
                "{secret}: {hidden:?}"
            );
        }
        // A certificate is no secret.
        assert!(!hidden.contains(&PathBuf::from("/etc/legate/cert.pem")));
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
    fn the_group_node_and_prompt_limits_are_the_seeds_unless_changed_within_their_range() {
        type Limit = (
            &'static str,
            &'static str,
            fn(&EngineConfig) -> usize,
            [usize; 4],
        );
        // key, environment, read, [the seed's default, from the file, from the environment,
        // the largest]; 0 and one past the largest are refused.
        let limits: [Limit; 2] = [
            (
                "max_group_nodes",
                "LEGATE_MAX_GROUP_NODES",
                |c| c.max_group_nodes,
                [32, 64, 50, 256],
            ),
            (
                "max_prompt_chars",
                "LEGATE_MAX_PROMPT_CHARS",
                |c| c.max_prompt_chars,
                [50_000, 100_000, 2_000, 1_000_000],
            ),
        ];
        for (key, env, read, [default, file, from_env, max]) in limits {
            assert_eq!(read(&resolve_text("", &[]).unwrap()), default);
            let text = format!("{key} = {file}");
            assert_eq!(read(&resolve_text(&text, &[]).unwrap()), file);
            let c = resolve_text(&text, &[(env, &from_env.to_string())]).unwrap();
            assert_eq!(read(&c), from_env);
            for bad in [0, max + 1] {
                let e = resolve_text(&format!("{key} = {bad}"), &[])
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("CONFIG_INVALID") && e.contains(key), "{e}");
            }
        }
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
}
