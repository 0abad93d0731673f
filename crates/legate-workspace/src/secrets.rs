//! The secret preflight: which files never reach a copy, and why.
//!
//! This module owns the rules: credential file names (`.env` and its variants, `.envrc`,
//! private keys, keystores, known credential files), high-confidence credential patterns in
//! content, and the configured exclusions (deny globs) and version-2 exceptions (globs that
//! skip the name check only). Precedence, strictly: unsafe paths first (decided by the
//! selection), then an exclusion (`SECRET_EXCLUSION`), then the name check unless an
//! exception covers it (`SECRET_FILE`), then content, which no exception ever skips
//! (`SECRET_CONTENT`).
//!
//! It must never put a file's content, or any part of a match, into a reason, an error or a
//! log. It does not claim to find arbitrary secrets: unknown formats, encrypted or obfuscated
//! data pass.

use crate::glob::Glob;
use legate_core::{Error, ErrorCode};
use regex::bytes::Regex;
use serde::{Deserialize, Serialize};
use std::sync::OnceLock;

/// Why a file was left out of a copy (or refused in a patch).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BlockReason {
    /// A known credential file name.
    SecretFile,
    /// A high-confidence credential pattern in the content.
    SecretContent,
    /// A configured exclusion matched.
    SecretExclusion,
    /// A symlink, a non-regular file, or a path that is not a safe relative path.
    UnsafePath,
}

impl BlockReason {
    /// The wire form, e.g. `SECRET_FILE`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SecretFile => "SECRET_FILE",
            Self::SecretContent => "SECRET_CONTENT",
            Self::SecretExclusion => "SECRET_EXCLUSION",
            Self::UnsafePath => "UNSAFE_PATH",
        }
    }
}

/// A file left out, by path and reason. Never its content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
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
pub struct SecretPolicy {
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

impl SecretPolicy {
    /// A policy from pattern lists.
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
    /// name not covered by an exception. Content is checked separately ([`scan_content`]).
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

    /// Both checks, name then content, for a file whose bytes are at hand.
    pub fn check(&self, path: &str, content: &[u8]) -> Option<BlockedFile> {
        let (reason, rule) = match self.check_name(path) {
            Some(v) => v,
            None => (
                BlockReason::SecretContent,
                scan_content(content)?.to_string(),
            ),
        };
        Some(BlockedFile {
            path: path.to_string(),
            reason,
            rule,
        })
    }
}

/// `.env` variants that are documentation and only get content inspection.
const DOTENV_EXAMPLES: &[&str] = &["example", "sample", "template", "dist"];

/// Private key file names (exact, lower case).
const KEY_NAMES: &[&str] = &[
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "id_ecdsa_sk",
    "id_ed25519_sk",
    "identity",
];

/// Private key and keystore extensions (lower case, without the dot), with their rule.
const EXTENSIONS: &[(&str, &str)] = &[
    ("key", "private-key"),
    ("ppk", "private-key"),
    ("p12", "keystore"),
    ("pfx", "keystore"),
    ("jks", "keystore"),
    ("keystore", "keystore"),
    ("bks", "keystore"),
    ("kdbx", "keystore"),
];

/// Known credential files by base name (lower case).
const CREDENTIAL_NAMES: &[&str] = &[
    ".netrc",
    "_netrc",
    ".pgpass",
    ".git-credentials",
    ".pypirc",
    ".htpasswd",
    ".dockercfg",
    "secring.gpg",
];

/// Known credential files by their last two components (lower case).
const CREDENTIAL_PATHS: &[&str] = &[
    ".aws/credentials",
    ".docker/config.json",
    ".kube/config",
    ".gnupg/secring.gpg",
    ".config/gh/hosts.yml",
];

/// The name rule `path` trips, if any.
pub fn credential_name(path: &str) -> Option<&'static str> {
    let lower = path.to_ascii_lowercase();
    let name = lower.rsplit('/').next().unwrap_or(&lower);
    if name == ".env" {
        return Some("dotenv");
    }
    if let Some(variant) = name.strip_prefix(".env.") {
        return (!DOTENV_EXAMPLES.contains(&variant)).then_some("dotenv");
    }
    if name == ".envrc" {
        return Some("envrc");
    }
    if KEY_NAMES.contains(&name) {
        return Some("private-key");
    }
    if CREDENTIAL_NAMES.contains(&name) {
        return Some("credential-file");
    }
    let tail2: Vec<&str> = lower.rsplitn(3, '/').take(2).collect();
    if tail2.len() == 2 {
        let joined = format!("{}/{}", tail2[1], tail2[0]);
        if CREDENTIAL_PATHS.contains(&joined.as_str()) {
            return Some("credential-file");
        }
        if tail2[1] == ".ssh" && !name.ends_with(".pub") && name != "known_hosts" {
            return Some("private-key");
        }
    }
    if let Some((_, ext)) = name.rsplit_once('.')
        && let Some((_, rule)) = EXTENSIONS.iter().find(|(e, _)| *e == ext)
    {
        return Some(rule);
    }
    None
}

