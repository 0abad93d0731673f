//! What each tool does, over the engine: translate arguments into engine calls and engine
//! answers into the shapes of [`crate::schema`].
//!
//! Nothing here decides a task's fate: submitting, continuing, messaging and canceling are
//! the engine's. This module validates ranges of its own arguments (cursors, limits, wait
//! times), applies the profile's mode rule, and reads.

use crate::chunk;
use crate::profile::Profile;
use crate::schema::*;
use legate_core::{Error, ErrorCode, Event, Result, RoleBase, Task, TaskMode, TaskState};
use legate_engine::TaskFilter;
use legate_engine::{ContinueRequest, Engine, MAX_PENDING_PER_CONTEXT, MessageRequest};
use serde_json::{Map, Value};
use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

mod health;
mod run;
pub use health::{agents, health};
pub use run::run;

/// The longest `wait`, in seconds.
pub const WAIT_MAX_SECS: u64 = 60;
/// The default `wait`, in seconds.
pub const WAIT_DEFAULT_SECS: u64 = 30;
/// The most events one answer carries.
pub const MAX_EVENTS: usize = 1000;
/// The default `events` page.
pub const EVENTS_DEFAULT_LIMIT: usize = 200;
/// The most tasks or sessions one listing returns.
pub const MAX_LIST: usize = 200;
/// The default listing length.
pub const LIST_DEFAULT: usize = 20;

/// `value` when it lies in `min..=max`, else `INVALID_INPUT` naming `name`.
pub fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
    name: &str,
    value: T,
    min: T,
    max: T,
) -> Result<T> {
    if value < min || value > max {
        return Err(Error::invalid_input(format!(
            "{name} must be between {min} and {max} (got {value})"
        )));
    }
    Ok(value)
}

fn timeout_arg(seconds: Option<u64>) -> Result<Option<Duration>> {
    seconds
        .map(|s| {
            in_range(
                "timeoutSeconds",
                s,
                1,
                legate_engine::MAX_TASK_TIMEOUT.as_secs(),
            )
            .map(Duration::from_secs)
        })
        .transpose()
}

/// `dir` as a path, when it is absolute (`INVALID_WORKSPACE` naming `name` otherwise).
pub fn absolute(name: &str, dir: &str) -> Result<PathBuf> {
    let path = PathBuf::from(dir);
    if !path.is_absolute() {
        return Err(Error::new(
            ErrorCode::InvalidWorkspace,
            format!("{name} must be an absolute path (got {dir:?})"),
        ));
    }
    Ok(path)
}

/// `resume`.
pub fn resume(engine: &Engine, profile: Profile, args: ResumeArgs) -> Result<StartedOut> {
    let ResumeArgs {
        context_id,
        prompt,
        mode,
        timeout_seconds,
    } = args;
    let mode = profile.task_mode(mode)?;
    let task = engine.resume(ContinueRequest {
        context_id,
        prompt,
        mode,
        timeout: timeout_arg(timeout_seconds)?,
    })?;
    Ok(started(&task))
}

/// `continue`.
pub fn continue_task(
    engine: &Engine,
    profile: Profile,
    args: ContinueArgs,
) -> Result<ContinuedOut> {
    let task = engine.continue_task(&args.task_id, profile.task_mode(None)?)?;
    let continued_from = task
        .controls
        .continued_from
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    Ok(ContinuedOut {
        started: started(&task),
        continued_from,
    })
}

/// `send_message`.
pub fn send_message(
    engine: &Engine,
    profile: Profile,
    args: SendMessageArgs,
) -> Result<ReceiptOut> {
    let SendMessageArgs {
        message_id,
        text,
        context_id,
        task_id,
    } = args;
    let context_id = match (context_id, task_id) {
        (Some(c), None) => c,
        (None, Some(t)) => engine.task(&t)?.context_id,
        _ => {
            return Err(Error::invalid_input(
                "give exactly one of contextId and taskId",
            ));
        }
    };
    // The tool is for short input to a running conversation (a longer prompt goes through
    // `resume`); the limit is the engine's configuration, read by every front alike.
    let max = engine.config().fronts.message_max_chars;
    let chars = text.chars().count();
    if chars > max {
        return Err(Error::invalid_input(format!(
            "the message has {chars} characters; the limit is {max} (use resume for a longer prompt)"
        )));
    }
    let receipt = engine.send_message(MessageRequest {
        context_id,
        message_id,
        text,
        mode: profile.read_only().then_some(TaskMode::ReadOnly),
    })?;
    Ok(ReceiptOut {
        message_id: receipt.message_id,
        context_id: receipt.context_id,
        state: receipt.delivery,
        continuation_task_id: receipt.task.id.to_string(),
        task_state: receipt.task.state,
        duplicate: receipt.duplicate,
    })
}

