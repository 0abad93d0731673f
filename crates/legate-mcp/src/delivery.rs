//! The MCP side of delivery (issue 17): `wait` for a task in `messages` delivery (public
//! messages in place of events), `set_delivery_mode`, and `read_artifact` (a collected
//! artifact in pieces bound to its sha256).
//!
//! A messages-mode wait returns once a question arrives (the agent asked for input, or a
//! permission request waits for a person), the task ends, the mode changes under it, or time
//! runs out; its progress notifications name only message numbers and kinds, never text. A
//! cursor is a message number in this mode and an event number in the other: `cursorMode`
//! says which the caller holds, and a mismatch restarts at 0 with `cursorReset: true`.
//! Nothing here changes a task except `set_delivery_mode`, and only its delivery.

use crate::chunk;
use crate::schema::{WaitArgs, WaitOut};
use crate::tools::in_range;
use crate::wait::{Notifier, Progress, answer_now, beat, wait_seconds};
use base64::Engine as _;
use legate_core::delivery::MAX_MESSAGES_PER_TASK;
use legate_core::{Artifact, DeliveryMode, Error, MessageKind, Result, Task};
use legate_engine::Engine;
use rmcp::schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// `set_delivery_mode`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SetDeliveryModeArgs {
    /// The task id (or a unique prefix).
    pub task_id: String,
    /// "events" (every event) or "messages" (questions, blockers and the result's excerpt).
    pub delivery_mode: DeliveryMode,
}

/// `set_delivery_mode`'s answer.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct DeliveryModeOut {
    /// The task id.
    pub task_id: String,
    /// The mode now.
    pub delivery_mode: DeliveryMode,
    /// The mode before.
    pub previous_mode: DeliveryMode,
    /// Whether it changed: then restart `wait` at `after: 0` with `cursorMode` set to the new
    /// mode.
    pub changed: bool,
}

/// `read_artifact`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadArtifactArgs {
    /// The task id (or a unique prefix).
    pub task_id: String,
    /// The artifact's name: the path as given in `artifactPaths` (see `result`'s `artifacts`).
    pub name: String,
    /// The artifact's sha256 as `result` lists it; any other is CONTENT_CHANGED.
    pub expected_sha256: String,
    /// Where to start (default 0): UTF-16 units for a UTF-8 artifact, bytes for a binary one.
    pub offset: Option<usize>,
    /// How much, 2 to 50000 (default 10000): UTF-16 units, or bytes (then at most 37500, so
    /// that the base64 text stays within 50000 characters).
    pub limit: Option<usize>,
}

/// `read_artifact`'s answer.
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase")]
pub struct ReadArtifactOut {
    /// The task id.
    pub task_id: String,
    /// The artifact's name.
    pub name: String,
    /// "utf-8" (text is the piece itself) or "base64" (text is the piece's bytes in base64).
    pub encoding: String,
    /// The piece.
    pub text: String,
    /// Where it starts.
    pub offset: usize,
    /// Where the next starts.
    pub next_offset: usize,
    /// Whether anything follows.
    pub has_more: bool,
    /// The whole length (UTF-16 units, or bytes).
    pub total_length: usize,
    /// The artifact's size in bytes.
    pub bytes: u64,
    /// The sha256 of the whole artifact (checked against the kept bytes on every read).
    pub sha256: String,
}

/// The largest binary window, so that its base64 fits [`chunk::MAX_LIMIT`].
const MAX_BINARY_LIMIT: usize = chunk::MAX_LIMIT / 4 * 3;

/// `set_delivery_mode`.
pub fn set_delivery_mode(engine: &Engine, args: SetDeliveryModeArgs) -> Result<DeliveryModeOut> {
    let before = engine.task(&args.task_id)?;
    let task = engine
        .messages()
        .set_delivery_mode(before.id.as_str(), args.delivery_mode)?;
    Ok(DeliveryModeOut {
        task_id: task.id.to_string(),
        delivery_mode: task.controls.delivery_mode,
        previous_mode: before.controls.delivery_mode,
        changed: before.controls.delivery_mode != task.controls.delivery_mode,
    })
}

/// The artifacts `result` lists: `None` for a task that named none.
pub fn listed(engine: &Engine, task: &Task) -> Result<Option<Vec<Artifact>>> {
    if task.controls.artifact_paths.is_empty() {
        return Ok(None);
    }
    engine.artifacts().list(task.id.as_str()).map(Some)
}

