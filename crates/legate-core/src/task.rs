//! Tasks: one delegated unit of work, and the A2A states it moves through.

use crate::{Error, ErrorCode, Timestamp, WorkspaceKind};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;

/// A task id: a random UUID (v4) in its hyphenated form, so that a short prefix is enough to
/// name one. Tasks sort by `created_at`, not by id.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TaskId(pub String);

impl TaskId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for TaskId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

crate::wire_enum! {
    /// The eight task states of A2A v1.0.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum TaskState {
        /// Stored, not yet running (queued).
        Submitted => "submitted",
        /// The agent is working on it.
        Working => "working",
        /// The task waits for the caller to say more.
        InputRequired => "input-required",
        /// The turn ended normally.
        Completed => "completed",
        /// The task ended with an error; see its error code.
        Failed => "failed",
        /// The task was canceled.
        Canceled => "canceled",
        /// The agent refused the task.
        Rejected => "rejected",
        /// The agent needs its user to log in.
        AuthRequired => "auth-required",
    }
}

impl TaskState {
    /// Parses a state a caller named (a filter), with one wording for every front:
    /// `INVALID_INPUT` naming the states there are.
    pub fn parse_named(s: &str) -> crate::Result<Self> {
        Self::parse(s).ok_or_else(|| {
            let known: Vec<&str> = Self::ALL.iter().map(|t| t.as_str()).collect();
            let shown: String = s.chars().take(64).collect();
            crate::Error::invalid_input(format!(
                "unknown state {shown:?}; one of {}",
                known.join(", ")
            ))
        })
    }

    /// Whether nothing more will happen to a task in this state.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Failed | Self::Canceled | Self::Rejected | Self::AuthRequired
        )
    }
}

crate::wire_enum! {
    /// Whether the agent may change files.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub enum TaskMode {
        /// The agent may edit files inside its root (subject to the supervisor).
        #[default]
        Write => "write",
        /// Every edit, delete, move and execute is refused.
        ReadOnly => "read-only",
    }
}

/// The model value that asks for the agent's own choice ("Auto"), overriding any saved
/// preference or configured default.
pub const AUTO_MODEL: &str = "auto";

/// Token accounting. A field the agent did not report is `None`, never 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Reasoning tokens.
    // One name everywhere (the usage totals' and the seed's); a task stored under the former
    // name `thoughtTokens` still reads.
    #[serde(
        default,
        alias = "thoughtTokens",
        skip_serializing_if = "Option::is_none"
    )]
    pub thinking_tokens: Option<u64>,
    /// Tokens read from a prompt cache.
    // Stored as `cachedReadTokens` before, which still reads.
    #[serde(
        default,
        alias = "cachedReadTokens",
        skip_serializing_if = "Option::is_none"
    )]
    pub cache_read_tokens: Option<u64>,
    /// Everything counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_tokens: Option<u64>,
    /// Context window in use, as the agent reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_used: Option<u64>,
    /// Context window size, as the agent reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_size: Option<u64>,
    /// The model these tokens were counted for, when the agent named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Where the counters come from: `turn` (the agent reported this turn's own),
    /// `session-total` (an agy conversation's first turn: its cumulative total is this
    /// turn's), `session-delta` (a resumed agy conversation: the difference from the total
    /// before). Absent when not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<UsageSource>,
    /// For agy: the conversation's cumulative counters as the CLI reported them at the end
    /// of this turn (the session's use so far, not this task's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_cumulative: Option<UsageCounters>,
}

/// Where a task's token counters come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum UsageSource {
    /// The agent reported the turn's own counts (ACP).
    Turn,
    /// The first turn of an agy conversation: the cumulative total is the turn's.
    SessionTotal,
    /// A resumed agy conversation: the difference from the previous cumulative total.
    SessionDelta,
}

/// Token counters as an agent CLI reported them, each `None` when not reported.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct UsageCounters {
    /// Prompt tokens.
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    pub output_tokens: Option<u64>,
    /// Everything counted.
    pub total_tokens: Option<u64>,
    /// Reasoning tokens.
    pub thinking_tokens: Option<u64>,
    /// Tokens read from a prompt cache.
    pub cache_read_tokens: Option<u64>,
}

