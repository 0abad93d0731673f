//! The permission policy at the edge: `[policy]` in `legate.toml` (inline `[[policy.rules]]`
//! and a policy `file`) into `EngineConfig::policy`, and `legate policy check|explain`.
//!
//! The inline rules come first, then the file's. A relative `file` is relative to
//! `$LEGATE_HOME`. This module reads the policy file and describes calls; the rules, their
//! validation and their matching are `legate_supervisor::policy`'s, and it decides nothing.

use anyhow::{Context, Result};
use legate_core::{
    Boundary, ErrorCode, OptionKind, PermissionOption, PermissionRequest, TaskMode, ToolKind,
    WorkspaceKind,
};

use legate_supervisor::{Policed, Policy, PolicyError, Preset, Rules, Supervision};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// `legate policy`.
#[derive(Debug, clap::Subcommand)]
pub enum PolicyCommand {
    /// Validate the policy (the configuration's, or `--file`) and list its rules in order.
    Check {
        /// A policy file to check instead of the configuration.
        #[arg(long)]
        file: Option<PathBuf>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Describe a tool call and print which rule decides it (or the built-in table), and why.
    Explain(ExplainArgs),
}

/// A described tool call.
#[derive(Debug, clap::Args)]
pub struct ExplainArgs {
    /// The tool kind (read, edit, delete, move, search, execute, think, fetch, switch_mode,
    /// other).
    #[arg(long)]
    kind: String,
    /// The command, as an agent's `rawInput.command` would carry it.
    #[arg(long)]
    command: Option<String>,
    /// A path the call names (repeatable), relative to `--root` or absolute.
    #[arg(long = "path")]
    paths: Vec<PathBuf>,
    /// The workspace kind: sandbox, copy or shared (default shared).
    #[arg(long, default_value = "shared")]
    workspace: String,
    /// Legate owns the root (implied by sandbox and copy).
    #[arg(long)]
    owned: bool,
    /// The agent (its configured preset and `allow_execute` apply when it is configured).
    #[arg(long, default_value = "")]
    agent: String,
    /// The role.
    #[arg(long, default_value = "implementer")]
    role: String,
    /// A read-only task.
    #[arg(long)]
    read_only: bool,
    /// The workspace root (default: the current directory).
    #[arg(long)]
    root: Option<PathBuf>,
    /// A policy file to use instead of the configuration's policy.
    #[arg(long)]
    file: Option<PathBuf>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Runs `legate policy …`: exit 1 with `POLICY_INVALID` for an invalid policy.
pub fn command(command: PolicyCommand) -> Result<ExitCode> {
    let file = match &command {
        PolicyCommand::Check { file, .. } => file.clone(),
        PolicyCommand::Explain(args) => args.file.clone(),
    };
    let loaded = match file {
        Some(path) => legate_config::read_policy_file(&path)
            .and_then(|rules| {
                Policy::from_tables(Vec::new(), rules).map_err(|e| legate_config::Error::In {
                    path: path.clone(),
                    source: e.into(),
                })
            })
            .map(|p| (p, None, Some(path))),
        None => crate::config::load().map(|c| {
            let file = c.policy_file.clone();
            (c.engine.policy.clone(), Some(c), file)
        }),
    };
    let (policy, config, source) = match loaded.map_err(anyhow::Error::from) {
        Ok(loaded) => loaded,
        Err(e) if is_policy_invalid(&e) => {
            eprintln!("error: {}", crate::error_chain(&e));
            return Ok(ExitCode::from(1));
        }
        Err(e) => return Err(e),
    };
    match command {
        PolicyCommand::Check { json, .. } => check(&policy, source.as_deref(), json),
        PolicyCommand::Explain(args) => explain(&policy, config.as_ref(), args),
    }
}

fn is_policy_invalid(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<legate_core::Error>()
            .is_some_and(|e| e.code == ErrorCode::PolicyInvalid)
            || c.downcast_ref::<legate_config::Error>()
                .is_some_and(|e| e.code() == ErrorCode::PolicyInvalid)
            || c.downcast_ref::<PolicyError>().is_some()
    })
}

