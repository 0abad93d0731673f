//! Continuing a turn cut by a restart of Legate ([`Engine::continue_task`](crate::Engine::continue_task)): on the caller's
//! request, a new turn of the cut task's context that resumes the agent's own session and
//! tells the agent its previous turn was cut.
//!
//! This module owns the rules. Only a task that ended `SERVER_RESTARTED`, is still its
//! context's latest task, and is neither a group's node nor a comparison's target (their
//! owners run them again) may be continued (`TASK_NOT_CONTINUABLE`); only when the agent
//! announced, when its session opened, that it can continue it (`session/resume` or
//! `session/load`, recorded in the store so the decision survives the restart), else
//! `CONTINUE_UNSUPPORTED` and nothing is started; and not while its workspace is blocked by
//! processes of an earlier run that could not be shown gone (`PROCESS_CLEANUP_UNVERIFIED`). A task has at most one continuation: a
//! second `continue` answers the same one (the store's unique index decides between two
//! processes). The continuation is an ordinary task of the context (same agent, workspace,
//! mode, model and timeout; a copy context's same copy while it is open), linked by
//! `controls.continuedFrom`; its first event says what it continues, and it fails
//! `CONTINUE_UNSUPPORTED` before its prompt is sent when the agent opened a new session
//! instead of resuming its own.
//!
//! It must never start a turn by itself (nothing here runs at startup), never re-send the cut
//! turn's prompt (the agent's session holds it), and never add events to the cut task, which
//! ended and stays as it ended.

use crate::core::Core;
use crate::core::ending::TurnResult;
use crate::core::request::{SubmitRequest, WorkspaceRequest};
use legate_backend::AgentSession;
use legate_core::{Error, ErrorCode, EventKind, Result, Task, TaskMode, TaskState};
use std::sync::Mutex;
use std::time::Duration;

/// Serializes the check and the submit of continuations within this process; across
/// processes the store's unique index on `controls.continuedFrom` decides.
static CONTINUING: Mutex<()> = Mutex::new(());

/// What the agent is told in a continuation's turn, after the task id of the cut turn.
pub const CONTINUE_PROMPT: &str = "Your previous turn in this session was cut off before it \
    finished, because Legate (the program relaying this conversation) was restarted; its \
    answer was lost. Continue that work from where it stopped (check what is already done \
    before redoing anything), then answer as you would have answered it.";

/// The stable name of the notice a continuation's turn starts with (`detail.event`).
pub const CONTINUED_EVENT: &str = "continued";

impl Core {
    /// Continues `id` (a task id or unique prefix), cut by a restart, as a new turn of its
    /// context that resumes the agent's session. `mode` overrides the cut task's mode (a
    /// read-only front profile). Answers the existing continuation when there is one.
    pub(crate) fn continue_task(&self, id: &str, mode: Option<TaskMode>) -> Result<Task> {
        let _one_at_a_time = CONTINUING.lock().unwrap_or_else(|p| p.into_inner());
        let cut = self.task(id)?;
        if let Some(next) = self.store().continuation_of(&cut.id)? {
            return Ok(next);
        }
        self.check_continuable(&cut)?;
        let mut submit = SubmitRequest::new(continue_prompt(&cut));
        submit.agent = Some(cut.agent.clone());
        submit.workspace = WorkspaceRequest::Context;
        submit.context_id = Some(cut.context_id.clone());
        submit.mode = Some(mode.unwrap_or(cut.mode));
        submit.timeout = Some(Duration::from_secs(cut.timeout_secs));
        submit.model = cut.model.clone();
        // The cut turn's caller's, as every next turn of a context is (`SubmitRequest::inbound`).
        submit.inbound = cut.controls.inbound;
        self.resolve_directory(&mut submit)?;
        let role = self.apply_role(&mut submit)?;
        let mut checked = self.check_submit(&submit, false)?;
        checked.controls.continued_from = Some(cut.id.clone());
        match self.submit_checked(submit, checked, role) {
            Ok(next) => {
                tracing::info!(task = %next.id, cut = %cut.id, context = %next.context_id, "task continued after a restart");
                Ok(next)
            }
            // Another process stored a continuation first: that one is the answer.
            Err(e) => self.store().continuation_of(&cut.id)?.ok_or(e),
        }
    }

