//! The `[copies]` table of `legate.toml` and its environment overrides: limits of copy
//! workspaces, the secret policy, retention, approval mode and whether tests are required.
//!
//! This module only reads and validates settings into the engine's `ReviewConfig`; the rules
//! that use them live in the engine and `legate-workspace`.

use crate::{Result, invalid, refuse};
use legate_engine::SecretPatterns;
use legate_engine::{ApprovalMode, ReviewConfig};
use serde::Deserialize;
use std::time::Duration;

/// `[copies]`. Unknown keys are errors.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CopiesTable {
    max_files: Option<u64>,
    max_bytes: Option<u64>,
    max_changed_files: Option<u64>,
    retention_hours: Option<u64>,
    approval_mode: Option<String>,
    require_tests: Option<bool>,
    /// Integration needs a passing test run in a fresh tree of the patch.
    require_fresh_tests: Option<bool>,
    /// Keep the copy of a task interrupted by its process's death (default: removed).
    keep_interrupted_copies: Option<bool>,
    test_timeout_secs: Option<u64>,
    max_test_output: Option<u64>,
    secret_exclusions: Option<Vec<String>>,
    secret_exceptions: Option<ExceptionsTable>,
}

/// `[copies.secret_exceptions]`: version 2 only.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExceptionsTable {
    version: u32,
    #[serde(default)]
    name_patterns: Vec<String>,
}

