//! `[agents.NAME]`: resolving the configured agents into `AgentSpec`s.
//!
//! Owns the built-in agents (`revisor`, the presets `claude`, `codex`, `gemini` and `agy`,
//! and `tck` when a table names it), the `[agents.NAME]` table's shape, and merging a table
//! over the agent it overrides. Every error is `CONFIG_INVALID` naming the key, and shows a
//! bounded excerpt of a hostile value, never the whole. It never reads the file or the
//! environment itself: `crate::config` hands it the parsed tables.

use crate::{Error, Result, refuse};
use legate_core::{AgentCredentials, AgentKind, AgentSpec};
use legate_engine::EngineConfig;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AgentTable {
    kind: Option<String>,
    model: Option<String>,
    inherit_env: Option<Vec<String>>,
    command: Option<String>,
    /// Where a remote agent (kind `a2a`) is served, instead of `command`: its card or the
    /// base URL its card is under.
    url: Option<String>,
    /// The remote agent's bearer token: the variable holding it, or a 0600 file.
    token_env: Option<String>,
    token_file: Option<PathBuf>,
    /// Never accepted: a token is not written in `legate.toml` (read only to refuse it).
    token: Option<toml::Value>,
    /// The remote agent, when it is not the card's default.
    agent: Option<String>,
    max_transfer_bytes: Option<u64>,
    allow_unsupervised: Option<bool>,
    /// The CA certificates an `https://` remote's certificate is checked against (absolute).
    tls_ca_file: Option<PathBuf>,
    /// Whether the bearer token may cross a network over plain `http://`.
    allow_plain_http: Option<bool>,
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
    /// `"environment"` (the default) or `"proxy"`: where a preset agent's model credentials
    /// are (`AgentSpec::credentials`).
    credentials: Option<String>,
    /// `[agents.NAME.network]`: egress rules of this agent's own, added to `[network]`
    /// (read by `crate::network`).
    network: Option<legate_supervisor::network::NetworkConfig>,
    /// `"local"` (the default) or `"kubernetes"`: where the agent's process runs.
    runtime: Option<String>,
    /// The agent's image, with `runtime = "kubernetes"`.
    image: Option<String>,
    /// The agent's command in its pod (default: its `command` and `args`; revisor's own).
    pod_command: Option<Vec<String>>,
    /// The processes (threads included) its local process tree may have at once.
    max_processes: Option<u32>,
    /// The memory its local process tree may use, in MiB.
    max_memory_mb: Option<u64>,
    /// Whether every task of this agent records its protocol frames (the wire tap).
    tap: Option<bool>,
    /// How many initialized sessions of this agent to keep ready for the next task (0 to
    /// `legate_engine::MAX_WARM`; ACP agents Legate starts locally).
    warm: Option<u64>,
}

impl AgentTable {
    /// The agent's own egress rules, if its table has any.
    pub(crate) fn network(&self) -> Option<&legate_supervisor::network::NetworkConfig> {
        self.network.as_ref()
    }
}

