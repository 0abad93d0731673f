//! The [`Messages`] service, every public method of it in this file: a task's public messages
//! and delivery mode (derived here), and the doors to the core's conversation machinery (an
//! inbound message, `core::inbound`; a conversation's next turn, `core::continuation`).
//!
//! Public messages: what a caller in `messages` delivery reads instead of every event. Each
//! is derived from one stored event: a question (the agent asked for input), a blocker (the
//! task failed, was refused or needs authentication; the supervisor refused a permission),
//! or the result (an excerpt of the answer, with the sha256 that `read_result` reports and a
//! pointer to it).
//!
//! Messages are derived on demand, from the last event already read (the store's mark, moved
//! by compare-and-set, so two readers never derive the same event twice), and kept by the
//! store, the newest [`MAX_MESSAGES_PER_TASK`] per task. This module owns the mapping, the
//! 2,000-character bound, and the scrubbing of text the agent wrote (control characters
//! removed; text that looks like a credential is withheld, never echoed). It never changes a
//! task, and a message from the agent stays a report: it proves no test and authorises no
//! integration.

use crate::core::Core;
use crate::core::continuation::{ContinueRequest, MAX_PENDING_PER_CONTEXT};
use crate::core::inbound::{Delivered, Inbound};
use legate_core::TaskId;
use legate_core::delivery::{MAX_MESSAGE_CHARS, MAX_MESSAGES_PER_TASK};
use legate_core::{
    DeliveryMode, Event, EventKind, MessageKind, MessageOrigin, MessagePage, Result, Task,
    TaskControls, TaskState,
};
use legate_store::NewMessage;
use legate_store::TaskFilter;

/// Events read per derivation step.
const DERIVE_BATCH: usize = 500;

/// How much of the answer a result message quotes, in characters; the rest of its 2,000 is
/// the pointer to `read_result`.
const EXCERPT_CHARS: usize = 1_600;

/// A task's messages and their delivery: the messages of a task, its delivery mode,
/// inbound deliveries from other agents, and the next turn of a conversation.
/// Handed out by [`Messages::list`](crate::Messages::list).
#[derive(Debug, Clone)]
pub struct Messages {
    pub(crate) core: Core,
}

impl Core {
    /// Derives messages from the events of `task` not read yet. Another reader deriving at
    /// the same time wins the mark; this one then reads again from the new mark.
    pub(crate) fn derive_messages(&self, task: &Task) -> Result<()> {
        let store = self.store();
        loop {
            let mark = store.message_mark(&task.id)?;
            let events = store.events(&task.id, mark, DERIVE_BATCH)?;
            let Some(last) = events.last().map(|e| e.seq) else {
                return Ok(());
            };
            // The answer and model as stored now: a result message is derived from the
            // terminal status, stored in the same transaction as the result.
            let now = store.task(&task.id)?.unwrap_or_else(|| task.clone());
            let derived: Vec<NewMessage> = events.iter().filter_map(|e| derive(&now, e)).collect();
            let full = events.len() == DERIVE_BATCH;
            store.append_public_messages(&task.id, mark, last, &derived, MAX_MESSAGES_PER_TASK)?;
            if !full {
                return Ok(());
            }
        }
    }
}

impl Messages {
    /// Up to `limit` public messages of `task_id` numbered after `after`, oldest first,
    /// derived first from any event not yet read. `TASK_NOT_FOUND` for an unknown task.
    pub fn list(&self, task_id: &str, after: u64, limit: usize) -> Result<MessagePage> {
        let task = self.core.task(task_id)?;
        self.core.derive_messages(&task)?;
        self.core.store().public_messages(&task.id, after, limit)
    }

    /// Changes how task `id` is delivered (the one control that may change after the task
    /// is stored) and returns the task as now stored. A continuation of its context started
    /// later inherits the new mode. `TASK_NOT_FOUND` for an unknown task.
    pub fn set_delivery_mode(&self, id: &str, mode: DeliveryMode) -> Result<Task> {
        let task = self.core.task(id)?;
        let controls: TaskControls = self.core.store().set_task_delivery_mode(&task.id, mode)?;
        tracing::info!(task = %task.id, mode = mode.as_str(), "delivery mode changed");
        // A notice wakes the waits that follow the task, so a wait begun in the other mode
        // ends and says so. An ended task's log stays closed by its final status.
        if !task.is_terminal() && mode != task.controls.delivery_mode {
            let notice = EventKind::Notice {
                message: format!("the task is now delivered as {}", mode.as_str()),
                detail: serde_json::json!({
                    "event": "delivery_mode_changed",
                    "deliveryMode": mode.as_str(),
                }),
            };
            match self.core.store().append_events(&task.id, &[notice]) {
                Ok(events) => self.core.publish(&events),
                Err(e) => {
                    tracing::warn!(task = %task.id, error = %e, "the delivery notice was not stored")
                }
            }
        }
        Ok(Task { controls, ..task })
    }

