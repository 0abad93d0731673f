//! Errors with stable codes.
//!
//! Every failure Legate reports carries an [`ErrorCode`] (a stable, SCREAMING_SNAKE string
//! that callers may match on) and one honest sentence for a person. Codes are never renamed;
//! new ones are added at the end.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A stable error code. The string form (`as_str`) is part of Legate's public interface.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[non_exhaustive]
pub enum ErrorCode {
    /// The request was malformed or a value was out of range.
    InvalidInput,
    /// The configuration file or an environment override is invalid.
    ConfigInvalid,
    /// No agent with that name is configured.
    AgentNotFound,
    /// The agent process could not be started or did not complete the handshake.
    AgentStartFailed,
    /// The agent process exited while a task was running.
    AgentExited,
    /// The agent broke the protocol (malformed JSON-RPC, unexpected answers).
    AgentProtocolError,
    /// The agent needs its user to log in with the agent's own CLI.
    AgentAuthRequired,
    /// The agent does not offer the mode in which it asks before acting.
    AgentUnsupervised,
    /// The agent reported an error for the prompt.
    AgentFailed,
    /// A workspace directory is missing, not a directory, or unusable.
    InvalidWorkspace,
    /// No task with that id exists.
    TaskNotFound,
    /// The task already ended and cannot be canceled.
    TaskNotCancelable,
    /// A reply was sent into a task that is not waiting for input (`input-required`).
    TaskNotAwaitingInput,
    /// The task ran longer than its timeout.
    TaskTimeout,
    /// The task was canceled.
    TaskCanceled,
    /// Too many tasks are waiting already.
    QueueFull,
    /// The process running the task stopped before the task ended.
    ServerRestarted,
    /// The store (SQLite) failed.
    StoreError,
    /// A path left the boundary it must stay in.
    PathOutsideRoot,
    /// Kernel confinement was required but is not available.
    ConfinementUnavailable,
    /// A bug in Legate.
    Internal,
    /// The Antigravity CLI (`agy`) executable was not found (not on `PATH`, or the configured path does not exist).
    AgyNotFound,
    /// The `agy` executable exists but may not be executed.
    AgyPermissionDenied,
    /// `agy --version` or `agy --help` failed, timed out or printed nothing.
    AgyProbeFailed,
    /// This `agy` lacks an interface Legate requires (`stream-json`, `--sandbox`, or `--mode plan` for read-only tasks).
    AgyIncompatible,
    /// `agy` needs its user to log in with the interactive CLI.
    AgyAuthRequired,
    /// The requested model is not one the agent offers.
    ModelNotAvailable,
    /// The agent's output stream could not be parsed and no result arrived.
    StreamParseError,
    /// The `agy` process failed: a non-zero exit, no result, or a result that is not `SUCCESS`.
    AgyProcessFailed,
    /// An agent's process group could not be shown to be gone after its run; its workspace is blocked until it is.
    ProcessCleanupUnverified,
    /// No conversation context with that id exists.
    ContextNotFound,
    /// A message id was sent again with other text or to another context.
    MessageIdConflict,
    /// The task has not ended, so its result cannot be read yet.
    ResultNotReady,
    /// The content no longer has the sha256 the caller expected.
    ContentChanged,
    /// No tool with that name is offered by this front's tool profile.
    ToolNotAvailable,
    /// The front's tool profile allows only read-only tasks.
    ModeNotAllowed,
    /// An include path is malformed (absolute, `..`, `.git`, a control character, a duplicate ignoring case) or matches no file git would copy.
    InvalidIncludePath,
    /// A path is a symlink, not a regular file, or not a safe relative path; it is never copied, read or written.
    UnsafePath,
    /// The original project changed under Legate: a file changed while being copied, or an affected original file no longer equals the baseline at integration.
    SourceChanged,
    /// The copy would hold more files or bytes than the configured limits.
    CopyLimitExceeded,
    /// More files changed than the configured limit allows to review or integrate.
    ChangeLimitExceeded,
    /// A read-only task created, changed or deleted a file in its copy; it can never be integrated.
    ReadOnlyViolation,
    /// The patch writes a file the secret policy blocks (a credential name, an exclusion, or credential content).
    BlockedFileDetected,
    /// The patch is no longer the one whose sha256 the caller named; preview again.
    PatchChanged,
    /// The patch holds a text change with bytes that are not UTF-8, so it cannot be read as text.
    UnsupportedPatchEncoding,
    /// Integration needs a current, passing verification (and current passing tests where configured).
    VerificationRequired,
    /// A test command could not start, exited non-zero, or timed out.
    TestFailed,
    /// A test command changed the copy's patch; its evidence cannot stand.
    TestChangedPatch,
    /// The patch changes line endings or a byte order mark in a way integration does not accept; nothing was written.
    LineEndingsChanged,
    /// Writing the patch into the original failed; what was written was put back.
    IntegrationFailed,
    /// Approval mode `ask`: the integration was not confirmed (declined, canceled, timed out or unsupported); the original is untouched.
    IntegrationDeclined,
    /// Another operation is using this copy right now.
    CopyBusy,
    /// The task has no usable copy: it is not a copy task, has not finished, was discarded or cleaned up, or was already integrated.
    CopyUnavailable,
}

