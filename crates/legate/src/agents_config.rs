//! `[agents.NAME]`: resolving the configured agents into `AgentSpec`s.
//!
//! Owns the built-in agents (`revisor`, the presets `claude`, `codex`, `gemini` and `agy`,
//! and `tck` when a table names it), the `[agents.NAME]` table's shape, and merging a table
//! over the agent it overrides. Every error is `CONFIG_INVALID` naming the key, and shows a
//! bounded excerpt of a hostile value, never the whole. It never reads the file or the
//! environment itself: `crate::config` hands it the parsed tables.

use anyhow::{Context, Result, bail};
use legate_core::{AgentKind, AgentSpec};
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

/// Sets `c.agents` to the built-in agents with `tables` merged over them (and `c.state_dirs`
/// to the tables' `state_dir`s).
pub(crate) fn resolve(tables: BTreeMap<String, AgentTable>, c: &mut EngineConfig) -> Result<()> {
    c.agents = builtin_agents()?;
    for (name, table) in tables {
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
    Ok(())
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
