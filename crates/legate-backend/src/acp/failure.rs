//! How a failed ACP request or an agent's exit becomes Legate's error: the protocol failure
//! the transport saw, the exit status and last stderr line, a login the agent asks for, or
//! the agent's own error answer (its message truncated).
//!
//! It only classifies and words errors; it must never stop the agent nor send events.

use super::process::{ProcessGroup, describe_exit};
use super::session::Connection;
use super::state::HandlerState;
use super::translate;
use legate_core::{Error, ErrorCode};
use std::time::Duration;

/// How long to wait for an exit status once the agent closed its output.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// Turns a failed request into Legate's error, once the process had a chance to exit.
/// `phase_code` is the code for an exit (`AGENT_START_FAILED` during the handshake, where
/// every other failure is a start failure too; `AGENT_EXITED` during a turn).
pub(crate) async fn request_error(
    what: &str,
    e: &agent_client_protocol::Error,
    process: &ProcessGroup,
    connection: &Connection,
    shared: &HandlerState,
    phase_code: ErrorCode,
) -> Error {
    // The transport ended the connection because the agent broke the protocol.
    if let Some(reason) = shared.protocol_failure() {
        let code = if phase_code == ErrorCode::AgentStartFailed {
            phase_code
        } else {
            ErrorCode::AgentProtocolError
        };
        return Error::new(code, format!("{reason} (during {what})"));
    }
    if agent_client_protocol::is_incoming_transport_closed(e)
        || agent_client_protocol::is_connection_terminated(e)
    {
        if let Some(status) = process.exited_within(EXIT_GRACE).await {
            return exited(what, &status, process, shared, phase_code).await;
        }
        if let Some(failure) = connection.failure() {
            return Error::new(
                ErrorCode::AgentProtocolError,
                format!("the connection to the agent failed during {what}: {failure}"),
            );
        }
        return Error::new(
            ErrorCode::AgentProtocolError,
            format!("the agent closed its output during {what} but kept running"),
        );
    }
    if e.code == agent_client_protocol::ErrorCode::AUTH_REQUIRED {
        return Error::new(
            ErrorCode::AgentAuthRequired,
            "the agent needs you to log in: log in with the agent's own CLI, then try again",
        );
    }
    let code = if phase_code == ErrorCode::AgentStartFailed {
        ErrorCode::AgentStartFailed
    } else if matches!(
        e.code,
        agent_client_protocol::ErrorCode::PARSE_ERROR
            | agent_client_protocol::ErrorCode::INVALID_REQUEST
    ) {
        ErrorCode::AgentProtocolError
    } else {
        ErrorCode::AgentFailed
    };
    Error::new(
        code,
        format!(
            "the agent answered {what} with error {}: {}",
            e.code,
            translate::truncate(&e.message, 500)
        ),
    )
}

/// The error for an agent that exited, with its status and last stderr line.
pub(crate) async fn exited(
    what: &str,
    status: &std::process::ExitStatus,
    process: &ProcessGroup,
    shared: &HandlerState,
    code: ErrorCode,
) -> Error {
    if process.is_stopping() {
        return Error::new(code, format!("the agent was stopped during {what}"));
    }
    if let (Some(pod), Some(why)) = (process.pod(), process.pod_lost()) {
        return Error::new(
            ErrorCode::PodLost,
            format!(
                "the agent's pod {} in namespace {} was lost during {what}: {why}",
                pod.name(),
                pod.namespace()
            ),
        );
    }
    let _ = tokio::time::timeout(Duration::from_millis(500), shared.wait_stderr_closed()).await;
    let last = shared
        .last_stderr()
        .map(|l| {
            // The agent's words: a credential in them is hidden before any log or store sees it.
            // Redacted before it is cut, so that no half of a credential is left to pass.
            let l = legate_credentials::redact(&l);
            format!("; its last stderr line: {}", translate::truncate(&l, 500))
        })
        .unwrap_or_default();
    let limits = process
        .limits_hit()
        .map(|l| format!("; {l}"))
        .unwrap_or_default();
    Error::new(
        code,
        format!(
            "the agent exited during {what} ({}){limits}{last}",
            describe_exit(status)
        ),
    )
}
