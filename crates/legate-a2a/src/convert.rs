//! Legate's tasks and events as A2A objects. Pure translation: nothing here decides a task's
//! fate, and nothing here does I/O.

use a2a::{
    A2AError, Artifact, Message, Part, PartContent, Role, Task as A2aTask, TaskState as A2aState,
    TaskStatus,
};
use base64::Engine as _;
use legate_core::{Attachment, ErrorCode, Task, TaskState};
use serde_json::{Value, json};
use std::collections::HashMap;

mod translator;

pub use translator::Translator;

/// The metadata key of a status update's message that carries the Legate event it was made
/// from (a thought, tool call, tool call update, plan or permission), as Legate's own JSON.
pub const LEGATE_EVENT_KEY: &str = "legateEvent";

/// The id of the answer artifact of every finished task.
pub const ANSWER_ARTIFACT: &str = "answer";

/// The id of the report artifact of a planner's or reviewer's task whose report Legate
/// accepted.
pub const REPORT_ARTIFACT: &str = "report";

/// A Legate state as A2A's (the same eight states).
pub fn state(s: TaskState) -> A2aState {
    match s {
        TaskState::Submitted => A2aState::Submitted,
        TaskState::Working => A2aState::Working,
        TaskState::InputRequired => A2aState::InputRequired,
        TaskState::Completed => A2aState::Completed,
        TaskState::Failed => A2aState::Failed,
        TaskState::Canceled => A2aState::Canceled,
        TaskState::Rejected => A2aState::Rejected,
        TaskState::AuthRequired => A2aState::AuthRequired,
    }
}

/// An A2A state filter as Legate's; `None` for "unspecified".
pub fn legate_state(s: A2aState) -> Option<TaskState> {
    Some(match s {
        A2aState::Unspecified => return None,
        A2aState::Submitted => TaskState::Submitted,
        A2aState::Working => TaskState::Working,
        A2aState::InputRequired => TaskState::InputRequired,
        A2aState::Completed => TaskState::Completed,
        A2aState::Failed => TaskState::Failed,
        A2aState::Canceled => TaskState::Canceled,
        A2aState::Rejected => TaskState::Rejected,
        A2aState::AuthRequired => TaskState::AuthRequired,
    })
}

fn timestamp(ms: i64) -> Option<chrono::DateTime<chrono::Utc>> {
    chrono::DateTime::from_timestamp_millis(ms)
}

fn agent_message(task: &Task, id: String, parts: Vec<Part>) -> Message {
    let mut m = Message::new(Role::Agent, parts);
    m.message_id = id;
    m.context_id = Some(task.context_id.clone());
    m.task_id = Some(task.id.0.clone());
    m
}

/// The sentence of a task's status: the engine's status message (which, for a finished task,
/// already lists the supervisor's refusals), led by the error code when the task failed.
pub fn status_text(task: &Task) -> Option<String> {
    match (&task.error, &task.status_message) {
        (Some(e), Some(m)) => Some(format!("{}: {m}", e.code.as_str())),
        (Some(e), None) => Some(format!("{}: {}", e.code.as_str(), e.detail())),
        (None, m) => m.clone(),
    }
}

/// The task's current status.
pub fn status(task: &Task) -> TaskStatus {
    TaskStatus {
        state: state(task.state),
        message: status_text(task).map(|text| {
            agent_message(
                task,
                format!("{}-status-{}", task.id.0, task.state.as_str()),
                vec![Part::text(text)],
            )
        }),
        timestamp: timestamp(task.updated_at.0),
    }
}

/// An attachment as a part: a link is a file part with its URL, embedded bytes a file part
/// with the bytes, embedded JSON (`application/json` or `…+json` that parses) a data part,
/// other embedded text a file part with the text's bytes. `None` for bytes that are not
/// base64 or an attachment with no content at all.
pub fn attachment_part(a: &Attachment) -> Option<Part> {
    let content = if let Some(b) = &a.base64 {
        PartContent::Raw(base64::engine::general_purpose::STANDARD.decode(b).ok()?)
    } else if let Some(text) = &a.text {
        let json = a
            .media_type
            .as_deref()
            .is_some_and(|m| m == "application/json" || m.ends_with("+json"));
        match serde_json::from_str::<Value>(text) {
            Ok(value) if json => return Some(Part::data(value)),
            _ => PartContent::Raw(text.as_bytes().to_vec()),
        }
    } else {
        PartContent::Url(a.uri.clone()?)
    };
    Some(Part {
        content,
        filename: a.name.clone(),
        media_type: a.media_type.clone(),
        metadata: None,
    })
}