fn check(policy: &Policy, source: Option<&Path>, json: bool) -> Result<ExitCode> {
    if json {
        let rules: Vec<serde_json::Value> = policy.rules().iter().map(rule_json).collect();
        out!(
            "{}",
            crate::json_out::line(&serde_json::json!({ "valid": true, "rules": rules }))?
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    let from = source
        .map(|p| format!(" (inline rules first, then {})", p.display()))
        .unwrap_or_default();
    if policy.is_empty() {
        out!("the policy is valid and has no rules: the built-in table decides every request")?;
        return Ok(ExitCode::SUCCESS);
    }
    out!(
        "the policy is valid: {} rules{from}, first match wins",
        policy.rules().len()
    )?;
    for (i, rule) in policy.rules().iter().enumerate() {
        out!(
            "{:>3}. {:<24} {:<5} {}  — {}",
            i + 1,
            rule.id,
            decision_str(rule.decision),
            conditions(rule),
            rule.reason
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn decision_str(d: legate_core::Decision) -> &'static str {
    match d {
        legate_core::Decision::Allow => "allow",
        legate_core::Decision::Deny => "deny",
        legate_core::Decision::Ask => "ask",
    }
}

/// A rule's conditions in one line: `kind=execute program="cargo test" workspace=shared`.
fn conditions(rule: &legate_supervisor::policy::Rule) -> String {
    let mut parts = Vec::new();
    let join = |v: Vec<&str>| v.join(",");
    if !rule.kinds.is_empty() {
        parts.push(format!(
            "kind={}",
            join(rule.kinds.iter().map(|k| k.as_str()).collect())
        ));
    }
    if let Some(p) = &rule.program {
        let mut words = vec![p.clone()];
        words.extend(rule.args_prefix.iter().cloned());
        parts.push(format!("program={:?}", words.join(" ")));
    }
    if let Some(g) = &rule.paths {
        parts.push(format!("paths={}", g.written.join(",")));
    }
    if !rule.workspace.is_empty() {
        parts.push(format!(
            "workspace={}",
            join(rule.workspace.iter().map(|w| w.as_str()).collect())
        ));
    }
    if let Some(o) = rule.owned {
        parts.push(format!("owned={o}"));
    }
    if !rule.agents.is_empty() {
        parts.push(format!("agent={}", rule.agents.join(",")));
    }
    if !rule.roles.is_empty() {
        parts.push(format!("role={}", rule.roles.join(",")));
    }
    if parts.is_empty() {
        "any call".to_string()
    } else {
        parts.join(" ")
    }
}

fn rule_json(rule: &legate_supervisor::policy::Rule) -> serde_json::Value {
    serde_json::json!({
        "id": rule.id,
        "decision": decision_str(rule.decision),
        "kind": rule.kinds.iter().map(|k| k.as_str()).collect::<Vec<_>>(),
        "program": rule.program,
        "args_prefix": rule.args_prefix,
        "paths": rule.paths.as_ref().map(|g| g.written.clone()),
        "workspace": rule.workspace.iter().map(|w| w.as_str()).collect::<Vec<_>>(),
        "owned": rule.owned,
        "agent": rule.agents,
        "role": rule.roles,
        "reason": rule.reason,
    })
}

fn explain(
    policy: &Policy,
    config: Option<&crate::config::Config>,
    args: ExplainArgs,
) -> Result<ExitCode> {
    let kind = ToolKind::parse(&args.kind).ok_or_else(|| {
        legate_core::Error::invalid_input(format!(
            "--kind must be a tool kind (got {:?})",
            args.kind
        ))
    })?;
    let workspace = WorkspaceKind::parse(&args.workspace).ok_or_else(|| {
        legate_core::Error::invalid_input(format!(
            "--workspace must be sandbox, copy or shared (got {:?})",
            args.workspace
        ))
    })?;
    let root = match args.root {
        Some(r) => r,
        None => std::env::current_dir().context("no current directory")?,
    };
    let root = std::fs::canonicalize(&root)
        .with_context(|| format!("cannot resolve the root {}", root.display()))?;
    let spec = config.and_then(|c| c.engine.agents.get(&args.agent));
    let preset = spec
        .and_then(|s| s.preset.as_deref())
        .and_then(Preset::by_name)
        .unwrap_or_else(Preset::generic);
    let boundary = Boundary {
        root,
        owned: args.owned || workspace != WorkspaceKind::Shared,
        allow_execute: spec.is_some_and(|s| s.allow_execute),
    };
    let mode = if args.read_only {
        TaskMode::ReadOnly
    } else {
        TaskMode::Write
    };
    let mut supervision = Supervision::new(boundary, mode, preset);
    supervision.workspace = workspace;
    supervision.agent = args.agent;
    supervision.role = args.role;
    let option = |id: &str, kind| PermissionOption {
        id: id.into(),
        name: id.into(),
        kind,
    };
    let request = PermissionRequest {
        tool_call_id: "explain".into(),
        title: args
            .command
            .clone()
            .unwrap_or_else(|| "a described call".into()),
        tool_kind: kind,
        locations: args.paths,
        raw_input: args.command.map(|c| serde_json::json!({ "command": c })),
        options: vec![
            option("allow", OptionKind::AllowOnce),
            option("allow_always", OptionKind::AllowAlways),
            option("reject", OptionKind::RejectOnce),
        ],
    };
    let policed = Policed::new(policy.clone(), Rules);
    let e = policed.explain(&supervision, &request);
    if args.json {
        let skipped: Vec<serde_json::Value> = e
            .skipped
            .iter()
            .map(|(id, why)| serde_json::json!({ "rule": id, "why": why.to_string() }))
            .collect();
        out!(
            "{}",
            crate::json_out::line(&serde_json::json!({
                "decider": e.ruling.decider,
                "rule_id": e.ruling.rule_id,
                "matched": e.matched,
                "decision": decision_str(e.ruling.decision),
                "option_id": e.ruling.option_id,
                "reason": e.ruling.reason,
                "overruled": e.overruled,
                "skipped": skipped,
            }))?
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    match (&e.matched, &e.overruled) {
        (Some(id), None) => out!("decided by: rule {id:?} of the policy")?,
        (Some(id), Some(why)) => {
            out!("matched rule {id:?}, but the built-in table decides: {why}")?
        }
        (None, _) => out!("decided by: the built-in table (no rule matches)")?,
    }
    let option = e
        .ruling
        .option_id
        .as_deref()
        .map(|o| format!(" (option {o})"))
        .unwrap_or_default();
    out!("decision: {}{option}", decision_str(e.ruling.decision))?;
    out!("reason: {}", e.ruling.reason)?;
    for (id, why) in &e.skipped {
        out!("  rule {id:?} does not match: {why}")?;
    }
    Ok(ExitCode::SUCCESS)
}
