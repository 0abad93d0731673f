//! How much of what its agent sends one task keeps (`[output]`): the number of events and
//! their bytes, the answer, the agent's stderr, with their defaults and bounds.
//!
//! This module only holds the values and checks their ranges; the event pump enforces them
//! (`crate::core::output`). It never reads a file.

use legate_core::{Error, ErrorCode, Result};

/// What one task keeps of its agent's output (`[output]`). Each limit is checked on what
/// would be stored, after redaction. Past a limit the agent's further output of that kind is
/// dropped (one notice says so, one more at the turn's end counts what went); past twice
/// `max_events` or `max_event_bytes` the agent is stopped and the task fails with
/// `TASK_OUTPUT_LIMIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimits {
    /// The agent's events one task stores (default 100,000; 1,000 to 10,000,000). Legate's
    /// own events (statuses, its notices) are counted but never dropped.
    pub max_events: u64,
    /// The bytes of those events as stored (JSON; default 64 MiB; 1 MiB to 4 GiB).
    pub max_event_bytes: u64,
    /// The bytes of one turn's answer, the text the task's result carries and its message
    /// events (default 4 MiB; 64 KiB to 256 MiB); a longer one is cut, with a marker.
    pub max_answer_bytes: u64,
    /// The bytes of the agent's stderr one turn keeps (default 1 MiB; 4 KiB to 256 MiB).
    pub max_stderr_bytes: u64,
}

impl Default for OutputLimits {
    fn default() -> Self {
        Self {
            max_events: 100_000,
            max_event_bytes: 64 << 20,
            max_answer_bytes: 4 << 20,
            max_stderr_bytes: 1 << 20,
        }
    }
}

/// Each limit's key in `[output]` and its range.
const RANGES: [(&str, u64, u64); 4] = [
    ("output.max_events", 1_000, 10_000_000),
    ("output.max_event_bytes", 1 << 20, 4 << 30),
    ("output.max_answer_bytes", 64 << 10, 256 << 20),
    ("output.max_stderr_bytes", 4 << 10, 256 << 20),
];

impl OutputLimits {
    /// `CONFIG_INVALID` naming the first limit outside its range.
    pub fn validate(&self) -> Result<()> {
        let values = [
            self.max_events,
            self.max_event_bytes,
            self.max_answer_bytes,
            self.max_stderr_bytes,
        ];
        for ((key, min, max), value) in RANGES.into_iter().zip(values) {
            if !(min..=max).contains(&value) {
                return Err(Error::new(
                    ErrorCode::ConfigInvalid,
                    format!("{key} must be between {min} and {max} (got {value})"),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_defaults_are_valid_and_each_bound_is_checked() {
        OutputLimits::default().validate().unwrap();
        let d = OutputLimits::default();
        for (i, (key, min, max)) in RANGES.into_iter().enumerate() {
            for (bad, good) in [(min - 1, min), (max + 1, max)] {
                let with = |v: u64| {
                    let mut l = d;
                    *[
                        &mut l.max_events,
                        &mut l.max_event_bytes,
                        &mut l.max_answer_bytes,
                        &mut l.max_stderr_bytes,
                    ][i] = v;
                    l
                };
                let e = with(bad).validate().unwrap_err();
                assert_eq!(e.code, ErrorCode::ConfigInvalid);
                assert!(e.message.contains(key), "{}", e.message);
                with(good).validate().unwrap();
            }
        }
    }
}
