//! A task's A2A `history`: every message exchanged over all of its turns, in the order they
//! were exchanged (A2A §3.2.4; the TCK's CORE-HIST-005 and -006).
//!
//! The engine stores each turn's prompt as an [`EventKind::Prompt`] event (the task's row
//! keeps only the latest prompt, which a reply replaces), and the agent's answer as its
//! message chunks, ended by the turn's `input-required` or terminal status. This module reads
//! those events back as messages: the caller's prompt (with the caller's own `messageId` when
//! it gave one), then the agent's answer, turn after turn. A task stored before prompts were
//! events has no such event; it gets the two messages its row holds (the latest prompt and
//! answer). Pure translation: nothing here does I/O or decides anything about a task.

use a2a::{Message, Part, Role};
use legate_core::{Event, EventKind, Task};

fn message(task: &Task, role: Role, id: String, text: String) -> Message {
    let mut m = Message::new(role, vec![Part::text(text)]);
    m.message_id = id;
    m.context_id = Some(task.context_id.clone());
    m.task_id = Some(task.id.0.clone());
    m
}

/// The history of `task` from its events, oldest first; `None` when the events hold no
/// prompt (a task stored before prompts were events, or one that never had a prompt).
pub fn from_events(task: &Task, events: &[Event]) -> Option<Vec<Message>> {
    if !events
        .iter()
        .any(|e| matches!(e.kind, EventKind::Prompt { .. }))
    {
        return None;
    }
    let mut out = Vec::new();
    // The agent's answer in the current turn, and the event that started it.
    let mut answer = String::new();
    let mut answer_seq = 0;
    let flush = |out: &mut Vec<Message>, answer: &mut String, seq: u64| {
        if !answer.trim().is_empty() {
            out.push(message(
                task,
                Role::Agent,
                format!("{}-answer-{seq}", task.id.0),
                std::mem::take(answer),
            ));
        }
        answer.clear();
    };
    for e in events {
        match &e.kind {
            EventKind::Prompt { text, message_id } => {
                flush(&mut out, &mut answer, answer_seq);
                let id = message_id
                    .clone()
                    .unwrap_or_else(|| format!("{}-prompt-{}", task.id.0, e.seq));
                out.push(message(task, Role::User, id, text.clone()));
            }
            EventKind::Message { text } => {
                if answer.is_empty() {
                    answer_seq = e.seq;
                }
                answer.push_str(text);
            }
            EventKind::Status { state, .. }
                if state.is_terminal() || *state == legate_core::TaskState::InputRequired =>
            {
                flush(&mut out, &mut answer, answer_seq);
            }
            _ => {}
        }
    }
    // A turn still running: what the agent said so far.
    flush(&mut out, &mut answer, answer_seq);
    Some(out)
}

/// The history a task's row holds alone: its latest prompt and, once it ended with an
/// answer, the agent's.
pub fn from_row(task: &Task) -> Vec<Message> {
    let mut out = Vec::new();
    if !task.prompt.is_empty() {
        out.push(message(
            task,
            Role::User,
            format!("{}-prompt", task.id.0),
            task.prompt.clone(),
        ));
    }
    if let Some(r) = &task.result
        && !r.text.is_empty()
    {
        out.push(message(
            task,
            Role::Agent,
            format!("{}-answer", task.id.0),
            r.text.clone(),
        ));
    }
    out
}

/// The last `n` messages of `history` (`None`: all of them).
pub fn last(mut history: Vec<Message>, n: Option<i32>) -> Vec<Message> {
    if let Some(n) = n {
        let keep = usize::try_from(n.max(0)).unwrap_or(0);
        let drop = history.len().saturating_sub(keep);
        history.drain(..drop);
    }
    history
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_core::{TaskId, TaskState, Timestamp};

    fn ev(seq: u64, kind: EventKind) -> Event {
        Event {
            task_id: TaskId("t".into()),
            seq,
            at: Timestamp(seq as i64),
            kind,
        }
    }

    fn status(state: TaskState) -> EventKind {
        EventKind::Status {
            state,
            message: None,
            error: None,
        }
    }

    fn prompt(text: &str, id: Option<&str>) -> EventKind {
        EventKind::Prompt {
            text: text.into(),
            message_id: id.map(str::to_string),
        }
    }

    fn chunk(text: &str) -> EventKind {
        EventKind::Message { text: text.into() }
    }

    fn texts(h: &[Message]) -> Vec<(Role, String)> {
        h.iter()
            .map(|m| (m.role.clone(), m.text().unwrap_or_default().to_string()))
            .collect()
    }

    #[test]
    fn every_turn_in_order() {
        let task = Task::new("t", "c", "tck", "third");
        let events = vec![
            ev(1, status(TaskState::Submitted)),
            ev(2, prompt("first", Some("m1"))),
            ev(3, status(TaskState::Working)),
            ev(4, chunk("what ")),
            ev(5, chunk("now?")),
            ev(6, status(TaskState::InputRequired)),
            ev(7, status(TaskState::Submitted)),
            ev(8, prompt("second", None)),
            ev(9, status(TaskState::Working)),
            ev(10, status(TaskState::InputRequired)),
            ev(11, status(TaskState::Submitted)),
            ev(12, prompt("third", Some("m3"))),
            ev(13, chunk("done")),
            ev(14, status(TaskState::Completed)),
        ];
        let h = from_events(&task, &events).unwrap();
        assert_eq!(
            texts(&h),
            vec![
                (Role::User, "first".into()),
                (Role::Agent, "what now?".into()),
                (Role::User, "second".into()),
                (Role::User, "third".into()),
                (Role::Agent, "done".into()),
            ]
        );
        assert_eq!(h[0].message_id, "m1");
        assert_eq!(h[2].message_id, "t-prompt-8");
        assert_eq!(h[1].message_id, "t-answer-4");
        assert!(h.iter().all(|m| m.task_id.as_deref() == Some("t")));
        let ids: std::collections::HashSet<_> = h.iter().map(|m| &m.message_id).collect();
        assert_eq!(ids.len(), h.len(), "ids are unique");
        assert_eq!(texts(&last(h.clone(), Some(2)))[0].1, "third");
        assert!(last(h.clone(), Some(0)).is_empty());
        assert_eq!(last(h, None).len(), 5);
    }

    #[test]
    fn a_task_without_prompt_events_reads_from_its_row() {
        let mut task = Task::new("t", "c", "tck", "only");
        assert!(from_events(&task, &[ev(1, status(TaskState::Submitted))]).is_none());
        assert_eq!(texts(&from_row(&task)), vec![(Role::User, "only".into())]);
        task.result = Some(legate_core::TaskResult {
            text: "answer".into(),
            ..Default::default()
        });
        assert_eq!(from_row(&task).len(), 2);
        task.prompt.clear();
        assert_eq!(from_row(&task).len(), 1);
    }

    #[test]
    fn a_running_turn_shows_what_was_said_so_far() {
        let task = Task::new("t", "c", "tck", "p");
        let h = from_events(&task, &[ev(1, prompt("p", None)), ev(2, chunk("partial"))]).unwrap();
        assert_eq!(texts(&h)[1], (Role::Agent, "partial".into()));
    }
}
