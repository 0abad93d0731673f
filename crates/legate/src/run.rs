//! `legate run`: submit a task from the command line, then watch it to its end.
//!
//! Owns `RunFlags` (the command line's syntax for a `SubmitRequest`, turned into one whole), reading the JSON files they
//! name, and `watch` (rendering a task's events live; Ctrl-C cancels). It never decides
//! anything about the task: the engine does.

use anyhow::Result;
use legate_core::{Error, ErrorCode, TaskMode, TaskState};
use legate_engine::{Engine, SubmitRequest, WorkspaceRequest};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::{config, front, render};

#[derive(Debug, clap::Args)]
pub(crate) struct RunFlags {
    /// The agent to delegate to (default: `default_agent`, normally `revisor`).
    #[arg(long, short)]
    agent: Option<String>,
    /// Work in the context's sandbox. The default for a new context; a continued context
    /// (`--context`) keeps whatever workspace it started with.
    #[arg(long, conflicts_with_all = ["cwd", "copy"])]
    sandbox: bool,
    /// Work on a copy of this git project (its root): review with `legate diff`, `verify`,
    /// `test`, then `integrate`.
    #[arg(long, conflicts_with = "cwd")]
    copy: Option<PathBuf>,
    /// With `--copy`: copy only these relative files or directories (repeatable).
    #[arg(long = "include", requires = "copy")]
    include: Vec<String>,
    /// With `--copy`: acceptance criteria, a JSON file `[{id, description, check?}, …]`.
    #[arg(long, requires = "copy")]
    criteria: Option<PathBuf>,
    /// Work in this directory instead (shared: Legate does not own it).
    #[arg(long)]
    cwd: Option<PathBuf>,
    /// Continue this conversation (same agent session, same workspace).
    #[arg(long)]
    context: Option<String>,
    /// Refuse every change: read-only task (a planner or reviewer role is read-only anyway).
    #[arg(long)]
    read_only: bool,
    /// The role the agent plays: implementer (the default), planner, reviewer, or a
    /// configured role (`legate roles`). A conversation keeps its role.
    #[arg(long)]
    role: Option<String>,
    /// Seconds before the task is stopped with TASK_TIMEOUT.
    #[arg(long)]
    timeout: Option<u64>,
    /// The model to use (an id the agent lists, or `auto` for the agent's own choice).
    /// Without it: the saved preference (`legate model`), then the agent's configured
    /// `model`, then the agent's own choice. `agy` and ACP agents that offer a model option
    /// select it; other agents ignore it with a notice.
    #[arg(long)]
    model: Option<String>,
    /// A JSON Schema file the answer must follow (structured output, agents of kind `agy`):
    /// passed as `--json-schema`, and the answer's JSON comes back as the attachment
    /// `structured_output.json`.
    #[arg(long, value_name = "FILE")]
    json_schema: Option<PathBuf>,
    /// Record the task's protocol frames (the wire tap; `legate tap ID` prints them), even
    /// when its agent is not configured with `tap = true`.
    #[arg(long)]
    tap: bool,
    /// What to ask. Each argument becomes one line of the prompt.
    #[arg(required = true, num_args = 1..)]
    prompt: Vec<String>,
}

/// How often `legate run` redraws its progress line on a terminal.
const PROGRESS_TICK: Duration = Duration::from_millis(200);

pub(crate) async fn run(config: config::Config, flags: RunFlags) -> Result<ExitCode> {
    // Taken apart whole and the request built whole, so a flag added to `RunFlags`, or a
    // field to `SubmitRequest`, does not compile until it is mapped here.
    let RunFlags {
        agent,
        sandbox,
        copy,
        include,
        criteria,
        cwd,
        context,
        read_only,
        role,
        timeout,
        model,
        json_schema,
        tap,
        prompt,
    } = flags;
    let engine = front::start_engine(&config.engine)?;
    let workspace = match (cwd, copy) {
        (Some(dir), _) => WorkspaceRequest::Shared(dir),
        (None, Some(source)) => WorkspaceRequest::Copy {
            source: std::path::absolute(&source).unwrap_or(source),
            include_paths: include,
            criteria: match &criteria {
                Some(file) => serde_json::from_value(read_json(file, "a list of criteria")?)
                    .map_err(|e| {
                        Error::quoting(
                            ErrorCode::InvalidInput,
                            format!("{} is not a list of criteria", file.display()),
                            e,
                        )
                    })?,
                None => Vec::new(),
            },
        },
        (None, None) if sandbox => WorkspaceRequest::Sandbox,
        (None, None) => WorkspaceRequest::Context,
    };
    let request = SubmitRequest {
        agent,
        prompt: prompt.join("\n"),
        workspace,
        context_id: context,
        mode: read_only.then_some(TaskMode::ReadOnly),
        timeout: timeout.map(Duration::from_secs),
        model,
        json_schema: match &json_schema {
            Some(file) => Some(read_json(file, "a JSON Schema")?),
            None => None,
        },
        role,
        // What the command line does not offer (other fronts do): none, each named.
        allowed_tools: None,
        artifact_paths: Vec::new(),
        delivery_mode: None,
        effort: None,
        mcp_servers: None,
        memory: None,
        message_id: None,
        skills: Vec::new(),
        inbound: false,
        tap,
    };
    let task = engine.submit(request)?;
    watch(engine, task).await
}

