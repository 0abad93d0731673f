//! The MCP `compare` and `comparison` tools: their translation to the engine's comparisons.
//! `compare`'s arguments are the engine's [`CompareRequest`] as it is (declared once, with
//! its schema, in `legate-engine`); `comparison`'s are an id. The answers are the engine's
//! own types.
//!
//! This module decides nothing: the target checks, the copies, the grouping and the
//! staleness checks are the engine's. It never integrates and never votes.

use legate_core::Result;
use legate_engine::{CompareRequest, Compared, Comparison, Engine};
use rmcp::schemars::JsonSchema;
use serde::Deserialize;

/// `comparison`.
#[derive(Debug, Deserialize, JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ComparisonArgs {
    /// The id `compare` returned.
    pub comparison_id: String,
}

/// Starts a comparison. The tool's arguments are the engine's [`CompareRequest`] itself.
pub async fn compare(engine: &Engine, request: CompareRequest) -> Result<Compared> {
    engine.comparisons().compare(request).await
}

/// Reads a comparison as it stands.
pub async fn comparison(engine: &Engine, args: ComparisonArgs) -> Result<Comparison> {
    engine.comparisons().comparison(&args.comparison_id).await
}
