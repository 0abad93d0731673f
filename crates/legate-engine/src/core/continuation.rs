//! Continuing a conversation: [`Engine::resume`](crate::Engine::resume) (a new prompt into an earlier context) and
//! [`Engine::send_message`](crate::Engine::send_message) (a caller's message, idempotent by a client-chosen id, delivered as
//! the context's next turn).
//!
//! Both become an ordinary task of the context, submitted like any other, so admission,
//! timeouts, cancel and recovery apply unchanged. The engine runs a context's turns one at a
//! time and in submission order, so a message sent while a turn runs waits for that turn and
//! is the one after it: the queue of pending input *is* the context's queue of submitted
//! tasks. A continuation keeps the earlier task's agent, workspace, mode, model and timeout
//! unless the request overrides them; in a copy context it works in the same copy, which
//! must still be open (`COPY_CLOSED` otherwise; see `review::chain`).
//!
//! It also keeps what a later turn resumes: the context's agent session, recorded by the turn
//! that opened it ([`Core::record_session`]), with whether the agent can resume it.
//!
//! This module never runs a turn itself and never re-sends a message: an input whose task was
//! interrupted (say, by a restart) stays failed, visibly.

use crate::core::Core;
use crate::core::request::{SubmitRequest, WorkspaceRequest, check_size};
use crate::review::{ContinuedCopy, NextCopy, ReviewRecord};
use legate_core::Timestamp;
use legate_core::{Error, ErrorCode, Result, Task, TaskMode, TaskState, WorkspaceKind};
use legate_store::{ContextRecord, MessageClaim, MessageRecord, TaskFilter};
use std::sync::Mutex;
use std::time::Duration;

/// The longest message id accepted, in bytes.
pub const MAX_MESSAGE_ID_BYTES: usize = 128;
/// At most this many tasks of one context may wait for their turn; one more is `QUEUE_FULL`.
pub const MAX_PENDING_PER_CONTEXT: usize = 20;

/// Serializes claim, submit and bind of messages within this process, so that two requests
/// with one id cannot both submit a task. Across processes the store's primary key decides.
static SENDING: Mutex<()> = Mutex::new(());

/// A new prompt into an earlier conversation.
#[derive(Debug, Clone)]
pub struct ContinueRequest {
    /// The conversation to continue.
    pub context_id: String,
    /// What to ask.
    pub prompt: String,
    /// Overrides the earlier task's mode.
    pub mode: Option<TaskMode>,
    /// Overrides the earlier task's timeout.
    pub timeout: Option<Duration>,
}

/// A caller's message to a conversation.
#[derive(Debug, Clone)]
pub struct MessageRequest {
    /// The conversation it is for.
    pub context_id: String,
    /// The client's id for it; sending the same id and text again is harmless.
    pub message_id: String,
    /// What it says (a prompt's limit applies: 1 MiB).
    pub text: String,
    /// Overrides the earlier task's mode.
    pub mode: Option<TaskMode>,
}

legate_core::wire_enum! {
    /// Where a message is, as far as Legate can tell.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Delivery {
        /// Its task waits for the context's running turn (or a running place).
        Queued => "queued",
        /// Its task started: the agent was given the message as a turn. This does not prove the
        /// agent read it.
        Sent => "sent",
        /// Its task failed (an agent that would not start, a restart, …). It is not retried.
        Failed => "failed",
        /// Its task was canceled.
        Canceled => "canceled",
    }
}

impl Delivery {
    fn of(state: TaskState) -> Self {
        match state {
            TaskState::Submitted => Self::Queued,
            TaskState::Working | TaskState::InputRequired | TaskState::Completed => Self::Sent,
            TaskState::Canceled => Self::Canceled,
            TaskState::Failed | TaskState::Rejected | TaskState::AuthRequired => Self::Failed,
        }
    }
}

/// What [`Engine::send_message`](crate::Engine::send_message) answers: the same receipt for every send of one message.
#[derive(Debug, Clone)]
pub struct MessageReceipt {
    /// The client's id.
    pub message_id: String,
    /// The conversation.
    pub context_id: String,
    /// The task that carries the message, as it is now.
    pub task: Task,
    /// Where the message is.
    pub delivery: Delivery,
    /// True when this id had been received before (nothing new was queued).
    pub duplicate: bool,
}

/// The workspace a context's next task gets (see [`Core::kept_workspace`](crate::Engine::kept_workspace)).
pub(crate) enum Kept {
    /// A workspace to set up as for a new task (a sandbox, a shared directory, a new copy).
    Request(WorkspaceRequest),
    /// The context's open copy, continued: its record as the latest turn left it.
    Continue(ContinuedCopy, Box<ReviewRecord>),
}

