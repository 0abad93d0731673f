//! Tool calls answered as MCP tasks (the `io.modelcontextprotocol/tasks` extension, SEP-2663,
//! as rmcp 3.x implements it): which tools may be, the id a caller follows, and `tasks/get`,
//! `tasks/cancel` and `tasks/update` translated to and from the engine.
//!
//! The task id is Legate's own: the task id of `run`, `resume` and `handoff`, the
//! continuation task of `send_message`, the group of `group_start`, the comparison of
//! `compare`, and the engine's `op-…` id for `test` and `integrate` (which the engine runs in
//! the background). Every call answered as a task is recorded by the engine with its direct
//! answer before the caller is told, so any `legate mcp` process rebuilds the task's result
//! from the store.
//!
//! Statuses: `working` while the work runs (`statusMessage` from the engine's state and last
//! event); `input_required` only for a question the delegated agent asks its caller, or an
//! `integrate` confirmation in approval mode `ask` (permission requests stay with the
//! supervisor); `completed` once the work ended, however it ended (a failed Legate task is
//! a call that worked: its `outcome` says failed); `cancelled` for work canceled; `failed`
//! only when the call has no answer (its process stopped: `SERVER_RESTARTED`).
//!
//! This module decides nothing about the work: starting, canceling, replying and confirming
//! are the engine's. It never logs prompts, answers or questions.

use crate::codec::to_value;
use crate::confirmation::{answer_of, approval_schema, confirmation_message};
use crate::groups::{self, GroupArgs};
use crate::schema::{ErrorBody, ResultArgs};
use crate::tools;
use legate_core::{Error, ErrorCode, EventKind, Result, Task, TaskMode, TaskState, Timestamp};
use legate_engine::{CallTask, CallTaskState, Engine, GroupState};
use rmcp::model::{
    DetailedTask, ElicitRequest, ElicitRequestParams, ElicitationAction, ElicitationSchema,
    InputRequest, InputRequests, InputResponses, JsonObject, Task as McpTask, TaskPayload,
    TaskStatus,
};
use serde_json::{Value, json};

/// The tools a caller that declared the extension gets answered as tasks.
pub(crate) const TASK_TOOLS: &[&str] = &[
    "run",
    "resume",
    "continue",
    "send_message",
    "handoff",
    "compare",
    "group_start",
    "test",
    "integrate",
];

/// The tools the engine runs in the background as ops for a task.
pub(crate) const OP_TOOLS: &[&str] = &["test", "integrate"];

/// How often a caller should poll `tasks/get`, in milliseconds.
pub(crate) const POLL_INTERVAL_MS: u64 = 1000;

/// How many of a task's last events its status message looks through.
const RECENT_EVENTS: u64 = 20;
/// The most characters of a tool call's title a status message quotes.
const MAX_TITLE_CHARS: usize = 80;

/// The key of an `integrate` confirmation among a task's input requests.
const CONFIRM_KEY: &str = "confirm";
/// The prefix of the key of an agent's question (the event number follows, so a later
/// question has another key).
const REPLY_KEY: &str = "reply-";

/// The id a caller follows for `tool`'s direct answer.
pub(crate) fn followed_id(tool: &str, answer: &Value) -> Option<String> {
    let field = match tool {
        "run" | "resume" | "continue" | "handoff" => "taskId",
        "send_message" => "continuationTaskId",
        "group_start" => "groupId",
        "compare" => "comparisonId",
        _ => return None,
    };
    answer.get(field).and_then(Value::as_str).map(str::to_owned)
}

fn iso(t: Timestamp) -> String {
    humantime::format_rfc3339_millis(t.to_system_time()).to_string()
}

/// The task a caller is handed for `id`, recorded at `created`.
pub(crate) fn handle(id: &str, created: Timestamp) -> McpTask {
    McpTask::new(id, TaskStatus::Working, iso(created), iso(Timestamp::now()))
        .with_poll_interval_ms(POLL_INTERVAL_MS)
}