/// `legate continue`: continues task `id`, cut by a restart, and watches the continuation
/// (the engine's answer: the existing continuation when there is one).
pub(crate) async fn continue_task(config: config::Config, id: &str) -> Result<ExitCode> {
    let engine = front::start_engine(&config.engine)?;
    let task = match engine.continue_task(id, None) {
        Ok(task) => task,
        Err(e) => {
            engine.shutdown().await;
            return Err(e.into());
        }
    };
    if let Some(cut) = &task.controls.continued_from {
        eprintln!("continuing task {cut}");
    }
    watch(engine, task).await
}

/// Follows `task` on `engine` to its end (or until it waits for input), rendering its events;
/// Ctrl-C cancels it. Shuts the engine down; exit code 0 when it completed.
pub(crate) async fn watch(engine: Engine, task: legate_core::Task) -> Result<ExitCode> {
    eprintln!(
        "task {} · agent {} · context {}",
        task.id, task.agent, task.context_id
    );
    let mut renderer = render::Renderer::new();
    let mut sub = engine.subscribe(&task.id, 0);
    let mut interrupts = 0;
    let mut ticker = tokio::time::interval(PROGRESS_TICK);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            _ = ticker.tick(), if renderer.live() => renderer.tick(),
            next = sub.next() => match next? {
                Some(e) => {
                    renderer.event(&e);
                    // The agent asked for input: the task waits for a reply, not for us.
                    if let legate_core::EventKind::Status { state, .. } = &e.kind
                        && *state == TaskState::InputRequired
                    {
                        break;
                    }
                }
                None => break,
            },
            _ = tokio::signal::ctrl_c() => {
                interrupts += 1;
                if interrupts > 1 {
                    eprintln!("interrupted twice; stopping now");
                    engine.shutdown().await;
                    return Ok(ExitCode::from(130));
                }
                eprintln!("\ncanceling (press Ctrl-C again to stop at once)");
                let _ = engine.cancel(task.id.as_str());
            }
        }
    }
    let done = engine.task(task.id.as_str())?;
    renderer.summary(&done);
    engine.shutdown().await;
    Ok(if done.state == TaskState::Completed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The JSON in `file`; `INVALID_INPUT` naming `what` when it cannot be read or parsed.
fn read_json(file: &std::path::Path, what: &str) -> Result<serde_json::Value> {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Error::caused_by(
            ErrorCode::InvalidInput,
            format!("could not read {}", file.display()),
            e,
        )
    })?;
    Ok(serde_json::from_str(&text).map_err(|e| {
        Error::quoting_between(
            ErrorCode::InvalidInput,
            format!("{} is not {what} (not JSON: ", file.display()),
            e,
            ")",
        )
    })?)
}

#[cfg(test)]
mod tests {
    use crate::error_chain;

    /// A file that is not JSON is `INVALID_INPUT` with the parser's error as its cause (not
    /// flattened into a string), and the printed chain says the cause once.
    #[test]
    fn a_bad_json_file_keeps_its_cause() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("criteria.json");
        std::fs::write(&file, "[not json").unwrap();
        let e = super::read_json(&file, "a list of criteria").unwrap_err();
        let legate = e.downcast_ref::<legate_core::Error>().unwrap();
        assert_eq!(legate.code, legate_core::ErrorCode::InvalidInput);
        // The parser's own error, kept (behind the `Arc` the error holds it in).
        let cause = std::error::Error::source(legate).expect("a cause");
        assert!(cause.to_string().contains("expected"), "{cause:?}");
        let chain = error_chain(&e);
        assert!(chain.starts_with("INVALID_INPUT: "), "{chain}");
        assert_eq!(chain.matches(&cause.to_string()).count(), 1, "{chain}");
    }
}
