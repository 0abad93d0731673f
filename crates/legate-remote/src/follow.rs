//! Following a remote task to the end of a turn: a stream (`SendStreamingMessage`,
//! `SubscribeToTask`) or `GetTask` polling with backoff, each update recorded (the first
//! naming the task goes to the ledger before anything is relayed), translated and relayed,
//! and a cancel sent as `CancelTask` once, after which the task is followed to its end.
//!
//! This module never decides the local task's state: it returns how the remote turn ended.

use crate::connect::{Remote, timed};
use crate::errors::{excerpt, from_a2a, protocol};
use crate::translate::Relay;
use a2a::{CancelTaskRequest, GetTaskRequest, StreamResponse};
use a2a_client::BoxStream;
use futures::StreamExt;
use legate_backend::{EventSink, RemoteLedger};
use legate_core::{RemoteRef, Result, TaskId};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The first and the longest wait between two `GetTask` polls.
pub const POLL_FIRST: Duration = Duration::from_millis(100);
/// See [`POLL_FIRST`].
pub const POLL_MAX: Duration = Duration::from_secs(3);
/// How long a cancel waits for the remote to name its task, so that it can be canceled.
pub const CANCEL_NAME_WAIT: Duration = Duration::from_secs(5);

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
        match timed(
            self.remote.url(),
            "CancelTask",
            self.remote.client.cancel_task(&req),
        )
        .await
        {
            Ok(_) => {
                tracing::info!(task_id = %self.task, remote_task = %id, "remote task cancel sent")
            }
            Err(e) => {
                tracing::warn!(task_id = %self.task, remote_task = %id, code = e.code.as_str(), error = %e.detail(), "remote cancel refused")
            }
        }
    }

    /// Reads `stream` until the remote task ends the turn or the stream ends. A cancel that
    /// comes before the remote named its task waits [`CANCEL_NAME_WAIT`] for the name (so the
    /// remote task is canceled too), then gives up on it.
    pub async fn stream(
        &mut self,
        mut stream: BoxStream<'static, std::result::Result<StreamResponse, a2a::A2AError>>,
        what: &str,
    ) -> Result<()> {
        let cancel = self.cancel.clone();
        let mut wanted: Option<tokio::time::Instant> = None;
        while !self.relay.done() {
            let unnamed_until = wanted.filter(|_| !self.cancel_sent);
            let next = tokio::select! {
                next = stream.next() => next,
                () = cancel.cancelled(), if wanted.is_none() => {
                    wanted = Some(tokio::time::Instant::now() + CANCEL_NAME_WAIT);
                    self.send_cancel().await;
                    continue;
                }
                () = tokio::time::sleep_until(unnamed_until.unwrap_or_else(tokio::time::Instant::now)), if unnamed_until.is_some() => {
                    tracing::warn!(task_id = %self.task, "canceled before the remote named its task; it was not canceled there");
                    return Ok(());
                }
            };
            match next {
                None => break,
                Some(Ok(update)) => {
                    self.relay_update(&update)?;
                    if wanted.is_some() {
                        self.send_cancel().await;
                    }
                }
                Some(Err(e)) => return Err(from_a2a(self.remote.url(), what, &e)),
            }
        }
        Ok(())
    }

    /// Polls `GetTask` with backoff until the remote task ends the turn.
    pub async fn poll(&mut self) -> Result<()> {
        let Some(id) = self.relay.task_id.clone() else {
            return Err(protocol(format!(
                "{} never named its task",
                self.remote.url()
            )));
        };
        let cancel = self.cancel.clone();
        let mut wait = POLL_FIRST;
        while !self.relay.done() {
            tokio::select! {
                () = tokio::time::sleep(wait) => {}
                () = cancel.cancelled(), if !self.cancel_sent => self.send_cancel().await,
            }
            wait = (wait * 2).min(POLL_MAX);
            let req = GetTaskRequest {
                id: id.clone(),
                history_length: Some(0),
                tenant: None,
            };
            let t = timed(
                self.remote.url(),
                "GetTask",
                self.remote.client.get_task(&req),
            )
            .await?;
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
