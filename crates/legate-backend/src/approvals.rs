//! The seam between a backend's permission handler and the engine's approval queue.
//!
//! The [`Supervisor`](legate_supervisor::Supervisor) decides synchronously. When it answers
//! `ask`, the handler hands the request to the [`ApprovalChannel`] it was given (the
//! engine's durable approval queue) and awaits the answer off the protocol's dispatch loop;
//! every decision sent to an agent is then recorded through the same channel.
//!
//! This module only declares the seam: it never stores, waits or decides anything itself.

use crate::EventSink;
use async_trait::async_trait;
use legate_core::{PermissionRequest, Ruling, TaskId};
use legate_supervisor::Supervision;
use std::fmt::Debug;
use tokio::sync::watch;

/// A permission request the supervisor's rules answered `ask` (`Decision::Ask`).
#[derive(Debug)]
pub struct Ask {
    /// The task whose turn asked.
    pub task_id: TaskId,
    /// The rules' inputs at the time of the request.
    pub supervision: Supervision,
    /// The request.
    pub request: PermissionRequest,
    /// The `ask` ruling (its reason and rule id).
    pub ruling: Ruling,
    /// The turn's events: where `awaiting supervision` is told.
    pub sink: EventSink,
    /// Resolves when the request must stop waiting (the task was canceled, the turn ended).
    pub abort: Abort,
}

/// The answer to an [`Ask`], to send to the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answered {
    /// The ruling: `Allow` or `Deny` with an offered option id (or none: `cancelled`).
    pub ruling: Ruling,
    /// The approval the answer closed, when one was queued.
    pub approval_id: Option<String>,
    /// The channel that answered (`cli`, `mcp`, `agent:NAME`), or the scope of an earlier
    /// allow-for-task.
    pub channel: Option<String>,
}

/// A decision as it is sent to the agent, for the audit trail.
#[derive(Debug, Clone, Copy)]
pub struct Sent<'a> {
    /// The task whose turn asked.
    pub task_id: &'a TaskId,
    /// The rules' inputs.
    pub supervision: &'a Supervision,
    /// The request.
    pub request: &'a PermissionRequest,
    /// What was sent (its `option_id` is what the agent got; `None`: `cancelled`).
    pub ruling: &'a Ruling,
    /// The approval it closed, if it went through the queue.
    pub approval_id: Option<&'a str>,
    /// The answering channel, if any.
    pub channel: Option<&'a str>,
}

/// Where `ask` decisions go, and where every decision is recorded. Implemented by the engine.
#[async_trait]
pub trait ApprovalChannel: Send + Sync + Debug {
    /// Waits for a supervisor's answer to `ask`, never past its deadline or its abort.
    async fn ask(&self, ask: Ask) -> Answered;

    /// Records a decision before it is sent (one cheap write; a failure is logged, and the
    /// decision is still sent).
    fn record(&self, sent: Sent<'_>);
}

/// A signal that ends every wait of one turn, with the reason.
#[derive(Debug, Clone)]
pub struct Abort(watch::Receiver<Option<String>>);

/// The sending side of an [`Abort`].
#[derive(Debug)]
pub struct AbortHandle(watch::Sender<Option<String>>);

impl Abort {
    /// A new signal, not raised.
    pub fn pair() -> (AbortHandle, Abort) {
        let (tx, rx) = watch::channel(None);
        (AbortHandle(tx), Abort(rx))
    }

    /// Resolves with the reason once raised (at once if it already was). A dropped handle
    /// counts as raised.
    pub async fn raised(&mut self) -> String {
        match self.0.wait_for(Option::is_some).await {
            Ok(reason) => reason.clone().unwrap_or_default(),
            Err(_) => "the turn ended".to_string(),
        }
    }

    /// The reason, if raised.
    pub fn reason(&self) -> Option<String> {
        self.0.borrow().clone()
    }
}

impl AbortHandle {
    /// Raises the signal with `reason`; the first reason stands.
    pub fn raise(&self, reason: &str) {
        self.0.send_if_modified(|r| {
            if r.is_some() {
                return false;
            }
            *r = Some(reason.to_string());
            true
        });
    }

    /// A receiver of this signal.
    pub fn subscribe(&self) -> Abort {
        Abort(self.0.subscribe())
    }
}
