//! Tool calls answered as MCP tasks (issue 30): the record of each (durable before the
//! caller is told), and the operations the engine runs in the background for a caller that
//! follows them as a task (`test`, `integrate`), with their own `op-…` id.
//!
//! A call whose work the engine already tracks (a task, a continuation, a group, a
//! comparison) is recorded `answered` with the tool's direct answer, so any process can
//! rebuild the task's result from the store. An op is recorded `running` with this runner
//! before it starts; it ends `completed` (its answer, which may be a tool error), `canceled`,
//! or, when the process running it stopped, `failed` with `SERVER_RESTARTED` the first time
//! it is read: nothing re-runs it.
//!
//! An op in approval mode `ask` asks its question through [`OpConfirmer`]: the question
//! waits here until [`CallTasks::confirm`] answers it (or the approval timeout, a cancel).
//! An op is canceled only while it waits on its question (the question is answered `Cancel`,
//! so the op refuses cleanly and writes nothing): past it, its work (an integration, a test
//! command) runs on a blocking thread that cannot be stopped halfway, so a cancel is refused
//! `TASK_NOT_CANCELABLE` and changes nothing. An op whose future panics ends `failed`
//! `INTERNAL`.
//! This module never interprets an answer, never asks a person itself and never speaks MCP.

use crate::core::Core;
use crate::core::runner;
use crate::review::{Confirmation, ConfirmationRequest, Confirmer};
use async_trait::async_trait;
use legate_core::{Error, ErrorCode, Result};
use legate_store::{CallTaskRecord, CallTaskState};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use tokio::sync::{Notify, oneshot};
use tokio::task::AbortHandle;

/// What a background op ends with: the tool's answer and whether it is a tool error.
pub type OpAnswer = (Value, bool);

/// A call answered as a task, as it stands.
#[derive(Debug, Clone)]
pub struct CallTask {
    /// The stored record.
    pub record: CallTaskRecord,
    /// The question an op waits on, when it waits on one.
    pub question: Option<ConfirmationRequest>,
}

/// The calls answered as tasks (see the module docs).
#[derive(Debug, Clone)]
pub struct CallTasks {
    pub(crate) core: Core,
    pub(crate) ops: Arc<Ops>,
}

/// The ops this process runs, and the questions they wait on.
#[derive(Debug, Default)]
pub(crate) struct Ops {
    running: Mutex<HashMap<String, AbortHandle>>,
    questions: Mutex<HashMap<String, Question>>,
    /// The ops whose question a cancel answered: they end `canceled`.
    canceling: Mutex<HashSet<String>>,
    ended: Notify,
}

#[derive(Debug)]
struct Question {
    request: ConfirmationRequest,
    answer: oneshot::Sender<Confirmation>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The kind of work a tool's call follows: calls of one kind may share an id (a duplicate
/// `send_message` names the same continuation), calls of two kinds never.
fn kind(tool: &str) -> &str {
    match tool {
        "run" | "resume" | "continue" | "handoff" | "send_message" => "task",
        other => other,
    }
}

fn not_found(id: &str) -> Error {
    Error::new(
        ErrorCode::TaskNotFound,
        format!("no call answered as a task has the id {id:?}"),
    )
}

impl CallTasks {
    /// Records a call answered at once whose work the engine follows elsewhere, with the
    /// tool's direct answer. Recording the same id again keeps the first record (a duplicate
    /// `send_message` names the same continuation).
    ///
    /// An id already recorded for another kind of call (a group id chosen equal to a task
    /// id, say) is refused `INVALID_INPUT`: the first record keeps its id.
    pub fn record(&self, id: &str, tool: &str, answer: &Value) -> Result<()> {
        let store = self.core.store();
        if store.insert_call_task(id, tool, CallTaskState::Answered, Some(answer), None)? {
            return Ok(());
        }
        let stored = store.call_task(id)?.ok_or_else(|| not_found(id))?;
        if kind(&stored.tool) == kind(tool) {
            return Ok(());
        }
        Err(Error::invalid_input(format!(
            "the id {id:?} already names another kind of call ({})",
            stored.tool
        )))
    }

    /// Records an op `running` under a new `op-…` id, then runs `work` in the background; the
    /// id is returned once the record is stored. `work` gets the confirmer its questions go
    /// through.
    pub fn start<F, Fut>(&self, tool: &str, work: F) -> Result<String>
    where
        F: FnOnce(OpConfirmer) -> Fut,
        Fut: Future<Output = OpAnswer> + Send + 'static,
    {
        let id = format!("op-{}", uuid::Uuid::new_v4().simple());
        let store = self.core.store().clone();
        store.insert_call_task(
            &id,
            tool,
            CallTaskState::Running,
            None,
            Some(self.core.runner_id()),
        )?;
        let fut = work(OpConfirmer {
            ops: self.ops.clone(),
            id: id.clone(),
            timeout: self.core.config().fronts.approval_timeout,
        });
        let ops = self.ops.clone();
        let op = id.clone();
        // Holding the lock while spawning keeps a fast op from ending before it is listed.
        let mut running = lock(&self.ops.running);
        let handle = tokio::spawn(async move {
            // Its own task, so a panic in the work ends the op instead of leaving it running.
            let (state, answer, is_error) = match tokio::spawn(fut).await {
                Ok((answer, is_error)) if lock(&ops.canceling).remove(&op) => {
                    (CallTaskState::Canceled, Some(answer), is_error)
                }
                Ok((answer, is_error)) => (CallTaskState::Completed, Some(answer), is_error),
                Err(_) => {
                    tracing::warn!(op = %op, "an op's work panicked");
                    lock(&ops.canceling).remove(&op);
                    (CallTaskState::Failed, Some(internal_answer()), true)
                }
            };
            if let Err(e) = store.end_call_task(&op, state, answer.as_ref(), is_error) {
                tracing::warn!(op = %op, code = %e.code, "could not store an op's answer");
            }
            lock(&ops.running).remove(&op);
            ops.ended.notify_waiters();
        });
        running.insert(id.clone(), handle.abort_handle());
        tracing::info!(op = %id, tool, "op started");
        Ok(id)
    }

