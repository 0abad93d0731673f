//! The `[skills]` table of `legate.toml`: whether the bundled skill packs are staged in new
//! copy tasks (`bundled`), and another directory of packs to use instead (`directory`).
//!
//! This module only reads and validates these settings into the engine's `SkillsConfig`;
//! the packs themselves are verified by the engine before every new task, never here, so a
//! directory that breaks after start-up still fails the next task. Every error is
//! `CONFIG_INVALID` and names its key.

use crate::{Result, refuse};
use legate_engine::EngineConfig;
use serde::Deserialize;
use std::path::PathBuf;

/// `[skills]`. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkillsTable {
    bundled: Option<bool>,
    directory: Option<PathBuf>,
}

/// Applies `table` to `engine`: `bundled` as given, `directory` an absolute path.
pub fn apply(table: SkillsTable, engine: &mut EngineConfig) -> Result<()> {
    if let Some(bundled) = table.bundled {
        engine.skills.bundled = bundled;
    }
    if let Some(dir) = table.directory {
        if !dir.is_absolute() {
            refuse!(
                "skills.directory must be an absolute path (got {})",
                dir.display()
            );
        }
        engine.skills.directory = Some(dir);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use crate::config::resolve_text;
    use std::path::Path;

    #[test]
    fn the_bundled_packs_are_on_by_default_and_the_table_switches_them() {
        let c = resolve_text("", &[]).unwrap();
        assert!(c.skills.bundled && c.skills.directory.is_none());
        let c = resolve_text("[skills]\nbundled = false\n", &[]).unwrap();
        assert!(!c.skills.bundled);
        let c = resolve_text("[skills]\ndirectory = \"/srv/packs\"\n", &[]).unwrap();
        assert_eq!(c.skills.directory.as_deref(), Some(Path::new("/srv/packs")));
        for bad in [
            "[skills]\ndirectory = \"packs\"\n",
            "[skills]\nbundled = \"yes\"\n",
            "[skills]\nurl = \"https://example.com\"\n",
        ] {
            let err = format!("{:#}", resolve_text(bad, &[]).unwrap_err());
            assert!(err.contains("CONFIG_INVALID"), "{bad}: {err}");
        }
    }
}