/// Where the work of a call answered as a task stands, for `tasks/get`.
pub(crate) async fn detailed(engine: &Engine, call: &CallTask) -> Result<DetailedTask> {
    let record = &call.record;
    let base = McpTask::new(
        record.id.as_str(),
        TaskStatus::Working,
        iso(record.created_at),
        iso(Timestamp::now()),
    );
    let (payload, message) = match record.tool.as_str() {
        "test" | "integrate" => op_state(call)?,
        "run" | "resume" | "continue" | "handoff" | "send_message" => task_state(engine, call)?,
        "compare" => compare_state(engine, call).await?,
        "group_start" => group_state(engine, call)?,
        other => {
            return Err(Error::new(
                ErrorCode::Internal,
                format!("a call of {other:?} was recorded as a task"),
            ));
        }
    };
    let base = match (&payload, message) {
        (TaskPayload::Working | TaskPayload::InputRequired { .. }, Some(m)) => base
            .with_status_message(m)
            .with_poll_interval_ms(POLL_INTERVAL_MS),
        (TaskPayload::Working | TaskPayload::InputRequired { .. }, None) => {
            base.with_poll_interval_ms(POLL_INTERVAL_MS)
        }
        (_, Some(m)) => base.with_status_message(m),
        (_, None) => base,
    };
    Ok(DetailedTask::new(base, payload))
}

/// A `CallToolResult` as a JSON object: `structuredContent`, a text copy, and `isError`.
fn tool_result(answer: Value, is_error: bool) -> Result<JsonObject> {
    let result = if is_error {
        rmcp::model::CallToolResult::structured_error(answer)
    } else {
        rmcp::model::CallToolResult::structured(answer)
    };
    match to_value(result)? {
        Value::Object(o) => Ok(o),
        _ => Err(Error::new(
            ErrorCode::Internal,
            "a tool result did not encode as an object",
        )),
    }
}

/// The recorded direct answer with `outcome` added.
fn with_outcome(call: &CallTask, outcome: Value) -> Result<TaskPayload> {
    let mut answer = call.record.answer.clone().unwrap_or_else(|| json!({}));
    if let Value::Object(o) = &mut answer {
        o.insert("outcome".into(), outcome);
    }
    Ok(TaskPayload::Completed {
        result: tool_result(answer, false)?,
    })
}

type State = (TaskPayload, Option<String>);

fn op_state(call: &CallTask) -> Result<State> {
    let r = &call.record;
    Ok(match r.state {
        CallTaskState::Running => match &call.question {
            Some(q) => (
                TaskPayload::InputRequired {
                    input_requests: one_request(
                        CONFIRM_KEY,
                        confirmation_message(q),
                        approval_schema(),
                    ),
                },
                Some("waiting for your confirmation to integrate".into()),
            ),
            None => (TaskPayload::Working, Some(format!("running {}", r.tool))),
        },
        CallTaskState::Completed | CallTaskState::Answered => (
            TaskPayload::Completed {
                result: tool_result(r.answer.clone().unwrap_or_else(|| json!({})), r.is_error)?,
            },
            None,
        ),
        CallTaskState::Canceled => (TaskPayload::Cancelled, Some("canceled".into())),
        CallTaskState::Failed => {
            let e = match r.answer.as_ref().and_then(|a| a.get("error")) {
                // The op's work stopped on a bug (its answer says so).
                Some(body) => Error::new(
                    ErrorCode::Internal,
                    body.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or("the op stopped on a bug in Legate")
                        .to_string(),
                ),
                None => Error::new(ErrorCode::ServerRestarted, stopped_message(&r.tool)),
            };
            let error = json!({
                "code": -32603,
                "message": e.detail(),
                "data": { "code": e.code.as_str() },
            });
            let Value::Object(error) = error else {
                return Err(Error::new(ErrorCode::Internal, "an error is not an object"));
            };
            (TaskPayload::Failed { error }, Some(e.detail()))
        }
    })
}

/// What a caller is told of an op whose process stopped before it ended.
fn stopped_message(tool: &str) -> String {
    if tool == "integrate" {
        // The next integrate's journal recovery may finish an integration cut halfway.
        "the legate process running integrate stopped before it ended; it was not re-run, but the project may have been integrated by the recovery of a later integrate: check status or preview".into()
    } else {
        format!("the legate process running {tool} stopped before it ended; it was not re-run")
    }
}

fn one_request(key: &str, message: String, schema: ElicitationSchema) -> InputRequests {
    let request = ElicitRequest::new(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message,
        requested_schema: schema,
    });
    InputRequests::from([(key.to_string(), InputRequest::Elicitation(request))])
}

fn reply_schema() -> ElicitationSchema {
    ElicitationSchema::builder()
        .required_string_property("answer", |s| {
            s.title("Answer")
                .description("Your answer; the agent receives it as its next prompt.")
        })
        .build_unchecked()
}

/// The Legate task a delegation's call follows.
fn followed_task(engine: &Engine, call: &CallTask) -> Result<Task> {
    engine.task(&call.record.id)
}