/// The `answer` artifact of a finished task: the answer text, a part for each attachment
/// (files, links, values the agent handed over), and a data part with what a program needs
/// (agent, session, root, stop reason, tool counts, refusals, notices, usage).
pub fn answer_artifact(task: &Task) -> Option<Artifact> {
    let result = task.result.as_ref()?;
    let data = json!({
        "agent": task.agent,
        "sessionId": task.session_id,
        "root": task.root,
        "stopReason": result.stop_reason,
        "toolCalls": result.tool_calls,
        "failedToolCalls": result.failed_tool_calls,
        "refusals": result.refusals,
        "notices": result.notices,
        "usage": task.usage,
        "state": task.state.as_str(),
        "error": task.error.as_ref().map(|e| json!({"code": e.code.as_str(), "message": e.detail()})),
    });
    let mut parts = Vec::new();
    if !result.text.is_empty() {
        parts.push(Part::text(result.text.clone()));
    }
    parts.extend(result.attachments.iter().filter_map(attachment_part));
    parts.push(Part::data(data));
    Some(Artifact {
        artifact_id: ANSWER_ARTIFACT.into(),
        name: Some(ANSWER_ARTIFACT.into()),
        description: Some("The agent's answer and the task's outcome.".into()),
        parts,
        metadata: None,
        extensions: None,
    })
}

/// The `report` artifact of a planner's or reviewer's task whose report Legate checked and
/// accepted: one data part holding the report as stored (`kind`, `origin`,
/// `citationsChecked`, and the plan's or review's fields). `None` for any other task.
pub fn report_artifact(task: &Task) -> Option<Artifact> {
    let report = task.result.as_ref()?.report.as_ref()?;
    let data = serde_json::to_value(report).ok()?;
    Some(Artifact {
        artifact_id: REPORT_ARTIFACT.into(),
        name: Some(REPORT_ARTIFACT.into()),
        description: Some(
            "The agent's report as Legate checked it: what the agent said (agent-reported), never evidence that a step was done.".into(),
        ),
        parts: vec![Part::data(data)],
        metadata: None,
        extensions: None,
    })
}

/// The prefix of the id of an artifact a task collected with `artifactPaths`; the rest is
/// the path it named.
pub const FILE_ARTIFACT_PREFIX: &str = "file:";

/// A file the task collected (`artifactPaths`) as an A2A artifact: the file's bytes as a file
/// part (`bytes`, read back checked against the sha256 and the secret policy; `None` when the
/// file was not collected or the check refused it now), then a data part with its name, state,
/// size, sha256 and the reason it was not collected. Nothing of a refused file is carried.
pub fn collected_artifact(a: &legate_core::Artifact, bytes: Option<Vec<u8>>) -> Artifact {
    let mut parts = Vec::new();
    let carried = bytes.is_some();
    if let Some(b) = bytes {
        parts.push(Part {
            content: PartContent::Raw(b),
            filename: Some(a.name.clone()),
            media_type: None,
            metadata: None,
        });
    }
    parts.push(Part::data(json!({
        "name": a.name,
        "state": a.state.as_str(),
        "bytes": a.bytes,
        "sha256": a.sha256,
        "reason": a.reason,
        "carried": carried,
    })));
    Artifact {
        artifact_id: format!("{FILE_ARTIFACT_PREFIX}{}", a.name),
        name: Some(a.name.clone()),
        description: Some(
            "A file the task named in artifactPaths, collected from its workspace when its turn ended.".into(),
        ),
        parts,
        metadata: None,
        extensions: None,
    }
}

