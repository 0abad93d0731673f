//! `legate context` and `legate handoff`: a finished copy task's context, printed, and a
//! handoff to another role, watched like `legate run`.
//!
//! This module translates flags into the engine's `HandoffRequest` (the one declaration of a
//! handoff, which the MCP `handoff` tool takes as it is) and prints; the engine checks the context hash, the
//! role, the decisions and the size, and makes the copy. It never reads a copy itself.

use crate::run::watch;
use crate::{config, front};
use anyhow::Result;
use legate_core::ReportBody;
use legate_engine::{ContextPack, ContextTest, Engine, HandoffRequest};
use std::process::ExitCode;

/// `legate handoff`.
// The command line's syntax for a `HandoffRequest` (the source task positional, the context
// hash optional, the prompt in words); not a second declaration of the request.
#[derive(Debug, clap::Args)]
pub struct HandoffFlags {
    /// The finished copy task to hand off from (id or prefix).
    pub id: String,
    /// The role to start: implementer, planner, reviewer or a configured one.
    #[arg(long)]
    pub role: String,
    /// The contextSha256 read with `legate context` (default: the context now, which is
    /// printed; pass it to be sure nothing changed since you read it).
    #[arg(long)]
    pub expect: Option<String>,
    /// The agent (default: the role's, else the configured default).
    #[arg(long)]
    pub agent: Option<String>,
    /// The model (default: the role's, else the agent's).
    #[arg(long)]
    pub model: Option<String>,
    /// A decision for the next role, marked client-reported (repeatable; no secrets).
    #[arg(long = "decision")]
    pub decisions: Vec<String>,
    /// What to ask the new role.
    #[arg(required = true, num_args = 1..)]
    pub prompt: Vec<String>,
}

/// Prints the context of task `id`.
pub async fn context(engine: &Engine, id: &str, json: bool) -> Result<ExitCode> {
    let pack = engine.handoffs().context(id).await?;
    if json {
        out!("{}", crate::json_out::pretty(&pack)?)?;
    } else {
        print_pack(&pack)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_pack(p: &ContextPack) -> std::io::Result<()> {
    out!("task {} · role {} · agent {}", p.task_id, p.role, p.agent)?;
    out!("contextSha256 {}", p.context_sha256)?;
    out!("treeSha256    {}", p.tree_sha256)?;
    out!("criteria: {}", p.criteria.len())?;
    for c in &p.criteria {
        out!("  {}: {}", c.id, crate::one_line(&c.description, 100))?;
    }
    out!(
        "reports: {} (agent-reported; citationsChecked attests files, lines and quotes, not judgement)",
        p.reports.len()
    )?;
    for r in &p.reports {
        let (kind, summary) = match &r.report.body {
            ReportBody::Plan(plan) => ("plan", &plan.summary),
            ReportBody::Review(review) => ("review", &review.summary),
        };
        out!(
            "  {} {} by {} ({}) · citationsChecked {} · {}",
            kind,
            r.task_id,
            r.agent,
            r.role,
            r.report.citations_checked,
            crate::one_line(summary, 80)
        )?;
    }
    out!("tests: {}", p.tests.len())?;
    for t in &p.tests {
        out!("{}", test_line(t))?;
    }
    out!("decisions: {} (client-reported)", p.decisions.len())?;
    for d in &p.decisions {
        out!(
            "  from {}: {}",
            d.handed_off_from,
            crate::one_line(&d.text, 100)
        )?;
    }
    Ok(())
}

/// One test record's line in `legate context`; the command is a caller's, shown on one line
/// with its escapes and bidirectional marks made visible.
fn test_line(t: &ContextTest) -> String {
    format!(
        "  #{} {} {} · {} · patch {}",
        t.id,
        t.source.as_str(),
        if t.passed { "passed" } else { "failed" },
        crate::review::command_line(&t.command, 200),
        &t.patch_sha256
    )
}

/// Hands task `flags.id` off and watches the new task.
pub async fn handoff(config: config::Config, flags: HandoffFlags) -> Result<ExitCode> {
    // Taken apart whole and the request built whole, so a flag added to `HandoffFlags`, or a
    // field to `HandoffRequest`, does not compile until it is mapped here.
    let HandoffFlags {
        id,
        role,
        expect,
        agent,
        model,
        decisions,
        prompt,
    } = flags;
    let engine = front::start_engine(&config.engine)?;
    let expected = match expect {
        Some(sha) => sha,
        None => {
            let sha = engine.handoffs().context(&id).await?.context_sha256;
            eprintln!("handing off context {sha} (read now; pass --expect to pin it)");
            sha
        }
    };
    let started = engine
        .handoffs()
        .handoff(HandoffRequest {
            source_task_id: id,
            expected_context_sha256: expected,
            role,
            prompt: prompt.join("\n"),
            agent,
            model,
            decisions,
            mode: None,
            memory: None,
            allowed_tools: None,
            mcp_servers: None,
        })
        .await;
    match started {
        Ok(task) => watch(engine, task).await,
        Err(e) => {
            engine.shutdown().await;
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's reported test command with a clipboard write (OSC 52), a line erased and
    /// rewritten, a right-to-left override and a newline is printed as visible text on one
    /// line.
    #[test]
    fn a_reported_test_command_cannot_act_on_the_terminal() {
        let t = ContextTest {
            id: 2,
            source: legate_engine::TestSource::ClientReported,
            command: legate_engine::TestCommand {
                executable: "ok\x1b]52;c;Y3VybCB4fHNo\x07\r\x1b[2K".into(),
                args: vec!["passed\u{202e}txt.exe\n  #3".into()],
            },
            exit_code: Some(0),
            passed: true,
            patch_sha256: "b".repeat(64),
            recorded_at: legate_core::Timestamp(0),
        };
        let line = test_line(&t);
        for c in ['\x1b', '\x07', '\r', '\n', '\u{202e}'] {
            assert!(!line.contains(c), "{c:?} in {line:?}");
        }
        assert!(
            line.starts_with(
                "  #2 client-reported passed · ok\\u{1b}]52;c;Y3VybCB4fHNo\\u{7} \\u{1b}[2K passed\\u{202e}txt.exe #3 · patch "
            ),
            "{line}"
        );
    }
}
