//! The launcher: the one path every way of starting a turn takes (submit, a reply into a
//! waiting task, a resumed context, a sent message, the next turn of a conversation). It takes
//! the queued place, registers the task's stop signal, stores the task `submitted` with this
//! runner as its owner, tells, records a copy's review and spawns its drive.
//!
//! Per-turn inputs that are not stored with the task (the caller's message id, the JSON Schema
//! for structured output) travel in one [`TurnInputs`] from the caller to the agent's turn,
//! the same way on every path; the model and the timeout are stored with the task, so a
//! continuation inherits them. A task that waits for input without running is
//! [`Core::park`]ed instead.
//!
//! This module never checks a caller's input (`request` does) and never runs a turn (`turn`
//! does): a task it accepted always reaches `drive`, which always ends it.

use crate::core::ending::EMPTY_PROMPT_MESSAGE;
use crate::core::request::{CopyRequest, SubmitRequest, check_reply};
use crate::core::spans::{self, TurnEntry};
use crate::core::{Core, Stop, first_intent, lock};
use legate_core::{
    AgentSpec, Error, ErrorCode, EventKind, Result, Task, TaskId, TaskState, Timestamp,
};
use tokio::sync::watch;
use tracing::Instrument;

/// What a turn gets besides its stored task, kept in memory only.
#[derive(Debug, Clone, Default)]
pub(crate) struct TurnInputs {
    /// The caller's id for the message this turn answers (an A2A `messageId`).
    pub(crate) message_id: Option<String>,
    /// The JSON Schema the answer must follow (structured output).
    pub(crate) json_schema: Option<serde_json::Value>,
    /// The reasoning effort the caller asked for.
    pub(crate) effort: Option<legate_core::Effort>,
}

/// How the task is stored before its turn.
pub(crate) enum Entry {
    /// A new task: inserted.
    New {
        /// The copy to record for review, for a copy workspace.
        copy: Option<CopyRequest>,
    },
    /// A task that waited for input and was replied to: updated in place, only while it
    /// still waits (on the question of event `question`, when given).
    Reply {
        /// The event number of the question the reply answers.
        question: Option<u64>,
    },
}

/// A task ready to be queued: `task` is in state `submitted`.
pub(crate) struct Launch {
    pub(crate) task: Task,
    pub(crate) agent: AgentSpec,
    pub(crate) inputs: TurnInputs,
    pub(crate) entry: Entry,
}

impl Core {
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
        let reply = matches!(entry, Entry::Reply { .. });
        let turn_entry = if reply {
            TurnEntry::Reply
        } else {
            TurnEntry::New
        };
        let span = spans::task_span(&task, turn_entry);
        let (events, copy) = match entry {
            Entry::New { copy } => (
                self.store().insert_task_with(&task, &first, Some(runner)),
                copy,
            ),
            Entry::Reply { question } => (
                self.store().reply_task(&task, &first, runner, question),
                None,
            ),
        };
        let events = match events {
            Ok(events) => events,
            Err(e) => {
                lock(&self.inner.stops).remove(&task.id);
                return Err(e);
            }
        };
        // A new task keeps its trace; a reply continues it.
        if reply {
            spans::continue_trace(self.store(), &task.id, &span);
        } else {
            spans::keep_trace(self.store(), &task.id, &span);
        }
        self.publish(&events);
        if let Some(copy) = copy
            && let Err(e) = self.start_review(&task, copy)
        {
            tracing::error!(task = %task.id, error = %e, "could not store the copy's review record");
        }
        let engine = self.clone();
        let t = task.clone();
        self.track(
            async move { engine.drive(t, agent, stop_rx, inputs, queued).await }.instrument(span),
        );
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

impl Core {
    /// Checks and stores a task, then queues it (or parks it waiting for input when its
    /// prompt is empty and `allow_empty`). Every way of submitting comes here.
    pub(crate) fn submit_inner(
        &self,
        mut request: SubmitRequest,
        allow_empty: bool,
    ) -> Result<Task> {
        self.resolve_directory(&mut request)?;
        let role = self.apply_role(&mut request)?;
        let checked = self.check_submit(&request, allow_empty)?;
        crate::core::request::check_framed(
            &request.prompt,
            role.as_ref(),
            self.config().max_prompt_chars,
        )?;
        self.submit_checked(request, checked, role)
    }

