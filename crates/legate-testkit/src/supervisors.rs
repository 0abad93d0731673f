//! Test supervisors: rulings a test needs that the built-in table never gives. Owns nothing
//! else; it never answers an approval itself.

use legate_core::{Decider, Decision, PermissionRequest, Ruling, ToolKind};
use legate_supervisor::{Rules, Supervision, Supervisor};

/// Asks a supervisor about every command; the table decides the rest.
#[derive(Debug, Clone, Copy, Default)]
pub struct AskCommands;

impl Supervisor for AskCommands {
    fn decide(&self, supervision: &Supervision, request: &PermissionRequest) -> Ruling {
        if request.tool_kind == ToolKind::Execute {
            return Ruling {
                decision: Decision::Ask,
                option_id: None,
                reason: "commands need a supervisor".into(),
                decider: Decider::Policy,
                rule_id: Some("ask-commands".into()),
            };
        }
        Rules.decide(supervision, request)
    }
}
