//! The `[supervision]` table of `legate.toml`: how long an approval waits for a supervisor
//! (`deadline_secs`, default 120) and the supervising agent asked first (`agent`).
//!
//! This module only reads and validates settings into the engine's `SupervisionConfig`; the
//! queue that uses them lives in the engine (`legate_engine::supervision`).

use anyhow::{Result, bail};
use legate_engine::SupervisionConfig;
use serde::Deserialize;
use std::time::Duration;

/// The longest deadline accepted: one day. A request the agent keeps open longer than that
/// is a hang by another name.
const MAX_DEADLINE_SECS: u64 = 86_400;

/// `[supervision]`. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SupervisionTable {
    deadline_secs: Option<u64>,
    agent: Option<String>,
}

/// Applies the table onto `config`.
pub fn resolve(table: SupervisionTable, config: &mut SupervisionConfig) -> Result<()> {
    if let Some(secs) = table.deadline_secs {
        if !(1..=MAX_DEADLINE_SECS).contains(&secs) {
            bail!(
                "supervision.deadline_secs must be between 1 and {MAX_DEADLINE_SECS} (got {secs})"
            );
        }
        config.deadline = Duration::from_secs(secs);
    }
    if let Some(agent) = table.agent {
        if agent.trim().is_empty() {
            bail!("supervision.agent must name a configured agent");
        }
        config.agent = Some(agent);
    }
    Ok(())
}
