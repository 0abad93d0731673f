//! `legate usage`: token usage of stored tasks, by task, session and model.
//!
//! The adding up is the engine's (`Records::usage`, also `Engine::usage`); this module only
//! prints. It never shows 0 for a counter nobody reported: that is `-`.

use anyhow::Result;
use legate_engine::{Records, UsageFilter, UsageTotals};
use std::process::ExitCode;

#[derive(Debug, clap::Args)]
pub(crate) struct UsageArgs {
    /// Only this task (id or unique prefix).
    #[arg(long)]
    task: Option<String>,
    /// Only this agent session (ACP session id or agy conversation id).
    #[arg(long)]
    session: Option<String>,
    /// Only usage counted for this model.
    #[arg(long)]
    model: Option<String>,
    /// Only tasks of this agent.
    #[arg(long)]
    agent: Option<String>,
    /// Print the whole report as JSON.
    #[arg(long)]
    json: bool,
}

/// Prints the report for `args`.
pub fn print(store: &Records, args: UsageArgs) -> Result<ExitCode> {
    let task_id = match args.task {
        Some(id) => Some(store.find_task(&id)?.id.0),
        None => None,
    };
    let filter = UsageFilter {
        task_id,
        session_id: args.session,
        model: args.model,
        agent: args.agent,
    };
    let report = store.usage(&filter)?;
    if args.json {
        crate::out!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    // Session ids and model names are what an agent (or a remote server) said: cleaned of
    // control characters and bounded before they reach the terminal.
    let clean = |s: &str| crate::render::clean(s, 128);
    crate::out!("by task")?;
    for t in &report.by_task {
        crate::out!(
            "  {}  {:<10} {:<20} {}",
            t.task_id,
            t.agent,
            clean(t.model.as_deref().unwrap_or("-")),
            counters(&t.totals)
        )?;
    }
    crate::out!("by session")?;
    for (session, totals) in &report.by_session {
        let name = if session.is_empty() {
            "(none)".to_string()
        } else {
            clean(session)
        };
        crate::out!("  {name:<38} {}", counters(totals))?;
    }
    crate::out!("by model")?;
    for (model, totals) in &report.by_model {
        let name = if model.is_empty() {
            "(unknown)".to_string()
        } else {
            clean(model)
        };
        crate::out!("  {name:<38} {}", counters(totals))?;
    }
    crate::out!("total")?;
    crate::out!("  {:<38} {}", "", counters(&report.total))?;
    Ok(ExitCode::SUCCESS)
}

fn counters(t: &UsageTotals) -> String {
    let n = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
    let mut s = format!(
        "in {} · out {} · total {} · thinking {} · cache {}",
        n(t.input_tokens),
        n(t.output_tokens),
        n(t.total_tokens),
        n(t.thinking_tokens),
        n(t.cache_read_tokens)
    );
    if t.tasks > 1 || t.unreported > 0 {
        s.push_str(&format!(" · {} task(s)", t.tasks));
    }
    if t.unreported > 0 {
        s.push_str(&format!(", {} unreported", t.unreported));
    }
    s
}
