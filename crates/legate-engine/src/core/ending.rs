//! The ending of a turn: how a turn's result becomes the task's state and status message
//! ([`TurnResult::into_ending`], [`ended`]), a planner's or reviewer's report check
//! ([`Core::check_report`]), a copy task's patch check ([`Core::settle`]), and storing
//! the end once ([`Core::finish`], [`Core::end`]).
//!
//! This module owns the status messages a task ends with and the rule that a cancel accepted
//! by the store before the end commits wins. It never runs an agent and never stores an end
//! twice: the store's `end_task` decides, in one transaction, whether the end still applies.

use crate::core::accumulator::Accumulator;
use crate::core::launcher::TurnInputs;
use crate::core::silent::Watch;
use crate::core::{Core, Stop, first_intent, lock};
use crate::report;
use legate_backend::StopReason;
use legate_core::{
    AgentSpec, Error, ErrorCode, EventKind, Result, RoleBase, Task, TaskState, Timestamp,
    WorkspaceKind,
};
use std::path::Path;

/// The status message of a task whose prompt was empty.
pub const EMPTY_PROMPT_MESSAGE: &str =
    "the message was empty; reply into this task with what you want done";

/// The status message of a task whose agent asked for more input without saying anything.
pub const INPUT_REQUIRED_MESSAGE: &str = "the agent needs more input; reply into this task";

/// The status message of a task the agent refused (ACP stop reason `refusal`).
pub const REJECTED_MESSAGE: &str = "the agent refused the task";

/// The longest status message taken from an agent's answer, in bytes.
const MAX_STATUS_FROM_ANSWER: usize = 4096;

impl Core {
    /// The turn's inputs for `task` on `agent`: a planner or reviewer on a backend with
    /// structured output (agy) gets its report's JSON Schema when the caller gave none.
    /// Whether the turn then carries a schema says where its report is read from.
    pub(crate) fn report_inputs(
        &self,
        task: &Task,
        agent: &AgentSpec,
        inputs: TurnInputs,
    ) -> TurnInputs {
        let Some(schema) = report_base(task).and_then(report::json_schema) else {
            return inputs;
        };
        let structured = self
            .inner
            .agents
            .backend(agent)
            .is_ok_and(|(_, capabilities)| capabilities.structured_output);
        if !structured || inputs.json_schema.is_some() {
            return inputs;
        }
        TurnInputs {
            json_schema: Some(schema),
            ..inputs
        }
    }

    /// A planner's or reviewer's turn that ended `completed`: a reviewer's owned workspace
    /// must be unchanged (`READ_ONLY_VIOLATION`), then the report is found, validated and, for
    /// a review, its citations checked in `root`. Success stores it in the result; failure
    /// ends the task `failed` with `REPORT_INVALID` or `CITATION_NOT_FOUND`. Any other
    /// ending, and an implementer's, is returned as it is.
    pub(crate) async fn check_report(
        &self,
        task: &Task,
        root: &Path,
        watch: &Watch,
        structured: bool,
        mut ending: Ending,
    ) -> Ending {
        let Some(base) = report_base(task) else {
            return ending;
        };
        if ending.state != TaskState::Completed {
            return ending;
        }
        if base == RoleBase::Reviewer && watch.unchanged(root).await == Some(false) {
            tracing::warn!(task = %task.id, "the reviewer changed its workspace; its report is refused");
            return ending.fail(Error::new(
                ErrorCode::ReadOnlyViolation,
                "the reviewer changed its workspace during its turn (a review leaves every file as it found it, ignored files included); its report was not accepted",
            ));
        }
        let text = ending.result.text.clone();
        let attachments = ending.result.attachments.clone();
        let root = root.to_path_buf();
        let checked = tokio::task::spawn_blocking(move || {
            let answer = report::Answer {
                text: &text,
                attachments: &attachments,
                structured,
            };
            report::check(base, &answer, &root)
        })
        .await
        .unwrap_or_else(|e| Err(Error::internal(format!("the report check stopped: {e}"))));
        match checked {
            Ok(report) => {
                tracing::info!(task = %task.id, base = %base, "the report was accepted");
                ending.result.report = report;
                ending
            }
            Err(e) => {
                tracing::warn!(task = %task.id, code = %e.code, "the report was refused");
                ending.fail(e)
            }
        }
    }

