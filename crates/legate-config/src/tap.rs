//! The `[tap]` table of `legate.toml`: how much of a tapped task's protocol frames the wire
//! tap keeps (its bytes per task, and of one frame).
//!
//! This module only reads and validates these settings into the engine's `TapLimits`; the
//! engine's recorder enforces them. Whether a task is tapped is `[agents.NAME] tap` or the
//! submit's, not this table's. Every error is `CONFIG_INVALID` and names its key.

use crate::{Result, refuse};
use legate_engine::{EngineConfig, TapLimits};
use serde::Deserialize;

/// `[tap]`. Unknown keys are errors; an omitted key keeps its default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TapTable {
    max_task_mb: Option<u64>,
    max_frame_kb: Option<u64>,
}

/// Applies `table` to `engine`.
pub fn apply(table: TapTable, engine: &mut EngineConfig) -> Result<()> {
    let d = TapLimits::default();
    // Checked before shifting: a huge number must not wrap into the range.
    let scaled = |key: &str, v: Option<u64>, shift: u32, default: u64| -> Result<u64> {
        match v {
            None => Ok(default),
            Some(v) if v.leading_zeros() < shift => {
                refuse!("tap.{key} is too large (got {v})")
            }
            Some(v) => Ok(v << shift),
        }
    };
    let limits = TapLimits {
        max_task_bytes: scaled("max_task_mb", table.max_task_mb, 20, d.max_task_bytes)?,
        max_frame_bytes: scaled("max_frame_kb", table.max_frame_kb, 10, d.max_frame_bytes)?,
    };
    if let Err(e) = limits.validate() {
        refuse!("{}", e.message);
    }
    engine.tap = limits;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::resolve_text;

    #[test]
    fn tap_limits_default_and_each_key_is_checked_by_name() {
        let c = resolve_text("", &[]).unwrap();
        assert_eq!(c.tap, legate_engine::TapLimits::default());
        let c = resolve_text("[tap]\nmax_task_mb = 2\nmax_frame_kb = 4\n", &[]).unwrap();
        assert_eq!(
            (c.tap.max_task_bytes, c.tap.max_frame_bytes),
            (2 << 20, 4 << 10)
        );
        for (bad, key) in [
            ("max_task_mb = 0", "tap.max_task_mb"),
            ("max_task_mb = 1025", "tap.max_task_mb"),
            ("max_task_mb = 18446744073709551615", "tap.max_task_mb"),
            ("max_frame_kb = 0", "tap.max_frame_kb"),
            ("max_frame_kb = 8193", "tap.max_frame_kb"),
            ("max_lines = 3", "max_lines"),
        ] {
            let e = resolve_text(&format!("[tap]\n{bad}\n"), &[])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("CONFIG_INVALID") && e.contains(key),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn an_agent_is_tapped_only_when_its_table_says_so() {
        let c = resolve_text(
            "[agents.quiet]\ncommand = \"/bin/true\"\n[agents.loud]\ncommand = \"/bin/true\"\ntap = true\n",
            &[],
        )
        .unwrap();
        assert!(!c.agents["quiet"].tap);
        assert!(c.agents["loud"].tap);
        assert!(!c.agents["revisor"].tap);
    }
}