impl Usage {
    /// Whether the agent reported anything at all.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// The five token counters of this usage.
    pub fn counters(&self) -> UsageCounters {
        UsageCounters {
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            total_tokens: self.total_tokens,
            thinking_tokens: self.thinking_tokens,
            cache_read_tokens: self.cache_read_tokens,
        }
    }

    /// Overwrites each field that `other` reports.
    pub fn merge(&mut self, other: &Usage) {
        fn take(dst: &mut Option<u64>, src: Option<u64>) {
            if src.is_some() {
                *dst = src;
            }
        }
        take(&mut self.input_tokens, other.input_tokens);
        take(&mut self.output_tokens, other.output_tokens);
        take(&mut self.thinking_tokens, other.thinking_tokens);
        take(&mut self.cache_read_tokens, other.cache_read_tokens);
        take(&mut self.total_tokens, other.total_tokens);
        take(&mut self.context_used, other.context_used);
        take(&mut self.context_size, other.context_size);
        if other.model.is_some() {
            self.model.clone_from(&other.model);
        }
        if other.source.is_some() {
            self.source = other.source;
        }
        if other.observed_cumulative.is_some() {
            self.observed_cumulative
                .clone_from(&other.observed_cumulative);
        }
    }
}

/// A permission the supervisor refused, as it travels back to the caller.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Refusal {
    /// The tool call's title as the agent gave it.
    pub title: String,
    /// Why the supervisor refused.
    pub reason: String,
}

/// What a finished turn produced.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskResult {
    /// The agent's answer (its message chunks, joined).
    pub text: String,
    /// The ACP stop reason (`end_turn`, `cancelled`, …) when there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// How many tool calls the agent started.
    pub tool_calls: u32,
    /// How many of them ended `failed`.
    pub failed_tool_calls: u32,
    /// Every permission the supervisor refused, in order.
    #[serde(default)]
    pub refusals: Vec<Refusal>,
    /// What the agent handed over besides its text (files, links, values), in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub attachments: Vec<crate::Attachment>,
    /// What Legate noticed about the turn that the caller should know, in order (for one:
    /// the answer claims tool work Legate never saw, [`NOTICE_SILENT_TURN`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<TaskNotice>,
    /// A planner's or reviewer's report, once Legate has checked it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<crate::Report>,
}

/// The [`TaskNotice::code`] of a turn whose answer claims tool work (wrote, created, ran…)
/// while Legate saw no tool call and no change in the workspace.
pub const NOTICE_SILENT_TURN: &str = "silent_turn";

/// Something Legate noticed about a turn, carried with its result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskNotice {
    /// A stable code (`silent_turn`, …).
    pub code: String,
    /// One sentence for a person.
    pub message: String,
}

/// The name of the attachment holding an agent's structured output (agy's
/// `structured_output`, as JSON).
pub const STRUCTURED_OUTPUT_ATTACHMENT: &str = "structured_output.json";

impl TaskResult {
    /// The agent's structured output as JSON text (agy's `structured_output` for a task run
    /// with a JSON Schema), or `None` when it gave none.
    pub fn structured_output(&self) -> Option<&str> {
        self.attachments
            .iter()
            .find(|a| a.name.as_deref() == Some(STRUCTURED_OUTPUT_ATTACHMENT))
            .and_then(|a| a.text.as_deref())
    }

    /// The status line that lists refusals, or `None` when there were none:
    /// `refused by the supervisor: <title>: <reason>; …`.
    pub fn refusal_note(&self) -> Option<String> {
        if self.refusals.is_empty() {
            return None;
        }
        let parts: Vec<String> = self
            .refusals
            .iter()
            .map(|r| format!("{}: {}", r.title, r.reason))
            .collect();
        Some(format!("refused by the supervisor: {}", parts.join("; ")))
    }
}

/// The timeout [`Task::new`] gives a task: ten minutes.
pub const DEFAULT_TASK_TIMEOUT_SECS: u64 = 600;

