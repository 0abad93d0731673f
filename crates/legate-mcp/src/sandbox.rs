//! The test sandbox policy over MCP: `get_sandbox_policy` (the global ceiling and its
//! sha256) and `set_sandbox_policy` (compare-and-set on that sha256; in approval mode `ask`
//! the engine asks the client's person through a form elicitation, [`CeilingElicitor`]).
//!
//! This module translates arguments to engine calls and an elicitation's answer to the
//! engine's [`Confirmation`]; what an answer means, what a policy may hold and whether a
//! selection fits are the engine's. It never logs a policy's roots or the form's content,
//! only sha256s and the answer's kind.

use crate::confirmation::answer_of;
use async_trait::async_trait;
use legate_core::Result;
use legate_engine::{
    CeilingChange, CeilingConfirmer, Confirmation, Engine, TestCeiling, TestCeilingView,
};
use rmcp::RoleServer;
use rmcp::model::{ElicitRequestParams, ElicitationSchema};
use rmcp::schemars::JsonSchema;
use rmcp::service::{ElicitationMode, Peer};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// `set_sandbox_policy`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(rename = "SetSandboxPolicyArgs")]
pub struct SetTestCeilingArgs {
    /// The `sha256` `get_sandbox_policy` returned: the version this proposal replaces.
    pub expected_sha256: String,
    /// The whole new policy (omitted fields take the default: no roots, no network, child
    /// processes allowed, 4,000 characters).
    pub policy: TestCeiling,
}

/// `get_sandbox_policy` and `set_sandbox_policy`: the policy and its sha256.
pub type TestCeilingOut = TestCeilingView;

/// `get_sandbox_policy`.
pub fn get_sandbox_policy(engine: &Engine) -> Result<TestCeilingOut> {
    engine.test_ceiling().get()
}

/// `set_sandbox_policy`, with `confirmer` asked when the approval mode is `ask`.
pub async fn set_sandbox_policy(
    engine: &Engine,
    args: SetTestCeilingArgs,
    confirmer: &dyn CeilingConfirmer,
) -> Result<TestCeilingOut> {
    let view = engine
        .test_ceiling()
        .set(&args.expected_sha256, args.policy, Some(confirmer))
        .await?;
    tracing::info!(sha256 = %view.sha256, "mcp set_sandbox_policy");
    Ok(view)
}

/// Asks the MCP client's person, with a form elicitation, whether a policy change may
/// proceed. A client that declared no form elicitation, a failed request, a timeout and a
/// malformed answer are all `Cancel`.
#[derive(Debug)]
pub struct CeilingElicitor {
    peer: Peer<RoleServer>,
    timeout: Duration,
}

impl CeilingElicitor {
    /// A confirmer that asks `peer`, whose person has `timeout` to answer.
    pub fn new(peer: Peer<RoleServer>, timeout: Duration) -> Self {
        Self { peer, timeout }
    }
}

fn roots(list: &[PathBuf]) -> String {
    if list.is_empty() {
        return "none".to_string();
    }
    list.iter()
        .map(|p| p.display().to_string().escape_debug().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe(p: &TestCeiling) -> Vec<String> {
    vec![
        format!("  read roots: {}", roots(&p.read_roots)),
        format!("  write roots: {}", roots(&p.write_roots)),
        format!(
            "  network: {}",
            if p.network { "may be granted" } else { "never" }
        ),
        format!(
            "  child processes: {}",
            if p.child_processes {
                "may be granted"
            } else {
                "never"
            }
        ),
        format!(
            "  output: at most {} characters per stream",
            p.max_output_chars
        ),
    ]
}

/// The message a person reads before confirming: the current and the proposed ceiling.
pub fn ceiling_message(change: &CeilingChange) -> String {
    let mut lines = vec![
        "Replace Legate's test sandbox policy (the ceiling of every test's sandbox selection)?"
            .to_string(),
        format!("Now (sha256 {}):", change.current.sha256),
    ];
    lines.extend(describe(&change.current.policy));
    lines.push(format!("Proposed (sha256 {}):", change.proposed.sha256));
    lines.extend(describe(&change.proposed.policy));
    lines.push("Only an accept with confirm checked replaces the policy.".to_string());
    lines.join("\n")
}

fn ceiling_schema() -> ElicitationSchema {
    ElicitationSchema::builder()
        .required_bool_property("confirm", |b| {
            b.title("Replace the policy")
                .description("Check to replace the test sandbox policy with the proposed one.")
        })
        .build_unchecked()
}

#[async_trait]
impl CeilingConfirmer for CeilingElicitor {
    async fn confirm_ceiling(&self, change: &CeilingChange) -> Confirmation {
        if !self
            .peer
            .supported_elicitation_modes()
            .contains(&ElicitationMode::Form)
        {
            tracing::info!("the client cannot answer a form elicitation");
            return Confirmation::Cancel;
        }
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: ceiling_message(change),
            requested_schema: ceiling_schema(),
        };
        match self
            .peer
            .create_elicitation_with_timeout(params, Some(self.timeout))
            .await
        {
            Ok(result) => answer_of(&result.action, result.content.as_ref()),
            Err(e) => {
                tracing::info!(error = %e, "sandbox policy confirmation failed");
                Confirmation::Cancel
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_message_shows_both_policies_and_escapes_control_characters() {
        let current = TestCeiling::default();
        let proposed = TestCeiling {
            write_roots: vec![PathBuf::from("/srv/out\n\u{1b}[2Jyes")],
            network: true,
            ..TestCeiling::default()
        };
        let change = CeilingChange {
            current: TestCeilingView {
                sha256: current.sha256(),
                policy: current,
            },
            proposed: TestCeilingView {
                sha256: proposed.sha256(),
                policy: proposed,
            },
        };
        let m = ceiling_message(&change);
        assert!(m.contains(&change.current.sha256));
        assert!(m.contains(&change.proposed.sha256));
        assert!(m.contains("network: may be granted"));
        assert!(!m.contains('\u{1b}'), "{m}");
        assert!(m.contains("/srv/out\\n"), "{m}");
        let s = serde_json::to_value(ceiling_schema()).unwrap();
        assert_eq!(s["required"], serde_json::json!(["confirm"]));
    }
}
