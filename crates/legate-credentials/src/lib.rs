//! Legate's credential detector: credentials recognised in text and files by rules that are
//! data.
//!
//! This crate owns the rule table (`rules.toml`, embedded, compiled by `rules` and run by
//! `scan`): credential file names (`.env` and its variants, private keys, keystores,
//! credential and state files of known tools), names the content must confirm (`*.key`
//! unless a zip), and high-confidence credential patterns in content, with the `glob` pattern
//! language the name rules (and the copy's configured exclusions and exceptions) are written
//! in. Its callers are the copy preflight (`legate-workspace`), the engine's input check of
//! prompts, messages, decisions and memory ([`credential_in`], [`refuse_credential`]), and the
//! engine's redaction of what agents print before it is stored or relayed ([`redact`],
//! [`StreamRedactor`], each credential replaced by `[REDACTED:<rule id>]`).
//!
//! It must never do I/O beyond reading what it is handed, and never decide what to do about a
//! hit: it answers a rule id (or hides the match behind a marker naming it), and the caller
//! blocks, refuses, redacts or lets pass. It never returns, logs or puts into an error any
//! part of a match. It does not claim to find arbitrary
//! secrets: unknown formats, encrypted or obfuscated data pass. A rule table that could not be
//! built fails closed: every check answers [`SCANNER_UNAVAILABLE`].
//!
//! ```
//! use legate_credentials::{credential_in, credential_name, refuse_credential};
//!
//! let key = format!("{}{}", "AKIA", "Q3ZL7RTX2WNVD6KM");
//! let prompt = format!("deploy with {key} please");
//! assert_eq!(credential_in(&prompt), Some("aws-access-key-id"));
//! let err = refuse_credential("the prompt", &prompt).unwrap_err();
//! assert!(!err.message.contains(&key));
//! assert_eq!(credential_in("Fix the failing test in src/lib.rs."), None);
//! assert!(credential_name("app/.env").is_some());
//! assert_eq!(credential_name(".env.example"), None);
//! ```

#[cfg(test)]
mod fakes;
mod glob;
mod input;
mod redact;
mod rules;
mod scan;

pub use glob::Glob;
pub use input::{credential_in, refuse_credential};
pub use redact::{CONTEXT, MAX_HOLD, StreamRedactor, TAIL, marker, redact, redact_escaped};
pub use rules::{RuleInfo, RuleKind, secret_rules};

/// The rule id every check answers when the rule table could not be built: fail closed.
pub const SCANNER_UNAVAILABLE: &str = "scanner-unavailable";

/// The name rule `path` trips, if any: the rules that the name alone decides (a rule the
/// content must confirm, such as `*.key`, is [`content_confirmed_name`]).
pub fn credential_name(path: &str) -> Option<&'static str> {
    let Ok(set) = rules::ruleset() else {
        return Some(SCANNER_UNAVAILABLE);
    };
    set.name(path, false).map(|r| r.id.as_str())
}

/// The name rule of `path` that only its content can confirm (`*.key`, unless it is a zip
/// archive such as a Keynote file); [`confirmed_name`] judges the bytes.
pub fn content_confirmed_name(path: &str) -> Option<&'static str> {
    let Ok(set) = rules::ruleset() else {
        return Some(SCANNER_UNAVAILABLE);
    };
    set.name(path, true).map(|r| r.id.as_str())
}

/// Whether `bytes` confirm the name rule `rule` (from [`content_confirmed_name`]): the rule
/// id when they do, `None` when they do not (a `*.key` that is a zip archive).
pub fn confirmed_name(rule: &'static str, bytes: &[u8]) -> Option<&'static str> {
    let Ok(set) = rules::ruleset() else {
        return Some(SCANNER_UNAVAILABLE);
    };
    let unless = set
        .names
        .iter()
        .find(|r| r.id == rule)
        .and_then(|r| r.unless_content);
    scan::confirmed(unless, bytes).then_some(rule)
}

/// The content rule `bytes` trips, if any. Binary files are scanned too, whole.
pub fn scan_content(bytes: &[u8]) -> Option<&'static str> {
    let Ok(set) = rules::ruleset() else {
        // Fail closed: a scanner that cannot run blocks everything it is asked about.
        return Some(SCANNER_UNAVAILABLE);
    };
    set.scan(bytes)
}

/// What every verdict of this detector depends on besides the bytes and the path it is
/// handed: the crate's version and the rule table as shipped. A cache of verdicts keys on it
/// (`legate-workspace`'s scan verdict cache), so that a new table or detector invalidates
/// every verdict made by the old one.
pub fn detector_identity() -> (&'static str, &'static str) {
    (env!("CARGO_PKG_VERSION"), rules::RULES_TOML)
}

/// Every content rule's id, in the order they are tried, for documentation and tests.
pub fn content_rule_names() -> Vec<&'static str> {
    secret_rules()
        .into_iter()
        .filter(|r| r.kind == RuleKind::Content)
        .map(|r| r.id)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_compiles() {
        assert!(rules::ruleset().is_ok());
        assert_eq!(scan_content(b"fn main() {}\n"), None);
    }

    /// `ssh-keygen -t ed25519 -N ""` writes an OpenSSH key whose first line is the same for
    /// every such key (`openssh-key-v1`, cipher `none`, …: little entropy); the lines after it
    /// are the key. Issue 29, finding 6: it passed every check. Its shape, with random key
    /// bytes, is caught in every place a credential is looked for, and redacted.
    #[test]
    fn an_unencrypted_ed25519_openssh_key_is_caught() {
        use fakes::{B64, rnd};
        let header = ["-----BEGIN", "OPENSSH PRIVATE KEY-----"].join(" ");
        let key = format!(
            "{header}\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\nQyNTUxOQAAACC{}\n{}\n{}\nAAAEC{}\n-----END OPENSSH PRIVATE KEY-----\n",
            rnd(B64, 57, 1),
            rnd(B64, 70, 2),
            rnd(B64, 70, 3),
            rnd(B64, 60, 4),
        );
        assert_eq!(scan_content(key.as_bytes()), Some("private-key-block"));
        assert!(credential_in(&key).is_some());
        let redacted = redact(&key);
        assert!(!redacted.contains(&rnd(B64, 57, 1)), "{redacted}");
        // As a prompt or memory would carry it, on one line with escaped newlines.
        let escaped = key.replace('\n', "\\n");
        assert_eq!(scan_content(escaped.as_bytes()), Some("private-key-block"));
    }

    #[test]
    fn a_zip_named_key_is_not_confirmed() {
        let Some(rule) = content_confirmed_name("slides.key") else {
            panic!("*.key is a name the content confirms");
        };
        assert_eq!(confirmed_name(rule, b"PK\x03\x04rest"), None);
        assert_eq!(confirmed_name(rule, b"-----BEGIN"), Some(rule));
        assert_eq!(credential_name("slides.key"), None);
    }
}
