//! `legate group`: create a group from a TOML or JSON definition file, start or resume it and
//! follow it to its end or its pause, read its status, wait for it, cancel it, list groups,
//! read a workflow's synthesis and the peer messages' receipts.
//!
//! This module reads the file, translates arguments and prints; the engine validates the
//! definition, schedules, checkpoints and decides every state. Text from a definition or an
//! agent is printed through `one_line`, so it cannot drive the terminal. It never reads the
//! store itself.

use crate::{config, front};
use anyhow::{Context as _, Result, bail};
use legate_engine::{
    Engine, GroupDefinition, GroupStarted, GroupState, GroupStatus, MAX_DEFINITION_BYTES,
    MAX_RECEIPTS_PAGE,
};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

/// The longest wait of one `legate group wait` call, in seconds.
const MAX_WAIT_SECS: u64 = 3_600;
/// How long `legate group start` follows the group between two status lines at most.
const FOLLOW_STEP: Duration = Duration::from_secs(60);

/// `legate group …`.
#[derive(Debug, clap::Args)]
pub struct GroupFlags {
    #[command(subcommand)]
    pub command: GroupCommand,
}

/// The group subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum GroupCommand {
    /// Validate and store a definition (FILE ending in .toml or .json); prints groupId and
    /// definitionSha256. Starts nothing.
    Create {
        /// The definition file.
        file: PathBuf,
        /// A stable id (a UUID) to create under; repeat it to read back a lost creation.
        #[arg(long)]
        id: Option<String>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Start (or resume a paused) group and follow it until it ends or pauses.
    Start {
        /// The group id.
        id: String,
        /// The definitionSha256 `legate group create` printed.
        sha256: String,
        /// Print the final status as JSON.
        #[arg(long)]
        json: bool,
    },
    /// A group's state, nodes, checkpoints and budget.
    Status {
        /// The group id.
        id: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Wait until the group ends or pauses (this process continues a group whose process
    /// died). Exit 0 completed, 1 failed or canceled, 3 paused, 4 still running at timeout.
    Wait {
        /// The group id.
        id: String,
        /// Seconds to wait, 1 to 3600.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Admit no further node and cancel the running ones.
    Cancel {
        /// The group id.
        id: String,
    },
    /// Every retained group, newest first.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// A completed workflow's final synthesis, after its checkpoints were checked again.
    Result {
        /// The group id.
        id: String,
    },
    /// The receipts of the group's peer messages (no bodies).
    Receipts {
        /// The group id.
        id: String,
        /// Only receipts after this cursor.
        #[arg(long)]
        after: Option<i64>,
        /// At most this many, 1 to 20.
        #[arg(long, default_value_t = MAX_RECEIPTS_PAGE)]
        limit: u32,
    },
}

/// Runs `legate group …`.
pub async fn run(config: config::Config, flags: GroupFlags) -> Result<ExitCode> {
    let GroupFlags { command } = flags;
    let engine = front::start_engine(&config.engine)?;
    let result = dispatch(&engine, command).await;
    engine.shutdown().await;
    result
}

async fn dispatch(engine: &Engine, command: GroupCommand) -> Result<ExitCode> {
    match command {
        GroupCommand::Create { file, id, json } => {
            let definition = read_definition(&file)?;
            let created = engine.groups().create(id, definition)?;
            if json {
                out!("{}", crate::json_out::pretty(&created)?)?;
            } else {
                out!("groupId {}", created.group_id)?;
                out!("definitionSha256 {}", created.definition_sha256)?;
                if created.existing {
                    out!("(already stored with this definition)")?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        GroupCommand::Start { id, sha256, json } => {
            // With --json, stdout carries the final status only.
            let progress = |s: &GroupStatus| if json { Ok(()) } else { print_line(s) };
            let started = engine.groups().start(&id, &sha256).await?;
            let mut status = started.status;
            progress(&status)?;
            let dropped = started.dropped_peer_messages;
            if !json {
                for d in &dropped {
                    let reason = crate::one_line(&d.reason, 200);
                    out!(
                        "  dropped by the resume: {} (task {}): {reason}",
                        d.node_id,
                        d.task_id
                    )?;
                }
            }
            while !settled(status.state) {
                status = engine.groups().wait(&id, FOLLOW_STEP).await?.status;
                progress(&status)?;
            }
            if json {
                // The final status, with what the resume dropped.
                let code = exit_code(status.state);
                let started = GroupStarted {
                    status,
                    dropped_peer_messages: dropped,
                };
                out!("{}", crate::json_out::pretty(&started)?)?;
                return Ok(code);
            }
            finish(&status, json)
        }
        GroupCommand::Status { id, json } => {
            let status = engine.groups().status(&id)?;
            show(&status, json)?;
            Ok(ExitCode::SUCCESS)
        }
        GroupCommand::Wait { id, timeout, json } => {
            if !(1..=MAX_WAIT_SECS).contains(&timeout) {
                bail!("--timeout must be 1 to {MAX_WAIT_SECS} seconds");
            }
            let deadline = tokio::time::Instant::now() + Duration::from_secs(timeout);
            let mut status = engine.groups().status(&id)?;
            while !settled(status.state) {
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                status = engine
                    .groups()
                    .wait(&id, left.min(FOLLOW_STEP))
                    .await?
                    .status;
            }
            finish(&status, json)
        }
        GroupCommand::Cancel { id } => {
            let status = engine.groups().cancel(&id)?;
            print_line(&status)?;
            Ok(ExitCode::SUCCESS)
        }
        GroupCommand::List { json } => {
            let groups = engine.groups().list()?;
            if json {
                out!("{}", crate::json_out::pretty(&groups)?)?;
            } else {
                for g in groups {
                    let reason = g
                        .pause_reason
                        .map(|c| format!(" ({c})"))
                        .unwrap_or_default();
                    let title = g
                        .title
                        .as_deref()
                        .map(|t| crate::one_line(t, 60))
                        .unwrap_or_default();
                    out!(
                        "{}  {}{reason}  {} nodes  {title}",
                        g.group_id,
                        g.state,
                        g.nodes
                    )?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        GroupCommand::Result { id } => {
            let result = engine.groups().workflow_result(&id).await?;
            out!("{}", crate::json_out::pretty(&result)?)?;
            Ok(ExitCode::SUCCESS)
        }
        GroupCommand::Receipts { id, after, limit } => {
            let page = engine.groups().peer_receipts(&id, after, limit)?;
            out!("{}", crate::json_out::pretty(&page)?)?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Whether the group can go no further without the caller.
fn settled(state: GroupState) -> bool {
    state.is_terminal() || state == GroupState::Paused
}

fn finish(status: &GroupStatus, json: bool) -> Result<ExitCode> {
    show(status, json)?;
    Ok(exit_code(status.state))
}

/// The exit code for a group left in `state`.
fn exit_code(state: GroupState) -> ExitCode {
    match state {
        GroupState::Completed => ExitCode::SUCCESS,
        GroupState::Failed | GroupState::Canceled => ExitCode::from(1),
        GroupState::Paused => ExitCode::from(3),
        GroupState::Created | GroupState::Running => ExitCode::from(4),
    }
}

fn print_line(s: &GroupStatus) -> std::io::Result<()> {
    let done = s
        .nodes
        .iter()
        .filter(|n| n.state == legate_engine::NodeState::Succeeded)
        .count();
    let reason = s.pause_reason.map(|c| format!(" {c}")).unwrap_or_default();
    out!(
        "group {} {}{reason} · {done}/{} nodes succeeded",
        s.group_id,
        s.state,
        s.nodes.len()
    )
}

fn show(s: &GroupStatus, json: bool) -> Result<()> {
    if json {
        out!("{}", crate::json_out::pretty(s)?)?;
        return Ok(());
    }
    print_line(s)?;
    if let Some(message) = &s.pause_message {
        out!("  {}", crate::one_line(message, 200))?;
    }
    for n in &s.nodes {
        let error = n.error.map(|c| format!(" ({c})")).unwrap_or_default();
        let tasks = n
            .task_ids
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(",");
        out!("  {:<20} {}{error}  tasks [{tasks}]", n.id, n.state)?;
    }
    if let Some(b) = &s.budget {
        let observed = b
            .observed_total_tokens
            .map_or("unknown".to_string(), |t| t.to_string());
        out!(
            "  budget {} · observed {observed} · known {} · margin {} · {} tasks without counters",
            b.max_total_tokens,
            b.known_subtotal_tokens,
            b.margin_tokens,
            b.tasks_without_counters.len()
        )?;
    }
    Ok(())
}

/// Reads a definition: TOML for `.toml`, JSON for `.json`, strictly (unknown fields are
/// refused by the definition's own types), at most twice the canonical size limit.
pub fn read_definition(path: &Path) -> Result<GroupDefinition> {
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let cap = (MAX_DEFINITION_BYTES * 2) as u64;
    let mut text = String::new();
    std::fs::File::open(path)
        .with_context(|| format!("could not open {}", path.display()))?
        .take(cap + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("could not read {} as UTF-8", path.display()))?;
    if text.len() as u64 > cap {
        bail!("{} is larger than {cap} bytes", path.display());
    }
    parse_definition(ext, &text)
        .with_context(|| format!("{} is not a group definition", path.display()))
}

fn parse_definition(ext: &str, text: &str) -> Result<GroupDefinition> {
    Ok(match ext {
        "toml" => toml::from_str(text)?,
        "json" => serde_json::from_str(text)?,
        other => bail!("a definition file ends in .toml or .json (got {other:?})"),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const TOML: &str = r#"
workingDirectory = "/tmp/project"
title = "Plan, build twice, review"

[[nodes]]
id = "plan"
role = "planner"
prompt = "Plan the change."

[[nodes]]
id = "impl-a"
prompt = "Implement it."
dependsOn = ["plan"]

[[peerRoutes]]
from = "impl-a"
to = "plan"

[budget]
maxTotalTokens = 1000

[workflow]
finalNode = "impl-a"

[workflow.hooks.impl-a]
requireTests = true
"#;

    #[test]
    fn toml_and_json_read_into_the_same_definition() {
        let from_toml = parse_definition("toml", TOML).unwrap();
        let json = serde_json::to_string(&from_toml).unwrap();
        let from_json = parse_definition("json", &json).unwrap();
        assert_eq!(from_toml, from_json);
        assert_eq!(from_toml.nodes.len(), 2);
        assert_eq!(from_toml.peer_routes[0].from, "impl-a");
        assert!(from_toml.workflow.unwrap().hooks["impl-a"].require_tests);
    }

    #[test]
    fn unknown_fields_and_other_extensions_are_refused() {
        let extra = TOML.replace("title =", "grant = \"all\"\ntitle =");
        assert!(parse_definition("toml", &extra).is_err());
        assert!(parse_definition("yaml", TOML).is_err());
        assert!(parse_definition("json", "{\"nodes\": []").is_err());
    }

    #[test]
    fn docs_examples_parse() {
        let doc = include_str!("../../../docs/workflows.md");
        let block = |lang: &str| {
            let start = doc.find(&format!("```{lang}\n")).expect("a block") + lang.len() + 4;
            let end = start + doc[start..].find("```").expect("closed");
            doc[start..end].to_string()
        };
        let toml = parse_definition("toml", &block("toml")).unwrap();
        let json = parse_definition("json", &block("json")).unwrap();
        assert_eq!(toml, json);
    }
}
