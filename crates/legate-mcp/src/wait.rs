//! `wait`: follow a task for up to a minute, collecting its new events, and tell a client that
//! sent a progress token about each one as it happens; `wait_many`: the engine's joint wait
//! over loose tasks, translated.
//!
//! Each notification carries a counter that strictly increases within one call (1, 2, 3, …),
//! and a short message naming the event's number and kind: never a prompt, file content,
//! command or output. While the agent is silent a notification still goes out at least every
//! `heartbeat`, so a client that resets its own timeout on progress never gives up.
//!
//! Waiting never changes the task: a wait that times out, a client that cancels the call and a
//! client that disconnects all leave the task running.

use crate::schema::{ErrorBody, WaitArgs, WaitManyArgs, WaitManyOut, WaitOut, WaitedOut};
use crate::tools::{
    MAX_EVENTS, WAIT_DEFAULT_SECS, WAIT_MAX_SECS, check_cursor, event_out, in_range,
};
use legate_core::{DeliveryMode, Event, EventKind, Result, Task};
use legate_engine::{Engine, WaitMode};
use rmcp::RoleServer;
use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where progress goes, when the client asked for it.
#[derive(Debug, Clone)]
pub struct Progress {
    /// The client.
    pub peer: Peer<RoleServer>,
    /// The token it sent.
    pub token: ProgressToken,
    /// The longest silence between two notifications.
    pub heartbeat: Duration,
}

pub(crate) struct Notifier {
    progress: Option<Progress>,
    counter: u64,
    last: Instant,
}

impl Notifier {
    pub(crate) fn new(progress: Option<Progress>) -> Self {
        Self {
            progress,
            counter: 0,
            last: Instant::now(),
        }
    }

    pub(crate) async fn send(&mut self, message: String) {
        let Some(p) = &self.progress else { return };
        self.counter += 1;
        self.last = Instant::now();
        let param = ProgressNotificationParam::new(p.token.clone(), self.counter as f64)
            .with_message(message);
        if let Err(e) = p.peer.notify_progress(param).await {
            tracing::debug!(error = %e, "could not send a progress notification");
        }
    }

    pub(crate) fn next_heartbeat(&self) -> Option<Instant> {
        self.progress.as_ref().map(|p| self.last + p.heartbeat)
    }
}

/// A short description of an event that reveals no content.
pub fn describe(e: &Event) -> String {
    let detail = match &e.kind {
        EventKind::Status { state, .. } => format!(" → {state}"),
        EventKind::ToolCall(c) => format!(" ({}, {})", c.tool_kind.as_str(), c.status.as_str()),
        EventKind::ToolCallUpdate(u) => u
            .status
            .map(|s| format!(" ({})", s.as_str()))
            .unwrap_or_default(),
        EventKind::Permission { verdict, .. } => {
            if verdict.is_allow() {
                " (allowed)".to_string()
            } else {
                " (refused)".to_string()
            }
        }
        _ => String::new(),
    };
    format!("event {}: {}{detail}", e.seq, e.kind.type_name())
}

