//! The role a task plays: what the caller asked the agent to be (an implementer that
//! writes, or a planner or reviewer that only reads and reports), saved with the task.
//!
//! This module owns the nouns only. Which roles exist (built in or configured), their
//! defaults and the prompt framing belong to the engine; a role never grants a permission.

use serde::{Deserialize, Serialize};

crate::wire_enum! {
    /// What a role is built on: the three built-in roles. A configured role names one.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub enum RoleBase {
        /// Changes files in its workspace (the default).
        #[default]
        Implementer => "implementer",
        /// Reads, and returns a plan report; never writes.
        Planner => "planner",
        /// Reads, and returns a review report whose citations Legate checks; never writes.
        Reviewer => "reviewer",
    }
}

impl RoleBase {
    /// Whether a task of this base must be read-only (asking for write is
    /// `MODE_NOT_ALLOWED`).
    pub fn is_read_only(self) -> bool {
        matches!(self, Self::Planner | Self::Reviewer)
    }
}

/// The role of one task, as resolved when it was submitted and stored with it, so that a
/// resume keeps its base and instructions even after the configuration changes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TaskRole {
    /// The role's name: a built-in name or a `[roles.NAME]`.
    pub name: String,
    /// What it is built on.
    pub base: RoleBase,
    /// A configured role's instructions, as they were when the task was submitted (empty for
    /// a built-in role).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub instructions: String,
}

impl TaskRole {
    /// A built-in role, with no configured instructions.
    pub fn builtin(base: RoleBase) -> Self {
        Self {
            name: base.as_str().to_string(),
            base,
            instructions: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_planner_and_reviewer_are_read_only() {
        assert!(!RoleBase::Implementer.is_read_only());
        assert!(RoleBase::Planner.is_read_only());
        assert!(RoleBase::Reviewer.is_read_only());
        assert_eq!(RoleBase::default(), RoleBase::Implementer);
    }

    #[test]
    fn a_builtin_role_round_trips_without_instructions() {
        let role = TaskRole::builtin(RoleBase::Reviewer);
        let json = serde_json::to_value(&role).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"name": "reviewer", "base": "reviewer"})
        );
        assert_eq!(serde_json::from_value::<TaskRole>(json).unwrap(), role);
    }
}
