//! The MCP `compare` and `comparison` tools: their arguments, and their translation to
//! [`Engine::compare`] and [`Engine::comparison`]. The answers are the engine's own types.
//!
//! This module decides nothing: the target checks, the copies, the grouping and the
//! staleness checks are the engine's. It never integrates and never votes.

use legate_core::Result;
use legate_engine::{CompareRequest, CompareTarget, Compared, Comparison, Engine};
use rmcp::schemars::JsonSchema;
use serde::Deserialize;

/// One target of `compare`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TargetArg {
    /// A configured agent (see `agents`).
    pub agent: String,
    /// The model; omitted for the agent's configured one.
    pub model: Option<String>,
}

/// `compare`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CompareArgs {
    /// The finished copy task whose copy's current files every target reviews.
    pub source_task_id: String,
    /// The contextSha256 `context` returned; CONTEXT_CHANGED when the context is another now.
    pub expected_context_sha256: String,
    /// What every target is asked, the same words for all.
    pub prompt: String,
    /// 2 to 4 distinct targets (agent and model; an omitted model is the agent's own).
    pub targets: Vec<TargetArg>,
}

/// `comparison`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComparisonArgs {
    /// The id `compare` returned.
    pub comparison_id: String,
}

/// Starts a comparison.
pub async fn compare(engine: &Engine, args: CompareArgs) -> Result<Compared> {
    // Taken apart whole, so a field added to the arguments does not compile until it is mapped.
    let CompareArgs {
        source_task_id,
        expected_context_sha256,
        prompt,
        targets,
    } = args;
    engine
        .comparisons()
        .compare(CompareRequest {
            source_task_id,
            expected_context_sha256,
            prompt,
            targets: targets
                .into_iter()
                .map(|TargetArg { agent, model }| CompareTarget { agent, model })
                .collect(),
        })
        .await
}

/// Reads a comparison as it stands.
pub async fn comparison(engine: &Engine, args: ComparisonArgs) -> Result<Comparison> {
    engine.comparisons().comparison(&args.comparison_id).await
}
