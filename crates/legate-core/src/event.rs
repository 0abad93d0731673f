//! The one event model every backend speaks.
//!
//! ACP `session/update`s, agy stream-json lines and remote A2A events all become
//! [`EventKind`]s. Fronts never see backend-specific shapes. Events are append-only and
//! numbered per task from 1; the store assigns the number.

use crate::{Error, Ruling, TaskId, TaskState, Timestamp, Usage};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

crate::wire_enum! {
    /// The kind of a tool call, as ACP's `ToolKind` says.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ToolKind {
        /// Reads files or data.
        Read => "read",
        /// Changes files.
        Edit => "edit",
        /// Deletes files.
        Delete => "delete",
        /// Moves or renames files.
        Move => "move",
        /// Searches.
        Search => "search",
        /// Runs a command.
        Execute => "execute",
        /// Reasons internally.
        Think => "think",
        /// Fetches from the network.
        Fetch => "fetch",
        /// Proposes changing the session mode (e.g. leaving plan mode).
        SwitchMode => "switch_mode",
        /// Anything else, or no kind given.
        Other => "other",
    }
}

crate::wire_enum! {
    /// A tool call's status.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ToolStatus {
        /// Not started (often: waiting for permission).
        Pending => "pending",
        /// Running.
        InProgress => "in_progress",
        /// Finished well.
        Completed => "completed",
        /// Finished badly or refused.
        Failed => "failed",
    }
}

/// A new tool call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallEvent {
    /// The agent's id for the call.
    pub id: String,
    /// Human title.
    pub title: String,
    /// Kind.
    pub tool_kind: ToolKind,
    /// Status.
    pub status: ToolStatus,
    /// Paths it touches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<PathBuf>,
    /// Raw input, as sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_input: Option<serde_json::Value>,
}

/// A change to an earlier tool call; absent fields did not change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallUpdateEvent {
    /// The agent's id for the call.
    pub id: String,
    /// New title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// New kind.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_kind: Option<ToolKind>,
    /// New status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ToolStatus>,
    /// New locations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locations: Option<Vec<PathBuf>>,
    /// Text content the update carried (output, diff summary), bounded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A file, a link or a structured value the agent handed over with its answer (ACP resource,
/// resource-link, image and audio content). Exactly one of `uri` alone (a link), `text` or
/// `base64` (embedded content) says what it is.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Attachment {
    /// Its name (a file name), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Its media type (`text/plain`, `application/json`, …), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Where it is (for a link) or where it came from (for embedded content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Embedded text content.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Embedded binary content, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
}

impl Attachment {
    /// Whether it is only a link (no embedded content).
    pub fn is_link(&self) -> bool {
        self.text.is_none() && self.base64.is_none()
    }
}

/// One entry of an agent's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlanEntry {
    /// What the step is.
    pub content: String,
    /// `high`, `medium` or `low`.
    pub priority: String,
    /// `pending`, `in_progress` or `completed`.
    pub status: String,
}

