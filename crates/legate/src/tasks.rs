//! `legate tasks`, `show`, `events` and `cancel`: the stored tasks, read from the store.
//!
//! Owns printing a task and its events. Reading never starts an engine; `cancel` does, since
//! the engine decides how a task ends. It never changes a task's record itself.

use anyhow::Result;
use legate_core::TaskState;
use legate_engine::{Paths, Records, TaskFilter};
use std::io::IsTerminal;
use std::process::ExitCode;

use crate::{config, front, one_line, render};

/// `legate tasks`: the tasks that match, newest first (one line each, or JSON lines).
pub(crate) fn list(
    paths: &Paths,
    state: Option<String>,
    context: Option<String>,
    agent: Option<String>,
    limit: usize,
    json: bool,
) -> Result<ExitCode> {
    let records = Records::open_or_empty(paths)?;
    let state = match state {
        Some(s) => Some(TaskState::parse_named(&s)?),
        None => None,
    };
    let filter_given = state.is_some() || context.is_some() || agent.is_some();
    let filter = TaskFilter {
        state,
        context_id: context,
        agent,
        limit: limit.clamp(1, 10_000),
        before: None,
        inbound_only: false,
    };
    let tasks = records.tasks(&filter)?;
    if tasks.is_empty() && !json && std::io::stdout().is_terminal() {
        out!(
            "no tasks yet{}",
            if filter_given { " that match" } else { "" }
        )?;
    }
    for t in tasks {
        if json {
            out!("{}", crate::json_out::line(&t)?)?;
        } else {
            let when = humantime::format_rfc3339_seconds(t.created_at.to_system_time());
            let code = t
                .error
                .as_ref()
                .map(|e| format!(" {}", e.code))
                .unwrap_or_default();
            out!(
                "{}  {when}  {:<10} {:<15}{code}  {}",
                t.id,
                t.agent,
                t.state.as_str(),
                one_line(&t.prompt, 60)
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `legate show`: one task, and its integration if it has one.
pub(crate) fn show(paths: &Paths, id: &str, json: bool) -> Result<ExitCode> {
    let records = Records::open(paths)?;
    let task = records.find_task(id)?;
    let review = records.review(&task.id)?;
    // A copy's disk use, measured now; none once the copy is discarded.
    let disk = review
        .as_ref()
        .filter(|r| r.discarded_at.is_none())
        .and_then(|r| r.copy.as_ref())
        .map(legate_engine::copy_disk);
    if json {
        let mut shown = serde_json::to_value(&task)?;
        if let (Some(d), Some(map)) = (disk, shown.as_object_mut()) {
            map.insert("copyDisk".into(), serde_json::to_value(d)?);
        }
        out!("{}", crate::json_out::pretty(&shown)?)?;
    } else {
        print_task(&task)?;
        if let Some(d) = &disk {
            out!("{}", render::copy_disk_line(d))?;
        }
        if let Some(r) = &review {
            for line in render::integration_lines(r) {
                out!("{line}")?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `legate events`: a task's events after `after`, or followed to the task's end.
pub(crate) async fn events(paths: &Paths, id: &str, after: u64, follow: bool) -> Result<ExitCode> {
    let records = Records::open(paths)?;
    let task = records.find_task(id)?;
    if follow {
        let mut sub = records.follow(task.id.clone(), after);
        while let Some(e) = sub.next().await? {
            out!("{}", render::event_line(&e))?;
        }
        // Like `legate run`: 0 only when the task completed.
        let done = records.find_task(task.id.as_str())?;
        return Ok(if done.state == TaskState::Completed {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    } else {
        let mut cursor = after;
        loop {
            let page = records.events(&task.id, cursor, 500)?;
            let Some(last) = page.last() else { break };
            cursor = last.seq;
            for e in &page {
                out!("{}", render::event_line(e))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `legate cancel`: asks the engine to cancel a task, and says what became of it.
pub(crate) async fn cancel(config: &config::Config, id: &str) -> Result<ExitCode> {
    // The engine decides, as for every front: a task waiting for input ends here and
    // now; a running one is asked to stop, and the process running it stops it.
    let engine = front::start_engine(&config.engine)?;
    let outcome = engine
        .cancel(id)
        .and_then(|before| Ok((engine.task(before.id.as_str())?, before)));
    engine.shutdown().await;
    let (after, before) = outcome?;
    if after.is_terminal() {
        out!("canceled {} (it was {})", after.id, before.state)?;
    } else {
        out!(
            "cancel requested for {} ({}); the process running it stops it within a second",
            after.id,
            after.state
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_task(t: &legate_core::Task) -> std::io::Result<()> {
    let at = |ts: legate_core::Timestamp| {
        humantime::format_rfc3339_seconds(ts.to_system_time()).to_string()
    };
    out!("task     {}", t.id)?;
    out!("state    {}", t.state)?;
    if let Some(e) = &t.error {
        out!(
            "error    {}: {}",
            e.code,
            render::terminal_text(&e.message).replace('\n', "\\n")
        )?;
    }
    out!("agent    {}", t.agent)?;
    out!("context  {}", t.context_id)?;
    if let Some(s) = &t.session_id {
        out!("session  {s}")?;
    }
    if let Some(r) = &t.remote {
        // The remote server named the task: shown on one line, control characters escaped.
        out!(
            "remote   {} task {}",
            one_line(&r.url, 200),
            one_line(&r.task_id, 200)
        )?;
    }
    out!("mode     {}", t.mode.as_str())?;
    match &t.role {
        Some(r) if r.name != r.base.as_str() => out!("role     {} ({})", r.name, r.base.as_str())?,
        Some(r) => out!("role     {}", r.name)?,
        None => out!("role     implementer")?,
    }
    match &t.root {
        Some(r) => out!("workspace {} {}", t.workspace.as_str(), r.display())?,
        None => out!("workspace {}", t.workspace.as_str())?,
    }
    out!("created  {}", at(t.created_at))?;
    out!("updated  {}", at(t.updated_at))?;
    out!("usage    {}", render::usage_text(t))?;
    if let Some(m) = &t.status_message {
        out!("status   {}", render::terminal_text(m).replace('\n', "\\n"))?;
    }
    out!("prompt   {}", one_line(&t.prompt, 200))?;
    // The private memory it was given: which entries, never their text.
    for m in &t.controls.memory {
        out!(
            "memory   {} sha256 {} ({} bytes)",
            one_line(&m.specialist, 64),
            one_line(&m.sha256, 64),
            m.bytes
        )?;
    }
    if let Some(r) = &t.result {
        out!(
            "tools    {} call(s), {} failed{}",
            r.tool_calls,
            r.failed_tool_calls,
            r.stop_reason
                .as_ref()
                .map(|s| format!(", stop reason {s}"))
                .unwrap_or_default()
        )?;
        for refusal in &r.refusals {
            let line = format!("{}: {}", refusal.title, refusal.reason);
            out!(
                "refused  {}",
                render::terminal_text(&line).replace('\n', "\\n")
            )?;
        }
        for line in r.report.iter().flat_map(render::report_lines) {
            out!("{line}")?;
        }
        if !r.text.is_empty() {
            out!("\n{}", render::terminal_text(r.text.trim_end()))?;
        }
    }
    Ok(())
}
