//! The secret preflight: which files never reach a copy, and why.
//!
//! This module owns the patterns over the credential detector (`legate_credentials`, whose
//! rules are data): the configured exclusions (deny globs) and version-2 exceptions (globs
//! that skip the name check only), and the verdict a copy records. Precedence, strictly:
//! unsafe paths first (decided by the selection), then an exclusion (`SECRET_EXCLUSION`),
//! then the name check unless an exception covers it (`SECRET_FILE`), then content, which no
//! exception ever skips (`SECRET_CONTENT`).
//!
//! It must never put a file's content, or any part of a match, into a reason, an error or a
//! log. It does not claim to find arbitrary secrets: unknown formats, encrypted or obfuscated
//! data pass.

use legate_core::{Error, ErrorCode};
use legate_credentials::{
    Glob, SCANNER_UNAVAILABLE, confirmed_name, content_confirmed_name, credential_name,
    scan_content,
};
use serde::{Deserialize, Serialize};

legate_core::wire_enum! {
    /// Why a file was left out of a copy (or refused in a patch).
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum BlockReason {
        /// A known credential file name.
        SecretFile => "SECRET_FILE",
        /// A high-confidence credential pattern in the content.
        SecretContent => "SECRET_CONTENT",
        /// A configured exclusion matched.
        SecretExclusion => "SECRET_EXCLUSION",
        /// A symlink, a non-regular file, or a path that is not a safe relative path.
        UnsafePath => "UNSAFE_PATH",
    }
}

/// A file left out, by path and reason. Never its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BlockedFile {
    /// The relative path.
    pub path: String,
    /// Why.
    pub reason: BlockReason,
    /// Which rule (`dotenv`, `aws-access-key-id`, the exclusion pattern, …); never content.
    pub rule: String,
}

/// Configured exclusions and exceptions.
#[derive(Debug, Clone, Default)]
pub struct SecretPatterns {
    exclusions: Vec<Glob>,
    exceptions: Vec<Glob>,
}

/// The version-2 exceptions object.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct ExceptionsV2 {
    version: u32,
    #[serde(default)]
    name_patterns: Vec<String>,
}

impl SecretPatterns {
    /// Patterns from the configured lists.
    pub fn new(exclusions: &[String], exceptions: &[String]) -> Result<Self, Error> {
        Ok(Self {
            exclusions: exclusions
                .iter()
                .map(|p| Glob::new(p))
                .collect::<Result<_, _>>()?,
            exceptions: exceptions
                .iter()
                .map(|p| Glob::new(p))
                .collect::<Result<_, _>>()?,
        })
    }

    /// Parses the configuration's JSON forms: exclusions as a JSON array of patterns;
    /// exceptions as `{"version": 2, "namePatterns": [...]}`. An empty legacy array `[]`
    /// means no exceptions; a non-empty one is refused with a migration hint (and without
    /// echoing it). Errors are `CONFIG_INVALID`.
    pub fn from_json(exclusions: Option<&str>, exceptions: Option<&str>) -> Result<Self, Error> {
        let invalid = |m: String| Error::new(ErrorCode::ConfigInvalid, m);
        let excl: Vec<String> = match exclusions.map(str::trim).filter(|s| !s.is_empty()) {
            None => Vec::new(),
            Some(s) => serde_json::from_str(s).map_err(|_| {
                invalid("secret exclusions must be a JSON array of relative glob patterns".into())
            })?,
        };
        let exc: Vec<String> = match exceptions.map(str::trim).filter(|s| !s.is_empty()) {
            None => Vec::new(),
            Some(s) => {
                match serde_json::from_str::<serde_json::Value>(s) {
                    Ok(serde_json::Value::Array(a)) if a.is_empty() => Vec::new(),
                    Ok(serde_json::Value::Array(_)) => {
                        return Err(invalid(
                        "secret exceptions are a legacy array; write {\"version\": 2, \"namePatterns\": [...]} instead (version 2 exceptions skip only the name check, never content)".into(),
                    ));
                    }
                    Ok(v) => {
                        let parsed: ExceptionsV2 = serde_json::from_value(v).map_err(|_| {
                        invalid("secret exceptions must be {\"version\": 2, \"namePatterns\": [...]}".into())
                    })?;
                        if parsed.version != 2 {
                            return Err(invalid(format!(
                                "secret exceptions have version {}; only version 2 is understood",
                                parsed.version
                            )));
                        }
                        parsed.name_patterns
                    }
                    Err(_) => {
                        return Err(invalid(
                        "secret exceptions must be a JSON object {\"version\": 2, \"namePatterns\": [...]}".into(),
                    ));
                    }
                }
            }
        };
        Self::new(&excl, &exc)
    }

    /// The exclusion patterns, as configured.
    pub fn exclusions(&self) -> Vec<&str> {
        self.exclusions.iter().map(Glob::as_str).collect()
    }

    /// The exception patterns, as configured.
    pub fn exceptions(&self) -> Vec<&str> {
        self.exceptions.iter().map(Glob::as_str).collect()
    }

    /// The name-level verdict for a safe relative `path`: an exclusion, else a credential
    /// name not covered by an exception. Content is checked separately ([`Self::check`]).
    pub fn check_name(&self, path: &str) -> Option<(BlockReason, String)> {
        if let Some(g) = self.exclusions.iter().find(|g| g.matches(path)) {
            return Some((BlockReason::SecretExclusion, g.as_str().to_string()));
        }
        let rule = credential_name(path)?;
        if self.exceptions.iter().any(|g| g.matches(path)) {
            return None;
        }
        Some((BlockReason::SecretFile, rule.to_string()))
    }

