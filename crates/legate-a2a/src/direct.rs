//! When Legate answers a blocking `SendMessage` with a bare `Message` instead of a task (A2A
//! §3.1.1: the agent "MAY return a direct `Message` response for simple interactions"; the
//! TCK's DM-MSG-001). The agent decides: over ACP it ends its turn with `end_turn` and
//! `_meta.legate.directMessage: true` (`legate_backend::acp::ext`), which the engine stores
//! as the stop reason `direct_message`. This module only reads a finished task; it never
//! decides a task's fate, and a streamed message is never answered this way (its stream
//! starts with the task before the agent has said anything).

use a2a::{Message, Part, Role};
use legate_core::{Task, TaskState};
use serde_json::Value;
use std::collections::HashMap;

/// The stop reason (`stopReason`) of a turn whose agent said its answer is a direct message
/// (`legate_backend::StopReason::DirectMessage`'s wire string).
pub const DIRECT_MESSAGE_STOP: &str = "direct_message";

/// The bare `Message` that answers a blocking `SendMessage` instead of its task (A2A §3.1.1,
/// "a direct Message response for simple interactions that don't require task tracking"),
/// when the agent said its answer is one and the task holds nothing else a caller would
/// need it for: it completed, with answer text, no tool call, no refusal, no attachment, no
/// notice and no report, in a workspace that is not a copy (which has a patch to review).
/// `None` for any other task, which is answered as a task.
///
/// The task is still stored (every A2A request is an engine task); the message names its
/// context (`contextId`, to continue the conversation) and, in its metadata, the task
/// (`legateTaskId`), but not as its `taskId`: there is nothing to track or reply into.
pub fn direct_message(task: &Task) -> Option<Message> {
    let r = task.result.as_ref()?;
    let plain = task.state == TaskState::Completed
        && r.stop_reason.as_deref() == Some(DIRECT_MESSAGE_STOP)
        && !r.text.trim().is_empty()
        && r.tool_calls == 0
        && r.refusals.is_empty()
        && r.attachments.is_empty()
        && r.notices.is_empty()
        && r.report.is_none()
        && task.workspace != legate_core::WorkspaceKind::Copy;
    if !plain {
        return None;
    }
    let mut m = Message::new(Role::Agent, vec![Part::text(r.text.clone())]);
    m.message_id = format!("{}-answer", task.id.0);
    m.context_id = Some(task.context_id.clone());
    m.metadata = Some(HashMap::from([
        ("legateTaskId".to_string(), Value::String(task.id.0.clone())),
        ("agent".to_string(), Value::String(task.agent.clone())),
    ]));
    Some(m)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_core::Attachment;

    #[test]
    fn only_a_plain_direct_answer_is_a_message() {
        let mut t = Task::new("t1", "c1", "tck", "hi").with_state(TaskState::Completed);
        t.result = Some(legate_core::TaskResult {
            text: "Direct message response".into(),
            stop_reason: Some(DIRECT_MESSAGE_STOP.into()),
            ..Default::default()
        });
        let m = direct_message(&t).unwrap();
        assert_eq!(m.role, Role::Agent);
        assert_eq!(m.text(), Some("Direct message response"));
        assert_eq!(m.context_id.as_deref(), Some("c1"));
        assert_eq!(m.task_id, None);
        assert_eq!(m.metadata.unwrap()["legateTaskId"], "t1");
        let not = |change: &dyn Fn(&mut Task)| {
            let mut other = t.clone();
            change(&mut other);
            direct_message(&other).is_none()
        };
        assert!(not(
            &|t| t.result.as_mut().unwrap().stop_reason = Some("end_turn".into())
        ));
        assert!(not(&|t| t.result.as_mut().unwrap().stop_reason = None));
        assert!(not(&|t| t.state = TaskState::Failed));
        assert!(not(&|t| t.result.as_mut().unwrap().tool_calls = 1));
        assert!(not(&|t| t.result.as_mut().unwrap().text = " ".into()));
        assert!(not(&|t| t.result.as_mut().unwrap().refusals.push(
            legate_core::Refusal {
                title: "w".into(),
                reason: "r".into()
            }
        )));
        assert!(not(&|t| t
            .result
            .as_mut()
            .unwrap()
            .attachments
            .push(Attachment::default())));
        assert!(not(&|t| t.result.as_mut().unwrap().notices.push(
            legate_core::TaskNotice {
                code: "silent_turn".into(),
                message: "m".into()
            }
        )));
        assert!(not(&|t| t.workspace = legate_core::WorkspaceKind::Copy));
        assert!(not(&|t| t.result = None));
    }
}
