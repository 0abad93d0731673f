//! `[logs]`: how large Legate's log files may grow and what they keep
//! (`legate_logs::Rotation`, and the level of Legate's own lines).
//!
//! This module only reads and bounds the table; the binary opens the files. Every error is
//! `CONFIG_INVALID` and names its key.

use crate::{Result, refuse};
use serde::Deserialize;
use std::time::Duration;

/// `[logs]`. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogsTable {
    max_file_mb: Option<u64>,
    max_files: Option<u64>,
    max_age_days: Option<u64>,
    max_total_mb: Option<u64>,
    level: Option<String>,
}

/// The resolved `[logs]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogSettings {
    /// How big the files may grow.
    pub rotation: legate_logs::Rotation,
    /// The level of Legate's own lines in the files (`off` writes none); libraries' lines are
    /// kept from `warn` up.
    pub level: String,
}

impl Default for LogSettings {
    fn default() -> Self {
        Self {
            rotation: legate_logs::Rotation::default(),
            level: "info".to_string(),
        }
    }
}

const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// `table` within its bounds.
pub(crate) fn resolve(table: LogsTable) -> Result<LogSettings> {
    let mut s = LogSettings::default();
    let bounded = |key: &str, v: Option<u64>, min: u64, max: u64| -> Result<Option<u64>> {
        match v {
            Some(v) if !(min..=max).contains(&v) => {
                refuse!("logs.{key} must be {min} to {max} (got {v})")
            }
            v => Ok(v),
        }
    };
    if let Some(mb) = bounded("max_file_mb", table.max_file_mb, 1, 1024)? {
        s.rotation.max_file_bytes = mb << 20;
    }
    if let Some(n) = bounded("max_files", table.max_files, 0, 100)? {
        s.rotation.max_files = n as usize;
    }
    if let Some(days) = bounded("max_age_days", table.max_age_days, 1, 3650)? {
        s.rotation.max_age = Duration::from_secs(days * 24 * 60 * 60);
    }
    if let Some(mb) = bounded("max_total_mb", table.max_total_mb, 1, 1 << 20)? {
        s.rotation.max_total_bytes = mb << 20;
    }
    if let Some(level) = table.level {
        if !LEVELS.contains(&level.as_str()) {
            let shown: String = level.chars().take(32).collect();
            refuse!(
                "logs.level must be one of {} (got {shown:?})",
                LEVELS.join(", ")
            );
        }
        s.level = level;
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn resolved(text: &str) -> Result<LogSettings> {
        resolve(crate::config::parse(text)?)
    }

    #[test]
    fn the_table_sets_the_bounds_and_refuses_what_is_out_of_them() {
        assert_eq!(resolved("").unwrap(), LogSettings::default());
        let s = resolved("max_file_mb = 2\nmax_files = 3\nmax_total_mb = 10\nlevel = \"debug\"\n")
            .unwrap();
        assert_eq!(s.rotation.max_file_bytes, 2 << 20);
        assert_eq!(s.rotation.max_files, 3);
        assert_eq!(s.rotation.max_total_bytes, 10 << 20);
        assert_eq!(s.level, "debug");
        for (text, key) in [
            ("max_file_mb = 0", "logs.max_file_mb"),
            ("max_age_days = 0", "logs.max_age_days"),
            ("level = \"loud\"", "logs.level"),
            ("size = 1", "size"),
        ] {
            let e = resolved(text).unwrap_err().to_string();
            assert!(e.contains(key), "{text}: {e}");
        }
    }
}