fn task_state(engine: &Engine, call: &CallTask) -> Result<State> {
    let task = followed_task(engine, call)?;
    if task.state == TaskState::Canceled {
        return Ok((TaskPayload::Cancelled, Some("canceled".into())));
    }
    if task.is_terminal() {
        let outcome = to_value(tools::result(
            engine,
            ResultArgs {
                task_id: task.id.to_string(),
                include_result: None,
            },
        )?)?;
        return Ok((with_outcome(call, outcome)?, Some(task.state.to_string())));
    }
    let last_seq = engine.records().last_seq(&task.id)?;
    if task.state == TaskState::InputRequired {
        let question = task
            .status_message
            .clone()
            .unwrap_or_else(|| "The agent asks for input.".into());
        return Ok((
            TaskPayload::InputRequired {
                input_requests: one_request(
                    &format!("{REPLY_KEY}{last_seq}"),
                    question,
                    reply_schema(),
                ),
            },
            Some("the agent asks you a question".into()),
        ));
    }
    Ok((
        TaskPayload::Working,
        Some(working_message(engine, &task, last_seq)?),
    ))
}

/// "running: the agent called Write", "waiting for approval", …: the task's state and what
/// its last event says it does, never its text.
fn working_message(engine: &Engine, task: &Task, last_seq: u64) -> Result<String> {
    if !crate::schema::AwaitingOut::of(engine, &task.id)?.is_empty() {
        return Ok(format!("{}: waiting for approval", task.state));
    }
    // The latest event that says what the agent does (a tool call's updates name no tool:
    // its call, a few events back, does).
    let recent = engine.events(
        &task.id,
        last_seq.saturating_sub(RECENT_EVENTS),
        RECENT_EVENTS as usize,
    )?;
    let doing = recent.iter().rev().find_map(|e| match &e.kind {
        EventKind::ToolCall(c) => Some(format!(
            "the agent called {}",
            c.title.chars().take(MAX_TITLE_CHARS).collect::<String>()
        )),
        EventKind::Message { .. } => Some("the agent is answering".to_string()),
        EventKind::Thought { .. } => Some("the agent is thinking".to_string()),
        EventKind::Plan { .. } => Some("the agent made a plan".to_string()),
        _ => None,
    });
    Ok(match doing {
        Some(d) => format!("{}: {d}", task.state),
        None => task.state.to_string(),
    })
}

async fn compare_state(engine: &Engine, call: &CallTask) -> Result<State> {
    let comparison = engine.comparisons().comparison(&call.record.id).await?;
    let ended = comparison
        .reviews
        .iter()
        .filter(|r| r.state.is_none_or(TaskState::is_terminal))
        .count();
    let total = comparison.reviews.len();
    if ended < total {
        return Ok((
            TaskPayload::Working,
            Some(format!("{ended} of {total} reviews ended")),
        ));
    }
    let canceled = comparison
        .reviews
        .iter()
        .all(|r| r.state == Some(TaskState::Canceled));
    if canceled && total > 0 {
        return Ok((TaskPayload::Cancelled, Some("canceled".into())));
    }
    let outcome = to_value(comparison)?;
    Ok((
        with_outcome(call, outcome)?,
        Some(format!("{total} reviews ended")),
    ))
}

fn group_state(engine: &Engine, call: &CallTask) -> Result<State> {
    let status = groups::status(
        engine,
        GroupArgs {
            group_id: call.record.id.clone(),
        },
    )?;
    match status.state {
        GroupState::Canceled => Ok((TaskPayload::Cancelled, Some("canceled".into()))),
        s if s.is_terminal() => {
            let message = s.as_str().to_string();
            Ok((with_outcome(call, to_value(status)?)?, Some(message)))
        }
        s => Ok((TaskPayload::Working, Some(s.as_str().to_string()))),
    }
}

/// Cancels the work of a call answered as a task through the engine; work that already
/// ended is left as it is (the next `tasks/get` says how it ended). An op is canceled only
/// while it waits on its confirmation (else `TASK_NOT_CANCELABLE`, see the engine).
pub(crate) async fn cancel(engine: &Engine, call: &CallTask) -> Result<()> {
    let id = call.record.id.as_str();
    match call.record.tool.as_str() {
        "test" | "integrate" => {
            engine.call_tasks().cancel(id).await?;
        }
        "group_start" => {
            if !engine.groups().status(id)?.state.is_terminal() {
                engine.groups().cancel(id)?;
            }
        }
        "compare" => {
            for review in engine.comparisons().comparison(id).await?.reviews {
                if review.state.is_some_and(|s| !s.is_terminal()) {
                    cancel_task(engine, review.task_id.as_str())?;
                }
            }
        }
        _ => cancel_task(engine, id)?,
    }
    Ok(())
}