fn started(task: &Task) -> StartedOut {
    let (role, role_base) = role_of(task);
    StartedOut {
        task_id: task.id.to_string(),
        context_id: task.context_id.clone(),
        agent: task.agent.clone(),
        state: task.state,
        mode: task.mode,
        role,
        role_base,
        workspace: task.workspace,
        skills: task.controls.skills.clone(),
        memory: task.controls.memory.clone(),
    }
}

/// A task's role name and base (a task stored with no role is the implementer).
fn role_of(task: &Task) -> (String, RoleBase) {
    task.role.as_ref().map_or_else(
        || {
            (
                RoleBase::Implementer.as_str().to_string(),
                RoleBase::Implementer,
            )
        },
        |r| (r.name.clone(), r.base),
    )
}

/// `roles`.
pub fn roles(engine: &Engine) -> RolesOut {
    RolesOut {
        roles: engine.roles().list(),
    }
}

/// A task without its bulky parts.
pub fn task_out(t: &Task) -> TaskOut {
    TaskOut {
        task_id: t.id.to_string(),
        context_id: t.context_id.clone(),
        agent: t.agent.clone(),
        state: t.state,
        mode: t.mode,
        role: role_of(t).0,
        role_base: role_of(t).1,
        workspace: t.workspace,
        root: t.root.as_ref().map(|r| r.display().to_string()),
        model: t.model.clone(),
        error: t.error.as_ref().map(ErrorBody::from),
        status_message: t.status_message.clone(),
        usage: t.usage.clone(),
        session_id: t.session_id.clone(),
        remote: t.remote.as_ref().map(|r| RemoteOut {
            url: r.url.clone(),
            task_id: r.task_id.clone(),
        }),
        prompt_preview: preview(&t.prompt, 120),
        timeout_seconds: t.timeout_secs,
        memory: t.controls.memory.clone(),
        allowed_tools: t.controls.allowed_tools.clone(),
        mcp_servers: t.controls.mcp_servers.clone(),
        created_at: t.created_at.0,
        updated_at: t.updated_at.0,
    }
}

fn preview(s: &str, max: usize) -> String {
    let flat = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match flat.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &flat[..i]),
        None => flat,
    }
}

/// An event as a client sees it: the stored event without the task id it repeats.
pub fn event_out(e: &Event) -> Map<String, Value> {
    match serde_json::to_value(e) {
        Ok(Value::Object(mut m)) => {
            m.remove("taskId");
            m
        }
        _ => Map::new(),
    }
}

/// `status`.
pub fn status(engine: &Engine, args: TaskArgs) -> Result<StatusOut> {
    let task = engine.task(&args.task_id)?;
    let last_seq = engine.records().last_seq(&task.id)?;
    let queued: Vec<String> = engine
        .messages()
        .queued_after(&task)?
        .into_iter()
        .map(|id| id.to_string())
        .collect();
    let awaiting_supervision = crate::schema::AwaitingOut::of(engine, &task.id)?;
    Ok(StatusOut {
        awaiting_supervision,
        ready: task.is_terminal(),
        task: task_out(&task),
        last_seq,
        continuation_pending: !queued.is_empty(),
        queued_task_ids: queued,
    })
}

/// The number of the task's last event, and `INVALID_INPUT` when `after` is past it.
pub fn check_cursor(engine: &Engine, task: &Task, after: u64) -> Result<u64> {
    let last = engine.records().last_seq(&task.id)?;
    if after > last {
        return Err(Error::invalid_input(format!(
            "after = {after} is past the task's last event ({last})"
        )));
    }
    Ok(last)
}

