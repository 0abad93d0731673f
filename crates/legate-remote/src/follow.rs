//! Following a remote task to the end of a turn: a stream (`SendStreamingMessage`,
//! `SubscribeToTask`) or `GetTask` polling with backoff, each update recorded (the first
//! naming the task goes to the ledger before anything is relayed), translated and relayed,
//! and a cancel sent as `CancelTask` once (waiting at most [`CANCEL_SEND_WAIT`] for its
//! answer), and the task is followed to its end for at most [`CANCEL_WAIT`] from the cancel: a
//! remote that ignores the cancel, drips or never ends its answer does not hold the local
//! turn, which then ends canceled with a notice saying the remote did not confirm.
//!
//! This module never decides the local task's state: it returns how the remote turn ended.

use crate::connect::{Remote, timed};
use crate::errors::{excerpt, from_a2a, protocol};
use crate::translate::{Finish, Relay};
use a2a::{CancelTaskRequest, GetTaskRequest, StreamResponse};
use a2a_client::BoxStream;
use futures::StreamExt;
use legate_backend::{EventSink, RemoteLedger};
use legate_core::{EventKind, RemoteRef, Result, TaskId};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The first and the longest wait between two `GetTask` polls.
pub const POLL_FIRST: Duration = Duration::from_millis(100);
/// See [`POLL_FIRST`].
pub const POLL_MAX: Duration = Duration::from_secs(3);
/// How long a cancel waits for the remote to name its task, so that it can be canceled.
pub const CANCEL_NAME_WAIT: Duration = Duration::from_secs(5);
/// How long the answer to `CancelTask` is waited for (the cancel is best effort).
pub const CANCEL_SEND_WAIT: Duration = Duration::from_secs(2);
/// How long a remote task is followed after the cancel (the `CancelTask` call included),
/// before the local turn ends canceled without the remote's word. Shorter than the engine's
/// cancel grace (5 s by default), so the notice saying so is relayed before the turn is
/// dropped.
pub const CANCEL_WAIT: Duration = Duration::from_secs(3);

/// The longest task or context id a remote may name (its ids are stored and shown).
pub const MAX_REMOTE_ID_BYTES: usize = 256;

/// Refuses a remote id that is empty, longer than [`MAX_REMOTE_ID_BYTES`] or holds a
/// control character: `REMOTE_PROTOCOL_ERROR`, the id shown only as an escaped excerpt.
pub fn check_remote_id(what: &str, id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_REMOTE_ID_BYTES || id.chars().any(char::is_control) {
        return Err(protocol(format!(
            "the remote named its {what} with an id that is empty, over {MAX_REMOTE_ID_BYTES} bytes or holds control characters ({})",
            excerpt(id)
        )));
    }
    Ok(())
}

/// One turn being followed.
#[derive(Debug)]
pub struct Follow<'a> {
    /// The connection.
    pub remote: &'a Remote,
    /// The local task.
    pub task: &'a TaskId,
    /// Where the binding is recorded (none in probes and tests).
    pub ledger: Option<&'a Arc<dyn RemoteLedger>>,
    /// Where events go.
    pub sink: &'a EventSink,
    /// Fires when the turn is to be canceled.
    pub cancel: &'a CancellationToken,
    /// The translation state.
    pub relay: Relay,
    /// Whether this turn's binding was recorded.
    pub recorded: bool,
    /// Whether `CancelTask` was sent.
    pub cancel_sent: bool,
}