    /// The name rule of `path` that only its content can confirm (`*.key`, unless it is a
    /// zip archive such as a Keynote file), unless an exception covers the path. The copy
    /// blocks the file as `SECRET_FILE` when its bytes confirm it.
    pub fn content_confirmed_name(&self, path: &str) -> Option<&'static str> {
        let rule = content_confirmed_name(path)?;
        if rule != SCANNER_UNAVAILABLE && self.exceptions.iter().any(|g| g.matches(path)) {
            return None;
        }
        Some(rule)
    }

    /// Every check, name then content, for a file whose bytes are at hand.
    pub fn check(&self, path: &str, content: &[u8]) -> Option<BlockedFile> {
        let (reason, rule) = match self.check_name(path) {
            Some(v) => v,
            None => {
                let (reason, rule) = scan_selected(self.content_confirmed_name(path), content)?;
                (reason, rule.to_string())
            }
        };
        Some(BlockedFile {
            path: path.to_string(),
            reason,
            rule,
        })
    }
}

/// The verdict on a selected file's bytes at copy time: a name rule that its content
/// confirms (`pending`, from [`SecretPatterns::content_confirmed_name`]) first, then content.
pub(crate) fn scan_selected(
    pending: Option<&'static str>,
    bytes: &[u8],
) -> Option<(BlockReason, &'static str)> {
    if let Some(rule) = pending.and_then(|id| confirmed_name(id, bytes)) {
        return Some((BlockReason::SecretFile, rule));
    }
    scan_content(bytes).map(|r| (BlockReason::SecretContent, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random-looking base64 (a fixed LCG), so that tests carry no real key material.
    fn fake_base64(n: usize) -> String {
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        (0..n)
            .map(|_| {
                x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                A[(x >> 58) as usize] as char
            })
            .collect()
    }

    #[test]
    fn dotenv_examples_pass_the_name_check_but_not_content() {
        let p = SecretPatterns::default();
        assert_eq!(
            p.check_name(".env").map(|v| v.0),
            Some(BlockReason::SecretFile)
        );
        assert_eq!(
            p.check_name("app/.env.local").map(|v| v.0),
            Some(BlockReason::SecretFile)
        );
        for ok in [
            ".env.example",
            ".env.sample",
            ".ENV.Template",
            "x/.env.dist",
        ] {
            assert_eq!(p.check_name(ok), None, "{ok}");
        }
        let key = format!("AWS_KEY={}{}\n", "AKIA", "Q3ZL7RTX2WNVD6KM");
        let key = key.as_bytes();
        let b = p.check(".env.example", key).unwrap();
        assert_eq!(b.reason, BlockReason::SecretContent);
        assert_eq!(b.rule, "aws-access-key-id");
    }

    #[test]
    fn precedence_is_exclusion_then_exception_then_content() {
        let p = SecretPatterns::new(
            &["fixtures/.env.local".into(), "*.secret".into()],
            &["fixtures/**".into(), "tests/.env.test".into()],
        )
        .unwrap();
        // An exclusion beats an exception covering the same file.
        assert_eq!(
            p.check_name("fixtures/.env.local").unwrap().0,
            BlockReason::SecretExclusion
        );
        // An exception skips the name check…
        assert_eq!(p.check_name("tests/.env.test"), None);
        assert!(p.check("tests/.env.test", b"A=1\n").is_none());
        // …but never content.
        let pem = format!("-----BEGIN {}-----\n{}\n", "PRIVATE KEY", fake_base64(64));
        let b = p.check("tests/.env.test", pem.as_bytes()).unwrap();
        assert_eq!(b.reason, BlockReason::SecretContent);
        // Without the exception the name is blocked.
        assert_eq!(
            SecretPatterns::default()
                .check_name("tests/.env.test")
                .unwrap()
                .0,
            BlockReason::SecretFile
        );
    }

    #[test]
    fn the_json_forms_are_strict() {
        assert!(SecretPatterns::from_json(None, None).is_ok());
        assert!(SecretPatterns::from_json(Some("[]"), Some("[]")).is_ok());
        let p = SecretPatterns::from_json(
            Some(r#"["*.secret"]"#),
            Some(r#"{"version": 2, "namePatterns": ["fixtures/.env.local"]}"#),
        )
        .unwrap();
        assert_eq!(p.exclusions(), ["*.secret"]);
        assert_eq!(p.exceptions(), ["fixtures/.env.local"]);
        let legacy =
            SecretPatterns::from_json(None, Some(r#"["fixtures/.env.local"]"#)).unwrap_err();
        assert_eq!(legacy.code, ErrorCode::ConfigInvalid);
        assert!(legacy.message.contains("version"));
        assert!(!legacy.message.contains("fixtures"), "{}", legacy.message);
        for bad in [
            r#"{"version": 1, "namePatterns": []}"#,
            r#"{"version": 2, "namePatterns": ["../x"]}"#,
            r#"{"version": 2, "other": 1}"#,
            "nope",
        ] {
            assert!(SecretPatterns::from_json(None, Some(bad)).is_err(), "{bad}");
        }
        assert!(SecretPatterns::from_json(Some(r#"["/abs"]"#), None).is_err());
    }
}