    /// A copy task's turn ended: compute its patch; a completed task whose patch may not
    /// stand (read-only violation, change limit, blocked file) fails with that code, and
    /// keeps no report.
    pub(crate) async fn settle(&self, task: &Task, outcome: Ending) -> Ending {
        if task.workspace != WorkspaceKind::Copy {
            return outcome;
        }
        match self.settle_copy(task).await {
            Some(e) if outcome.state == TaskState::Completed => outcome.fail(e),
            _ => outcome,
        }
    }

    /// Stores the terminal state (or `input-required`, when the agent asked for input) and its
    /// status event in one transaction, then tells.
    pub(crate) fn finish(&self, task: &Task, ending: Ending) -> Result<()> {
        if !self.end(task, ending, |s| !s.is_terminal())? {
            tracing::warn!(task = %task.id, "the task had ended already; its turn's end was not stored");
        }
        Ok(())
    }

    /// Stores `ending` for `task` if its stored state passes `ends_from`, and tells; returns
    /// whether it did. The end and any cancel request are ordered by the store: a cancel that
    /// was accepted before this commits wins, whatever the turn did meanwhile.
    pub(crate) fn end(
        &self,
        task: &Task,
        ending: Ending,
        ends_from: impl FnOnce(TaskState) -> bool,
    ) -> Result<bool> {
        let store = &self.store();
        let stored = store.end_task(&task.id, |base, cancel_requested| {
            if !ends_from(base.state) {
                return None;
            }
            let ending = if cancel_requested && ending.state != TaskState::Canceled {
                Ending {
                    state: TaskState::Canceled,
                    error: Some(canceled()),
                    ..ending
                }
            } else {
                ending
            };
            Some(ended(base, ending))
        })?;
        let Some((t, events)) = stored else {
            return Ok(false);
        };
        store.set_runner(&t.id, None)?;
        self.publish(&events);
        if t.state == TaskState::InputRequired {
            tracing::info!(task = %t.id, "the agent asked for input; the task waits for a reply");
        } else {
            tracing::info!(task = %t.id, state = %t.state, "task ended");
        }
        Ok(true)
    }
}

/// How the turn itself went, before the result is folded in.
pub(crate) enum TurnResult {
    Completed {
        stop_reason: StopReason,
        usage: Option<legate_core::Usage>,
    },
    Canceled {
        stop_reason: Option<StopReason>,
        usage: Option<legate_core::Usage>,
    },
    Failed(Error),
}

impl TurnResult {
    /// The task's state after the turn: `completed`, `rejected` for ACP's `refusal`,
    /// `input-required` when the agent asked for input (and the task `can_wait`), `canceled`,
    /// or `failed`/`auth-required` with the error.
    pub(crate) fn into_ending(self, mut acc: Accumulator, can_wait: bool) -> Ending {
        match self {
            TurnResult::Completed { stop_reason, usage } => {
                if let Some(u) = &usage {
                    acc.add_usage(u);
                }
                let state = match stop_reason {
                    StopReason::Refusal => TaskState::Rejected,
                    StopReason::InputRequired if can_wait => TaskState::InputRequired,
                    _ => TaskState::Completed,
                };
                // The stored and wire form (`stopReason`) is the reason's wire string.
                let (result, usage) = acc.finish(Some(stop_reason.as_str().to_string()));
                Ending {
                    state,
                    error: None,
                    result,
                    usage,
                }
            }
            TurnResult::Canceled { stop_reason, usage } => {
                if let Some(u) = &usage {
                    acc.add_usage(u);
                }
                Ending::canceled(stop_reason, acc)
            }
            TurnResult::Failed(e) => Ending::failed(e, acc),
        }
    }
}

/// The agent's answer as a status message (trimmed, bounded), or `fallback` when it said
/// nothing.
fn answer_or(answer: &str, fallback: &str) -> String {
    let answer = answer.trim();
    if answer.is_empty() {
        return fallback.to_string();
    }
    if answer.len() <= MAX_STATUS_FROM_ANSWER {
        return answer.to_string();
    }
    let mut end = MAX_STATUS_FROM_ANSWER;
    while !answer.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &answer[..end])
}

