//! The confirmer that asks the MCP client's person (a form elicitation) before an
//! integration in approval mode `ask`.
//!
//! It puts the elicitation's answer into the engine's [`Confirmation`] without
//! interpreting it: what an answer means is the engine's to decide. It never logs the
//! form's content, only the answer's kind.

use async_trait::async_trait;
use legate_engine::{Confirmation, ConfirmationRequest, Confirmer};
use rmcp::RoleServer;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::{ElicitationMode, Peer};
use serde_json::Value;
use std::time::Duration;

/// The most changed files the confirmation message names (the rest are counted).
const APPROVAL_FILES_SHOWN: usize = 50;

/// Asks the MCP client's person, with a form elicitation, whether to integrate. A client
/// that declared no form elicitation, a failed request, a timeout and a malformed answer are
/// all `Cancel`; what any answer means is the engine's to decide.
#[derive(Debug)]
pub struct ElicitationConfirmer {
    peer: Peer<RoleServer>,
    timeout: Duration,
}

impl ElicitationConfirmer {
    /// An confirmer that asks `peer`, whose person has `timeout` to answer (the engine's
    /// `fronts.approval_timeout`).
    pub fn new(peer: Peer<RoleServer>, timeout: Duration) -> Self {
        Self { peer, timeout }
    }
}

/// The message a person reads before confirming.
pub fn confirmation_message(r: &ConfirmationRequest) -> String {
    let mut lines = vec![
        format!(
            "Integrate the patch of Legate task {} into {}?",
            r.task_id,
            r.source.display()
        ),
        format!(
            "sha256 {}; {} file(s): {} added, {} modified, {} deleted; +{} -{} lines.",
            r.sha256,
            r.summary.files_changed,
            r.summary.added,
            r.summary.modified,
            r.summary.deleted,
            r.summary.insertions,
            r.summary.deletions
        ),
    ];
    for f in r.files.iter().take(APPROVAL_FILES_SHOWN) {
        let status = f.status.as_str();
        let counts = match (f.insertions, f.deletions) {
            (Some(i), Some(d)) => format!("+{i} -{d}"),
            _ => "binary".to_string(),
        };
        lines.push(format!("  {status} {} ({counts})", f.path));
    }
    if r.files.len() > APPROVAL_FILES_SHOWN {
        lines.push(format!(
            "  … and {} more",
            r.files.len() - APPROVAL_FILES_SHOWN
        ));
    }
    lines.push("Only an accept with confirm checked writes the original.".to_string());
    lines.join("\n")
}

/// The form a person answers: one required `confirm` box.
pub(crate) fn approval_schema() -> ElicitationSchema {
    ElicitationSchema::builder()
        .required_bool_property("confirm", |b| {
            b.title("Integrate")
                .description("Check to write this patch into the original project.")
        })
        .build_unchecked()
}

/// The engine's reading of an elicitation's answer: accept carries the form's `confirm`
/// (anything but the JSON value `true` is false); decline is decline; anything else cancel.
pub fn answer_of(action: &ElicitationAction, content: Option<&Value>) -> Confirmation {
    match action {
        ElicitationAction::Accept => Confirmation::Accept {
            confirm: content.and_then(|c| c.get("confirm")) == Some(&Value::Bool(true)),
        },
        ElicitationAction::Decline => Confirmation::Decline,
        _ => Confirmation::Cancel,
    }
}

#[async_trait]
impl Confirmer for ElicitationConfirmer {
    async fn confirm(&self, request: &ConfirmationRequest) -> Confirmation {
        if !self
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            tracing::info!(task = %request.task_id, "the client cannot answer a form elicitation");
            return Confirmation::Cancel;
        }
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: confirmation_message(request),
            requested_schema: approval_schema(),
        };
        match self
            .peer
            .create_elicitation_with_timeout(params, Some(self.timeout))
            .await
        {
            Ok(result) => {
                let answer = answer_of(&result.action, result.content.as_ref());
                tracing::info!(task = %request.task_id, answer = ?answer, "integration approval answered");
                answer
            }
            Err(e) => {
                tracing::info!(task = %request.task_id, error = %e, "integration approval failed");
                Confirmation::Cancel
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_an_accept_with_confirm_true_is_a_confirmation() {
        let accept = ElicitationAction::Accept;
        assert_eq!(
            answer_of(&accept, Some(&json!({"confirm": true}))),
            Confirmation::Accept { confirm: true }
        );
        for content in [
            Some(json!({"confirm": false})),
            Some(json!({"confirm": "true"})),
            Some(json!({})),
            None,
        ] {
            assert_eq!(
                answer_of(&accept, content.as_ref()),
                Confirmation::Accept { confirm: false }
            );
        }
        assert_eq!(
            answer_of(&ElicitationAction::Decline, Some(&json!({"confirm": true}))),
            Confirmation::Decline
        );
        assert_eq!(
            answer_of(&ElicitationAction::Cancel, None),
            Confirmation::Cancel
        );
    }

    #[test]
    fn the_schema_asks_for_one_required_boolean() {
        let s = serde_json::to_value(approval_schema()).unwrap();
        assert_eq!(s["required"], json!(["confirm"]));
        assert_eq!(s["properties"]["confirm"]["type"], "boolean");
    }
}