impl Follow<'_> {
    /// Records the remote task before anything of it is relayed.
    pub fn record(&mut self, task_id: &str, context_id: Option<&str>) -> Result<()> {
        if self.recorded {
            return Ok(());
        }
        if let Some(ledger) = self.ledger {
            ledger.record(
                self.task,
                &RemoteRef {
                    url: self.remote.url().to_string(),
                    binding: self.remote.binding().to_string(),
                    task_id: task_id.to_string(),
                    context_id: context_id.map(str::to_owned),
                },
            )?;
        }
        tracing::info!(task_id = %self.task, remote_task = %task_id, url = %self.remote.url(), "remote task bound");
        self.recorded = true;
        Ok(())
    }

    /// Translates and relays one streamed update. The ids it names are the remote's text:
    /// an empty one, one with control characters or longer than [`MAX_REMOTE_ID_BYTES`],
    /// or a task id other than the one this turn follows, is `REMOTE_PROTOCOL_ERROR` before
    /// anything of the update is recorded or relayed.
    pub fn relay_update(&mut self, update: &StreamResponse) -> Result<()> {
        let (task, context) = Relay::names(update);
        for (what, id) in [("task", task), ("context", context)] {
            if let Some(id) = id {
                check_remote_id(what, id)?;
            }
        }
        if let (Some(t), Some(known)) = (task, self.relay.task_id.as_deref())
            && t != known
        {
            return Err(protocol(format!(
                "the remote's stream for task {} names another task, {}",
                excerpt(known),
                excerpt(t)
            )));
        }
        if let (Some(t), c) = (task, context) {
            let (t, c) = (t.to_string(), c.map(str::to_owned));
            self.record(&t, c.as_deref())?;
        }
        for e in self.relay.update(update)? {
            self.sink.send(e);
        }
        Ok(())
    }

    /// Sends `CancelTask` for the remote task, once. A refusal (the task ended meanwhile)
    /// is not an error: following the task shows how it ended.
    pub async fn send_cancel(&mut self) {
        if self.cancel_sent {
            return;
        }
        let Some(id) = self.relay.task_id.clone() else {
            return;
        };
        self.cancel_sent = true;
        let req = CancelTaskRequest {
            id: id.clone(),
            metadata: None,
            tenant: None,
        };
        let call = timed(
            self.remote.url(),
            "CancelTask",
            self.remote.client.cancel_task(&req),
        );
        match tokio::time::timeout(CANCEL_SEND_WAIT, call).await {
            Ok(Ok(_)) => {
                tracing::info!(task_id = %self.task, remote_task = %id, "remote task cancel sent")
            }
            Ok(Err(e)) => {
                tracing::warn!(task_id = %self.task, remote_task = %id, code = e.code.as_str(), error = %e.detail(), "remote cancel refused")
            }
            Err(_) => {
                tracing::warn!(task_id = %self.task, remote_task = %id, "the remote did not answer the cancel in time")
            }
        }
    }

    /// Ends the turn canceled without the remote's word (it did not end its task within the
    /// wait after the cancel, or never named it), with a notice saying so.
    fn give_up(&mut self) {
        let (message, event) = if self.cancel_sent {
            (
                format!(
                    "the remote did not end its task within {} s of the cancel; the local task ends without it",
                    CANCEL_WAIT.as_secs()
                ),
                "remote_cancel_unconfirmed",
            )
        } else {
            (
                "canceled before the remote named its task; it was not canceled there".to_string(),
                "remote_cancel_unsent",
            )
        };
        tracing::warn!(task_id = %self.task, "{message}");
        self.sink.send(EventKind::Notice {
            message,
            detail: serde_json::json!({"event": event, "url": self.remote.url()}),
        });
        self.relay.finish = Some(Finish::Canceled);
    }

    /// Reads `stream` until the remote task ends the turn or the stream ends. A cancel that
    /// comes before the remote named its task waits [`CANCEL_NAME_WAIT`] for the name (so the
    /// remote task is canceled too); once `CancelTask` is sent the stream is read for
    /// [`CANCEL_WAIT`] more. Past either, the turn ends canceled (see `Self::give_up`).
    pub async fn stream(
        &mut self,
        mut stream: BoxStream<'static, std::result::Result<StreamResponse, a2a::A2AError>>,
        what: &str,
    ) -> Result<()> {
        let cancel = self.cancel.clone();
        let mut until: Option<tokio::time::Instant> = None;
        while !self.relay.done() {
            let next = tokio::select! {
                next = stream.next() => next,
                () = cancel.cancelled(), if until.is_none() => {
                    let at = tokio::time::Instant::now();
                    self.send_cancel().await;
                    until = Some(at + if self.cancel_sent { CANCEL_WAIT } else { CANCEL_NAME_WAIT });
                    continue;
                }
                () = tokio::time::sleep_until(until.unwrap_or_else(tokio::time::Instant::now)), if until.is_some() => {
                    self.give_up();
                    return Ok(());
                }
            };
            match next {
                None => break,
                Some(Ok(update)) => {
                    self.relay_update(&update)?;
                    if until.is_some() && !self.cancel_sent {
                        self.send_cancel().await;
                        if self.cancel_sent {
                            until = Some(tokio::time::Instant::now() + CANCEL_WAIT);
                        }
                    }
                }
                Some(Err(e)) => return Err(from_a2a(self.remote.url(), what, &e)),
            }
        }
        Ok(())
    }

    /// Polls `GetTask` with backoff until the remote task ends the turn; after a cancel, for
    /// [`CANCEL_WAIT`] at most (then see `Self::give_up`), a slow `GetTask` included.
    pub async fn poll(&mut self) -> Result<()> {
        let Some(id) = self.relay.task_id.clone() else {
            return Err(protocol(format!(
                "{} never named its task",
                self.remote.url()
            )));
        };
        let cancel = self.cancel.clone();
        let mut until: Option<tokio::time::Instant> = None;
        let mut wait = POLL_FIRST;
        while !self.relay.done() {
            if until.is_none() && cancel.is_cancelled() {
                let at = tokio::time::Instant::now();
                self.send_cancel().await;
                until = Some(at + CANCEL_WAIT);
            }
            let deadline = until.unwrap_or_else(|| tokio::time::Instant::now() + POLL_MAX);
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = cancel.cancelled(), if until.is_none() => continue,
                () = tokio::time::sleep_until(deadline), if until.is_some() => {
                    self.give_up();
                    return Ok(());
                }
            }
            wait = (wait * 2).min(POLL_MAX);
            let req = GetTaskRequest {
                id: id.clone(),
                history_length: Some(0),
                tenant: None,
            };
            let get = timed(
                self.remote.url(),
                "GetTask",
                self.remote.client.get_task(&req),
            );
            let t = tokio::select! {
                t = get => t?,
                () = cancel.cancelled(), if until.is_none() => continue,
                () = tokio::time::sleep_until(deadline), if until.is_some() => {
                    self.give_up();
                    return Ok(());
                }
            };
            if t.id != id {
                return Err(protocol(format!(
                    "{} answered GetTask {id} with another task",
                    self.remote.url()
                )));
            }
            for e in self.relay.polled(&t)? {
                self.sink.send(e);
            }
        }
        Ok(())
    }
}