/// `read_artifact`.
pub async fn read_artifact(engine: &Engine, args: ReadArtifactArgs) -> Result<ReadArtifactOut> {
    let task = engine.task(&args.task_id)?;
    let read = engine
        .artifacts()
        .read(task.id.as_str(), &args.name, &args.expected_sha256)
        .await?;
    let sha = read.artifact.sha256.clone().unwrap_or_default();
    let size = read.bytes.len() as u64;
    let offset = args.offset.unwrap_or(0);
    let limit = args.limit.unwrap_or(chunk::DEFAULT_LIMIT);
    let out = |encoding: &str, text, offset, next_offset, has_more, total_length| ReadArtifactOut {
        task_id: task.id.to_string(),
        name: read.artifact.name.clone(),
        encoding: encoding.to_string(),
        text,
        offset,
        next_offset,
        has_more,
        total_length,
        bytes: size,
        sha256: sha.clone(),
    };
    match std::str::from_utf8(&read.bytes) {
        Ok(text) => {
            let piece = chunk::read(text, offset, limit, Some(&sha))?;
            Ok(out(
                "utf-8",
                piece.text,
                piece.offset,
                piece.next_offset,
                piece.has_more,
                piece.total_length,
            ))
        }
        Err(_) => {
            let limit = in_range("limit", limit, chunk::MIN_LIMIT, MAX_BINARY_LIMIT)?;
            let total = read.bytes.len();
            if offset > total {
                return Err(Error::invalid_input(format!(
                    "offset {offset} is past the artifact's {total} bytes"
                )));
            }
            let end = offset.saturating_add(limit).min(total);
            let text = base64::engine::general_purpose::STANDARD.encode(&read.bytes[offset..end]);
            Ok(out("base64", text, offset, end, end < total, total))
        }
    }
}

/// The cursor a wait starts from: `after`, or 0 with a reset when the caller's cursor was
/// for the other mode.
pub fn cursor(task: &Task, after: u64, cursor_mode: Option<DeliveryMode>) -> (u64, bool) {
    match cursor_mode {
        Some(m) if m != task.controls.delivery_mode => (0, true),
        _ => (after, false),
    }
}

/// `wait` for a task in `messages` delivery.
pub async fn wait_messages(
    engine: &Engine,
    task: Task,
    args: WaitArgs,
    progress: Option<Progress>,
    cancelled: CancellationToken,
) -> Result<WaitOut> {
    let (after, reset) = cursor(&task, args.after.unwrap_or(0), args.cursor_mode);
    let seconds = wait_seconds(args.timeout_seconds)?;
    let max = in_range(
        "maxEvents",
        args.max_events
            .unwrap_or(MAX_MESSAGES_PER_TASK)
            .min(MAX_MESSAGES_PER_TASK),
        1,
        MAX_MESSAGES_PER_TASK,
    )?;
    let first = engine.messages().list(task.id.as_str(), after, max)?;
    if after > first.last_seq {
        return Err(Error::invalid_input(format!(
            "after is {after}, but task {} has {} messages",
            task.id, first.last_seq
        )));
    }
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let mut notifier = Notifier::new(progress);
    // Tells the client at once that the wait has begun (a number, never content).
    notifier
        .send(format!("waiting for messages after {after}"))
        .await;
    // Woken by every new event (a message is derived from one) and every approval change.
    let mut sub = engine.subscribe(&task.id, engine.records().last_seq(&task.id)?);
    let mut approvals = engine.approvals().changes();
    let mut told = after;
    let mut timed_out = false;
    let mut mode_changed = false;
    let mut page = first;
    loop {
        let fresh: Vec<(u64, MessageKind)> = page
            .messages
            .iter()
            .filter(|m| m.seq > told)
            .map(|m| (m.seq, m.kind))
            .collect();
        for (seq, kind) in fresh {
            notifier
                .send(format!("message {seq}: {}", kind.as_str()))
                .await;
            told = seq;
        }
        let now = engine.task(task.id.as_str())?;
        if now.controls.delivery_mode != DeliveryMode::Messages {
            mode_changed = true;
            break;
        }
        let question = page
            .messages
            .iter()
            .any(|m| m.kind == MessageKind::Question)
            || !engine.approvals().pending(&now.id)?.is_empty();
        if now.is_terminal() || question || page.messages.len() >= max {
            break;
        }
        let heartbeat = notifier.next_heartbeat();
        tokio::select! {
            next = sub.next() => {
                if next?.is_none() {
                    // The task ended: one more read collects its last messages.
                    page = engine.messages().list(task.id.as_str(), after, max)?;
                    continue;
                }
            }
            changed = approvals.changed() => {
                if changed.is_err() {
                    // No engine left to tell of approvals; the subscription still wakes us.
                    approvals = engine.approvals().changes();
                }
            }
            _ = tokio::time::sleep_until(deadline) => {
                timed_out = true;
                break;
            }
            _ = beat(heartbeat) => {
                notifier.send(format!("no new message; task still running (last message {told})")).await;
            }
            _ = cancelled.cancelled() => break,
        }
        page = engine.messages().list(task.id.as_str(), after, max)?;
    }
    let page = engine.messages().list(task.id.as_str(), after, max)?;
    let now = engine.task(task.id.as_str())?;
    let next_cursor = page.messages.last().map_or(after, |m| m.seq);
    Ok(WaitOut {
        truncated: page.oldest_available > after + 1,
        has_more: next_cursor < page.last_seq,
        next_cursor,
        messages: Some(page.messages),
        oldest_available: Some(page.oldest_available),
        delivery_mode: Some(if mode_changed {
            now.controls.delivery_mode
        } else {
            DeliveryMode::Messages
        }),
        cursor_reset: Some(reset),
        ..answer_now(engine, &now, timed_out)?
    })
}