    /// The next turn of a conversation, whatever a front received: an empty text puts a task
    /// of the context in `input-required` (as [`Engine::submit_or_ask`](crate::Engine::submit_or_ask) does for a new one);
    /// a text with the caller's `message_id` is [`Engine::send_message`](crate::Engine::send_message) (idempotent by that
    /// id); a text without one is [`Engine::resume`](crate::Engine::resume). Fronts call this instead of choosing.
    /// A context an inbound message started is its caller's (`INVALID_INPUT`), as for
    /// [`Engine::resume`](crate::Engine::resume).
    pub fn next_turn(&self, request: ContinueRequest, message_id: Option<String>) -> Result<Task> {
        self.core.refuse_inbound_context(&request.context_id)?;
        self.core.next_turn(request, message_id)
    }

    /// Tasks of `task`'s context that wait for their turn and were submitted after it.
    pub fn queued_after(&self, task: &Task) -> Result<Vec<TaskId>> {
        let pending = self.core.tasks(&TaskFilter {
            state: Some(TaskState::Submitted),
            context_id: Some(task.context_id.clone()),
            limit: MAX_PENDING_PER_CONTEXT * 2,
            ..TaskFilter::default()
        })?;
        Ok(pending
            .into_iter()
            .filter(|t| t.id != task.id && t.created_at >= task.created_at)
            .map(|t| t.id)
            .collect())
    }

    /// Routes an inbound message to the task it becomes, by the rules of this module.
    /// Refusals change nothing.
    pub fn deliver(&self, inbound: Inbound) -> Result<Delivered> {
        self.core.deliver(inbound)
    }

    /// The tasks of `agent` an inbound caller may reach (those of conversations an inbound
    /// message started), as `filter` selects them otherwise: what a front's list shows
    /// such a caller. The agent and the reach are set here, whatever `filter` says.
    pub fn tasks_of(&self, agent: &str, filter: &TaskFilter) -> Result<Vec<Task>> {
        self.core.tasks(&TaskFilter {
            agent: Some(agent.to_string()),
            inbound_only: true,
            ..filter.clone()
        })
    }

    /// The task `id` (exactly, no prefix) when it belongs to `agent`: a task belongs to the
    /// agent it was sent to, and asking another agent for it is `TASK_NOT_FOUND`, as for an
    /// unknown id, so that one agent's callers learn nothing of another's tasks.
    pub fn task_of(&self, agent: &str, id: &str) -> Result<Task> {
        self.core.task_of(agent, id)
    }
}

/// The model of `task`: the one it reported, else the one it was given.
fn model_of(task: &Task) -> Option<String> {
    task.usage
        .as_ref()
        .and_then(|u| u.model.clone())
        .or_else(|| task.model.clone())
        .map(|m| scrub(&m, 200))
}

/// The message `event` of `task` gives, if any.
pub(crate) fn derive(task: &Task, event: &Event) -> Option<NewMessage> {
    let new = |kind, origin, text: String, code: Option<String>| NewMessage {
        kind,
        origin,
        model: model_of(task),
        at: event.at.0,
        text,
        event_seq: event.seq,
        result_sha256: None,
        result_length: None,
        code,
    };
    match &event.kind {
        EventKind::Status {
            state,
            message,
            error,
        } => match state {
            TaskState::InputRequired => Some(new(
                MessageKind::Question,
                MessageOrigin::AgentReported,
                bounded(
                    message
                        .as_deref()
                        .unwrap_or(crate::core::ending::INPUT_REQUIRED_MESSAGE),
                ),
                None,
            )),
            TaskState::Rejected => Some(new(
                MessageKind::Blocker,
                MessageOrigin::AgentReported,
                bounded(
                    message
                        .as_deref()
                        .unwrap_or(crate::core::ending::REJECTED_MESSAGE),
                ),
                None,
            )),
            TaskState::Failed | TaskState::AuthRequired => {
                let code = error.as_ref().map(|e| e.code.as_str().to_string());
                let text = match (error, message) {
                    (Some(e), _) => format!("{}: {}", e.code.as_str(), e.message),
                    (None, Some(m)) => m.clone(),
                    (None, None) => format!("the task is {state}"),
                };
                Some(new(
                    MessageKind::Blocker,
                    MessageOrigin::Legate,
                    bounded(&text),
                    code,
                ))
            }
            TaskState::Completed => Some(result_message(
                task,
                new(
                    MessageKind::Result,
                    MessageOrigin::AgentReported,
                    String::new(),
                    None,
                ),
            )),
            _ => None,
        },
        EventKind::Permission {
            title,
            tool_kind,
            verdict,
            ..
        } if !verdict.is_allow() => Some(new(
            MessageKind::Blocker,
            MessageOrigin::Legate,
            bounded(&format!(
                "Legate refused the agent's {} request \"{}\"",
                tool_kind.as_str(),
                scrub(title, 300)
            )),
            None,
        )),
        _ => None,
    }
}