/// A finished task's artifacts: its answer, then its report when it has one.
fn artifacts(task: &Task) -> Vec<Artifact> {
    answer_artifact(task)
        .into_iter()
        .chain(report_artifact(task))
        .collect()
}

/// A Legate task as an A2A task, with the history its row holds (the latest prompt and
/// answer; [`task_with_history`] takes the whole history). `history_length`: `None` for all,
/// `Some(0)` for none, `n` for the last `n` messages.
pub fn task(t: &Task, history_length: Option<i32>, artifacts: bool) -> A2aTask {
    task_with_history(t, crate::history::from_row(t), history_length, artifacts)
}

/// A Legate task as an A2A task whose history is `history` (oldest first), cut to its last
/// `history_length` messages.
pub fn task_with_history(
    t: &Task,
    history: Vec<Message>,
    history_length: Option<i32>,
    artifacts: bool,
) -> A2aTask {
    let h = crate::history::last(history, history_length);
    let mut metadata = HashMap::new();
    metadata.insert("agent".to_string(), Value::String(t.agent.clone()));
    metadata.insert("mode".to_string(), Value::String(t.mode.as_str().into()));
    let (role, base) = t.role.as_ref().map_or(("implementer", "implementer"), |r| {
        (r.name.as_str(), r.base.as_str())
    });
    metadata.insert("role".to_string(), Value::String(role.into()));
    metadata.insert("roleBase".to_string(), Value::String(base.into()));
    A2aTask {
        id: t.id.0.clone(),
        context_id: t.context_id.clone(),
        status: status(t),
        artifacts: if artifacts {
            Some(crate::convert::artifacts(t)).filter(|a| !a.is_empty())
        } else {
            None
        },
        history: if h.is_empty() { None } else { Some(h) },
        metadata: Some(metadata),
    }
}