/// Sets `c.agents` to the built-in agents with `tables` merged over them (and `c.state_dirs`
/// to the tables' `state_dir`s).
pub(crate) fn resolve(
    tables: BTreeMap<String, AgentTable>,
    kubernetes: &crate::kubernetes::KubernetesTable,
    c: &mut EngineConfig,
) -> Result<()> {
    c.agents = builtin_agents()?;
    for (name, table) in tables {
        validate_name(&name).map_err(|e| Error::invalid_because(format!("agents.{name}"), e))?;
        if let Some(dir) = &table.state_dir {
            if !dir.is_absolute() {
                refuse!(
                    "agents.{name}.state_dir must be an absolute path (got {})",
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
            refuse!("agents.{name}.preset must be one of claude, codex, gemini (got {p:?})");
        }
        if (name == "revisor" || name == "tck") && table.command.is_some() {
            refuse!("agents.{name}.command cannot be changed; {name} is built in");
        }
        if name == "revisor" && table.kind.is_some() {
            refuse!("agents.revisor.kind cannot be changed; revisor is built in");
        }
        if table.token.is_some() {
            refuse!(
                "agents.{name}.token: a token is never written in legate.toml; name it with token_env = \"VAR\" or token_file = \"/path\""
            );
        }
        let kind = if table.kind.is_none() && table.url.is_some() && base.is_none() {
            legate_remote::kind()
        } else {
            kind_of(&name, table.kind.as_deref(), base.as_ref())?
        };
        let credentials = match table.credentials.as_deref() {
            None => base.as_ref().map(|b| b.credentials).unwrap_or_default(),
            Some("environment") => AgentCredentials::Environment,
            Some("proxy") => AgentCredentials::Proxy,
            Some(other) => {
                let shown: String = other.chars().take(64).collect();
                refuse!(
                    "agents.{name}.credentials must be \"environment\" or \"proxy\" (got {shown:?})"
                );
            }
        };
        if credentials == AgentCredentials::Proxy
            && (preset.is_none() || kind != AgentKind::ACP || table.url.is_some())
        {
            refuse!(
                "agents.{name}.credentials = \"proxy\" applies to ACP agents with a preset (claude, codex, gemini): only their model host is known"
            );
        }
        let tap = table
            .tap
            .unwrap_or_else(|| base.as_ref().is_some_and(|b| b.tap));
        let pod = crate::kubernetes::AgentPod {
            runtime: table.runtime.clone(),
            image: table.image.clone(),
            pod_command: table.pod_command.clone(),
        };
        let limits = crate::limits::resolve(
            &name,
            table.max_processes,
            table.max_memory_mb,
            base.as_ref(),
        )?;
        if let Some(n) = table.warm {
            let local_acp = kind == AgentKind::ACP || kind == AgentKind::REVISOR;
            if !local_acp
                || table.url.is_some()
                || pod.runtime.as_deref().is_some_and(|r| r != "local")
            {
                refuse!(
                    "agents.{name}.warm applies to ACP agents Legate starts on this machine, not to kind {kind} or a pod"
                );
            }
            if n > legate_engine::MAX_WARM as u64 {
                refuse!(
                    "agents.{name}.warm must be 0 to {} (got {n})",
                    legate_engine::MAX_WARM
                );
            }
            if n > 0 {
                c.warm.insert(name.clone(), n as usize);
            } else {
                c.warm.remove(&name);
            }
        }
        if kind.as_str() == legate_remote::KIND || table.url.is_some() {
            if table.max_processes.is_some() || table.max_memory_mb.is_some() {
                refuse!(
                    "agents.{name}.max_processes and max_memory_mb apply to agents Legate starts, not to remote agents"
                );
            }
            if pod.runtime.is_some() || pod.image.is_some() || pod.pod_command.is_some() {
                refuse!(
                    "agents.{name}.runtime, image and pod_command apply to agents Legate starts, not to remote agents"
                );
            }
            let mut spec = remote_agent(&name, kind, table, base.as_ref())?;
            spec.tap = tap;
            c.agents.insert(name, spec);
            continue;
        }
        for (field, set) in [
            ("token_env", table.token_env.is_some()),
            ("token_file", table.token_file.is_some()),
            ("agent", table.agent.is_some()),
            ("max_transfer_bytes", table.max_transfer_bytes.is_some()),
            ("allow_unsupervised", table.allow_unsupervised.is_some()),
            ("tls_ca_file", table.tls_ca_file.is_some()),
            ("allow_plain_http", table.allow_plain_http.is_some()),
        ] {
            if set {
                refuse!(
                    "agents.{name}.{field} applies to remote agents (kind = \"a2a\"), not to kind {kind}"
                );
            }
        }
        let command = match (table.command, &base) {
            (Some(cmd), _) if cmd.trim().is_empty() => {
                refuse!("agents.{name}.command is empty")
            }
            (Some(cmd), _) => cmd,
            (None, Some(b)) => b
                .local_command()
                .map(|c| c.command.clone())
                .unwrap_or_default(),
            (None, None) => refuse!("agents.{name}.command is required"),
        };
        for key in table.env.keys() {
            if key.is_empty() || key.contains('=') || key.contains('\0') {
                refuse!("agents.{name}.env has an invalid variable name {key:?}");
            }
        }
        let base_local = base.as_ref().and_then(AgentSpec::local_command);
        let mut env = base_local.map(|b| b.env.clone()).unwrap_or_default();
        env.extend(table.env);
        if kind == AgentKind::AGY {
            if preset.is_some() {
                refuse!("agents.{name}.preset applies to ACP agents, not to kind agy");
            }
            if command.contains('/') && !Path::new(&command).is_absolute() {
                refuse!(
                    "agents.{name}.command must be `agy` (found on PATH) or an absolute path (got {command:?})"
                );
            }
        }
        if let Some(m) = &table.model
            && (m.trim().is_empty() || m.len() > 128 || m.chars().any(char::is_whitespace))
        {
            refuse!("agents.{name}.model must be a model id or \"auto\" (got {m:?})");
        }
        let inherit_env = match table.inherit_env {
            Some(names) => {
                if let Err(e) = legate_backend::env::check_opt_ins(&names) {
                    refuse!("agents.{name}.inherit_env: {}", e.message);
                }
                names
            }
            None => base_local
                .map(|b| b.inherit_env.clone())
                .unwrap_or_default(),
        };
        let mut spec = AgentSpec::command(name.clone(), kind.clone(), command)
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
        spec.credentials = credentials;
        let default_command = if kind == AgentKind::REVISOR {
            vec![
                "legate".to_string(),
                "agent".to_string(),
                "revisor".to_string(),
            ]
        } else {
            spec.local_command()
                .map(|l| {
                    std::iter::once(l.command.clone())
                        .chain(l.args.iter().cloned())
                        .collect()
                })
                .unwrap_or_default()
        };
        if let Some(settings) =
            crate::kubernetes::resolve(&name, &kind, &pod, default_command, kubernetes)?
        {
            if table.max_processes.is_some() || table.max_memory_mb.is_some() {
                refuse!(
                    "agents.{name}.max_processes and max_memory_mb apply to local processes; a pod's are its [kubernetes] cpu and memory"
                );
            }
            spec.runtime = legate_core::AgentRuntime::Kubernetes(Box::new(settings));
        }
        spec.limits = limits;
        spec.tap = tap;
        c.agents.insert(name, spec);
    }
    Ok(())
}

/// A name that is not 1 to 64 letters, digits, `-` or `_`.
#[derive(Debug, thiserror::Error)]
#[error("an agent name must be 1 to 64 letters, digits, '-' or '_'")]
struct BadName;

fn validate_name(name: &str) -> Result<(), BadName> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        return Err(BadName);
    }
    Ok(())
}