impl Core {
    /// Submits `prompt` as the next turn of an earlier conversation, with the agent and
    /// workspace of the context's latest task. `CONTEXT_NOT_FOUND` when the context has no
    /// task; `QUEUE_FULL` when [`MAX_PENDING_PER_CONTEXT`] tasks of it already wait.
    pub(crate) fn resume(&self, request: ContinueRequest) -> Result<Task> {
        self.resume_as(request, None, false)
    }

    /// The next turn of a conversation, whatever a front received: an empty text puts a task
    /// of the context in `input-required` (as [`Engine::submit_or_ask`](crate::Engine::submit_or_ask) does for a new one);
    /// a text with the caller's `message_id` is [`Engine::send_message`](crate::Engine::send_message) (idempotent by that
    /// id); a text without one is [`Engine::resume`](crate::Engine::resume). Fronts call this instead of choosing.
    pub(crate) fn next_turn(
        &self,
        request: ContinueRequest,
        message_id: Option<String>,
    ) -> Result<Task> {
        if request.prompt.trim().is_empty() {
            return self.resume_as(request, message_id, true);
        }
        match message_id {
            Some(message_id) => self
                .send_message(MessageRequest {
                    context_id: request.context_id,
                    message_id,
                    text: request.prompt,
                    mode: request.mode,
                })
                .map(|receipt| receipt.task),
            None => self.resume(request),
        }
    }

    /// [`Engine::resume`](crate::Engine::resume) for the caller's message `message_id`, which the agent receives
    /// with the prompt. `allow_empty`: an empty prompt asks for input instead of failing.
    fn resume_as(
        &self,
        request: ContinueRequest,
        message_id: Option<String>,
        allow_empty: bool,
    ) -> Result<Task> {
        let last = self.latest_task(&request.context_id)?;
        let mut submit = SubmitRequest::new(request.prompt);
        submit.agent = Some(last.agent.clone());
        submit.workspace = WorkspaceRequest::Context;
        submit.context_id = Some(last.context_id.clone());
        submit.mode = Some(request.mode.unwrap_or(last.mode));
        submit.timeout = Some(
            request
                .timeout
                .unwrap_or(Duration::from_secs(last.timeout_secs)),
        );
        submit.model = last.model.clone();
        submit.message_id = message_id;
        // The next turn of a conversation is its caller's: the origin is the context's.
        submit.inbound = last.controls.inbound;
        self.submit_inner(submit, allow_empty)
    }