/// A Legate error as the A2A error a caller expects, keeping Legate's stable code as the
/// `google.rpc.ErrorInfo` reason.
pub fn error(e: &legate_core::Error) -> A2AError {
    let base = match e.code {
        ErrorCode::TaskNotFound => A2AError::new(a2a::error_code::TASK_NOT_FOUND, e.detail()),
        ErrorCode::TaskNotCancelable => {
            A2AError::new(a2a::error_code::TASK_NOT_CANCELABLE, e.detail())
        }
        ErrorCode::TaskNotAwaitingInput
        | ErrorCode::TaskNotContinuable
        | ErrorCode::ContinueUnsupported => A2AError::unsupported_operation(e.detail()),
        ErrorCode::Internal | ErrorCode::StoreError => {
            A2AError::internal(format!("{}: {}", e.code.as_str(), e.detail()))
        }
        _ => A2AError::invalid_params(format!("{}: {}", e.code.as_str(), e.detail())),
    };
    let mut meta = HashMap::new();
    meta.insert("legateCode".to_string(), e.code.as_str().to_string());
    base.with_details(vec![a2a::TypedDetail::error_info(
        e.code.as_str(),
        "legate",
        Some(meta),
    )])
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn every_state_maps_both_ways() {
        for s in [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Canceled,
            TaskState::Rejected,
            TaskState::AuthRequired,
        ] {
            assert_eq!(legate_state(state(s)), Some(s));
        }
        assert_eq!(legate_state(A2aState::Unspecified), None);
    }

    #[test]
    fn an_accepted_report_is_a_data_artifact_after_the_answer() {
        let mut t = Task::new("t1", "c1", "agent", "review");
        t.state = TaskState::Completed;
        t.result = Some(legate_core::TaskResult {
            text: "done".into(),
            ..Default::default()
        });
        let plain = task(&t, None, true).artifacts.unwrap();
        assert_eq!(plain.len(), 1);
        let report = legate_core::Report {
            origin: legate_core::ReportOrigin::AgentReported,
            citations_checked: true,
            body: legate_core::ReportBody::Review(legate_core::ReviewReport {
                summary: "s".into(),
                reviewed_files: vec!["a.rs".into()],
                findings: vec![],
                unverified: vec![],
            }),
        };
        if let Some(r) = t.result.as_mut() {
            r.report = Some(report.clone());
        }
        let both = task(&t, None, true).artifacts.unwrap();
        assert_eq!(both[0].artifact_id, ANSWER_ARTIFACT);
        assert_eq!(both[1].artifact_id, REPORT_ARTIFACT);
        let PartContent::Data(data) = &both[1].parts[0].content else {
            panic!("not a data part: {:?}", both[1].parts)
        };
        assert_eq!(data["kind"], "review");
        assert_eq!(data["citationsChecked"], true);
        assert_eq!(
            serde_json::from_value::<legate_core::Report>(data.clone()).ok(),
            Some(report)
        );
    }

    #[test]
    fn attachments_become_file_url_and_data_parts() {
        let file = attachment_part(&Attachment {
            name: Some("output.txt".into()),
            media_type: Some("text/plain".into()),
            uri: Some("output.txt".into()),
            text: None,
            base64: Some("dGNr".into()),
        })
        .unwrap();
        assert_eq!(file.content, PartContent::Raw(b"tck".to_vec()));
        assert_eq!(file.filename.as_deref(), Some("output.txt"));
        assert_eq!(file.media_type.as_deref(), Some("text/plain"));
        let link = attachment_part(&Attachment {
            name: Some("output.txt".into()),
            uri: Some("https://example.com/output.txt".into()),
            ..Attachment::default()
        })
        .unwrap();
        assert_eq!(
            link.content,
            PartContent::Url("https://example.com/output.txt".into())
        );
        let data = attachment_part(&Attachment {
            media_type: Some("application/json".into()),
            text: Some(r#"{"key": "value", "count": 42}"#.into()),
            ..Attachment::default()
        })
        .unwrap();
        assert_eq!(
            data.content,
            PartContent::Data(json!({"key": "value", "count": 42}))
        );
        // JSON that does not parse, or text of another type, is a file of that text.
        let text = attachment_part(&Attachment {
            media_type: Some("application/json".into()),
            text: Some("{not json".into()),
            ..Attachment::default()
        })
        .unwrap();
        assert_eq!(text.content, PartContent::Raw(b"{not json".to_vec()));
        assert!(attachment_part(&Attachment::default()).is_none());
        assert!(
            attachment_part(&Attachment {
                base64: Some("not base64!".into()),
                ..Attachment::default()
            })
            .is_none()
        );
    }

    #[test]
    fn a_collected_file_carries_its_bytes_and_a_blocked_one_carries_none() {
        let collected = legate_core::Artifact {
            name: "out/report.md".into(),
            state: legate_core::ArtifactState::Collected,
            bytes: Some(3),
            sha256: Some("ab".into()),
            reason: None,
            collected_at: 1,
        };
        let a = collected_artifact(&collected, Some(b"abc".to_vec()));
        assert_eq!(a.artifact_id, "file:out/report.md");
        assert_eq!(a.parts.len(), 2);
        assert!(matches!(&a.parts[0].content, PartContent::Raw(b) if b == b"abc"));
        let blocked = legate_core::Artifact {
            state: legate_core::ArtifactState::Blocked,
            bytes: None,
            sha256: None,
            reason: Some("SECRET_CONTENT: aws-access-key-id".into()),
            ..collected
        };
        let b = collected_artifact(&blocked, None);
        assert_eq!(b.parts.len(), 1);
        let data = serde_json::to_value(&b.parts[0]).unwrap().to_string();
        assert!(
            data.contains("blocked") && data.contains("SECRET_CONTENT"),
            "{data}"
        );
    }

    #[test]
    fn errors_keep_their_code() {
        let e = error(&legate_core::Error::new(
            ErrorCode::TaskNotFound,
            "no such task",
        ));
        assert_eq!(e.code, a2a::error_code::TASK_NOT_FOUND);
        let e = error(&legate_core::Error::new(
            ErrorCode::TaskNotCancelable,
            "ended",
        ));
        assert_eq!(e.code, a2a::error_code::TASK_NOT_CANCELABLE);
        let e = error(&legate_core::Error::new(ErrorCode::InvalidInput, "bad"));
        assert_eq!(e.code, a2a::error_code::INVALID_PARAMS);
        assert!(e.message.starts_with("INVALID_INPUT"));
    }
}