/// `events`.
pub fn events(engine: &Engine, args: EventsArgs) -> Result<EventsOut> {
    let task = engine.task(&args.task_id)?;
    let after = args.after.unwrap_or(0);
    let limit = in_range(
        "limit",
        args.limit.unwrap_or(EVENTS_DEFAULT_LIMIT),
        1,
        MAX_EVENTS,
    )?;
    let last_seq = check_cursor(engine, &task, after)?;
    let page = engine.events(&task.id, after, limit)?;
    let next_cursor = page.last().map_or(after, |e| e.seq);
    Ok(EventsOut {
        task_id: task.id.to_string(),
        truncated: page.first().is_some_and(|e| e.seq > after + 1),
        events: page.iter().map(event_out).collect(),
        next_cursor,
        has_more: next_cursor < last_seq,
        last_seq,
    })
}

/// The text `read_result` reads: the answer of an ended task.
fn answer(task: &Task) -> Result<String> {
    if !task.is_terminal() {
        return Err(Error::new(
            ErrorCode::ResultNotReady,
            format!(
                "task {} is {}; its result can be read once it ends (use wait)",
                task.id, task.state
            ),
        ));
    }
    Ok(task
        .result
        .as_ref()
        .map(|r| r.text.clone())
        .unwrap_or_default())
}

/// `result`.
pub fn result(engine: &Engine, args: ResultArgs) -> Result<ResultOut> {
    let task = engine.task(&args.task_id)?;
    let include = args.include_result.unwrap_or(true);
    let mut out = ResultOut {
        task_id: task.id.to_string(),
        ready: task.is_terminal(),
        state: task.state,
        task_error: None,
        status_message: None,
        usage: None,
        stop_reason: None,
        tool_calls: None,
        failed_tool_calls: None,
        answer_length: None,
        answer_sha256: None,
        answer: None,
        refusals: None,
        prompt: None,
        report: None,
        artifacts: None,
        memory: task.controls.memory.clone(),
    };
    if !task.is_terminal() {
        return Ok(out);
    }
    let text = answer(&task)?;
    out.task_error = task.error.as_ref().map(ErrorBody::from);
    out.status_message = task.status_message.clone();
    out.usage = task.usage.clone();
    out.answer_length = Some(chunk::utf16_len(&text));
    out.answer_sha256 = Some(chunk::sha256_hex(&text));
    if let Some(r) = &task.result {
        out.stop_reason = r.stop_reason.clone();
        out.tool_calls = Some(r.tool_calls);
        out.failed_tool_calls = Some(r.failed_tool_calls);
        out.report = r.report.clone();
        if include {
            out.refusals = Some(r.refusals.clone());
        }
    }
    if include {
        out.answer = Some(text);
        out.prompt = Some(task.prompt.clone());
    }
    out.artifacts = crate::delivery::listed(engine, &task)?;
    Ok(out)
}

/// `read_result`.
pub fn read_result(engine: &Engine, args: ReadResultArgs) -> Result<ReadResultOut> {
    let task = engine.task(&args.task_id)?;
    let text = match args.part.as_deref() {
        None | Some("answer") => answer(&task)?,
        Some("structuredOutput") => {
            answer(&task)?;
            task.result
                .as_ref()
                .and_then(|r| r.structured_output())
                .map(str::to_owned)
                .ok_or_else(|| {
                    Error::invalid_input(format!(
                        "task {} has no structured output (only an agy task run with a JSON Schema answers with one)",
                        task.id
                    ))
                })?
        }
        Some(_) => {
            return Err(Error::invalid_input(
                "part must be \"answer\" or \"structuredOutput\"",
            ));
        }
    };
    let piece = chunk::read(
        &text,
        args.offset.unwrap_or(0),
        args.limit.unwrap_or(chunk::DEFAULT_LIMIT),
        args.expected_content_sha256.as_deref(),
    )?;
    Ok(ReadResultOut {
        task_id: task.id.to_string(),
        text: piece.text,
        offset: piece.offset,
        next_offset: piece.next_offset,
        has_more: piece.has_more,
        total_length: piece.total_length,
        content_sha256: piece.content_sha256,
    })
}