/// One delegated unit of work, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// Unique id.
    pub id: TaskId,
    /// The conversation this task belongs to; later tasks in it reuse the agent session.
    pub context_id: String,
    /// The configured agent's name.
    pub agent: String,
    /// What kind of workspace the agent got.
    pub workspace: WorkspaceKind,
    /// The workspace root, once prepared (absolute, resolved).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<PathBuf>,
    /// What the caller asked for.
    pub prompt: String,
    /// Write or read-only.
    pub mode: TaskMode,
    /// The model the caller asked for: an id, [`AUTO_MODEL`] for the agent's own choice, or
    /// `None` to use the saved preference or the configured default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The role it plays, as resolved at submit; `None` for a task stored before roles
    /// existed (an implementer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<crate::TaskRole>,
    /// Where the task is in its life.
    pub state: TaskState,
    /// Why it ended badly, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Error>,
    /// A short human status message (refusals, the reason for input-required, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// Tokens, when the agent reported any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The outcome of the turn, once it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<TaskResult>,
    /// The agent's session id, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Seconds before the task is stopped with `TASK_TIMEOUT`.
    pub timeout_secs: u64,
    /// The remote task it is bound to, when its agent is served elsewhere (recorded by the
    /// remote backend through the store, never by the engine's updates).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote: Option<crate::RemoteRef>,
    /// What it was given besides its prompt (memory, skills, delivery, tools, artifacts, its
    /// group), fixed when it was stored; a continuation inherits it.
    #[serde(default, skip_serializing_if = "crate::TaskControls::is_empty")]
    pub controls: crate::TaskControls,
    /// When it was stored.
    pub created_at: Timestamp,
    /// When it last changed.
    pub updated_at: Timestamp,
}

impl Task {
    /// A task just submitted: a sandbox workspace not yet prepared, write mode, the agent's
    /// own model, a ten-minute timeout, stored now. The `with_*` setters change the rest.
    pub fn new(
        id: impl Into<String>,
        context_id: impl Into<String>,
        agent: impl Into<String>,
        prompt: impl Into<String>,
    ) -> Self {
        let now = Timestamp::now();
        Self {
            id: TaskId(id.into()),
            context_id: context_id.into(),
            agent: agent.into(),
            workspace: WorkspaceKind::Sandbox,
            root: None,
            prompt: prompt.into(),
            mode: TaskMode::Write,
            model: None,
            role: None,
            state: TaskState::Submitted,
            error: None,
            status_message: None,
            usage: None,
            result: None,
            session_id: None,
            timeout_secs: DEFAULT_TASK_TIMEOUT_SECS,
            remote: None,
            controls: crate::TaskControls::default(),
            created_at: now,
            updated_at: now,
        }
    }

    /// The same task with this state.
    #[must_use]
    pub fn with_state(mut self, state: TaskState) -> Self {
        self.state = state;
        self
    }

    /// The same task with this workspace kind and, if prepared, root.
    #[must_use]
    pub fn with_workspace(mut self, workspace: WorkspaceKind, root: Option<PathBuf>) -> Self {
        self.workspace = workspace;
        self.root = root;
        self
    }

    /// The same task in this mode.
    #[must_use]
    pub fn with_mode(mut self, mode: TaskMode) -> Self {
        self.mode = mode;
        self
    }

    /// The same task asking for this model.
    #[must_use]
    pub fn with_model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// The same task playing this role.
    #[must_use]
    pub fn with_role(mut self, role: crate::TaskRole) -> Self {
        self.role = Some(role);
        self
    }

    /// The same task with this status message.
    #[must_use]
    pub fn with_status_message(mut self, message: impl Into<String>) -> Self {
        self.status_message = Some(message.into());
        self
    }

    /// The same task with this timeout in seconds.
    #[must_use]
    pub fn with_timeout_secs(mut self, secs: u64) -> Self {
        self.timeout_secs = secs;
        self
    }

    /// The same task stored and last changed at `at`.
    #[must_use]
    pub fn at(mut self, at: Timestamp) -> Self {
        self.created_at = at;
        self.updated_at = at;
        self
    }

    /// Whether the task has ended.
    pub fn is_terminal(&self) -> bool {
        self.state.is_terminal()
    }

