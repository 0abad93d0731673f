//! `legate usage`: token usage of stored tasks, by task, session and model.
//!
//! The adding up is the engine's (`Records::usage`, also `Engine::usage`); this module only
//! prints. It never shows 0 for a counter nobody reported: that is `-`.

use anyhow::Result;
use legate_engine::{Records, UsageFilter, UsageReport, UsageTotals};
use std::process::ExitCode;

// `legate usage`: the command line's syntax for a `UsageFilter` (a task id may be a prefix,
// resolved here) and how to print the report.
#[derive(Debug, clap::Args)]
pub(crate) struct UsageFlags {
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

/// Prints the report `flags` ask for.
pub fn print(store: &Records, flags: UsageFlags) -> Result<ExitCode> {
    // Taken apart whole and the filter built whole, so a flag added to `UsageFlags`, or a
    // field to `UsageFilter`, does not compile until it is mapped here.
    let UsageFlags {
        task,
        session,
        model,
        agent,
        json,
    } = flags;
    let task_id = match task {
        Some(id) => Some(store.find_task(&id)?.id.0),
        None => None,
    };
    let filter = UsageFilter {
        task_id,
        session_id: session,
        model,
        agent,
    };
    let report = store.usage(&filter)?;
    if json {
        crate::out!("{}", crate::json_out::pretty(&report)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    for line in lines(&report) {
        crate::out!("{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The report as the lines `legate usage` prints. Agent names, session ids and model names
/// are what an agent (or a remote server) said: cleaned of control characters and bounded
/// before they reach the terminal.
fn lines(report: &UsageReport) -> Vec<String> {
    let clean = |s: &str| crate::render::clean(s, 128);
    let mut out = vec!["by task".to_string()];
    for t in &report.by_task {
        out.push(format!(
            "  {}  {:<10} {:<20} {}",
            t.task_id,
            clean(&t.agent),
            clean(t.model.as_deref().unwrap_or("-")),
            counters(&t.totals)
        ));
    }
    out.push("by session".to_string());
    for (session, totals) in &report.by_session {
        let name = if session.is_empty() {
            "(none)".to_string()
        } else {
            clean(session)
        };
        out.push(format!("  {name:<38} {}", counters(totals)));
    }
    out.push("by model".to_string());
    for (model, totals) in &report.by_model {
        let name = if model.is_empty() {
            "(unknown)".to_string()
        } else {
            clean(model)
        };
        out.push(format!("  {name:<38} {}", counters(totals)));
    }
    out.push("total".to_string());
    out.push(format!("  {:<38} {}", "", counters(&report.total)));
    out
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use legate_engine::TaskUsage;

    #[test]
    fn names_an_agent_chose_reach_the_terminal_without_control_characters() {
        let hostile = "m\u{1b}]52;c;aGk=\u{7}\u{1b}[2J\r\nfake total";
        let totals = UsageTotals {
            tasks: 1,
            input_tokens: Some(3),
            ..UsageTotals::default()
        };
        let mut report = UsageReport {
            by_task: vec![TaskUsage {
                task_id: legate_core::TaskId("t1".into()),
                agent: "a".into(),
                session_id: Some(hostile.into()),
                model: Some(hostile.into()),
                created_at: legate_core::Timestamp(1),
                totals: totals.clone(),
                available: true,
                partial: true,
                source: "turn".into(),
                warnings: Vec::new(),
            }],
            total: totals.clone(),
            ..UsageReport::default()
        };
        report.by_session.insert(hostile.into(), totals.clone());
        report.by_model.insert("x".repeat(10_000), totals);
        let printed = lines(&report);
        for line in &printed {
            assert!(!line.chars().any(char::is_control), "{line:?}");
            assert!(line.chars().count() < 400, "{} characters", line.len());
        }
        assert!(printed.iter().any(|l| l.contains("fake total")));
    }
}
