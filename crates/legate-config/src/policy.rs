//! `[policy]` of `legate.toml`: the inline `[[policy.rules]]` and a policy `file` into the
//! engine's `Policy`.
//!
//! The inline rules come first, then the file's. A relative `file` is relative to
//! `$LEGATE_HOME`. This module reads the policy file; the rules, their validation and their
//! matching are `legate_supervisor::policy`'s, and it decides nothing.

use crate::{Error, Result};
use legate_core::ErrorCode;
use legate_supervisor::Policy;
use legate_supervisor::policy::{PolicyTable, RuleTable, parse_file};
use std::path::{Path, PathBuf};

/// The policy of `[policy]`, and the policy file it read (which agents must not see).
pub fn resolve(table: PolicyTable, home: &Path) -> Result<(Policy, Option<PathBuf>)> {
    let file = table
        .file
        .map(|f| if f.is_absolute() { f } else { home.join(f) });
    let from_file = match &file {
        Some(path) => read_file(path)?,
        None => Vec::new(),
    };
    let policy = Policy::from_tables(table.rules, from_file).map_err(legate_core::Error::from)?;
    Ok((policy, file))
}

/// The rules of a policy file.
pub fn read_file(path: &Path) -> Result<Vec<RuleTable>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        legate_core::Error::caused_by(
            ErrorCode::PolicyInvalid,
            format!("policy.file: could not read {}", path.display()),
            e,
        )
    })?;
    parse_file(&text).map_err(|e| Error::In {
        path: path.to_path_buf(),
        source: legate_core::Error::from(e),
    })
}