    /// The workspace a new task of `context_id` works in. A context with earlier tasks keeps
    /// their agent and workspace: [`WorkspaceRequest::Context`] or the same workspace named
    /// again is accepted, another is `INVALID_WORKSPACE`. A copy context's next task continues
    /// in the same copy ([`Kept::Continue`]) while the copy is open, and is `COPY_CLOSED` once
    /// it was integrated or discarded; naming the copy's project again means the same copy
    /// (other include paths or criteria are `INVALID_WORKSPACE`). Also refuses a context
    /// whose queue of waiting tasks is full (`QUEUE_FULL`). Changes nothing.
    pub(crate) fn kept_workspace(
        &self,
        context_id: &str,
        agent: &str,
        requested: WorkspaceRequest,
    ) -> Result<Kept> {
        let last = match self.latest_task(context_id) {
            Ok(last) => last,
            // A new context: a sandbox unless another workspace is named.
            Err(e) if e.code == ErrorCode::ContextNotFound => {
                return Ok(Kept::Request(match requested {
                    WorkspaceRequest::Context => WorkspaceRequest::Sandbox,
                    other => other,
                }));
            }
            Err(e) => return Err(e),
        };
        if last.agent != agent {
            return Err(Error::invalid_input(format!(
                "context {context_id} belongs to agent {:?}, not {agent:?}",
                last.agent
            )));
        }
        let pending = self.tasks(&TaskFilter {
            state: Some(TaskState::Submitted),
            context_id: Some(context_id.to_string()),
            limit: MAX_PENDING_PER_CONTEXT + 1,
            ..TaskFilter::default()
        })?;
        if pending.len() >= MAX_PENDING_PER_CONTEXT {
            return Err(Error::new(
                ErrorCode::QueueFull,
                format!(
                    "{MAX_PENDING_PER_CONTEXT} tasks of context {context_id} already wait for their turn"
                ),
            ));
        }
        let elsewhere = |kept: String| {
            Error::new(
                ErrorCode::InvalidWorkspace,
                format!(
                    "context {context_id} works in {kept}; a conversation keeps the workspace it started with, so leave the workspace out to continue there or start a new context"
                ),
            )
        };
        let same_dir = |named: &std::path::Path, kept: &std::path::Path| {
            // A path that cannot be resolved is not judged here: the workspace's own check
            // names what is wrong with it.
            std::fs::canonicalize(named).map_or(true, |named| named == kept)
        };
        match (last.workspace, requested) {
            (WorkspaceKind::Sandbox, WorkspaceRequest::Context | WorkspaceRequest::Sandbox) => {
                Ok(Kept::Request(WorkspaceRequest::Sandbox))
            }
            (WorkspaceKind::Sandbox, _) => Err(elsewhere("its sandbox".into())),
            (WorkspaceKind::Shared, requested) => {
                let root = last.root.clone().ok_or_else(|| {
                    Error::internal("the context's latest task is shared but has no directory")
                })?;
                match requested {
                    WorkspaceRequest::Context => Ok(Kept::Request(WorkspaceRequest::Shared(root))),
                    WorkspaceRequest::Shared(dir) if same_dir(&dir, &root) => {
                        Ok(Kept::Request(WorkspaceRequest::Shared(dir)))
                    }
                    _ => Err(elsewhere(format!("the directory {}", root.display()))),
                }
            }
            (WorkspaceKind::Copy, requested) => {
                let next = self.next_copy(&last)?;
                let record = match &next {
                    NextCopy::Continue(_, r) | NextCopy::Fresh(r) => r,
                };
                let source = record.source.clone();
                match &requested {
                    WorkspaceRequest::Context => {}
                    WorkspaceRequest::Copy {
                        source: named,
                        include_paths,
                        criteria,
                    } if same_dir(named, &source) => {
                        let include = legate_workspace::validate_include_paths(include_paths)?;
                        let same_include = include.is_empty() || include == record.include_paths;
                        let same_criteria = criteria.is_empty() || *criteria == record.criteria;
                        if !same_include || !same_criteria {
                            return Err(Error::new(
                                ErrorCode::InvalidWorkspace,
                                format!(
                                    "context {context_id} works in one copy of {}, with the include paths and criteria it started with; leave them out to continue there, or start a new context",
                                    source.display()
                                ),
                            ));
                        }
                    }
                    _ => return Err(elsewhere(format!("a copy of {}", source.display()))),
                }
                Ok(match next {
                    NextCopy::Continue(continued, record) => {
                        Kept::Continue(continued, Box::new(record))
                    }
                    NextCopy::Fresh(record) => Kept::Request(WorkspaceRequest::Copy {
                        source: record.source,
                        include_paths: record.include_paths,
                        criteria: record.criteria,
                    }),
                })
            }
        }
    }

    /// Queues a caller's message as the context's next turn, once per message id in that
    /// context. The same id with the same text answers the existing receipt (`duplicate`);
    /// the same id with other text is `MESSAGE_ID_CONFLICT` and changes nothing. In another
    /// context the same id is another message.
    pub(crate) fn send_message(&self, request: MessageRequest) -> Result<MessageReceipt> {
        validate_message(&request, self.config().max_prompt_chars)?;
        let _one_at_a_time = SENDING.lock().unwrap_or_else(|p| p.into_inner());
        let store = self.store();
        let record = MessageRecord {
            message_id: request.message_id.clone(),
            context_id: request.context_id.clone(),
            text: request.text.clone(),
            task_id: None,
            created_at: legate_core::Timestamp::now(),
        };
        match store.claim_message(&record)? {
            MessageClaim::Existing(existing) => self.receipt_for(existing, &request),
            MessageClaim::Claimed => {
                let submitted = self.resume_as(
                    ContinueRequest {
                        context_id: request.context_id.clone(),
                        prompt: request.text.clone(),
                        mode: request.mode,
                        timeout: None,
                    },
                    Some(request.message_id.clone()),
                    false,
                );
                let task = match submitted {
                    Ok(task) => task,
                    Err(e) => {
                        if let Err(release) =
                            store.release_message(&request.context_id, &request.message_id)
                        {
                            tracing::warn!(error = %release, "could not release a refused message");
                        }
                        return Err(e);
                    }
                };
                store.bind_message(&request.context_id, &request.message_id, &task.id)?;
                tracing::info!(task = %task.id, context = %task.context_id, "message queued");
                Ok(MessageReceipt {
                    message_id: request.message_id,
                    context_id: task.context_id.clone(),
                    delivery: Delivery::of(task.state),
                    task,
                    duplicate: false,
                })
            }
        }
    }