/// `cancel`.
pub fn cancel(engine: &Engine, args: TaskArgs) -> Result<CancelOut> {
    let task = engine.cancel(&args.task_id)?;
    Ok(CancelOut {
        task_id: task.id.to_string(),
        state: task.state,
        cancel_requested: true,
    })
}

/// `tasks`.
pub fn tasks(engine: &Engine, args: TasksArgs) -> Result<TasksOut> {
    let state = match args.state.as_deref() {
        None => None,
        Some(s) => Some(TaskState::parse_named(s)?),
    };
    let limit = in_range("limit", args.limit.unwrap_or(LIST_DEFAULT), 1, MAX_LIST)?;
    let found = engine.tasks(&TaskFilter {
        state,
        context_id: args.context_id,
        agent: args.agent,
        limit,
        before: args.before.map(legate_core::Timestamp),
        inbound_only: false,
    })?;
    let next_before = if found.len() == limit {
        found.last().map(|t| t.created_at.0)
    } else {
        None
    };
    Ok(TasksOut {
        tasks: found.iter().map(task_out).collect(),
        next_before,
    })
}

/// `sessions`.
pub fn sessions(engine: &Engine, args: SessionsArgs) -> Result<SessionsOut> {
    let limit = in_range("limit", args.limit.unwrap_or(LIST_DEFAULT), 1, MAX_LIST)?;
    let contexts = engine.records().contexts(limit)?;
    let mut sessions = Vec::with_capacity(contexts.len());
    for c in contexts {
        let last = engine
            .tasks(&TaskFilter {
                context_id: Some(c.context_id.clone()),
                limit: 1,
                ..TaskFilter::default()
            })?
            .into_iter()
            .next();
        sessions.push(SessionOut {
            context_id: c.context_id,
            agent: c.agent,
            session_id: c.session_id,
            sandbox_root: c.sandbox_root.map(|p| p.display().to_string()),
            updated_at: c.updated_at.0,
            last_task_id: last.as_ref().map(|t| t.id.to_string()),
            last_state: last.as_ref().map(|t| t.state),
        });
    }
    Ok(SessionsOut { sessions })
}

/// `handoff`: the source's context checked, then the role started in a fresh copy of the
/// source copy's current files. A read-only profile makes the new task read-only (and
/// refuses `mode: "write"`).
pub async fn handoff(
    engine: &Engine,
    profile: Profile,
    request: legate_engine::HandoffRequest,
) -> Result<StartedOut> {
    // The arguments are the engine's request itself; only the mode is the profile's to narrow.
    let mode = profile.task_mode(request.mode)?;
    let task = engine
        .handoffs()
        .handoff(legate_engine::HandoffRequest { mode, ..request })
        .await?;
    Ok(started(&task))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn ranges_name_the_argument() {
        assert_eq!(in_range("limit", 5, 1, 10).unwrap(), 5);
        let e = in_range("timeoutSeconds", 61u64, 1, 60).unwrap_err();
        assert_eq!(e.code, ErrorCode::InvalidInput);
        assert!(e.message.contains("timeoutSeconds"), "{}", e.message);
    }

    #[test]
    fn the_task_record_names_the_remote_task_only_when_there_is_one() {
        let mut task = Task::new("t1", "c1", "remote", "p");
        let local = serde_json::to_value(task_out(&task)).unwrap();
        assert!(local.get("remote").is_none(), "{local}");
        task.remote = Some(legate_core::RemoteRef {
            url: "http://127.0.0.1:9/a2a".into(),
            binding: "JSONRPC".into(),
            task_id: "remote-7".into(),
            context_id: Some("rc".into()),
        });
        let remote = serde_json::to_value(task_out(&task)).unwrap();
        assert_eq!(
            remote["remote"],
            serde_json::json!({"url": "http://127.0.0.1:9/a2a", "taskId": "remote-7"})
        );
    }

    #[test]
    fn previews_are_flat_and_short() {
        assert_eq!(preview("a\n b  c", 10), "a b c");
        assert_eq!(preview(&"é".repeat(5), 3), "ééé…");
    }
}
