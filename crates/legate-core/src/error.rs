//! Errors with stable codes.
//!
//! Every failure Legate reports carries an [`ErrorCode`] (a stable, SCREAMING_SNAKE string
//! that callers may match on) and one honest sentence for a person. Codes are never renamed;
//! new ones are added at the end.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

/// Declares [`ErrorCode`] once: each variant with its doc and its stable wire string, from
/// which the enum (its serde names included), [`ErrorCode::ALL`] and [`ErrorCode::as_str`]
/// are generated. A new code is one line here (and a row in `docs/troubleshooting.md`,
/// which a test checks).
macro_rules! error_codes {
    ($($(#[doc = $doc:expr])* $name:ident => $wire:literal,)+) => {
        /// A stable error code. The string form (`as_str`) is part of Legate's public
        /// interface.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[non_exhaustive]
        pub enum ErrorCode {
            $($(#[doc = $doc])* #[serde(rename = $wire)] $name,)+
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(Self::$name,)+];

            /// The stable wire form, e.g. `"TASK_TIMEOUT"`.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(Self::$name => $wire,)+
                }
            }
        }
    };
}

error_codes! {
    /// The request was malformed or a value was out of range.
    InvalidInput => "INVALID_INPUT",
    /// The configuration file or an environment override is invalid.
    ConfigInvalid => "CONFIG_INVALID",
    /// No agent with that name is configured.
    AgentNotFound => "AGENT_NOT_FOUND",
    /// The agent process could not be started or did not complete the handshake.
    AgentStartFailed => "AGENT_START_FAILED",
    /// The agent process exited while a task was running.
    AgentExited => "AGENT_EXITED",
    /// The agent broke the protocol (malformed JSON-RPC, unexpected answers).
    AgentProtocolError => "AGENT_PROTOCOL_ERROR",
    /// The agent needs its user to log in with the agent's own CLI.
    AgentAuthRequired => "AGENT_AUTH_REQUIRED",
    /// The agent does not offer the mode in which it asks before acting.
    AgentUnsupervised => "AGENT_UNSUPERVISED",
    /// The agent reported an error for the prompt.
    AgentFailed => "AGENT_FAILED",
    /// A workspace directory is missing, not a directory, or unusable.
    InvalidWorkspace => "INVALID_WORKSPACE",
    /// No task with that id exists.
    TaskNotFound => "TASK_NOT_FOUND",
    /// The task already ended and cannot be canceled.
    TaskNotCancelable => "TASK_NOT_CANCELABLE",
    /// A reply was sent into a task that is not waiting for input (`input-required`).
    TaskNotAwaitingInput => "TASK_NOT_AWAITING_INPUT",
    /// The task ran longer than its timeout.
    TaskTimeout => "TASK_TIMEOUT",
    /// The agent sent far more output than a task keeps: its events passed twice their configured limits (`[output]`); the agent was stopped.
    TaskOutputLimit => "TASK_OUTPUT_LIMIT",
    /// The task was not tapped: neither its agent (`tap = true`) nor its submit asked for a wire tap, so it has no frames.
    TapOff => "TAP_OFF",
    /// The task was canceled.
    TaskCanceled => "TASK_CANCELED",
    /// Too many tasks are waiting already.
    QueueFull => "QUEUE_FULL",
    /// The process running the task stopped before the task ended.
    ServerRestarted => "SERVER_RESTARTED",
    /// `continue` of a task that was not cut by a restart (it did not end `SERVER_RESTARTED`), or whose context has had a later turn since.
    TaskNotContinuable => "TASK_NOT_CONTINUABLE",
    /// `continue` of a task whose agent session cannot be resumed: the agent did not announce `session/resume` or `session/load`, or no session was opened before the restart. Nothing was started.
    ContinueUnsupported => "CONTINUE_UNSUPPORTED",
    /// The store (SQLite) failed.
    StoreError => "STORE_ERROR",
    /// A path left the boundary it must stay in.
    PathOutsideRoot => "PATH_OUTSIDE_ROOT",
    /// Kernel confinement was required but is not available.
    ConfinementUnavailable => "CONFINEMENT_UNAVAILABLE",
    /// `legate service`: the service manager (systemd's `systemctl --user`, launchd's `launchctl`) could not be run or refused the unit; nothing was left installed.
    ServiceUnavailable => "SERVICE_UNAVAILABLE",
    /// A bug in Legate.
    Internal => "INTERNAL",
    /// The Antigravity CLI (`agy`) executable was not found (not on `PATH`, or the configured path does not exist).
    AgyNotFound => "AGY_NOT_FOUND",
    /// The `agy` executable exists but may not be executed.
    AgyPermissionDenied => "AGY_PERMISSION_DENIED",
    /// `agy --version` or `agy --help` failed, timed out or printed nothing.
    AgyProbeFailed => "AGY_PROBE_FAILED",
    /// This `agy` lacks an interface Legate requires (`stream-json`, `--sandbox`, or `--mode plan` for read-only tasks).
    AgyIncompatible => "AGY_INCOMPATIBLE",
    /// `agy` needs its user to log in with the interactive CLI.
    AgyAuthRequired => "AGY_AUTH_REQUIRED",
    /// The requested model is not one the agent offers.
    ModelNotAvailable => "MODEL_NOT_AVAILABLE",
    /// The agent's output stream could not be parsed and no result arrived.
    StreamParseError => "STREAM_PARSE_ERROR",
    /// The `agy` process failed: a non-zero exit, no result, or a result that is not `SUCCESS`.
    AgyProcessFailed => "AGY_PROCESS_FAILED",
    /// An agent's process group could not be shown to be gone after its run; its workspace is blocked until it is.
    ProcessCleanupUnverified => "PROCESS_CLEANUP_UNVERIFIED",
    /// No conversation context with that id exists.
    ContextNotFound => "CONTEXT_NOT_FOUND",
    /// A message id was sent again with other text or to another context.
    MessageIdConflict => "MESSAGE_ID_CONFLICT",
    /// The task has not ended, so its result cannot be read yet.
    ResultNotReady => "RESULT_NOT_READY",
    /// The content no longer has the sha256 the caller expected.
    ContentChanged => "CONTENT_CHANGED",
    /// No tool with that name is offered by this front's tool profile.
    ToolNotAvailable => "TOOL_NOT_AVAILABLE",
    /// The front's tool profile allows only read-only tasks.
    ModeNotAllowed => "MODE_NOT_ALLOWED",
    /// An include path is malformed (absolute, `..`, `.git`, a control character, a duplicate ignoring case) or matches no file git would copy.
    InvalidIncludePath => "INVALID_INCLUDE_PATH",
    /// A path is a symlink, not a regular file, or not a safe relative path; it is never copied, read or written.
    UnsafePath => "UNSAFE_PATH",
    /// The original project changed under Legate: a file changed while being copied, or an affected original file no longer equals the baseline at integration.
    SourceChanged => "SOURCE_CHANGED",
    /// The copy would hold more files or bytes than the configured limits.
    CopyLimitExceeded => "COPY_LIMIT_EXCEEDED",
    /// More files changed than the configured limit allows to review or integrate.
    ChangeLimitExceeded => "CHANGE_LIMIT_EXCEEDED",
    /// A read-only task created, changed or deleted a file in its copy; it can never be integrated.
    ReadOnlyViolation => "READ_ONLY_VIOLATION",
    /// The patch writes a file the secret policy blocks (a credential name, an exclusion, or credential content).
    BlockedFileDetected => "BLOCKED_FILE_DETECTED",
    /// The patch is no longer the one whose sha256 the caller named; preview again.
    PatchChanged => "PATCH_CHANGED",
    /// The patch holds a text change with bytes that are not UTF-8, so it cannot be read as text.
    UnsupportedPatchEncoding => "UNSUPPORTED_PATCH_ENCODING",
    /// Integration needs a current, passing verification (and current passing tests where configured).
    VerificationRequired => "VERIFICATION_REQUIRED",
    /// A test command could not start, exited non-zero, or timed out.
    TestFailed => "TEST_FAILED",
    /// A test command changed the copy's patch; its evidence cannot stand.
    TestChangedPatch => "TEST_CHANGED_PATCH",
    /// The patch changes line endings or a byte order mark in a way integration does not accept; nothing was written.
    LineEndingsChanged => "LINE_ENDINGS_CHANGED",
    /// Writing the patch into the original failed; what was written was put back.
    IntegrationFailed => "INTEGRATION_FAILED",
    /// Approval mode `ask`: the integration was not confirmed (declined, canceled, timed out or unsupported); the original is untouched.
    IntegrationDeclined => "INTEGRATION_DECLINED",
    /// Another operation is using this copy right now.
    CopyBusy => "COPY_BUSY",
    /// The task has no usable copy: it is not a copy task, has not finished, was discarded or cleaned up, or was already integrated.
    CopyUnavailable => "COPY_UNAVAILABLE",
    /// No role with that name is built in or configured.
    RoleNotFound => "ROLE_NOT_FOUND",
    /// A planner's or reviewer's report does not follow its role's schema.
    ReportInvalid => "REPORT_INVALID",
    /// A reviewer's finding cites a file, line or quote that is not in its copy.
    CitationNotFound => "CITATION_NOT_FOUND",
    /// The source task's context or files changed since its `contextSha256` was read.
    ContextChanged => "CONTEXT_CHANGED",
    /// The context handed to the next role does not fit the prompt limit.
    ContextTooLarge => "CONTEXT_TOO_LARGE",
    /// The copy was integrated or discarded, so it takes no new turns.
    CopyClosed => "COPY_CLOSED",
    /// No pending or decided approval with that id exists.
    ApprovalNotFound => "APPROVAL_NOT_FOUND",
    /// The approval was already decided or expired.
    ApprovalClosed => "APPROVAL_CLOSED",
    /// The permission policy is invalid.
    PolicyInvalid => "POLICY_INVALID",
    /// The remote agent's server could not be reached (connection refused, DNS, TLS, timeout).
    RemoteUnreachable => "REMOTE_UNREACHABLE",
    /// The remote agent's server refused Legate's credentials (HTTP 401 or 403).
    RemoteUnauthenticated => "REMOTE_UNAUTHENTICATED",
    /// The remote agent answered outside the A2A protocol, or with an A2A error; the message carries the remote's own words.
    RemoteProtocolError => "REMOTE_PROTOCOL_ERROR",
    /// A copy task was sent to a remote agent whose card does not declare Legate's copy-workspace extension.
    RemoteWorkspaceUnsupported => "REMOTE_WORKSPACE_UNSUPPORTED",
    /// The Kubernetes API server could not be reached, or refused Legate's credentials.
    KubeUnavailable => "KUBE_UNAVAILABLE",
    /// The agent's pod did not start: its image, its spec, or the time it took.
    PodStartFailed => "POD_START_FAILED",
    /// The agent's pod was deleted or evicted, or its node lost, while a session used it.
    PodLost => "POD_LOST",
    /// The namespace's resource quota stayed full for longer than the agent may wait.
    KubeQuotaExceeded => "KUBE_QUOTA_EXCEEDED",
    /// A workspace kind that cannot travel to a pod (a shared directory).
    PodWorkspaceUnsupported => "POD_WORKSPACE_UNSUPPORTED",
    /// The files of a copy task exceed the transfer bound to a remote agent; nothing was sent.
    CopyTooLarge => "COPY_TOO_LARGE",
    /// No comparison has that id.
    ComparisonNotFound => "COMPARISON_NOT_FOUND",
    /// No group has that id.
    GroupNotFound => "GROUP_NOT_FOUND",
    /// A group with that id exists with another definition.
    GroupConflict => "GROUP_CONFLICT",
    /// A group definition is invalid: a cycle, an unknown or duplicate id, a limit passed.
    WorkflowInvalid => "WORKFLOW_INVALID",
    /// The context a workflow node would receive from its predecessors exceeds 64 KiB.
    WorkflowContextTooLarge => "WORKFLOW_CONTEXT_TOO_LARGE",
    /// A checkpoint no longer matches the files, patch, result or validation it recorded.
    WorkflowCheckpointChanged => "WORKFLOW_CHECKPOINT_CHANGED",
    /// The group has no currently valid final synthesis.
    WorkflowResultUnavailable => "WORKFLOW_RESULT_UNAVAILABLE",
    /// The group ended (completed, failed or canceled) and takes no new turn.
    GroupClosed => "GROUP_CLOSED",
    /// A group's observed token use reached its budget; it is paused.
    GroupBudgetExceeded => "GROUP_BUDGET_EXCEEDED",
    /// A group with a budget cannot admit a turn: a task of it reported no token counts.
    GroupUsageUnavailable => "GROUP_USAGE_UNAVAILABLE",
    /// A node was being admitted when its process died and no task proves the admission.
    GroupAdmissionUnverified => "GROUP_ADMISSION_UNVERIFIED",
    /// A role a group's nodes use was defined otherwise when the group started; no node is
    /// admitted until it is defined as it was.
    GroupProfileChanged => "GROUP_PROFILE_CHANGED",
    /// A peer message id was sent again with other content; the group is paused.
    PeerMessageConflict => "PEER_MESSAGE_CONFLICT",
    /// A peer message passed a route's, node's or group's limit; the group is paused.
    PeerLimitExceeded => "PEER_LIMIT_EXCEEDED",
    /// A memory entry is not at the version the caller named.
    MemoryChanged => "MEMORY_CHANGED",
    /// No memory entry has that specialist and hash.
    MemoryNotFound => "MEMORY_NOT_FOUND",
    /// A memory write would pass the entry count or size limits.
    MemoryLimitExceeded => "MEMORY_LIMIT_EXCEEDED",
    /// An input holds what looks like a high-confidence credential; it was not stored.
    InputSecretDetected => "INPUT_SECRET_DETECTED",
    /// Two skills share a name with different content.
    SkillConflict => "SKILL_CONFLICT",
    /// A bundled skill pack does not match its manifest.
    SkillPackInvalid => "SKILL_PACK_INVALID",
    /// A bundled skill pack, or a file its manifest names, is missing.
    SkillPackMissing => "SKILL_PACK_MISSING",
    /// An artifact path is unsafe, blocked by the secret policy, or its file changed.
    BlockedArtifactPath => "BLOCKED_ARTIFACT_PATH",
    /// No artifact has that name on that task.
    ArtifactNotFound => "ARTIFACT_NOT_FOUND",
    /// A tool kind or MCP tool is outside the task's or the configuration's allowed set.
    ToolNotAllowed => "TOOL_NOT_ALLOWED",
    /// No MCP server of the configured catalogue has that id.
    McpServerNotFound => "MCP_SERVER_NOT_FOUND",
    /// The sandbox policy is not at the version the caller named.
    SandboxPolicyChanged => "SANDBOX_POLICY_CHANGED",
    /// A test's sandbox selection is outside the policy's ceiling or touches a protected path.
    SandboxSelectionDenied => "SANDBOX_SELECTION_DENIED",
    /// A path lies in a directory the configuration forbids.
    ForbiddenDirectory => "FORBIDDEN_DIRECTORY",
    /// Approval mode `ask`: a change of the sandbox policy was not confirmed.
    SandboxPolicyDeclined => "SANDBOX_POLICY_DECLINED",
    /// The prompt could not be written to the agent CLI's stdin (a broken pipe, an early close).
    CliInputFailed => "CLI_INPUT_FAILED",
    /// Reading the `agy` process's output stream failed.
    AgyIoFailed => "AGY_IO_FAILED",
    /// `agy` denied a selected MCP tool because its own `mcp(<server>/<tool>)` permission is not granted in its settings.
    AgyMcpPermissionRequired => "AGY_MCP_PERMISSION_REQUIRED",
    /// A copy needs git 2.32 or later on `PATH`, and the git found is older or does not run.
    GitUnsupported => "GIT_UNSUPPORTED",
    /// A git process Legate ran could not be shown gone after it was stopped; its copy is blocked (no turn, preview, test, integration or discard) until the marker in its baseline is removed.
    GitCleanupUnverified => "GIT_CLEANUP_UNVERIFIED",
    /// The agent is the supervising agent (`[supervision] agent`): no caller runs a task on it or chooses its model.
    AgentReserved => "AGENT_RESERVED",
}

impl ErrorCode {
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

/// A Legate error: a stable code and one sentence for a person, and the error that caused
/// it, when there is one. The cause is kept as the error's source (`std::error::Error::source`,
/// `{:#}` in the binary, logs), never pasted into the sentence by the code that raised it.
/// What leaves the process (the wire, the store, a page) is [`Error::detail`]: the sentence
/// followed by its causes, so a caller still reads why. Two errors are equal when their code
/// and sentence are.
#[derive(Debug, Clone, Deserialize, thiserror::Error)]
#[error("{code}: {message}")]
pub struct Error {
    /// What kind of failure this is; stable.
    pub code: ErrorCode,
    /// One honest sentence; never contains secrets.
    pub message: String,
    /// What caused it (an I/O or database error, say); not serialized.
    #[serde(skip)]
    #[source]
    pub cause: Option<Arc<dyn std::error::Error + Send + Sync>>,
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        self.code == other.code && self.message == other.message
    }
}

impl Eq for Error {}

/// `text` followed by `cause` and each cause in its chain (`text: cause: cause`), each said
/// once (a cause the text already holds is not repeated): how [`Error::detail`] and any other
/// error's chain (a library's whose words are only in its causes) are read out.
pub fn with_causes(mut text: String, cause: Option<&(dyn std::error::Error + 'static)>) -> String {
    let mut next = cause;
    while let Some(cause) = next {
        let said = cause.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        next = cause.source();
    }
    text
}

impl Error {
    /// Builds an error from a code and a sentence.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            cause: None,
        }
    }

    /// Builds an error from a code, a sentence, and the error that caused it.
    pub fn caused_by(
        code: ErrorCode,
        message: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self {
            code,
            message: message.into(),
            cause: Some(Arc::new(cause)),
        }
    }

    /// The sentence followed by each cause in the chain (`sentence: cause: cause`), each said
    /// once (a cause the text already holds is not repeated): what a person outside the
    /// process reads. Without a cause, the sentence alone.
    pub fn detail(&self) -> String {
        let cause: Option<&(dyn std::error::Error + 'static)> = match &self.cause {
            Some(cause) => Some(cause.as_ref()),
            None => None,
        };
        with_causes(self.message.clone(), cause)
    }

    /// Builds an error whose sentence ends with its cause's own words, `{sentence}: {cause}`,
    /// and keeps the cause for the chain. This is the one place a cause is rendered into the
    /// sentence: what leaves the process is the sentence (see [`Error::detail`]), and where a person has always read the
    /// cause there (an OS error, a parser's position) it stays; the binary's chain printer
    /// leaves out a cause the sentence already quotes, so nothing prints twice.
    pub fn quoting(
        code: ErrorCode,
        sentence: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::quoting_between(code, format!("{}: ", sentence.into()), cause, "")
    }

    /// Like [`Error::quoting`], for a sentence that holds its cause's words elsewhere:
    /// `{before}{cause}{after}` (`"x cannot be read ("` and `")"`, say).
    pub fn quoting_between(
        code: ErrorCode,
        before: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
        after: &str,
    ) -> Self {
        let mut message = before.into();
        message.push_str(&cause.to_string());
        message.push_str(after);
        Self {
            code,
            message,
            cause: Some(Arc::new(cause)),
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

/// Written as `{"code", "message"}`, the message being [`Error::detail`]: the cause's text
/// leaves with the sentence, the cause itself does not (it is not serializable), so an
/// error read back has the same text and no source.
impl Serialize for Error {
    fn serialize<S: serde::Serializer>(
        &self,
        serializer: S,
    ) -> std::result::Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut out = serializer.serialize_struct("Error", 2)?;
        out.serialize_field("code", &self.code)?;
        out.serialize_field("message", &self.detail())?;
        out.end()
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
    fn a_cause_is_kept_for_the_chain_and_leaves_as_text() {
        use std::error::Error as _;
        let io = std::io::Error::other("disk on fire");
        let e = Error::caused_by(ErrorCode::StoreError, "the store could not be written", io);
        assert_eq!(e.source().unwrap().to_string(), "disk on fire");
        assert_eq!(e.message, "the store could not be written");
        let json = serde_json::to_value(&e).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"code": "STORE_ERROR", "message": "the store could not be written: disk on fire"})
        );
        let back: Error = serde_json::from_value(json).unwrap();
        assert_eq!(back.detail(), e.detail(), "the same text after the trip");
        assert!(back.source().is_none());
        let plain = Error::new(ErrorCode::StoreError, "the store could not be written");
        assert_eq!(
            serde_json::to_value(&plain).unwrap()["message"],
            "the store could not be written"
        );
    }

    #[test]
    fn detail_says_each_cause_once() {
        #[derive(Debug, thiserror::Error)]
        #[error("git failed")]
        struct Outer(#[source] std::io::Error);
        let e = Error::caused_by(
            ErrorCode::Internal,
            "cannot make the copy",
            Outer(std::io::Error::other("no space left")),
        );
        assert_eq!(
            e.detail(),
            "cannot make the copy: git failed: no space left"
        );
        let repeated = Error::caused_by(
            ErrorCode::Internal,
            "read failed: boom",
            std::io::Error::other("boom"),
        );
        assert_eq!(repeated.detail(), "read failed: boom");
    }

    #[test]
    fn a_quoted_cause_ends_the_sentence_and_stays_the_source() {
        use std::error::Error as _;
        let io = || std::io::Error::other("disk on fire");
        let e = Error::quoting(ErrorCode::StoreError, "cannot write x", io());
        assert_eq!(e.message, "cannot write x: disk on fire");
        assert_eq!(e.source().unwrap().to_string(), "disk on fire");
        let e = Error::quoting_between(ErrorCode::StoreError, "cannot write x (", io(), ").");
        assert_eq!(e.message, "cannot write x (disk on fire).");
        assert!(e.source().is_some());
    }

    #[test]
    fn display_leads_with_the_code() {
        let e = Error::new(ErrorCode::QueueFull, "20 tasks are already waiting.");
        assert_eq!(e.to_string(), "QUEUE_FULL: 20 tasks are already waiting.");
    }
}