/// A result message: an excerpt of the answer and the pointer to `read_result`, with the
/// answer's sha256 and length.
fn result_message(task: &Task, mut message: NewMessage) -> NewMessage {
    let answer = task.result.as_ref().map_or("", |r| r.text.as_str());
    let sha = legate_core::remote::sha256_hex(answer.as_bytes());
    let length: u64 = answer.chars().map(|c| c.len_utf16() as u64).sum();
    let excerpt = scrub(answer.trim(), EXCERPT_CHARS);
    let total = answer.trim().chars().count();
    let mut text = excerpt;
    if total > EXCERPT_CHARS {
        text.push('…');
    }
    text.push_str(&format!(
        "\n\n[the whole answer: read_result (contentSha256 {sha}, {length} UTF-16 units)]"
    ));
    message.text = bounded(&text);
    message.result_sha256 = Some(sha);
    message.result_length = Some(length);
    message
}

/// `text` scrubbed and cut to the message bound.
fn bounded(text: &str) -> String {
    scrub(text, MAX_MESSAGE_CHARS)
}

/// At most `max` characters of `text`, control characters other than newline and tab
/// removed; text that looks like a credential is withheld whole (the rule's name is kept,
/// never the value).
pub(crate) fn scrub(text: &str, max: usize) -> String {
    // The one credential detector every input passes (the copy's content rules).
    if let Some(kind) = legate_credentials::credential_in(text) {
        return format!("[withheld by Legate: the text looked like a credential ({kind})]");
    }
    let clean: String = text
        .chars()
        .filter(|c| !c.is_control() || *c == '\n' || *c == '\t')
        .collect();
    match clean.char_indices().nth(max) {
        None => clean,
        Some((i, _)) => {
            let mut cut = clean[..i].to_string();
            // One character for the ellipsis keeps the whole within `max`.
            cut.pop();
            cut.push('…');
            cut
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_core::{Error, ErrorCode, TaskId, TaskResult, Timestamp};
    use proptest::prelude::*;

    fn ev(kind: EventKind) -> Event {
        Event {
            task_id: TaskId("t".into()),
            seq: 3,
            at: Timestamp(5),
            kind,
        }
    }

    fn task_with_answer(answer: &str) -> Task {
        let mut t = Task::new("t", "c", "revisor", "p");
        t.model = Some("m-1".into());
        t.result = Some(TaskResult {
            text: answer.into(),
            ..TaskResult::default()
        });
        t
    }

    #[test]
    fn a_megabyte_answer_gives_a_bounded_excerpt_with_the_pointer_and_hash() {
        let answer = "x".repeat(1024 * 1024);
        let t = task_with_answer(&answer);
        let m = derive(
            &t,
            &ev(EventKind::Status {
                state: TaskState::Completed,
                message: None,
                error: None,
            }),
        )
        .unwrap();
        assert_eq!(m.kind, MessageKind::Result);
        assert!(m.text.chars().count() <= MAX_MESSAGE_CHARS);
        let sha = legate_core::remote::sha256_hex(answer.as_bytes());
        assert!(m.text.contains(&sha), "{}", &m.text[m.text.len() - 200..]);
        assert!(m.text.contains("read_result"));
        assert_eq!(m.result_sha256.as_deref(), Some(sha.as_str()));
        assert_eq!(m.result_length, Some(1024 * 1024));
        assert_eq!(m.model.as_deref(), Some("m-1"));
    }

    #[test]
    fn a_question_quoting_a_credential_is_withheld() {
        let t = task_with_answer("");
        let key = format!("AKIA{}", "QWERTYUIOPASDFGH");
        let m = derive(
            &t,
            &ev(EventKind::Status {
                state: TaskState::InputRequired,
                message: Some(format!("should I use {key}?")),
                error: None,
            }),
        )
        .unwrap();
        assert_eq!(m.kind, MessageKind::Question);
        assert_eq!(m.origin, MessageOrigin::AgentReported);
        assert!(!m.text.contains(&key), "{}", m.text);
        assert!(m.text.contains("withheld"));
    }

    #[test]
    fn events_that_are_not_public_give_no_message() {
        let t = task_with_answer("");
        assert!(derive(&t, &ev(EventKind::Message { text: "hi".into() })).is_none());
        assert!(
            derive(
                &t,
                &ev(EventKind::Status {
                    state: TaskState::Working,
                    message: None,
                    error: None
                })
            )
            .is_none()
        );
    }

    #[test]
    fn a_failure_is_a_blocker_with_its_code() {
        let t = task_with_answer("");
        let m = derive(
            &t,
            &ev(EventKind::Status {
                state: TaskState::Failed,
                message: None,
                error: Some(Error::new(ErrorCode::AgentStartFailed, "it died")),
            }),
        )
        .unwrap();
        assert_eq!(m.kind, MessageKind::Blocker);
        assert_eq!(m.origin, MessageOrigin::Legate);
        assert_eq!(m.code.as_deref(), Some("AGENT_START_FAILED"));
    }

    proptest! {
        #[test]
        fn scrubbed_text_is_bounded_and_free_of_control_characters(s in "\\PC*|[\\x00-\\x1f\\x7f-\\x9f]{0,50}", max in 1usize..3000) {
            let out = scrub(&s, max);
            prop_assert!(out.chars().count() <= max || out.starts_with("[withheld"));
            prop_assert!(out.chars().all(|c| !c.is_control() || c == '\n' || c == '\t'));
        }
    }
}