    /// Stores `session_id` as the context's session to resume (and the task's), and
    /// `resumable`, what the agent announced when it opened the session (`None`: unchanged).
    pub(crate) fn record_session(
        &self,
        task: &Task,
        session_id: &str,
        resumable: Option<bool>,
    ) -> Result<()> {
        if session_id.is_empty() && resumable.is_none() {
            // Not known yet (agy learns it from the first run's `init`).
            return Ok(());
        }
        let store = &self.inner.store;
        let mut record = store
            .context(&task.context_id)?
            .unwrap_or_else(|| ContextRecord::new(task.context_id.clone(), task.agent.clone()));
        if let Some(resumable) = resumable {
            record.resumable = Some(resumable);
        }
        record.updated_at = Timestamp::now();
        if session_id.is_empty() {
            return store.put_context(&record);
        }
        record.session_id = Some(session_id.to_string());
        store.put_context(&record)?;
        if let Some(mut t) = store.task(&task.id)? {
            t.session_id = Some(session_id.to_string());
            store.update_task(&t, &[])?;
        }
        Ok(())
    }

    pub(crate) fn latest_task(&self, context_id: &str) -> Result<Task> {
        let latest = self.tasks(&TaskFilter {
            context_id: Some(context_id.to_string()),
            limit: 1,
            ..TaskFilter::default()
        })?;
        latest.into_iter().next().ok_or_else(|| {
            Error::new(
                ErrorCode::ContextNotFound,
                format!("no task has run in a context with the id {context_id:?}"),
            )
        })
    }

    fn receipt_for(
        &self,
        existing: MessageRecord,
        request: &MessageRequest,
    ) -> Result<MessageReceipt> {
        if existing.text != request.text {
            return Err(Error::new(
                ErrorCode::MessageIdConflict,
                format!(
                    "message {:?} was already sent to this context with other text; choose a new id",
                    request.message_id
                ),
            ));
        }
        let Some(task_id) = existing.task_id else {
            return Err(Error::new(
                ErrorCode::QueueFull,
                format!(
                    "message {:?} is being queued by another request right now; send it again in a moment",
                    request.message_id
                ),
            ));
        };
        let task = self.store().task(&task_id)?.ok_or_else(|| {
            Error::new(
                ErrorCode::TaskNotFound,
                format!(
                    "message {:?} was delivered as task {task_id}, which has since been pruned",
                    request.message_id
                ),
            )
        })?;
        Ok(MessageReceipt {
            message_id: existing.message_id,
            context_id: existing.context_id,
            delivery: Delivery::of(task.state),
            task,
            duplicate: true,
        })
    }
}

/// A caller's message id: 1 to [`MAX_MESSAGE_ID_BYTES`] bytes without control characters,
/// else `INVALID_INPUT`. The one rule for every route a message id takes (a next turn here,
/// and every inbound message in `Messages::deliver`).
pub(crate) fn check_message_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > MAX_MESSAGE_ID_BYTES || id.chars().any(char::is_control) {
        return Err(Error::invalid_input(format!(
            "a message id must be 1 to {MAX_MESSAGE_ID_BYTES} bytes with no control characters"
        )));
    }
    Ok(())
}

fn validate_message(request: &MessageRequest, limit: usize) -> Result<()> {
    check_message_id(&request.message_id)?;
    if request.text.trim().is_empty() {
        return Err(Error::invalid_input("the message is empty"));
    }
    check_size("message", &request.text, limit)?;
    // Before the message is claimed: a refused text is never stored.
    legate_credentials::refuse_credential("the message", &request.text)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    const LIMIT: usize = crate::core::request::DEFAULT_MAX_PROMPT_CHARS;

    fn request(id: &str, text: &str) -> MessageRequest {
        MessageRequest {
            context_id: "c".into(),
            message_id: id.into(),
            text: text.into(),
            mode: None,
        }
    }

    #[test]
    fn messages_are_validated_before_anything_is_stored() {
        assert!(validate_message(&request("m", "hello"), LIMIT).is_ok());
        for bad in [
            request("", "hello"),
            request(&"x".repeat(129), "hello"),
            request("a\nb", "hello"),
            request("m", "   "),
            request("m", &"x".repeat(LIMIT + 1)),
        ] {
            assert_eq!(
                validate_message(&bad, LIMIT).unwrap_err().code,
                ErrorCode::InvalidInput
            );
        }
        assert!(validate_message(&request("m", &"é".repeat(5000)), LIMIT).is_ok());
    }

    #[test]
    fn delivery_follows_the_task_state() {
        assert_eq!(Delivery::of(TaskState::Submitted), Delivery::Queued);
        assert_eq!(Delivery::of(TaskState::Working), Delivery::Sent);
        assert_eq!(Delivery::of(TaskState::Completed), Delivery::Sent);
        assert_eq!(Delivery::of(TaskState::Failed), Delivery::Failed);
        assert_eq!(Delivery::of(TaskState::Canceled), Delivery::Canceled);
    }
}
