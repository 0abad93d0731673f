//! Folds a turn's events into the task's result: answer text, attachments, tool counts,
//! refusals, notices, usage.

use legate_core::{EventKind, Refusal, TaskResult, ToolStatus, Usage};
use std::collections::HashSet;

/// The most attachments one turn keeps; later ones are dropped (and logged).
pub const MAX_ATTACHMENTS: usize = 32;

/// What a turn has produced so far.
#[derive(Debug, Default)]
pub struct Accumulator {
    result: TaskResult,
    usage: Usage,
    failed: HashSet<String>,
    session_id: Option<String>,
    fs_writes: u32,
}

impl Accumulator {
    /// Takes one event into account.
    pub fn add(&mut self, event: &EventKind) {
        match event {
            EventKind::Message { text } => self.result.text.push_str(text),
            EventKind::Attachment(a) => {
                if self.result.attachments.len() < MAX_ATTACHMENTS {
                    self.result.attachments.push(a.clone());
                } else {
                    tracing::warn!(
                        name = a.name.as_deref().unwrap_or(""),
                        "an attachment past the first {MAX_ATTACHMENTS} of the turn was dropped"
                    );
                }
            }
            EventKind::ToolCall(call) => {
                self.result.tool_calls += 1;
                if call.status == ToolStatus::Failed {
                    self.fail(&call.id);
                }
            }
            EventKind::ToolCallUpdate(update) if update.status == Some(ToolStatus::Failed) => {
                self.fail(&update.id);
            }
            EventKind::Permission { title, verdict, .. } if !verdict.is_allow() => {
                self.result.refusals.push(Refusal {
                    title: title.clone(),
                    reason: verdict.reason.clone(),
                });
            }
            EventKind::Connection(c) if c.decision != legate_core::Decision::Allow => {
                self.result.refusals.push(Refusal {
                    title: format!("network: {} {}", c.method, c.destination),
                    reason: c.reason.clone(),
                });
            }
            EventKind::FsAccess {
                op, allowed: true, ..
            } if op == "write" => self.fs_writes += 1,
            EventKind::Usage { usage } => self.usage.merge(usage),
            EventKind::Session { session_id, .. } if !session_id.is_empty() => {
                self.session_id = Some(session_id.clone());
            }
            _ => {}
        }
    }

    /// Takes into account an event the output limits kept out of the store: a message still
    /// belongs to the answer (which has its own limit), usage and the session id still count;
    /// nothing else that would grow the result (refusals, attachments) is kept.
    pub fn add_dropped(&mut self, event: &EventKind) {
        if matches!(
            event,
            EventKind::Message { .. } | EventKind::Usage { .. } | EventKind::Session { .. }
        ) {
            self.add(event);
        }
    }

    /// Ends the answer with `marker`, which says it was cut.
    pub fn cut_answer(&mut self, marker: &str) {
        self.result.text.push_str(marker);
    }

    fn fail(&mut self, id: &str) {
        if self.failed.insert(id.to_string()) {
            self.result.failed_tool_calls += 1;
        }
    }

    /// What Legate saw the agent do: tool calls, and writes through the file service.
    pub fn seen(&self) -> crate::core::silent::Seen {
        crate::core::silent::Seen {
            tool_calls: self.result.tool_calls,
            fs_writes: self.fs_writes,
        }
    }

    /// The answer so far.
    pub fn text(&self) -> &str {
        &self.result.text
    }

    /// Adds a notice to the result.
    pub fn notice(&mut self, notice: legate_core::TaskNotice) {
        self.result.notices.push(notice);
    }

    /// The session id the last session event of the turn named, if any.
    pub fn session_id(&self) -> Option<&str> {
        self.session_id.as_deref()
    }

    /// Merges usage reported with the prompt's response.
    pub fn add_usage(&mut self, usage: &Usage) {
        self.usage.merge(usage);
    }

    /// The result and usage (`None` when the agent reported none).
    pub fn finish(self, stop_reason: Option<String>) -> (TaskResult, Option<Usage>) {
        let mut result = self.result;
        result.stop_reason = stop_reason;
        let usage = (!self.usage.is_empty()).then_some(self.usage);
        (result, usage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use legate_core::{Decision, Ruling, ToolCallEvent, ToolCallUpdateEvent, ToolKind};

    #[test]
    fn counts_tools_once_and_collects_refusals() {
        let mut acc = Accumulator::default();
        acc.add(&EventKind::Message { text: "a".into() });
        acc.add(&EventKind::Message { text: "b".into() });
        acc.add(&EventKind::ToolCall(ToolCallEvent {
            id: "t1".into(),
            title: "rm x".into(),
            tool_kind: ToolKind::Execute,
            status: ToolStatus::Pending,
            locations: vec![],
            raw_input: None,
        }));
        for _ in 0..2 {
            acc.add(&EventKind::ToolCallUpdate(ToolCallUpdateEvent {
                id: "t1".into(),
                title: None,
                tool_kind: None,
                status: Some(ToolStatus::Failed),
                locations: None,
                content: None,
            }));
        }
        acc.add(&EventKind::Permission {
            tool_call_id: "t1".into(),
            title: "rm x".into(),
            tool_kind: ToolKind::Execute,
            offered: vec!["allow".into(), "reject".into()],
            verdict: Ruling::new(Decision::Deny, Some("reject".into()), "not owned"),
        });
        for i in 0..=MAX_ATTACHMENTS {
            acc.add(&EventKind::Attachment(legate_core::Attachment {
                name: Some(format!("f{i}.txt")),
                ..legate_core::Attachment::default()
            }));
        }
        let (r, usage) = acc.finish(Some("end_turn".into()));
        assert_eq!(r.attachments.len(), MAX_ATTACHMENTS);
        assert_eq!(r.attachments[0].name.as_deref(), Some("f0.txt"));
        assert_eq!(r.text, "ab");
        assert_eq!(r.tool_calls, 1);
        assert_eq!(r.failed_tool_calls, 1);
        assert_eq!(r.refusals.len(), 1);
        assert_eq!(usage, None);
    }
}