    /// Refuses a `continue` of `cut` unless it ended `SERVER_RESTARTED`, is its context's
    /// latest task, and its context's agent session can be resumed. Changes nothing.
    fn check_continuable(&self, cut: &Task) -> Result<()> {
        let restarted = cut.state == TaskState::Failed
            && cut
                .error
                .as_ref()
                .is_some_and(|e| e.code == ErrorCode::ServerRestarted);
        if !restarted {
            let how = match &cut.error {
                Some(e) if cut.state.is_terminal() => format!("{} ({})", cut.state, e.code),
                _ => cut.state.to_string(),
            };
            return Err(Error::new(
                ErrorCode::TaskNotContinuable,
                format!(
                    "task {} is {how}, not cut by a restart of Legate (SERVER_RESTARTED); only such a task can be continued",
                    cut.id
                ),
            ));
        }
        if let Some(owner) = owner_of(cut) {
            return Err(Error::new(
                ErrorCode::TaskNotContinuable,
                format!("task {} is {owner}", cut.id),
            ));
        }
        let latest = self.latest_task(&cut.context_id)?;
        if latest.id != cut.id {
            return Err(Error::new(
                ErrorCode::TaskNotContinuable,
                format!(
                    "context {} took a later turn (task {}) after task {} was cut; continue the conversation with resume instead",
                    cut.context_id, latest.id, cut.id
                ),
            ));
        }
        // A workspace an earlier run's processes may still change is not worked in again.
        if let Some(root) = &cut.root {
            legate_backend::cleanup::check_path(&self.config().paths.blocked(), root)?;
        }
        let context = self.store().context(&cut.context_id)?;
        let unsupported = |why: String| {
            Err(Error::new(
                ErrorCode::ContinueUnsupported,
                format!(
                    "task {} cannot be continued: {why}; nothing was started",
                    cut.id
                ),
            ))
        };
        match context {
            Some(c) if c.session_id.is_none() => unsupported(format!(
                "no agent session of context {} was opened before the restart",
                cut.context_id
            )),
            None => unsupported(format!(
                "no agent session of context {} was opened before the restart",
                cut.context_id
            )),
            Some(c) => match c.resumable {
                Some(true) => Ok(()),
                Some(false) => unsupported(format!(
                    "agent `{}` announced neither session/resume nor session/load when its session opened",
                    cut.agent
                )),
                None => unsupported(format!(
                    "the session of context {} was opened by a Legate that did not record whether agent `{}` can resume it",
                    cut.context_id, cut.agent
                )),
            },
        }
    }
}

/// What owns `cut` and runs it again itself, said for a person: a group's node or a
/// comparison's target. `None` for a task of its caller's own.
fn owner_of(cut: &Task) -> Option<String> {
    match (&cut.controls.group, &cut.controls.comparison_id) {
        (Some(g), _) => Some(format!(
            "node {} of group {}: start the group again (group_start) to resume it",
            g.node_id, g.group_id
        )),
        (None, Some(c)) => Some(format!("a target of comparison {c}: compare again")),
        (None, None) => None,
    }
}

/// The prompt of `cut`'s continuation.
fn continue_prompt(cut: &Task) -> String {
    format!("[Legate: continuing task {}] {CONTINUE_PROMPT}", cut.id)
}

/// Whether the agent that opened `session` said it can continue it later.
pub(crate) fn resumable(session: &dyn AgentSession) -> bool {
    let info = session.agent_info();
    info.load_session || info.capabilities.iter().any(|c| c == "session/resume")
}

/// The notice a continuation's turn starts with, before its session opens.
pub(crate) fn continuing_notice(task: &Task) -> Option<EventKind> {
    let cut = task.controls.continued_from.as_ref()?;
    Some(EventKind::Notice {
        message: format!(
            "continuing task {cut} after a restart of Legate: resuming the agent's session"
        ),
        detail: serde_json::json!({ "event": CONTINUED_EVENT, "continuedFrom": cut }),
    })
}

/// Whether a turn ended as [`check_resumed`] refuses it: its new session is not the context's.
pub(crate) fn refused_new_session(result: &TurnResult) -> bool {
    matches!(result, TurnResult::Failed(e) if e.code == ErrorCode::ContinueUnsupported)
}

/// `CONTINUE_UNSUPPORTED` when `task` continues a cut task and `session` is not the agent's
/// earlier session (the agent opened a new one): the continuation's prompt would reach an
/// agent that remembers nothing of the cut turn.
pub(crate) fn check_resumed(task: &Task, session: &dyn AgentSession) -> Result<()> {
    match &task.controls.continued_from {
        Some(cut) if !session.resumed() => Err(Error::new(
            ErrorCode::ContinueUnsupported,
            format!(
                "the agent did not resume its earlier session, so task {cut} cannot be continued: it opened a new one (see this task's notices); nothing was sent to it"
            ),
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_node_and_a_comparisons_target_are_their_owners_to_run_again() {
        let mut t = Task::new("t", "c", "a", "p");
        assert_eq!(owner_of(&t), None);
        t.controls.comparison_id = Some("cmp".into());
        assert!(owner_of(&t).unwrap().contains("comparison cmp"));
        t.controls.group = Some(legate_core::GroupNode {
            group_id: "g".into(),
            node_id: "n".into(),
        });
        assert!(owner_of(&t).unwrap().contains("group_start"));
    }

    #[test]
    fn the_prompt_names_the_cut_task_and_never_repeats_its_prompt() {
        let t = Task::new("cut-id", "c", "a", "secret earlier prompt");
        let prompt = continue_prompt(&t);
        assert!(
            prompt.contains("cut-id") && prompt.contains("restarted"),
            "{prompt}"
        );
        assert!(!prompt.contains("secret earlier prompt"));
    }
}
