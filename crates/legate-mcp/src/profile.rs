//! Tool profiles: which tools a server lists and answers, and whether its tasks may write.
//!
//! A profile is chosen in configuration (`[mcp] profile`), never by the client. A tool outside
//! the profile is not listed and a call to it is refused with `TOOL_NOT_AVAILABLE`; `query` and
//! `review` refuse `mode: "write"` with `MODE_NOT_ALLOWED` and make every task they start,
//! resume or message read-only. `supervisor` offers none of these groups: it is the
//! supervisor's server ([`crate::approvals::ApprovalsMcp`], three tools over the approval
//! queue), never the caller's, and is served only behind the supervisor token. This module
//! maps names to rules; it never talks to a client.

use legate_core::{Error, ErrorCode, Result, TaskMode};
use std::fmt;

/// The group a tool belongs to. A profile is the set of groups it offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolGroup {
    /// Asking, delegating read-only work, following and collecting, usage, and listing the
    /// files a copy would get.
    Query,
    /// Reading a copy's patch and verifying it: `preview`, `read_patch`, `verify`.
    Review,
    /// Running and recording tests in a copy, integrating, discarding, sweeping: `test`,
    /// `record_test`, `integrate`, `discard`, `cleanup`.
    Implementation,
}

/// A tool profile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// Every tool; tasks may write. The default.
    #[default]
    Full,
    /// Query tools only; tasks are read-only.
    Query,
    /// Query and review tools; tasks are read-only.
    Review,
    /// The whole flow, including tests and integration; tasks may write.
    Implementation,
    /// The supervisor's tools (`approvals`, `decide`, `audit`) and nothing that delegates.
    Supervisor,
}

impl Profile {
    /// Every profile.
    pub const ALL: &'static [Profile] = &[
        Self::Full,
        Self::Query,
        Self::Review,
        Self::Implementation,
        Self::Supervisor,
    ];

    /// The configuration form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Query => "query",
            Self::Review => "review",
            Self::Implementation => "implementation",
            Self::Supervisor => "supervisor",
        }
    }

    /// Parses the configuration form; an unknown name is `CONFIG_INVALID` (a server must not
    /// start with a profile it does not understand).
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .iter()
            .copied()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::ConfigInvalid,
                    format!(
                        "mcp.profile must be one of full, query, review, implementation, supervisor (got {s:?})"
                    ),
                )
            })
    }

    /// Whether tools of `group` are offered.
    pub fn offers(self, group: ToolGroup) -> bool {
        match self {
            Self::Full | Self::Implementation => true,
            Self::Review => matches!(group, ToolGroup::Query | ToolGroup::Review),
            Self::Query => group == ToolGroup::Query,
            Self::Supervisor => false,
        }
    }

    /// Whether tasks started through this profile must be read-only.
    pub fn read_only(self) -> bool {
        matches!(self, Self::Query | Self::Review | Self::Supervisor)
    }

    /// Whether this is the supervisor's profile (served behind the supervisor token only).
    pub fn is_supervisor(self) -> bool {
        self == Self::Supervisor
    }

    /// The mode a task gets: the requested one, or `default` when none was requested; a
    /// read-only profile answers read-only for an omitted mode and refuses `write`.
    pub fn mode(self, requested: Option<TaskMode>, default: TaskMode) -> Result<TaskMode> {
        if !self.read_only() {
            return Ok(requested.unwrap_or(default));
        }
        match requested {
            Some(TaskMode::Write) => Err(Error::new(
                ErrorCode::ModeNotAllowed,
                format!(
                    "the {} profile allows only read-only tasks; omit mode or pass \"read-only\"",
                    self.as_str()
                ),
            )),
            _ => Ok(TaskMode::ReadOnly),
        }
    }

    /// The mode a task started through this profile asks the engine for: `requested` as
    /// given (`None`: the role's default), except that a read-only profile asks read-only for
    /// an omitted mode and refuses `write` (see [`Profile::mode`]).
    pub fn task_mode(self, requested: Option<TaskMode>) -> Result<Option<TaskMode>> {
        if self.read_only() {
            Ok(Some(self.mode(requested, TaskMode::ReadOnly)?))
        } else {
            Ok(requested)
        }
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_and_unknown_names_stop_the_server() {
        for p in Profile::ALL {
            assert_eq!(Profile::parse(p.as_str()).unwrap(), *p);
        }
        assert_eq!(
            Profile::parse("admin").unwrap_err().code,
            ErrorCode::ConfigInvalid
        );
    }

    #[test]
    fn groups_follow_the_seed_table() {
        use ToolGroup::*;
        let offered = |p: Profile| [Query, Review, Implementation].map(|g| p.offers(g));
        assert_eq!(offered(Profile::Full), [true, true, true]);
        assert_eq!(offered(Profile::Implementation), [true, true, true]);
        assert_eq!(offered(Profile::Review), [true, true, false]);
        assert_eq!(offered(Profile::Query), [true, false, false]);
        // The supervisor's profile offers no caller tool at all, `run` included.
        assert_eq!(offered(Profile::Supervisor), [false, false, false]);
    }

    #[test]
    fn read_only_profiles_refuse_write_and_default_to_read_only() {
        use TaskMode::*;
        for p in [Profile::Query, Profile::Review, Profile::Supervisor] {
            assert_eq!(p.mode(None, Write).unwrap(), ReadOnly);
            assert_eq!(p.mode(Some(ReadOnly), Write).unwrap(), ReadOnly);
            assert_eq!(
                p.mode(Some(Write), Write).unwrap_err().code,
                ErrorCode::ModeNotAllowed
            );
        }
        for p in [Profile::Full, Profile::Implementation] {
            assert_eq!(p.mode(None, Write).unwrap(), Write);
            assert_eq!(p.mode(None, ReadOnly).unwrap(), ReadOnly);
            assert_eq!(p.mode(Some(Write), ReadOnly).unwrap(), Write);
        }
    }
}
