//! The shapes of what a task delivers besides its events: public messages (questions,
//! blockers and an excerpt of the result, for a caller in `messages` delivery) and the
//! artifacts collected from its workspace when a turn ends.
//!
//! This module only names the shapes and their limits. The engine derives messages and
//! collects artifacts; the store keeps them. A message from the agent stays a report: it
//! never proves that a test ran and never authorises an integration.

use serde::{Deserialize, Serialize};

/// The longest text of one public message, in characters.
pub const MAX_MESSAGE_CHARS: usize = 2_000;
/// How many public messages are kept per task; older ones are dropped.
pub const MAX_MESSAGES_PER_TASK: usize = 100;
/// The most artifact paths one task may name.
pub const MAX_ARTIFACT_PATHS: usize = 16;
/// The largest artifact collected, in bytes.
pub const MAX_ARTIFACT_BYTES: u64 = 1024 * 1024;
/// The most bytes collected for one task, all artifacts together.
pub const MAX_ARTIFACT_TOTAL_BYTES: u64 = 8 * 1024 * 1024;

crate::wire_enum! {
    /// What a public message is.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum MessageKind {
        /// The task waits for the caller: the agent asked for input, or a permission request
        /// waits for a person.
        Question => "question",
        /// Something stopped the work: an error, a refusal.
        Blocker => "blocker",
        /// The task ended: an excerpt of its answer and where to read the whole of it.
        Result => "result",
    }
}

crate::wire_enum! {
    /// Who a public message's text comes from.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum MessageOrigin {
        /// The agent said it (a claim, not evidence).
        AgentReported => "agent-reported",
        /// Legate observed it (a state, an error, a refusal by the supervisor).
        Legate => "legate",
    }
}

/// One public message of a task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PublicMessage {
    /// A stable id (`<taskId>:m<seq>`).
    pub id: String,
    /// Its number within the task, from 1, without gaps (dropped ones included).
    pub seq: u64,
    /// What it is.
    pub kind: MessageKind,
    /// Who said it.
    pub origin: MessageOrigin,
    /// The model the task reported or was given, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// When the event it comes from was stored (milliseconds since the epoch).
    pub at: i64,
    /// The text, at most [`MAX_MESSAGE_CHARS`] characters.
    pub text: String,
    /// The event it was derived from.
    pub event_seq: u64,
    /// For a result: the sha256 of the whole answer (`read_result`'s `contentSha256`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_sha256: Option<String>,
    /// For a result: the answer's length in UTF-16 units.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_length: Option<u64>,
    /// For a blocker: the error code, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
}

/// A page of a task's public messages.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MessagePage {
    /// The messages after the cursor, oldest first.
    pub messages: Vec<PublicMessage>,
    /// The number of the oldest message still kept (0 when none was ever derived).
    pub oldest_available: u64,
    /// The number of the newest message.
    pub last_seq: u64,
}

crate::wire_enum! {
    /// What happened to a named artifact when it was collected.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ArtifactState {
        /// Its bytes were kept and may be read.
        Collected => "collected",
        /// No regular file was at the path.
        Missing => "missing",
        /// Refused: a symlink, a non-regular file, or the secret policy (`BLOCKED_ARTIFACT_PATH`).
        Blocked => "blocked",
        /// Over the size limits.
        TooLarge => "too-large",
    }
}

/// One artifact of a task, as collected.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Artifact {
    /// The path the caller named, relative to the workspace; also its name for `read_artifact`.
    pub name: String,
    /// What collection found.
    pub state: ArtifactState,
    /// Its size in bytes, when collected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The sha256 of its bytes (lowercase hex), when collected.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Why it was not collected (a rule name or a short reason; never content).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it was collected (milliseconds since the epoch).
    pub collected_at: i64,
}