    /// Stores and queues (or parks) the task of a `request` that passed `check_submit` as
    /// `checked`, with its resolved `role`. A handoff comes here too, with its copy's source
    /// set in `checked`.
    pub(crate) fn submit_checked(
        &self,
        request: SubmitRequest,
        checked: crate::core::request::Checked,
        role: Option<legate_core::TaskRole>,
    ) -> Result<Task> {
        let id = checked
            .id
            .clone()
            .unwrap_or_else(|| TaskId(uuid::Uuid::new_v4().to_string()));
        // Before the task is stored, so that its first turn finds them.
        self.take_memory_snapshots(&id, &request, &checked)?;
        let mut task = Task {
            workspace: checked.workspace,
            root: checked.root,
            // Set by `apply_role`; write only if that ever changed.
            mode: request.mode.unwrap_or_default(),
            model: request.model,
            role,
            timeout_secs: checked.timeout.as_secs().max(1),
            controls: checked.controls,
            ..Task::new(
                id.0.clone(),
                checked.context_id,
                checked.agent.name.clone(),
                request.prompt,
            )
        };
        if checked.empty {
            task.prompt = String::new();
            task.state = TaskState::InputRequired;
            task.status_message = Some(EMPTY_PROMPT_MESSAGE.to_string());
            return self
                .park(task)
                .inspect_err(|_| self.forget_memory_snapshots(&id));
        }
        let task = self
            .launch(Launch {
                task,
                agent: checked.agent,
                inputs: TurnInputs {
                    message_id: request.message_id,
                    json_schema: request.json_schema,
                    effort: request.effort,
                },
                entry: Entry::New { copy: checked.copy },
            })
            .inspect_err(|_| self.forget_memory_snapshots(&id))?;
        tracing::info!(task = %task.id, agent = %task.agent, context = %task.context_id, "task submitted");
        Ok(task)
    }

    /// Replies into a task that waits for input (`input-required`), with the caller's id for
    /// the reply (an A2A `messageId`): see [`crate::Engine::reply_message`]. `question`: the
    /// event number of the question answered (see [`crate::Engine::answer_question`]).
    pub(crate) fn reply_message(
        &self,
        id: &str,
        prompt: impl Into<String>,
        message_id: Option<String>,
        question: Option<u64>,
    ) -> Result<Task> {
        let prompt = prompt.into();
        check_reply(&prompt, self.config().max_prompt_chars)?;
        // One reply (or cancel) of a waiting task at a time in this process.
        let _waiting = lock(&self.inner.waiting);
        let mut task = self.inner.store.find_task(id)?;
        if task.state != TaskState::InputRequired {
            return Err(Error::new(
                ErrorCode::TaskNotAwaitingInput,
                format!(
                    "task {} is {}, not input-required; send a new message to continue its context {}",
                    task.id, task.state, task.context_id
                ),
            ));
        }
        let (agent, _) = self.task_agent(&task.agent)?;
        crate::core::request::check_framed(
            &prompt,
            task.role.as_ref(),
            self.config().max_prompt_chars,
        )?;
        task.prompt = prompt;
        task.state = TaskState::Submitted;
        task.status_message = None;
        task.updated_at = Timestamp::now();
        let task = self.launch(Launch {
            task,
            agent,
            inputs: TurnInputs {
                message_id,
                json_schema: None,
                effort: None,
            },
            entry: Entry::Reply { question },
        })?;
        tracing::info!(task = %task.id, context = %task.context_id, "task resumed by a reply");
        Ok(task)
    }
}