/// How a task's run ended (terminal, or `input-required`), ready to store.
pub(crate) struct Ending {
    pub(crate) state: TaskState,
    pub(crate) error: Option<Error>,
    pub(crate) result: legate_core::TaskResult,
    pub(crate) usage: Option<legate_core::Usage>,
}

/// The base of `task`'s role when it reports (planner or reviewer).
fn report_base(task: &Task) -> Option<RoleBase> {
    task.role
        .as_ref()
        .map(|r| r.base)
        .filter(|b| *b != RoleBase::Implementer)
}

impl Ending {
    /// This ending, `failed` with `error`, keeping what the turn did but no report.
    fn fail(mut self, error: Error) -> Self {
        self.result.report = None;
        Self {
            state: TaskState::Failed,
            error: Some(error),
            ..self
        }
    }

    pub(crate) fn canceled(stop_reason: Option<StopReason>, acc: Accumulator) -> Self {
        let (result, usage) = acc.finish(stop_reason.map(|r| r.as_str().to_string()));
        Self {
            state: TaskState::Canceled,
            error: Some(canceled()),
            result,
            usage,
        }
    }

    pub(crate) fn failed(error: Error, acc: Accumulator) -> Self {
        let (result, usage) = acc.finish(None);
        let state = if matches!(
            error.code,
            ErrorCode::AgentAuthRequired | ErrorCode::AgyAuthRequired
        ) {
            TaskState::AuthRequired
        } else {
            TaskState::Failed
        };
        Self {
            state,
            error: Some(error),
            result,
            usage,
        }
    }
}

/// The error every canceled task carries, `TASK_CANCELED`: its sentence is the status
/// message a canceled task always had.
pub(crate) fn canceled() -> Error {
    Error::new(ErrorCode::TaskCanceled, "canceled")
}

/// `TASK_NOT_CANCELABLE` for a task that already ended.
pub(crate) fn not_cancelable(task: &Task) -> Error {
    Error::new(
        ErrorCode::TaskNotCancelable,
        format!("task {} already ended ({})", task.id, task.state),
    )
}

/// Task `t` as `ending` leaves it, and the status event that says so.
fn ended(mut t: Task, ending: Ending) -> (Task, Vec<EventKind>) {
    let Ending {
        state,
        error,
        mut result,
        usage,
    } = ending;
    // The answer was redacted as it streamed; the error may quote the agent (its stderr).
    let error = error.map(crate::core::redaction::hide_error);
    if let std::borrow::Cow::Owned(text) = legate_credentials::redact(&result.text) {
        result.text = text;
    }
    // A report is parsed from the answer or the structured output: JSON escapes or a token
    // joined across streamed pieces can hold a credential the stream did not see whole.
    result.report = result
        .report
        .take()
        .and_then(crate::core::redaction::hide_report);
    let notes: Vec<String> = [result.refusal_note(), failed_tools_note(&result)]
        .into_iter()
        .flatten()
        .chain(result.notices.iter().map(|n| n.message.clone()))
        .collect();
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    // What the supervisor refused travels with every ending but a question to the caller.
    let noted = |head: String| match &note {
        Some(n) => format!("{head}; {n}"),
        None => head,
    };
    let message = match (&error, state) {
        (Some(e), _) => Some(noted(e.message.clone())),
        (None, TaskState::Canceled) => Some(noted("canceled".to_string())),
        (None, TaskState::InputRequired) => Some(answer_or(&result.text, INPUT_REQUIRED_MESSAGE)),
        (None, TaskState::Rejected) => Some(noted(answer_or(&result.text, REJECTED_MESSAGE))),
        (None, _) => note,
    };
    t.state = state;
    t.error = error.clone();
    t.status_message = message.clone();
    t.usage = usage;
    t.result = Some(result);
    t.updated_at = Timestamp::now();
    let status = EventKind::Status {
        state,
        message,
        error,
    };
    (t, vec![status])
}

/// "2 of 5 tool calls failed", when any did. Some agents (Codex) end a turn whose tools
/// failed with `end_turn`, so a completed task says it here rather than look clean.
fn failed_tools_note(result: &legate_core::TaskResult) -> Option<String> {
    (result.failed_tool_calls > 0).then(|| {
        // An agent may report a failed call it never announced (Gemini's refused shell).
        let total = result.tool_calls.max(result.failed_tool_calls);
        format!("{} of {total} tool calls failed", result.failed_tool_calls)
    })
}