fn cancel_task(engine: &Engine, id: &str) -> Result<()> {
    if engine.task(id)?.is_terminal() {
        return Ok(());
    }
    match engine.cancel(id) {
        // It ended between the two reads.
        Err(_) if engine.task(id)?.is_terminal() => Ok(()),
        other => other.map(|_| ()),
    }
}

fn bad_update(message: impl Into<String>) -> Error {
    Error::invalid_input(message)
}

/// The action and content of one elicitation answer.
fn elicit_answer(value: &Value) -> Result<(ElicitationAction, Option<&Value>)> {
    let action = value
        .get("action")
        .cloned()
        .ok_or_else(|| bad_update("an input response needs an action (accept, decline or cancel)"))
        .and_then(|a| {
            serde_json::from_value::<ElicitationAction>(a).map_err(|_| {
                bad_update("an input response's action must be accept, decline or cancel")
            })
        })?;
    Ok((action, value.get("content")))
}

/// What `send_message` asks of the same text: at most the engine's `message_max_chars`,
/// and, under a read-only profile (`read_only`), no answer into a task that may write (which
/// would run its next turn in write mode).
fn check_answer(engine: &Engine, id: &str, answer: &str, read_only: bool) -> Result<()> {
    let max = engine.config().fronts.message_max_chars;
    let chars = answer.chars().count();
    if chars > max {
        return Err(bad_update(format!(
            "the answer has {chars} characters; the limit is {max}"
        )));
    }
    if read_only && engine.task(id)?.mode != TaskMode::ReadOnly {
        return Err(Error::new(
            ErrorCode::ModeNotAllowed,
            format!("{id} may write, and this server's profile allows only read-only tasks"),
        ));
    }
    Ok(())
}

/// Answers the input request the call's work waits on: the agent's question (the answer
/// becomes its next prompt; decline or cancel cancels the task) or an `integrate`
/// confirmation (the engine reads the answer). Anything else changes nothing. `read_only`:
/// this server's profile allows only read-only tasks.
pub(crate) async fn update(
    engine: &Engine,
    call: &CallTask,
    responses: &InputResponses,
    read_only: bool,
) -> Result<()> {
    let task = detailed(engine, call).await?;
    let TaskPayload::InputRequired { input_requests } = &task.payload else {
        return Err(Error::new(
            ErrorCode::TaskNotAwaitingInput,
            format!("{} waits on no input", call.record.id),
        ));
    };
    if responses.len() != 1 {
        return Err(bad_update("give exactly one input response"));
    }
    let Some((key, value)) = responses.iter().next() else {
        return Err(bad_update("give exactly one input response"));
    };
    if !input_requests.contains_key(key) {
        // A question of this task's asked before the one it waits on now (a second answer
        // that lost the race to the first, whose turn asked again): the engine's refusal. A
        // key naming no question asked is a bad update.
        let seq = |k: &str| {
            k.strip_prefix(REPLY_KEY)
                .and_then(|n| n.parse::<u64>().ok())
        };
        let waiting = input_requests.keys().filter_map(|k| seq(k)).max();
        if let (Some(named), Some(waiting)) = (seq(key), waiting)
            && named < waiting
        {
            return Err(Error::new(
                ErrorCode::TaskNotAwaitingInput,
                format!(
                    "{key:?} is no longer waiting: {} has moved on since",
                    call.record.id
                ),
            ));
        }
        return Err(bad_update(format!(
            "{key:?} is not an outstanding input request of {}",
            call.record.id
        )));
    }
    let (action, content) = elicit_answer(value)?;
    if key == CONFIRM_KEY {
        return engine
            .call_tasks()
            .confirm(&call.record.id, answer_of(&action, content));
    }
    match action {
        ElicitationAction::Accept => {
            let answer = content
                .and_then(|c| c.get("answer"))
                .and_then(Value::as_str)
                .filter(|a| !a.trim().is_empty())
                .ok_or_else(|| {
                    bad_update("an accepted answer needs content {answer: a non-empty string}")
                })?;
            check_answer(engine, &call.record.id, answer, read_only)?;
            // The key names the question's event: the engine stores the answer only while
            // that question is still the task's latest (a second answer is refused).
            let question = key
                .strip_prefix(REPLY_KEY)
                .and_then(|seq| seq.parse::<u64>().ok())
                .ok_or_else(|| bad_update(format!("{key:?} names no question")))?;
            engine.answer_question(&call.record.id, answer, question)?;
        }
        _ => cancel_task(engine, &call.record.id)?,
    }
    Ok(())
}

/// The error body of a failed tool call, as the task's result carries it.
pub(crate) fn error_answer(e: &Error) -> Value {
    json!({ "error": ErrorBody::from(e) })
}