    /// The call `id` as it stands; `TASK_NOT_FOUND` when no call answered as a task has it.
    /// An op whose runner is gone is failed `SERVER_RESTARTED` here, once.
    pub fn get(&self, id: &str) -> Result<CallTask> {
        let store = self.core.store();
        let mut record = store.call_task(id)?.ok_or_else(|| not_found(id))?;
        if record.state == CallTaskState::Running {
            let own = record.runner.as_deref() == Some(self.core.runner_id());
            let alive = own
                || record
                    .runner
                    .as_deref()
                    .is_some_and(|r| runner::is_alive(&self.core.config().paths.run(), r));
            if !alive {
                store.end_call_task(id, CallTaskState::Failed, None, false)?;
                record = store.call_task(id)?.ok_or_else(|| not_found(id))?;
            }
        }
        let question = lock(&self.ops.questions).get(id).map(|q| q.request.clone());
        Ok(CallTask { record, question })
    }

    /// Cancels the op `id` while it waits on its question: the question is answered `Cancel`,
    /// and this waits until the op ended (`canceled`, having written nothing). An op that
    /// already ended is left as it is. `TASK_NOT_CANCELABLE`, changing nothing, when the op
    /// waits on no question (its work runs and cannot be stopped halfway) or another process
    /// runs it; `TASK_NOT_FOUND` when there is no such call.
    pub async fn cancel(&self, id: &str) -> Result<CallTask> {
        let call = self.get(id)?;
        if call.record.state != CallTaskState::Running {
            return Ok(call);
        }
        let own = call.record.runner.as_deref() == Some(self.core.runner_id());
        let question = if own {
            let mut questions = lock(&self.ops.questions);
            let q = questions.remove(id);
            if q.is_some() {
                lock(&self.ops.canceling).insert(id.to_string());
            }
            q
        } else {
            None
        };
        let Some(q) = question else {
            // It may have ended between the two reads.
            let now = self.get(id)?;
            if now.record.state != CallTaskState::Running {
                return Ok(now);
            }
            return Err(Error::new(
                ErrorCode::TaskNotCancelable,
                format!(
                    "{id} ({}) is running and cannot be stopped halfway; only an integrate waiting on its confirmation can be canceled",
                    call.record.tool
                ),
            ));
        };
        // The op may be ending on a timeout at the same moment: it reads `Cancel` either way.
        let _ = q.answer.send(Confirmation::Cancel);
        loop {
            let ended = self.ops.ended.notified();
            if !lock(&self.ops.running).contains_key(id) {
                break;
            }
            ended.await;
        }
        tracing::info!(op = %id, "op canceled");
        self.get(id)
    }

    /// Answers the question the op `id` waits on. `TASK_NOT_AWAITING_INPUT` when it waits on
    /// none.
    pub fn confirm(&self, id: &str, answer: Confirmation) -> Result<()> {
        let question = lock(&self.ops.questions).remove(id);
        let Some(q) = question else {
            self.get(id)?;
            return Err(Error::new(
                ErrorCode::TaskNotAwaitingInput,
                format!("{id} waits on no question"),
            ));
        };
        // The op may have been canceled since; its answer is then read by nobody.
        let _ = q.answer.send(answer);
        Ok(())
    }

    /// Whether this process runs an op now.
    pub fn busy(&self) -> bool {
        !lock(&self.ops.running).is_empty()
    }

    /// Waits until every op this process runs has ended.
    pub async fn settle(&self) {
        loop {
            let ended = self.ops.ended.notified();
            if lock(&self.ops.running).is_empty() {
                return;
            }
            ended.await;
        }
    }
}

/// The answer an op whose work panicked ends with.
fn internal_answer() -> Value {
    let e = Error::new(
        ErrorCode::Internal,
        "the op's work stopped on a bug in Legate",
    );
    serde_json::json!({ "error": { "code": e.code.as_str(), "message": e.detail() } })
}

/// The confirmer of one op: its question waits in [`CallTasks`] until answered, canceled or
/// the approval timeout passes (then `Cancel`).
#[derive(Debug)]
pub struct OpConfirmer {
    ops: Arc<Ops>,
    id: String,
    timeout: std::time::Duration,
}

#[async_trait]
impl Confirmer for OpConfirmer {
    async fn confirm(&self, request: &ConfirmationRequest) -> Confirmation {
        let (tx, rx) = oneshot::channel();
        lock(&self.ops.questions).insert(
            self.id.clone(),
            Question {
                request: request.clone(),
                answer: tx,
            },
        );
        let answer = tokio::time::timeout(self.timeout, rx).await;
        lock(&self.ops.questions).remove(&self.id);
        match answer {
            Ok(Ok(a)) => a,
            _ => Confirmation::Cancel,
        }
    }
}
