//! The launcher: the one path every way of starting a turn takes (submit, a reply into a
//! waiting task, a resumed context, a sent message, the next turn of a conversation). It takes
//! the queued place, registers the task's stop signal, stores the task `submitted` with this
//! runner as its owner, tells, records a copy's review and spawns its drive.
//!
//! Per-turn inputs that are not stored with the task (the caller's message id, the JSON Schema
//! for structured output) travel in one [`TurnInputs`] from the caller to the agent's turn,
//! the same way on every path; the model and the timeout are stored with the task, so a
//! continuation inherits them. A task that waits for input without running is
//! [`Engine::park`]ed instead.
//!
//! This module never checks a caller's input (`request` does) and never runs a turn (`turn`
//! does): a task it accepted always reaches `drive`, which always ends it.

use crate::engine::{Engine, Stop, first_intent, lock};
use crate::request::CopyRequest;
use legate_core::{AgentSpec, EventKind, Result, Task, TaskState};
use tokio::sync::watch;

/// What a turn gets besides its stored task, kept in memory only.
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnInputs {
    /// The caller's id for the message this turn answers (an A2A `messageId`).
    pub(crate) message_id: Option<String>,
    /// The JSON Schema the answer must follow (structured output).
    pub(crate) json_schema: Option<serde_json::Value>,
}

/// How the task is stored before its turn.
pub(crate) enum Entry {
    /// A new task: inserted.
    New {
        /// The copy to record for review, for a copy workspace.
        copy: Option<CopyRequest>,
    },
    /// A task that waited for input and was replied to: updated in place.
    Reply,
}

/// A task ready to be queued: `task` is in state `submitted`.
pub(crate) struct Launch {
    pub(crate) task: Task,
    pub(crate) agent: AgentSpec,
    pub(crate) inputs: TurnInputs,
    pub(crate) entry: Entry,
}

impl Engine {
    /// Queues `launch`'s task and starts its drive. `QUEUE_FULL` (nothing stored) when the
    /// queue is full; a store error gives the queued place back.
    pub(crate) fn launch(&self, launch: Launch) -> Result<Task> {
        let Launch {
            task,
            agent,
            inputs,
            entry,
        } = launch;
        let queued = self.slots().queue()?;
        // The stop signal is registered before the task is stored: a cancel accepted once the
        // task is in the store (even while the review record is written below) finds it and
        // reaches the drive, instead of being left for the next cancel-request sweep.
        let (stop_tx, stop_rx) = watch::channel(Stop::None);
        {
            let mut stops = lock(&self.inner.stops);
            // A task launched after `shutdown` sent its cancels would run on, unseen, while
            // shutdown waits for it: it is canceled at once instead. Checked under the lock
            // shutdown takes after raising its flag, so every task sees one or the other.
            if *self.inner.shutdown.borrow() {
                stop_tx.send_if_modified(|s| first_intent(s, Stop::Cancel));
            }
            stops.insert(task.id.clone(), stop_tx);
        }
        let submitted = EventKind::Status {
            state: TaskState::Submitted,
            message: None,
            error: None,
        };
        // The task and its runner are stored in one transaction: a `kill -9` between two
        // writes would leave a `submitted` task no process claims, which recovery (it
        // settles only the tasks of dead runners) would never end.
        // The turn's prompt is kept as an event too: the task's row holds only the latest,
        // and a reply replaces it (the A2A front reads a task's history from these).
        let mut first = vec![submitted];
        if !task.prompt.is_empty() {
            first.push(EventKind::Prompt {
                text: task.prompt.clone(),
                message_id: inputs.message_id.clone(),
            });
        }
        let runner = self.runner_id();
        let (events, copy) = match entry {
            Entry::New { copy } => (
                self.store().insert_task_with(&task, &first, Some(runner)),
                copy,
            ),
            Entry::Reply => (self.store().update_task_run_by(&task, &first, runner), None),
        };
        let events = match events {
            Ok(events) => events,
            Err(e) => {
                lock(&self.inner.stops).remove(&task.id);
                return Err(e);
            }
        };
        self.publish(&events);
        if let Some(copy) = copy
            && let Err(e) = self.start_review(&task, copy)
        {
            tracing::error!(task = %task.id, error = %e, "could not store the copy's review record");
        }
        let engine = self.clone();
        let t = task.clone();
        self.track(async move { engine.drive(t, agent, stop_rx, inputs, queued).await });
        Ok(task)
    }

    /// Stores a task that waits for the caller's input: no runner claims it (nothing runs, so
    /// a restart leaves it waiting), and the context's live session is kept while it waits.
    pub(crate) fn park(&self, task: Task) -> Result<Task> {
        let first = self.store().insert_task(
            &task,
            &EventKind::Status {
                state: TaskState::InputRequired,
                message: task.status_message.clone(),
                error: None,
            },
        )?;
        self.publish(&[first]);
        self.release_session(&task.context_id, true);
        tracing::info!(task = %task.id, agent = %task.agent, context = %task.context_id, "task waits for input");
        Ok(task)
    }
}