/// Applies the table, then the `LEGATE_*` overrides, onto `review`.
pub fn resolve(
    table: CopiesTable,
    env: &dyn Fn(&str) -> Option<String>,
    review: &mut ReviewConfig,
) -> Result<()> {
    let number = |key: &str, env_key: &str, file: Option<u64>, min: u64, max: u64| {
        crate::config::number(env, &format!("copies.{key}"), env_key, file, min, max)
    };
    if let Some(v) = number(
        "max_files",
        "LEGATE_MAX_COPY_FILES",
        table.max_files,
        1,
        1_000_000,
    )? {
        review.limits.max_files = v as usize;
    }
    if let Some(v) = number(
        "max_bytes",
        "LEGATE_MAX_COPY_BYTES",
        table.max_bytes,
        1,
        1 << 40,
    )? {
        review.limits.max_bytes = v;
    }
    if let Some(v) = number(
        "max_changed_files",
        "LEGATE_MAX_CHANGED_FILES",
        table.max_changed_files,
        1,
        100_000,
    )? {
        review.limits.max_changed_files = v as usize;
    }
    if let Some(v) = number(
        "retention_hours",
        "LEGATE_COPY_RETENTION_HOURS",
        table.retention_hours,
        0,
        24 * 365,
    )? {
        review.retention = Duration::from_secs(v * 3600);
    }
    if let Some(v) = number(
        "test_timeout_secs",
        "LEGATE_TEST_TIMEOUT_SECS",
        table.test_timeout_secs,
        1,
        24 * 3600,
    )? {
        review.test_timeout = Duration::from_secs(v);
    }
    if let Some(v) = number(
        "max_test_output",
        "LEGATE_MAX_TEST_OUTPUT",
        table.max_test_output,
        100,
        1 << 20,
    )? {
        review.max_test_output = v as usize;
    }
    let mode = env("LEGATE_APPROVAL_MODE")
        .map(|v| (v, "LEGATE_APPROVAL_MODE"))
        .or(table.approval_mode.map(|v| (v, "copies.approval_mode")));
    if let Some((value, key)) = mode {
        review.approval = ApprovalMode::parse(value.trim())
            .ok_or_else(|| invalid!("{key} must be \"auto\" or \"ask\" (got {value:?})"))?;
    }
    if let Some(v) = env("LEGATE_REQUIRE_TESTS") {
        review.require_tests = match v.trim() {
            "1" | "true" => true,
            "0" | "false" => false,
            _ => refuse!("LEGATE_REQUIRE_TESTS must be true or false (got {v:?})"),
        };
    } else if let Some(v) = table.require_tests {
        review.require_tests = v;
    }
    if let Some(v) = env("LEGATE_REQUIRE_FRESH_TESTS") {
        review.require_fresh_tests = match v.trim() {
            "1" | "true" => true,
            "0" | "false" => false,
            _ => refuse!("LEGATE_REQUIRE_FRESH_TESTS must be true or false (got {v:?})"),
        };
    } else if let Some(v) = table.require_fresh_tests {
        review.require_fresh_tests = v;
    }
    if let Some(v) = env("LEGATE_KEEP_INTERRUPTED_COPIES") {
        review.keep_interrupted_copies = match v.trim() {
            "1" | "true" => true,
            "0" | "false" => false,
            _ => refuse!("LEGATE_KEEP_INTERRUPTED_COPIES must be true or false (got {v:?})"),
        };
    } else if let Some(v) = table.keep_interrupted_copies {
        review.keep_interrupted_copies = v;
    }
    let exclusions = env("LEGATE_SECRET_EXCLUSIONS");
    let exceptions = env("LEGATE_SECRET_EXCEPTIONS");
    let file_excl = table.secret_exclusions.unwrap_or_default();
    let file_exc = match table.secret_exceptions {
        None => Vec::new(),
        Some(t) if t.version == 2 => t.name_patterns,
        Some(t) => refuse!(
            "copies.secret_exceptions.version is {}; only version 2 is understood",
            t.version
        ),
    };
    let from_env = SecretPatterns::from_json(exclusions.as_deref(), exceptions.as_deref())?;
    let excl: Vec<String> = if exclusions.is_some() {
        from_env
            .exclusions()
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        file_excl
    };
    let exc: Vec<String> = if exceptions.is_some() {
        from_env
            .exceptions()
            .iter()
            .map(|s| s.to_string())
            .collect()
    } else {
        file_exc
    };
    review.secrets = SecretPatterns::new(&excl, &exc)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn table(text: &str) -> CopiesTable {
        toml::from_str(text).unwrap()
    }

    #[test]
    fn interrupted_copies_are_removed_unless_kept() {
        let mut r = ReviewConfig::default();
        assert!(!r.keep_interrupted_copies);
        resolve(table("keep_interrupted_copies = true\n"), &|_| None, &mut r).unwrap();
        assert!(r.keep_interrupted_copies);
        let env = |k: &str| (k == "LEGATE_KEEP_INTERRUPTED_COPIES").then(|| "false".to_string());
        resolve(table("keep_interrupted_copies = true\n"), &env, &mut r).unwrap();
        assert!(!r.keep_interrupted_copies);
        let bad = |k: &str| (k == "LEGATE_KEEP_INTERRUPTED_COPIES").then(|| "yes".to_string());
        let e = resolve(table(""), &bad, &mut r).unwrap_err().to_string();
        assert!(e.contains("LEGATE_KEEP_INTERRUPTED_COPIES"), "{e}");
    }

    #[test]
    fn fresh_tests_are_required_only_when_asked() {
        let mut r = ReviewConfig::default();
        assert!(!r.require_fresh_tests);
        resolve(table("require_fresh_tests = true\n"), &|_| None, &mut r).unwrap();
        assert!(r.require_fresh_tests);
        let env = |k: &str| (k == "LEGATE_REQUIRE_FRESH_TESTS").then(|| "false".to_string());
        resolve(table("require_fresh_tests = true\n"), &env, &mut r).unwrap();
        assert!(!r.require_fresh_tests);
        let bad = |k: &str| (k == "LEGATE_REQUIRE_FRESH_TESTS").then(|| "often".to_string());
        let e = resolve(table(""), &bad, &mut r).unwrap_err().to_string();
        assert!(e.contains("LEGATE_REQUIRE_FRESH_TESTS"), "{e}");
    }

    #[test]
    fn the_table_and_the_environment_set_the_review_config() {
        let mut r = ReviewConfig::default();
        resolve(
            table(
                "max_files = 5\napproval_mode = \"ask\"\nsecret_exclusions = [\"*.secret\"]\n[secret_exceptions]\nversion = 2\nname_patterns = [\"fixtures/.env.local\"]\n",
            ),
            &|_| None,
            &mut r,
        )
        .unwrap();
        assert_eq!(r.limits.max_files, 5);
        assert_eq!(r.approval, ApprovalMode::Ask);
        assert_eq!(r.secrets.exclusions(), ["*.secret"]);
        assert_eq!(r.secrets.exceptions(), ["fixtures/.env.local"]);
        let mut r = ReviewConfig::default();
        let env = |k: &str| match k {
            "LEGATE_APPROVAL_MODE" => Some("auto".to_string()),
            "LEGATE_SECRET_EXCEPTIONS" => Some("[\"x\"]".to_string()),
            _ => None,
        };
        let err = resolve(table(""), &env, &mut r).unwrap_err().to_string();
        assert!(
            err.contains("CONFIG_INVALID") && err.contains("version"),
            "{err}"
        );
        let bad = |k: &str| (k == "LEGATE_APPROVAL_MODE").then(|| "sometimes".to_string());
        assert!(resolve(table(""), &bad, &mut r).is_err());
    }
}
