//! Legate's events as A2A stream updates, one stream at a time: the [`Translator`] keeps what
//! a stream needs between events (the message line being built, the plans already sent for a
//! caller of the plan-changes extension). Pure translation: it decides nothing and does no
//! I/O.

use super::{LEGATE_EVENT_KEY, agent_message, artifacts, state, status, timestamp};
use a2a::{
    Part, StreamResponse, TaskArtifactUpdateEvent, TaskState as A2aState, TaskStatus,
    TaskStatusUpdateEvent,
};
use legate_core::plan_change::PlanStep;
use legate_core::{EventKind, PlanEntry, PlanTrail, Task, TaskState, Timestamp};
use serde_json::{Value, json};
use std::collections::HashMap;

/// Turns a task's events into A2A stream responses: message chunks buffered into whole
/// lines, thoughts marked as thoughts, tool calls and plans as lines, and at the end the answer
/// artifact and the final status.
#[derive(Debug, Default)]
pub struct Translator {
    line: String,
    seq: u64,
    /// The event being translated, as Legate's own JSON: carried as `legateEvent` in the
    /// metadata of the update it gives (not of the message lines it flushes), so a Legate
    /// reading this stream gets the structured event back.
    event: Option<Value>,
    /// When the event being translated was stored: every update it gives carries this time,
    /// so replaying the same events gives the same updates.
    at: Option<Timestamp>,
    /// For a caller that named the plan-changes extension: the plans sent on this stream,
    /// so that each after the first travels as what changed.
    plans: Option<PlanTrail>,
    /// How many plans this stream sent (each carries its number, a change its base's).
    plans_sent: u64,
}

/// A plan entry as a line of a plan update's text.
fn plan_line(e: &PlanEntry) -> String {
    format!("[{}] {}", e.status, e.content)
}

/// A whole plan's text: `head`, then each entry as its line ([`plan_line`]), one string.
fn plan_text(head: &str, entries: &[PlanEntry]) -> String {
    let len = entries
        .iter()
        .map(|e| e.status.len() + e.content.len() + 4)
        .sum::<usize>();
    let mut text = String::with_capacity(head.len() + len);
    text.push_str(head);
    for (i, e) in entries.iter().enumerate() {
        if i > 0 {
            text.push('\n');
        }
        text.push('[');
        text.push_str(&e.status);
        text.push_str("] ");
        text.push_str(&e.content);
    }
    text
}

impl Translator {
    /// A fresh translator.
    pub fn new() -> Self {
        Self::default()
    }

    /// The same translator for a caller that named the plan-changes extension
    /// (`legate_core::remote::PLAN_CHANGES_EXTENSION`) when `on`: each plan after the first
    /// goes as the hunks from the one before (its text the changed entries only), whole when
    /// the changes since the last whole one would outgrow it.
    #[must_use]
    pub fn with_plan_changes(mut self, on: bool) -> Self {
        self.plans = on.then(PlanTrail::default);
        self
    }

    /// A plan's update: whole, or (for a caller of the plan-changes extension) what changed.
    fn plan(&mut self, task: &Task, entries: &[PlanEntry]) -> StreamResponse {
        self.plans_sent += 1;
        let n = self.plans_sent;
        let Some(trail) = self.plans.as_mut() else {
            // As `EventKind::Plan` is written (`{"type":"plan","entries":[…]}`), without a copy.
            self.event = Some(json!({"type": "plan", "entries": entries}));
            return self.update(task, "plan", plan_text("plan:\n", entries));
        };
        let text = match trail.step(entries) {
            PlanStep::Changes { hunks, .. } => {
                let lines: Vec<String> = hunks
                    .iter()
                    .flat_map(|h| h.ins.iter().map(plan_line))
                    .collect();
                self.event = Some(json!({
                    "type": "plan_changes", "n": n, "base": n - 1, "hunks": hunks,
                }));
                format!(
                    "plan changed ({} entries):\n{}",
                    entries.len(),
                    lines.join("\n")
                )
            }
            PlanStep::Whole => {
                self.event = Some(json!({"type": "plan", "n": n, "entries": entries}));
                plan_text("plan:\n", entries)
            }
        };
        self.update(task, "plan", text)
    }