/// The content rules: a name and a pattern each. High confidence only: a prefix or a block
/// header that ordinary code does not contain.
const CONTENT_RULES: &[(&str, &str)] = &[
    (
        "private-key-block",
        r"-----BEGIN (?:RSA |DSA |EC |OPENSSH |ENCRYPTED |PGP )?PRIVATE KEY(?: BLOCK)?-----",
    ),
    (
        "aws-access-key-id",
        r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA)[0-9A-Z]{16}\b",
    ),
    (
        "aws-secret-access-key",
        r#"(?i:aws_?secret_?access_?key)["']?\s*[:=]\s*["']?[A-Za-z0-9/+=]{40}\b"#,
    ),
    (
        "github-token",
        r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36}\b",
    ),
    (
        "github-fine-grained-token",
        r"\bgithub_pat_[A-Za-z0-9_]{60,}",
    ),
    ("gitlab-token", r"\bglpat-[A-Za-z0-9_\-]{20}\b"),
    (
        "slack-token",
        r"\bxox[abposr]-[A-Za-z0-9]{6,}-[A-Za-z0-9\-]{6,}",
    ),
    (
        "slack-webhook",
        r"https://hooks\.slack\.com/services/T[A-Z0-9]{6,}/B[A-Z0-9]{6,}/[A-Za-z0-9]{16,}",
    ),
    ("google-api-key", r"\bAIza[0-9A-Za-z_\-]{35}"),
    ("stripe-secret-key", r"\b(?:sk|rk)_live_[0-9A-Za-z]{24,}"),
    (
        "openai-api-key",
        r"\bsk-[A-Za-z0-9_\-]{16,}T3BlbkFJ[A-Za-z0-9_\-]{16,}",
    ),
    (
        "anthropic-api-key",
        r"\bsk-ant-[a-z]{3,6}[0-9]{2}-[A-Za-z0-9_\-]{80,}",
    ),
    ("npm-token", r"\bnpm_[A-Za-z0-9]{36}\b"),
];

fn content_regex() -> Option<&'static Regex> {
    static RE: OnceLock<Option<Regex>> = OnceLock::new();
    RE.get_or_init(|| {
        let alternation: Vec<String> = CONTENT_RULES
            .iter()
            .map(|(_, p)| format!("({p})"))
            .collect();
        let built = Regex::new(&format!("(?-u){}", alternation.join("|")));
        if let Err(e) = &built {
            tracing::error!(error = %e, "the secret content patterns do not compile");
        }
        built.ok()
    })
    .as_ref()
}

/// The content rule `bytes` trips, if any. Binary files are scanned too.
pub fn scan_content(bytes: &[u8]) -> Option<&'static str> {
    let Some(re) = content_regex() else {
        // Fail closed: a scanner that cannot run blocks everything it is asked about.
        return Some("scanner-unavailable");
    };
    let caps = re.captures(bytes)?;
    CONTENT_RULES
        .iter()
        .enumerate()
        .find(|(i, _)| caps.get(i + 1).is_some())
        .map(|(_, (name, _))| *name)
}

/// Every content rule's name, for documentation and tests.
pub fn content_rule_names() -> Vec<&'static str> {
    CONTENT_RULES.iter().map(|(n, _)| *n).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotenv_examples_pass_the_name_check_but_not_content() {
        let p = SecretPolicy::default();
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
        let key = b"AWS_KEY=AKIAABCDEFGHIJKLMNOP\n";
        let b = p.check(".env.example", key).unwrap();
        assert_eq!(b.reason, BlockReason::SecretContent);
        assert_eq!(b.rule, "aws-access-key-id");
    }

    #[test]
    fn precedence_is_exclusion_then_exception_then_content() {
        let p = SecretPolicy::new(
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
        let b = p
            .check("tests/.env.test", b"-----BEGIN PRIVATE KEY-----\n")
            .unwrap();
        assert_eq!(b.reason, BlockReason::SecretContent);
        // Without the exception the name is blocked.
        assert_eq!(
            SecretPolicy::default()
                .check_name("tests/.env.test")
                .unwrap()
                .0,
            BlockReason::SecretFile
        );
    }

    #[test]
    fn the_json_forms_are_strict() {
        assert!(SecretPolicy::from_json(None, None).is_ok());
        assert!(SecretPolicy::from_json(Some("[]"), Some("[]")).is_ok());
        let p = SecretPolicy::from_json(
            Some(r#"["*.secret"]"#),
            Some(r#"{"version": 2, "namePatterns": ["fixtures/.env.local"]}"#),
        )
        .unwrap();
        assert_eq!(p.exclusions(), ["*.secret"]);
        assert_eq!(p.exceptions(), ["fixtures/.env.local"]);
        let legacy = SecretPolicy::from_json(None, Some(r#"["fixtures/.env.local"]"#)).unwrap_err();
        assert_eq!(legacy.code, ErrorCode::ConfigInvalid);
        assert!(legacy.message.contains("version"));
        assert!(!legacy.message.contains("fixtures"), "{}", legacy.message);
        for bad in [
            r#"{"version": 1, "namePatterns": []}"#,
            r#"{"version": 2, "namePatterns": ["../x"]}"#,
            r#"{"version": 2, "other": 1}"#,
            "nope",
        ] {
            assert!(SecretPolicy::from_json(None, Some(bad)).is_err(), "{bad}");
        }
        assert!(SecretPolicy::from_json(Some(r#"["/abs"]"#), None).is_err());
    }

    #[test]
    fn every_rule_compiles() {
        assert!(content_regex().is_some());
        assert_eq!(scan_content(b"fn main() {}\n"), None);
    }
}
