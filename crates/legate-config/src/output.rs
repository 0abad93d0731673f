//! The `[output]` table of `legate.toml`: how much of its agent's output one task keeps
//! (events, their bytes, the answer, stderr).
//!
//! This module only reads and validates these settings into the engine's `OutputLimits`;
//! the engine's event pump enforces them. Every error is `CONFIG_INVALID` and names its key.

use crate::{Result, refuse};
use legate_engine::{EngineConfig, OutputLimits};
use serde::Deserialize;

/// `[output]`. Unknown keys are errors; an omitted key keeps its default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputTable {
    max_events: Option<u64>,
    max_event_bytes: Option<u64>,
    max_answer_bytes: Option<u64>,
    max_stderr_bytes: Option<u64>,
}

/// Applies `table` to `engine`.
pub fn apply(table: OutputTable, engine: &mut EngineConfig) -> Result<()> {
    let d = OutputLimits::default();
    let limits = OutputLimits {
        max_events: table.max_events.unwrap_or(d.max_events),
        max_event_bytes: table.max_event_bytes.unwrap_or(d.max_event_bytes),
        max_answer_bytes: table.max_answer_bytes.unwrap_or(d.max_answer_bytes),
        max_stderr_bytes: table.max_stderr_bytes.unwrap_or(d.max_stderr_bytes),
    };
    if let Err(e) = limits.validate() {
        refuse!("{}", e.message);
    }
    engine.output = limits;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::resolve_text;

    #[test]
    fn output_limits_default_and_each_key_is_checked_by_name() {
        let c = resolve_text("", &[]).unwrap();
        assert_eq!(c.output, legate_engine::OutputLimits::default());
        let c = resolve_text(
            "[output]\nmax_events = 5000\nmax_event_bytes = 8388608\nmax_answer_bytes = 65536\nmax_stderr_bytes = 4096\n",
            &[],
        )
        .unwrap();
        assert_eq!(
            (
                c.output.max_events,
                c.output.max_event_bytes,
                c.output.max_answer_bytes,
                c.output.max_stderr_bytes
            ),
            (5_000, 8 << 20, 64 << 10, 4 << 10)
        );
        for (bad, key) in [
            ("max_events = 999", "output.max_events"),
            ("max_events = 10000001", "output.max_events"),
            ("max_event_bytes = 1000", "output.max_event_bytes"),
            ("max_answer_bytes = 0", "output.max_answer_bytes"),
            ("max_answer_bytes = 268435457", "output.max_answer_bytes"),
            ("max_stderr_bytes = 100", "output.max_stderr_bytes"),
            ("max_events = -1", "max_events"),
            ("max_events = \"many\"", "max_events"),
            ("max_lines = 3", "max_lines"),
        ] {
            let e = resolve_text(&format!("[output]\n{bad}\n"), &[])
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("CONFIG_INVALID") && e.contains(key),
                "{bad}: {e}"
            );
        }
    }
}