impl Core {
    /// Asks a task to stop. A queued task ends `canceled` without touching running ones; a
    /// running one gets `session/cancel`, then is killed after the grace period. A task run
    /// by another `legate` process is flagged in the store for that process to act on.
    pub(crate) fn cancel(&self, id: &str) -> Result<Task> {
        // A task may move between waiting for input and running while this runs (a reply, a
        // turn that asks); each attempt either holds in the store or sees the new state.
        for _ in 0..3 {
            let task = self.inner.store.find_task(id)?;
            if task.is_terminal() {
                return Err(not_cancelable(&task));
            }
            if task.state == TaskState::InputRequired {
                // Nothing runs: end it here, if it still waits when the end is stored.
                let _waiting = lock(&self.inner.waiting);
                let ending = Ending::canceled(None, Accumulator::default());
                if self.end(&task, ending, |s| s == TaskState::InputRequired)? {
                    if !self.waits_for_input(&task.context_id) {
                        self.release_session(&task.context_id, false);
                    }
                    tracing::info!(task = %task.id, "waiting task canceled");
                    return Ok(task);
                }
                continue;
            }
            // Recorded first: the task's end reads it in the same transaction that stores the
            // end, so a cancel accepted here always ends the task `canceled`.
            if self.inner.store.request_cancel(&task.id)? {
                if let Some(tx) = lock(&self.inner.stops).get(&task.id) {
                    tx.send_if_modified(|s| first_intent(s, Stop::Cancel));
                }
                tracing::info!(task = %task.id, "cancel requested");
                return Ok(task);
            }
        }
        let task = self.inner.store.find_task(id)?;
        if task.is_terminal() {
            return Err(not_cancelable(&task));
        }
        Err(Error::new(
            ErrorCode::TaskNotCancelable,
            format!(
                "task {} kept changing state while being canceled (now {}); try again",
                task.id, task.state
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ended(stop_reason: StopReason, can_wait: bool) -> Ending {
        let mut acc = Accumulator::default();
        acc.add(&EventKind::Message {
            text: "  Which file?\n".into(),
        });
        TurnResult::Completed {
            stop_reason,
            usage: None,
        }
        .into_ending(acc, can_wait)
    }

    #[test]
    fn the_stop_reason_decides_the_state() {
        assert_eq!(ended(StopReason::EndTurn, true).state, TaskState::Completed);
        assert_eq!(
            ended(StopReason::MaxTokens, true).state,
            TaskState::Completed
        );
        assert_eq!(ended(StopReason::Refusal, true).state, TaskState::Rejected);
        let asks = ended(StopReason::InputRequired, true);
        assert_eq!(asks.state, TaskState::InputRequired);
        assert_eq!(asks.error, None);
        // The stored result keeps the wire string of before the enum.
        assert_eq!(asks.result.stop_reason.as_deref(), Some("input_required"));
        assert_eq!(
            ended(StopReason::MaxTurnRequests, true)
                .result
                .stop_reason
                .as_deref(),
            Some("max_turn_requests")
        );
        // A copy task cannot wait: a reply would prepare its copy again.
        assert_eq!(
            ended(StopReason::InputRequired, false).state,
            TaskState::Completed
        );
        let canceled = TurnResult::Canceled {
            stop_reason: Some(StopReason::Cancelled),
            usage: None,
        }
        .into_ending(Accumulator::default(), true);
        assert_eq!(canceled.state, TaskState::Canceled);
        assert_eq!(canceled.result.stop_reason.as_deref(), Some("cancelled"));
    }

    #[test]
    fn the_status_of_a_question_is_the_answer_bounded() {
        assert_eq!(answer_or("  Which file?\n", "fallback"), "Which file?");
        assert_eq!(
            answer_or(" \n", INPUT_REQUIRED_MESSAGE),
            INPUT_REQUIRED_MESSAGE
        );
        let long = "é".repeat(MAX_STATUS_FROM_ANSWER);
        let cut = answer_or(&long, "");
        assert!(cut.len() <= MAX_STATUS_FROM_ANSWER + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }
}