/// What happened. Serialized with a `type` tag in snake case.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum EventKind {
    /// The task changed state.
    Status {
        /// The new state.
        state: TaskState,
        /// A short human message.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
        /// The error, for a task that ended badly.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<Error>,
    },
    /// What the caller asked for in the turn that starts here: the task's prompt for its
    /// first turn, or a reply into it (the task's `prompt` keeps only the latest). Stored by
    /// the engine with the turn's `submitted` status, so a task's history across its turns
    /// reads back in order from its events.
    Prompt {
        /// The prompt as the caller sent it.
        text: String,
        /// The caller's id for the message (an A2A `messageId`), when it gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_id: Option<String>,
    },
    /// A chunk of the agent's answer.
    Message {
        /// The text.
        text: String,
    },
    /// A chunk of the agent's reasoning.
    Thought {
        /// The text.
        text: String,
    },
    /// A file, a link or a value the agent handed over with its answer.
    Attachment(Attachment),
    /// A new tool call.
    ToolCall(ToolCallEvent),
    /// A change to a tool call.
    ToolCallUpdate(ToolCallUpdateEvent),
    /// The agent's plan, whole.
    Plan {
        /// The entries.
        entries: Vec<PlanEntry>,
    },
    /// A network connection through Legate's egress proxy: refused, or allowed and closed.
    Connection(crate::ConnectionEvent),
    /// The supervisor answered a permission request.
    Permission {
        /// The tool call it was about.
        tool_call_id: String,
        /// Its title.
        title: String,
        /// Its kind.
        tool_kind: ToolKind,
        /// The ids the agent offered.
        offered: Vec<String>,
        /// The answer.
        verdict: Ruling,
    },
    /// The agent read or wrote a file through the client (`fs/*`).
    FsAccess {
        /// `read` or `write`.
        op: String,
        /// The path as asked.
        path: PathBuf,
        /// Whether it was served.
        allowed: bool,
        /// Why not, when refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reason: Option<String>,
    },
    /// Token accounting reported by the agent.
    Usage {
        /// What was reported.
        usage: Usage,
    },
    /// The session's mode changed.
    Mode {
        /// The new mode id.
        mode_id: String,
    },
    /// A line the agent wrote on stderr (bounded).
    Stderr {
        /// The line, truncated.
        line: String,
    },
    /// A notice for a person about the task's workspace, session, confinement, review or
    /// protocol (copy made, session reused, start retried, malformed message, …): the
    /// stable name of what happened is in `detail.event` where there is one. Stored
    /// events of older releases carry the type `workspace` and read back as notices.
    #[serde(alias = "workspace")]
    Notice {
        /// What happened, for a person.
        message: String,
        /// Structured detail.
        #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
        detail: serde_json::Value,
    },
    /// The agent session was opened or reused.
    Session {
        /// The agent's session id.
        session_id: String,
        /// True when an earlier session was continued.
        resumed: bool,
    },
    /// A line of the agent's structured output that could not be parsed (bounded).
    Unparsed {
        /// The line, truncated.
        line: String,
    },
    /// A well-formed structured event Legate has no kind for, kept as it came (bounded).
    Raw {
        /// The agent's own name for the event.
        event: String,
        /// The event as the agent sent it.
        #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
        payload: serde_json::Value,
    },
}

impl EventKind {
    /// The `type` tag, e.g. `"tool_call"`.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::Status { .. } => "status",
            Self::Prompt { .. } => "prompt",
            Self::Message { .. } => "message",
            Self::Thought { .. } => "thought",
            Self::Attachment(_) => "attachment",
            Self::ToolCall(_) => "tool_call",
            Self::ToolCallUpdate(_) => "tool_call_update",
            Self::Plan { .. } => "plan",
            Self::Connection(_) => "connection",
            Self::Permission { .. } => "permission",
            Self::FsAccess { .. } => "fs_access",
            Self::Usage { .. } => "usage",
            Self::Mode { .. } => "mode",
            Self::Stderr { .. } => "stderr",
            Self::Notice { .. } => "notice",
            Self::Session { .. } => "session",
            Self::Unparsed { .. } => "unparsed",
            Self::Raw { .. } => "raw",
        }
    }
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// The task it belongs to.
    pub task_id: TaskId,
    /// 1-based, gapless per task.
    pub seq: u64,
    /// When it was stored.
    pub at: Timestamp,
    /// What happened.
    #[serde(flatten)]
    pub kind: EventKind,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_kinds_carry_their_type_tag() {
        let kinds = [
            EventKind::Message { text: "hi".into() },
            EventKind::Stderr { line: "x".into() },
            EventKind::Status {
                state: TaskState::Working,
                message: None,
                error: None,
            },
        ];
        for k in kinds {
            let v = serde_json::to_value(&k).unwrap();
            assert_eq!(v["type"], k.type_name());
            let back: EventKind = serde_json::from_value(v).unwrap();
            assert_eq!(back, k);
        }
    }

    #[test]
    fn a_notice_is_stored_as_notice_and_an_older_workspace_event_reads_back_as_one() {
        let notice = EventKind::Notice {
            message: "copy ready".into(),
            detail: serde_json::json!({"event": "copy.ready"}),
        };
        let v = serde_json::to_value(&notice).unwrap();
        assert_eq!(v["type"], "notice");
        let old = serde_json::json!({
            "type": "workspace", "message": "copy ready", "detail": {"event": "copy.ready"}
        });
        let back: EventKind = serde_json::from_value(old).unwrap();
        assert_eq!(back, notice);
        // The same through a stored event, whose kind is flattened beside its fields.
        let stored = serde_json::json!({
            "taskId": "t1", "seq": 3, "at": 1_767_225_600_000_i64,
            "type": "workspace", "message": "copy ready", "detail": {"event": "copy.ready"}
        });
        let event: Event = serde_json::from_value(stored).unwrap();
        assert_eq!(event.kind, notice);
    }
}
