//! The `[memory]` table of `legate.toml` (how much private memory the store keeps) and the
//! top-level `forbidden_directories` list (directories that are never a workspace, a copy's
//! source or a test's root), with `LEGATE_FORBIDDEN_DIRECTORIES` (`:`-separated) replacing the
//! list from the environment.
//!
//! This module only reads and validates these settings into the engine's `MemoryLimits` and
//! `forbidden_directories`; the engine enforces them. Every error is `CONFIG_INVALID` and
//! names its key.

use crate::{Result, refuse};
use legate_engine::{EngineConfig, MemoryLimits};
use serde::Deserialize;
use std::path::PathBuf;

/// `[memory]`. Unknown keys are errors; an omitted key keeps its default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryTable {
    max_entries: Option<u64>,
    max_bytes: Option<u64>,
    max_entry_bytes: Option<u64>,
}

/// At most this many forbidden directories.
const MAX_FORBIDDEN: usize = 256;

/// Applies `table` and `forbidden` (the file's list; the environment's replaces it) to
/// `engine`, whose home is already set.
pub fn apply(
    table: MemoryTable,
    forbidden: Option<Vec<String>>,
    env: &dyn Fn(&str) -> Option<String>,
    engine: &mut EngineConfig,
) -> Result<()> {
    let d = MemoryLimits::default();
    let limits = MemoryLimits {
        max_entries: table.max_entries.unwrap_or(d.max_entries),
        max_bytes: table.max_bytes.unwrap_or(d.max_bytes),
        max_entry_bytes: table.max_entry_bytes.unwrap_or(d.max_entry_bytes),
    };
    if let Err(e) = limits.validate() {
        refuse!("{}", e.message);
    }
    engine.memory = limits;

    let (list, key) = match env("LEGATE_FORBIDDEN_DIRECTORIES") {
        Some(v) => (
            v.split(':')
                .filter(|s| !s.trim().is_empty())
                .map(str::to_string)
                .collect(),
            "LEGATE_FORBIDDEN_DIRECTORIES",
        ),
        None => (forbidden.unwrap_or_default(), "forbidden_directories"),
    };
    if list.len() > MAX_FORBIDDEN {
        refuse!("{key} has {} entries; at most {MAX_FORBIDDEN}", list.len());
    }
    let home = std::fs::canonicalize(engine.paths.home()).unwrap_or(engine.paths.home.clone());
    let mut dirs = Vec::with_capacity(list.len());
    for raw in list {
        let p = PathBuf::from(raw.trim());
        if !p.is_absolute() || raw.contains('\0') {
            let shown: String = raw.chars().take(80).collect();
            refuse!("{key} entries must be absolute paths (got {shown:?})");
        }
        let resolved = std::fs::canonicalize(&p).unwrap_or(p.clone());
        if resolved.starts_with(&home) || home.starts_with(&resolved) {
            refuse!(
                "{key} names {}, which is, holds or lies inside Legate's home {}; Legate keeps its copies and sandboxes there",
                p.display(),
                home.display()
            );
        }
        dirs.push(p);
    }
    engine.forbidden_directories = dirs;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::resolve_text;

    #[test]
    fn memory_limits_default_and_stay_within_the_seeds_bounds() {
        let c = resolve_text("", &[]).unwrap();
        assert_eq!(c.memory, legate_engine::MemoryLimits::default());
        let c = resolve_text(
            "[memory]\nmax_entries = 10000\nmax_bytes = 67108864\nmax_entry_bytes = 1048576\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.memory.max_entries, 10_000);
        for bad in [
            "[memory]\nmax_entries = 10001\n",
            "[memory]\nmax_bytes = 67108865\n",
            "[memory]\nmax_entry_bytes = 1048577\n",
            "[memory]\nmax_bytes = 1000\nmax_entry_bytes = 2000\n",
            "[memory]\nmax_entries = 0\n",
            "[memory]\nunknown = 1\n",
        ] {
            let e = resolve_text(bad, &[]).unwrap_err().to_string();
            assert!(
                e.contains("CONFIG_INVALID") || e.contains("unknown"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn forbidden_directories_are_absolute_and_never_legates_home() {
        let c = resolve_text(
            "forbidden_directories = [\"/srv/secret\", \"/opt/keys\"]\n",
            &[],
        )
        .unwrap();
        assert_eq!(c.forbidden_directories.len(), 2);
        let c = resolve_text(
            "forbidden_directories = [\"/srv/secret\"]\n",
            &[("LEGATE_FORBIDDEN_DIRECTORIES", "/a:/b:/c")],
        )
        .unwrap();
        assert_eq!(c.forbidden_directories.len(), 3);
        for bad in [
            "forbidden_directories = [\"relative/dir\"]\n",
            "forbidden_directories = [\"/tmp/lh\"]\n",
            "forbidden_directories = [\"/tmp\"]\n",
            "forbidden_directories = [\"/tmp/lh/copies\"]\n",
        ] {
            let e = resolve_text(bad, &[]).unwrap_err().to_string();
            assert!(e.contains("CONFIG_INVALID"), "{bad}: {e}");
        }
    }
}