impl ErrorCode {
    /// Every code, in declaration order.
    pub const ALL: &'static [ErrorCode] = &[
        Self::InvalidInput,
        Self::ConfigInvalid,
        Self::AgentNotFound,
        Self::AgentStartFailed,
        Self::AgentExited,
        Self::AgentProtocolError,
        Self::AgentAuthRequired,
        Self::AgentUnsupervised,
        Self::AgentFailed,
        Self::InvalidWorkspace,
        Self::TaskNotFound,
        Self::TaskNotCancelable,
        Self::TaskNotAwaitingInput,
        Self::TaskTimeout,
        Self::TaskCanceled,
        Self::QueueFull,
        Self::ServerRestarted,
        Self::StoreError,
        Self::PathOutsideRoot,
        Self::ConfinementUnavailable,
        Self::Internal,
        Self::AgyNotFound,
        Self::AgyPermissionDenied,
        Self::AgyProbeFailed,
        Self::AgyIncompatible,
        Self::AgyAuthRequired,
        Self::ModelNotAvailable,
        Self::StreamParseError,
        Self::AgyProcessFailed,
        Self::ProcessCleanupUnverified,
        Self::ContextNotFound,
        Self::MessageIdConflict,
        Self::ResultNotReady,
        Self::ContentChanged,
        Self::ToolNotAvailable,
        Self::ModeNotAllowed,
        Self::InvalidIncludePath,
        Self::UnsafePath,
        Self::SourceChanged,
        Self::CopyLimitExceeded,
        Self::ChangeLimitExceeded,
        Self::ReadOnlyViolation,
        Self::BlockedFileDetected,
        Self::PatchChanged,
        Self::UnsupportedPatchEncoding,
        Self::VerificationRequired,
        Self::TestFailed,
        Self::TestChangedPatch,
        Self::LineEndingsChanged,
        Self::IntegrationFailed,
        Self::IntegrationDeclined,
        Self::CopyBusy,
        Self::CopyUnavailable,
    ];

    /// The stable wire form, e.g. `"TASK_TIMEOUT"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::InvalidInput => "INVALID_INPUT",
            Self::ConfigInvalid => "CONFIG_INVALID",
            Self::AgentNotFound => "AGENT_NOT_FOUND",
            Self::AgentStartFailed => "AGENT_START_FAILED",
            Self::AgentExited => "AGENT_EXITED",
            Self::AgentProtocolError => "AGENT_PROTOCOL_ERROR",
            Self::AgentAuthRequired => "AGENT_AUTH_REQUIRED",
            Self::AgentUnsupervised => "AGENT_UNSUPERVISED",
            Self::AgentFailed => "AGENT_FAILED",
            Self::InvalidWorkspace => "INVALID_WORKSPACE",
            Self::TaskNotFound => "TASK_NOT_FOUND",
            Self::TaskNotCancelable => "TASK_NOT_CANCELABLE",
            Self::TaskNotAwaitingInput => "TASK_NOT_AWAITING_INPUT",
            Self::TaskTimeout => "TASK_TIMEOUT",
            Self::TaskCanceled => "TASK_CANCELED",
            Self::QueueFull => "QUEUE_FULL",
            Self::ServerRestarted => "SERVER_RESTARTED",
            Self::StoreError => "STORE_ERROR",
            Self::PathOutsideRoot => "PATH_OUTSIDE_ROOT",
            Self::ConfinementUnavailable => "CONFINEMENT_UNAVAILABLE",
            Self::Internal => "INTERNAL",
            Self::AgyNotFound => "AGY_NOT_FOUND",
            Self::AgyPermissionDenied => "AGY_PERMISSION_DENIED",
            Self::AgyProbeFailed => "AGY_PROBE_FAILED",
            Self::AgyIncompatible => "AGY_INCOMPATIBLE",
            Self::AgyAuthRequired => "AGY_AUTH_REQUIRED",
            Self::ModelNotAvailable => "MODEL_NOT_AVAILABLE",
            Self::StreamParseError => "STREAM_PARSE_ERROR",
            Self::AgyProcessFailed => "AGY_PROCESS_FAILED",
            Self::ProcessCleanupUnverified => "PROCESS_CLEANUP_UNVERIFIED",
            Self::ContextNotFound => "CONTEXT_NOT_FOUND",
            Self::MessageIdConflict => "MESSAGE_ID_CONFLICT",
            Self::ResultNotReady => "RESULT_NOT_READY",
            Self::ContentChanged => "CONTENT_CHANGED",
            Self::ToolNotAvailable => "TOOL_NOT_AVAILABLE",
            Self::ModeNotAllowed => "MODE_NOT_ALLOWED",
            Self::InvalidIncludePath => "INVALID_INCLUDE_PATH",
            Self::UnsafePath => "UNSAFE_PATH",
            Self::SourceChanged => "SOURCE_CHANGED",
            Self::CopyLimitExceeded => "COPY_LIMIT_EXCEEDED",
            Self::ChangeLimitExceeded => "CHANGE_LIMIT_EXCEEDED",
            Self::ReadOnlyViolation => "READ_ONLY_VIOLATION",
            Self::BlockedFileDetected => "BLOCKED_FILE_DETECTED",
            Self::PatchChanged => "PATCH_CHANGED",
            Self::UnsupportedPatchEncoding => "UNSUPPORTED_PATCH_ENCODING",
            Self::VerificationRequired => "VERIFICATION_REQUIRED",
            Self::TestFailed => "TEST_FAILED",
            Self::TestChangedPatch => "TEST_CHANGED_PATCH",
            Self::LineEndingsChanged => "LINE_ENDINGS_CHANGED",
            Self::IntegrationFailed => "INTEGRATION_FAILED",
            Self::IntegrationDeclined => "INTEGRATION_DECLINED",
            Self::CopyBusy => "COPY_BUSY",
            Self::CopyUnavailable => "COPY_UNAVAILABLE",
        }
    }

    /// Parses the wire form back; `None` for an unknown code.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|c| c.as_str() == s)
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Legate error: a stable code and one sentence for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    /// What kind of failure this is; stable.
    pub code: ErrorCode,
    /// One honest sentence; never contains secrets.
    pub message: String,
}

impl Error {
    /// Builds an error from a code and a sentence.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Shorthand for [`ErrorCode::InvalidInput`].
    pub fn invalid_input(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::InvalidInput, message)
    }

    /// Shorthand for [`ErrorCode::Internal`].
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorCode::Internal, message)
    }
}

/// `Result` with Legate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_round_trips_through_its_wire_form() {
        for code in ErrorCode::ALL {
            assert_eq!(ErrorCode::parse(code.as_str()), Some(*code));
            let json = serde_json::to_string(code).unwrap();
            assert_eq!(json, format!("\"{}\"", code.as_str()));
        }
    }

    #[test]
    fn display_leads_with_the_code() {
        let e = Error::new(ErrorCode::QueueFull, "20 tasks are already waiting.");
        assert_eq!(e.to_string(), "QUEUE_FULL: 20 tasks are already waiting.");
    }
}