/// The kinds a configured agent may name: every kind this build's registry serves, except
/// `revisor` (the built-in agent's own).
fn configurable_kinds() -> Vec<AgentKind> {
    crate::backends(legate_confine::Requirement::BestEffort)
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
        _ => refuse!(
            "agents.{name}.kind must be {} (got {shown:?})",
            kinds
                .iter()
                .map(AgentKind::as_str)
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    }
}

/// A remote agent's table (`kind = "a2a"`): a `url` and none of a local command's fields,
/// the token named (`token_env` or `token_file`, not both), the remote agent's name checked.
fn remote_agent(
    name: &str,
    kind: AgentKind,
    table: AgentTable,
    base: Option<&AgentSpec>,
) -> Result<AgentSpec> {
    if kind.as_str() != legate_remote::KIND {
        let shown: String = table
            .url
            .as_deref()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect();
        refuse!(
            "agents.{name}.url ({shown:?}): kind {kind} runs a local command; an agent at a url is kind = \"a2a\""
        );
    }
    if base.is_some_and(|b| b.local_command().is_some()) && table.kind.is_none() {
        refuse!(
            "agents.{name}.url: {name} is a built-in local agent; name a remote agent otherwise"
        );
    }
    for (field, set) in [
        ("command", table.command.is_some()),
        ("args", table.args.is_some()),
        ("env", !table.env.is_empty()),
        ("inherit_env", table.inherit_env.is_some()),
        ("preset", table.preset.is_some()),
        ("model", table.model.is_some()),
        ("state_dir", table.state_dir.is_some()),
        ("terminal", table.terminal.is_some()),
        ("allow_execute", table.allow_execute.is_some()),
    ] {
        if set {
            refuse!(
                "agents.{name}.{field} is a local command's; a remote agent (kind = \"a2a\") takes url, token_env or token_file, agent, max_transfer_bytes, allow_unsupervised, tls_ca_file, allow_plain_http"
            );
        }
    }
    let Some(url) = table.url else {
        refuse!("agents.{name}.url is required for kind = \"a2a\"");
    };
    let shown: String = url.chars().take(200).collect();
    if !(url.starts_with("http://") || url.starts_with("https://"))
        || url.len() > 2048
        || url.chars().any(|c| c.is_control() || c.is_whitespace())
    {
        refuse!("agents.{name}.url must be an http:// or https:// URL (got {shown:?})");
    }
    let token = match (table.token_env, table.token_file) {
        (Some(_), Some(_)) => {
            refuse!("agents.{name} sets both token_env and token_file; a remote agent has one")
        }
        (Some(var), None) => {
            if var.is_empty()
                || var.len() > 128
                || !var.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                refuse!("agents.{name}.token_env must be a variable name (letters, digits, '_')");
            }
            Some(legate_core::TokenRef::Env(var))
        }
        (None, Some(path)) => {
            if !path.is_absolute() {
                refuse!(
                    "agents.{name}.token_file must be an absolute path (got {})",
                    path.display()
                );
            }
            Some(legate_core::TokenRef::File(path))
        }
        (None, None) => None,
    };
    if let Some(a) = &table.agent {
        validate_name(a).map_err(|e| Error::invalid_because(format!("agents.{name}.agent"), e))?;
    }
    if table.max_transfer_bytes == Some(0) {
        refuse!("agents.{name}.max_transfer_bytes must be at least 1");
    }
    if let Some(path) = &table.tls_ca_file {
        if !path.is_absolute() {
            refuse!(
                "agents.{name}.tls_ca_file must be an absolute path (got {})",
                path.display()
            );
        }
        if !url.starts_with("https://") {
            refuse!("agents.{name}.tls_ca_file applies to an https:// url only");
        }
    }
    if legate_remote::tls::has_credentials(&url) {
        refuse!(
            "agents.{name}.url carries a user name or password; name a bearer token with token_env or token_file instead"
        );
    }
    let mut spec = AgentSpec::url(name, kind, url);
    spec.description = table.description;
    if let legate_core::Transport::Url(remote) = &mut spec.transport {
        remote.token = token;
        remote.agent = table.agent;
        remote.max_transfer_bytes = table.max_transfer_bytes;
        remote.allow_unsupervised = table.allow_unsupervised.unwrap_or(false);
        remote.tls_ca_file = table.tls_ca_file;
        remote.allow_plain_http = table.allow_plain_http.unwrap_or(false);
        if legate_remote::tls::token_in_clear(remote) {
            refuse!(
                "agents.{name}.url is plain http:// to another machine: its bearer token would cross the network in clear; use https://, or set allow_plain_http = true on a network you trust"
            );
        }
    }
    Ok(spec)
}

