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
        Self::TaskTimeout,
        Self::TaskCanceled,
        Self::QueueFull,
        Self::ServerRestarted,
        Self::StoreError,
        Self::PathOutsideRoot,
        Self::ConfinementUnavailable,
        Self::Internal,
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
            Self::TaskTimeout => "TASK_TIMEOUT",
            Self::TaskCanceled => "TASK_CANCELED",
            Self::QueueFull => "QUEUE_FULL",
            Self::ServerRestarted => "SERVER_RESTARTED",
            Self::StoreError => "STORE_ERROR",
            Self::PathOutsideRoot => "PATH_OUTSIDE_ROOT",
            Self::ConfinementUnavailable => "CONFINEMENT_UNAVAILABLE",
            Self::Internal => "INTERNAL",
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