/// Waits as `args` says. `cancelled` ends the wait early (the client gave up on the call).
pub async fn wait(
    engine: &Engine,
    args: WaitArgs,
    progress: Option<Progress>,
    cancelled: CancellationToken,
) -> Result<WaitOut> {
    let task = engine.task(&args.task_id)?;
    if task.controls.delivery_mode == DeliveryMode::Messages {
        return crate::delivery::wait_messages(engine, task, args, progress, cancelled).await;
    }
    let (after, reset) = crate::delivery::cursor(&task, args.after.unwrap_or(0), args.cursor_mode);
    let seconds = wait_seconds(args.timeout_seconds)?;
    let max = in_range(
        "maxEvents",
        args.max_events.unwrap_or(MAX_EVENTS),
        1,
        MAX_EVENTS,
    )?;
    check_cursor(engine, &task, after)?;

    let mut collected: Vec<Event> = Vec::new();
    let mut timed_out = false;
    if task.is_terminal() {
        // Everything is stored already; a subscription would wait for a terminal event the
        // caller may have read before.
        collected = engine.events(&task.id, after, max)?;
    } else {
        let deadline = Instant::now() + Duration::from_secs(seconds);
        let mut notifier = Notifier::new(progress);
        let mut sub = engine.subscribe(&task.id, after);
        loop {
            let heartbeat = notifier.next_heartbeat();
            tokio::select! {
                next = sub.next() => match next? {
                    Some(e) => {
                        notifier.send(describe(&e)).await;
                        collected.push(e);
                        if collected.len() >= max {
                            break;
                        }
                    }
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => {
                    timed_out = true;
                    break;
                }
                _ = beat(heartbeat) => {
                    let message = format!("no new event; task still running (last event {})", sub.cursor());
                    notifier.send(message).await;
                }
                _ = cancelled.cancelled() => break,
            }
        }
    }

    let now = engine.task(task.id.as_str())?;
    let last_seq = engine.records().last_seq(&now.id)?;
    let next_cursor = collected.last().map_or(after, |e| e.seq);
    Ok(WaitOut {
        truncated: collected.first().is_some_and(|e| e.seq > after + 1),
        events: Some(collected.iter().map(event_out).collect()),
        has_more: next_cursor < last_seq,
        next_cursor,
        // Only a caller that names its cursor's mode hears about modes: the answer to one
        // that does not is what it always was.
        delivery_mode: args.cursor_mode.map(|_| DeliveryMode::Events),
        cursor_reset: args.cursor_mode.map(|_| reset),
        ..answer_now(engine, &now, timed_out)?
    })
}

/// The answer to a wait in either delivery, as far as it speaks of the task as it is now
/// (`now`): its state, error and usage, the tasks queued after it and the permission requests
/// waiting for a supervisor. The delivery's own fields (cursor, events or messages, mode) are
/// left empty for the caller to fill.
pub(crate) fn answer_now(engine: &Engine, now: &Task, timed_out: bool) -> Result<WaitOut> {
    let queued: Vec<String> = engine
        .messages()
        .queued_after(now)?
        .into_iter()
        .map(|id| id.to_string())
        .collect();
    let awaiting_supervision = crate::schema::AwaitingOut::of(engine, &now.id)?;
    Ok(WaitOut {
        awaiting_supervision,
        task_id: now.id.to_string(),
        ready: now.is_terminal(),
        timed_out: timed_out && !now.is_terminal(),
        state: now.state,
        task_error: now.error.as_ref().map(ErrorBody::from),
        usage: now.usage.clone(),
        status_message: now.status_message.clone(),
        truncated: false,
        events: None,
        has_more: false,
        next_cursor: 0,
        continuation_pending: !queued.is_empty(),
        queued_task_ids: queued,
        messages: None,
        oldest_available: None,
        delivery_mode: None,
        cursor_reset: None,
    })
}

/// A wait's `timeoutSeconds`, checked (the default when omitted).
/// `wait_many`: the engine waits; this only translates.
pub async fn wait_many(engine: &Engine, args: WaitManyArgs) -> Result<WaitManyOut> {
    let mode = match args.mode.as_deref() {
        None => WaitMode::All,
        Some(m) => WaitMode::parse(m)?,
    };
    let seconds = wait_seconds(args.timeout_seconds)?;
    let joint = engine
        .wait_many(&args.task_ids, mode, Duration::from_secs(seconds))
        .await?;
    Ok(WaitManyOut {
        mode: match mode {
            WaitMode::First => "first",
            WaitMode::All => "all",
        }
        .to_string(),
        ready: joint.ready,
        timed_out: joint.timed_out,
        tasks: joint
            .tasks
            .into_iter()
            .map(|w| WaitedOut {
                task_id: w.task.id.to_string(),
                state: w.task.state,
                ready: w.ready,
                task_error: w.task.error.as_ref().map(ErrorBody::from),
                status_message: w.task.status_message,
                usage: w.task.usage,
            })
            .collect(),
    })
}

pub(crate) fn wait_seconds(timeout_seconds: Option<u64>) -> Result<u64> {
    in_range(
        "timeoutSeconds",
        timeout_seconds.unwrap_or(WAIT_DEFAULT_SECS),
        1,
        WAIT_MAX_SECS,
    )
}

/// Resolves at `heartbeat`, the next time a silent wait tells its client it goes on; never
/// without one (the client asked for no progress).
pub(crate) async fn beat(heartbeat: Option<Instant>) {
    match heartbeat {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_core::{TaskId, TaskState, Timestamp, ToolCallEvent, ToolKind, ToolStatus};

    fn event(seq: u64, kind: EventKind) -> Event {
        Event {
            task_id: TaskId("t".into()),
            seq,
            at: Timestamp(0),
            kind,
        }
    }

    #[test]
    fn descriptions_name_the_event_and_reveal_no_content() {
        let secret = "cat /etc/secret-file";
        let call = event(
            4,
            EventKind::ToolCall(ToolCallEvent {
                id: "c1".into(),
                title: secret.into(),
                tool_kind: ToolKind::Execute,
                status: ToolStatus::Pending,
                locations: vec![],
                raw_input: None,
            }),
        );
        assert_eq!(describe(&call), "event 4: tool_call (execute, pending)");
        let msg = event(
            5,
            EventKind::Message {
                text: secret.into(),
            },
        );
        assert_eq!(describe(&msg), "event 5: message");
        let done = event(
            9,
            EventKind::Status {
                state: TaskState::Completed,
                message: Some(secret.into()),
                error: None,
            },
        );
        assert_eq!(describe(&done), "event 9: status → completed");
    }
}