/// The TCK profile (`legate agent tck`): an agent that behaves as the A2A TCK expects of its
/// system under test. Only configured agents named `tck` get it.
fn tck_agent() -> Result<AgentSpec> {
    let exe = std::env::current_exe().map_err(Error::NoExecutable)?;
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
    let exe = std::env::current_exe().map_err(Error::NoExecutable)?;
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
    use crate::config::resolve_text;

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
    fn warm_is_bounded_and_only_for_local_acp_agents() {
        let c = resolve_text(
            "[agents.claude]\nwarm = 2\n[agents.revisor]\nwarm = 0\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.warm.get("claude"), Some(&2));
        assert_eq!(c.warm.get("revisor"), None);
        assert!(resolve_text("", &[]).unwrap().warm.is_empty());
        let e = resolve_text("[agents.claude]\nwarm = 9\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.claude.warm"), "{e}");
        let e = resolve_text(
            "[agents.x]\nkind = \"agy\"\ncommand = \"agy\"\nwarm = 1\n",
            &[],
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("agents.x.warm"), "{e}");
        let e = resolve_text("[agents.r]\nurl = \"https://example.com\"\nwarm = 1\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.r.warm"), "{e}");
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
        let e = resolve_text("[agents.x]\nkind = \"a3a\"\ncommand = \"agy\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.x.kind"), "{e}");
        assert!(e.contains("a2a or acp or agy"), "{e}");
        // A remote agent is not a command.
        let e = resolve_text("[agents.x]\nkind = \"a2a\"\ncommand = \"agy\"\n", &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("agents.x.command"), "{e}");
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
            proptest::prop_assume!(!["acp", "agy", "a2a"].contains(&kind.as_str()));
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
    fn a_remote_agent_is_read_strictly() {
        let c = resolve_text(
            "[agents.far]\nkind = \"a2a\"\nurl = \"http://127.0.0.1:9/\"\ntoken_env = \"FAR_TOKEN\"\nagent = \"coder\"\nmax_transfer_bytes = 1024\nallow_unsupervised = true\n",
            &[],
        )
        .unwrap();
        let remote = c.agents["far"].remote().unwrap();
        assert_eq!(
            remote.token,
            Some(legate_core::TokenRef::Env("FAR_TOKEN".into()))
        );
        assert_eq!(remote.agent.as_deref(), Some("coder"));
        assert_eq!(remote.max_transfer_bytes(), 1024);
        assert!(remote.allow_unsupervised);
        let a2a = "kind = \"a2a\"\n";
        for (text, field) in [
            (
                format!("{a2a}url = \"http://x/\"\ntoken = \"s3cret-inline-token\"\n"),
                "agents.r.token",
            ),
            (
                format!("{a2a}url = \"http://x/\"\ntoken_env = \"A\"\ntoken_file = \"/t\"\n"),
                "both token_env and token_file",
            ),
            (
                format!("{a2a}url = \"http://x/\"\ncommand = \"sh\"\n"),
                "agents.r.command",
            ),
            (
                format!("{a2a}url = \"http://x/\"\nargs = [\"x\"]\n"),
                "agents.r.args",
            ),
            (
                format!("{a2a}url = \"http://x/\"\ntoken_file = \"rel\"\n"),
                "agents.r.token_file",
            ),
            (format!("{a2a}url = \"ftp://x/\"\n"), "agents.r.url"),
            (
                format!("{a2a}url = \"http://x/\"\nagent = \"../x\"\n"),
                "agents.r.agent",
            ),
            (format!("{a2a}url = \"http://x/\"\nbogus = 1\n"), "bogus"),
            (a2a.to_string(), "agents.r.url is required"),
            (
                "command = \"sh\"\ntoken_env = \"A\"\n".to_string(),
                "agents.r.token_env",
            ),
            (
                "kind = \"acp\"\nurl = \"http://x/\"\n".to_string(),
                "agents.r.url",
            ),
        ] {
            let e = format!(
                "{:#}",
                resolve_text(&format!("[agents.r]\n{text}"), &[]).unwrap_err()
            );
            assert!(e.contains(field), "{text}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
        // A url without kind is an a2a agent too.
        let c = resolve_text("[agents.r]\nurl = \"http://127.0.0.1:9/\"\n", &[]).unwrap();
        assert_eq!(c.agents["r"].kind.as_str(), "a2a");
    }

    #[test]
    fn a_token_over_plain_http_to_another_machine_is_refused_unless_allowed() {
        let far = "[agents.far]\nkind = \"a2a\"\ntoken_env = \"FAR_TOKEN\"\n";
        let e = format!(
            "{:#}",
            resolve_text(&format!("{far}url = \"http://10.0.0.7:8080/\"\n"), &[]).unwrap_err()
        );
        assert!(
            e.contains("agents.far.url") && e.contains("in clear"),
            "{e}"
        );
        for ok in [
            "url = \"http://10.0.0.7:8080/\"\nallow_plain_http = true\n",
            "url = \"https://build-1.example/\"\ntls_ca_file = \"/etc/legate/ca.pem\"\n",
            "url = \"http://127.0.0.1:8080/\"\n",
        ] {
            let c = resolve_text(&format!("{far}{ok}"), &[]).unwrap();
            let remote = c.agents["far"].remote().unwrap();
            assert_eq!(remote.allow_plain_http, ok.contains("allow_plain_http"));
            assert_eq!(remote.tls_ca_file.is_some(), ok.contains("tls_ca_file"));
        }
        // Without a token no credential crosses: plain http is allowed.
        assert!(resolve_text("[agents.r]\nurl = \"http://10.0.0.7/\"\n", &[]).is_ok());
        for (text, wanted) in [
            (
                "[agents.r]\nurl = \"http://svc:s3cret@10.0.0.7/\"\n",
                "agents.r.url carries a user name or password",
            ),
            (
                "[agents.r]\nurl = \"http://127.0.0.1:9/\"\ntls_ca_file = \"/ca.pem\"\n",
                "applies to an https:// url only",
            ),
        ] {
            let e = format!("{:#}", resolve_text(text, &[]).unwrap_err());
            assert!(e.contains(wanted), "{text}: {e}");
            assert!(!e.contains("s3cret"), "{e}");
        }
        let e = format!(
            "{:#}",
            resolve_text(
                &format!("{far}url = \"https://x/\"\ntls_ca_file = \"ca.pem\"\n"),
                &[]
            )
            .unwrap_err()
        );
        assert!(
            e.contains("agents.far.tls_ca_file must be an absolute path"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            resolve_text(
                "[agents.x]\ncommand = \"sh\"\nallow_plain_http = true\n",
                &[]
            )
            .unwrap_err()
        );
        assert!(e.contains("agents.x.allow_plain_http"), "{e}");
    }

    #[test]
    fn credentials_stay_in_the_environment_unless_the_proxy_is_asked_to_hold_them() {
        let c = resolve_text("", &[]).unwrap();
        assert_eq!(
            c.agents["claude"].credentials,
            AgentCredentials::Environment
        );
        let c = resolve_text(
            "[agents.claude]\ncredentials = \"proxy\"\n[agents.mine]\ncommand = \"claude-agent-acp\"\npreset = \"claude\"\ncredentials = \"proxy\"\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.agents["claude"].credentials, AgentCredentials::Proxy);
        assert_eq!(c.agents["mine"].credentials, AgentCredentials::Proxy);
        assert_eq!(c.agents["codex"].credentials, AgentCredentials::Environment);
        let c = resolve_text("[agents.gemini]\ncredentials = \"environment\"\n", &[]).unwrap();
        assert_eq!(
            c.agents["gemini"].credentials,
            AgentCredentials::Environment
        );
        for (text, wanted) in [
            (
                "[agents.claude]\ncredentials = \"vault\"\n",
                "must be \"environment\" or \"proxy\"",
            ),
            (
                "[agents.r]\ncommand = \"sh\"\ncredentials = \"proxy\"\n",
                "applies to ACP agents with a preset",
            ),
            (
                "[agents.agy]\ncredentials = \"proxy\"\n",
                "applies to ACP agents with a preset",
            ),
            (
                "[agents.r]\nkind = \"a2a\"\nurl = \"http://x/\"\ncredentials = \"proxy\"\n",
                "applies to ACP agents with a preset",
            ),
        ] {
            let e = format!("{:#}", resolve_text(text, &[]).unwrap_err());
            assert!(
                e.contains("credentials") && e.contains(wanted),
                "{text}: {e}"
            );
        }
    }
}