    fn update(&mut self, task: &Task, kind: &str, text: String) -> StreamResponse {
        self.seq += 1;
        let mut part = Part::text(text);
        let mut meta = HashMap::new();
        meta.insert("kind".to_string(), Value::String(kind.into()));
        if kind == "thought" {
            meta.insert("thought".to_string(), Value::Bool(true));
        }
        part.metadata = Some(meta.clone());
        // An event gives at most one update that is not a message line: its own, which takes
        // it (a plan's is as big as the plan).
        if kind != "message"
            && let Some(event) = self.event.take()
        {
            meta.insert(LEGATE_EVENT_KEY.to_string(), event);
        }
        let mut message = agent_message(task, format!("{}-u{}", task.id.0, self.seq), vec![part]);
        message.metadata = Some(meta);
        StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: task.id.0.clone(),
            context_id: task.context_id.clone(),
            status: TaskStatus {
                state: A2aState::Working,
                message: Some(message),
                timestamp: timestamp(self.at.unwrap_or_else(Timestamp::now).0),
            },
            metadata: None,
        })
    }

    fn flush(&mut self, task: &Task, out: &mut Vec<StreamResponse>) {
        if !self.line.trim().is_empty() {
            let text = std::mem::take(&mut self.line);
            out.push(self.update(task, "message", text));
        }
        self.line.clear();
    }

    /// The stream responses for one event, timed now. `task` is the task as stored (for a
    /// terminal or `input-required` status, as stored with that status: result, usage, status
    /// message and error included).
    pub fn event(&mut self, task: &Task, kind: &EventKind) -> Vec<StreamResponse> {
        self.at = None;
        self.translate(task, kind)
    }

    /// [`Translator::event`] for an event stored at `at`: its updates carry that time.
    pub fn event_at(
        &mut self,
        task: &Task,
        kind: &EventKind,
        at: Timestamp,
    ) -> Vec<StreamResponse> {
        self.at = Some(at);
        self.translate(task, kind)
    }

    fn translate(&mut self, task: &Task, kind: &EventKind) -> Vec<StreamResponse> {
        // A plan's is made with its update (`plan`), whole or as what changed.
        self.event = match kind {
            EventKind::Plan { .. } => None,
            _ => serde_json::to_value(kind).ok(),
        };
        let mut out = Vec::new();
        match kind {
            EventKind::Message { text } => {
                self.line.push_str(text);
                while let Some(i) = self.line.find('\n') {
                    let rest = self.line.split_off(i + 1);
                    let line = std::mem::replace(&mut self.line, rest);
                    let line = line.trim_end_matches('\n').to_string();
                    if !line.trim().is_empty() {
                        out.push(self.update(task, "message", line));
                    }
                }
            }
            EventKind::Thought { text } => {
                self.flush(task, &mut out);
                if !text.trim().is_empty() {
                    out.push(self.update(task, "thought", text.trim_end().to_string()));
                }
            }
            EventKind::ToolCall(c) => {
                self.flush(task, &mut out);
                out.push(self.update(
                    task,
                    "tool_call",
                    format!(
                        "tool {} ({}, {}): {}",
                        c.id,
                        c.tool_kind.as_str(),
                        c.status.as_str(),
                        c.title
                    ),
                ));
            }
            EventKind::ToolCallUpdate(u) => {
                if let Some(s) = u.status {
                    self.flush(task, &mut out);
                    let title = u
                        .title
                        .as_deref()
                        .map(|t| format!(": {t}"))
                        .unwrap_or_default();
                    out.push(self.update(
                        task,
                        "tool_call_update",
                        format!("tool {} {}{title}", u.id, s.as_str()),
                    ));
                }
            }
            EventKind::Plan { entries } => {
                self.flush(task, &mut out);
                let update = self.plan(task, entries);
                out.push(update);
            }
            EventKind::Permission { title, verdict, .. } => {
                self.flush(task, &mut out);
                let word = if verdict.is_allow() {
                    "allowed"
                } else {
                    "refused"
                };
                let reason = &verdict.reason;
                out.push(self.update(
                    task,
                    "permission",
                    format!("supervisor {word}: {title} ({reason})"),
                ));
            }
            EventKind::Status { state: s, .. } => {
                self.flush(task, &mut out);
                // A task that waits for input ends its turn like a finished one: its answer
                // so far, then its status with the agent's question.
                if s.is_terminal() || *s == TaskState::InputRequired {
                    for a in artifacts(task) {
                        out.push(StreamResponse::ArtifactUpdate(TaskArtifactUpdateEvent {
                            task_id: task.id.0.clone(),
                            context_id: task.context_id.clone(),
                            artifact: a,
                            append: Some(false),
                            last_chunk: Some(true),
                            metadata: None,
                        }));
                    }
                    out.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                        task_id: task.id.0.clone(),
                        context_id: task.context_id.clone(),
                        status: status(task),
                        metadata: None,
                    }));
                } else {
                    out.push(StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
                        task_id: task.id.0.clone(),
                        context_id: task.context_id.clone(),
                        status: TaskStatus {
                            state: state(*s),
                            message: None,
                            timestamp: timestamp(self.at.unwrap_or_else(Timestamp::now).0),
                        },
                        metadata: None,
                    }));
                }
            }
            _ => {}
        }
        out
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_plan_text_is_its_lines_joined() {
        let e = |c: &str, s: &str| PlanEntry {
            content: c.into(),
            priority: "low".into(),
            status: s.into(),
        };
        let entries = [
            e("a", "pending"),
            e("b é", "in_progress"),
            e("", "completed"),
        ];
        for n in 0..=entries.len() {
            let lines: Vec<String> = entries[..n].iter().map(plan_line).collect();
            assert_eq!(
                plan_text("plan:\n", &entries[..n]),
                format!("plan:\n{}", lines.join("\n"))
            );
        }
    }

    #[test]
    fn replayed_events_translate_the_same_way() {
        let task = Task::new("t1", "c1", "tck", "p")
            .with_state(TaskState::Working)
            .with_timeout_secs(60)
            .at(Timestamp(1));
        let kind = EventKind::Message {
            text: "hello\n".into(),
        };
        let one = Translator::new().event_at(&task, &kind, Timestamp(1_000));
        // The clock moves between the two translations (the sleep is the subject): a replay
        // must not depend on when it runs.
        std::thread::sleep(std::time::Duration::from_millis(5));
        let two = Translator::new().event_at(&task, &kind, Timestamp(1_000));
        assert_eq!(one, two);
        assert_eq!(one.len(), 1);
    }
}