    /// The error code, if any, as text.
    pub fn error_code(&self) -> Option<ErrorCode> {
        self.error.as_ref().map(|e| e.code)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_has_one_name_per_counter_and_reads_the_former_names() {
        let old: Usage = serde_json::from_str(r#"{"thoughtTokens": 7, "cachedReadTokens": 3}"#)
            .unwrap_or_default();
        assert_eq!(
            (old.thinking_tokens, old.cache_read_tokens),
            (Some(7), Some(3))
        );
        let wire = serde_json::to_value(&old).unwrap_or_default();
        assert_eq!(
            wire,
            serde_json::json!({"thinkingTokens": 7, "cacheReadTokens": 3})
        );
    }

    #[test]
    fn a_named_state_parses_and_an_unknown_one_lists_every_state_bounded() {
        assert_eq!(
            TaskState::parse_named("input-required").unwrap(),
            TaskState::InputRequired
        );
        let e = TaskState::parse_named(&"x".repeat(10_000)).unwrap_err();
        assert_eq!(e.code, crate::ErrorCode::InvalidInput);
        for state in TaskState::ALL {
            assert!(e.message.contains(state.as_str()), "{}", e.message);
        }
        assert!(e.message.len() < 300, "{}", e.message);
    }

    #[test]
    fn a_new_task_is_submitted_empty_and_its_setters_change_one_field_each() {
        let t = Task::new("t1", "c1", "agent", "do it");
        assert_eq!(
            (t.id.as_str(), t.context_id.as_str(), t.agent.as_str()),
            ("t1", "c1", "agent")
        );
        assert_eq!(t.state, TaskState::Submitted);
        assert_eq!(t.workspace, WorkspaceKind::Sandbox);
        assert_eq!(t.timeout_secs, DEFAULT_TASK_TIMEOUT_SECS);
        assert_eq!(t.created_at, t.updated_at);
        assert!(t.root.is_none() && t.error.is_none() && t.result.is_none());
        let t = t
            .with_state(TaskState::Working)
            .with_mode(TaskMode::ReadOnly)
            .with_timeout_secs(60)
            .at(Timestamp(7));
        assert_eq!(t.state, TaskState::Working);
        assert_eq!(t.mode, TaskMode::ReadOnly);
        assert_eq!(t.timeout_secs, 60);
        assert_eq!((t.created_at, t.updated_at), (Timestamp(7), Timestamp(7)));
    }

    #[test]
    fn states_round_trip_and_terminality_matches_a2a() {
        for st in TaskState::ALL {
            assert_eq!(TaskState::parse(st.as_str()), Some(*st));
            assert_eq!(
                serde_json::to_string(st).unwrap(),
                format!("\"{}\"", st.as_str())
            );
        }
        let terminal: Vec<_> = TaskState::ALL
            .iter()
            .filter(|s| s.is_terminal())
            .map(|s| s.as_str())
            .collect();
        assert_eq!(
            terminal,
            [
                "completed",
                "failed",
                "canceled",
                "rejected",
                "auth-required"
            ]
        );
    }

    #[test]
    fn refusal_note_lists_each_refusal() {
        let mut r = TaskResult::default();
        assert_eq!(r.refusal_note(), None);
        r.refusals.push(Refusal {
            title: "rm -rf /".into(),
            reason: "the root is not owned".into(),
        });
        r.refusals.push(Refusal {
            title: "Write /etc/x".into(),
            reason: "/etc/x is outside the root".into(),
        });
        assert_eq!(
            r.refusal_note().unwrap(),
            "refused by the supervisor: rm -rf /: the root is not owned; Write /etc/x: /etc/x is outside the root"
        );
    }

    #[test]
    fn usage_merge_keeps_unreported_fields() {
        let mut u = Usage {
            input_tokens: Some(10),
            ..Usage::default()
        };
        u.merge(&Usage {
            output_tokens: Some(3),
            ..Usage::default()
        });
        assert_eq!(u.input_tokens, Some(10));
        assert_eq!(u.output_tokens, Some(3));
        assert!(Usage::default().is_empty());
    }
}
