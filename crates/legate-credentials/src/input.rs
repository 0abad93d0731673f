//! The input check: text a caller hands Legate (a prompt, a message, a decision, a memory
//! entry) that holds a high-confidence credential is refused before anything stores or
//! forwards it.
//!
//! This module owns [`credential_in`] and [`refuse_credential`]. It uses the content rules the
//! copy preflight uses (`rules.toml`, one definition): private key blocks, AWS key ids,
//! GitHub, Slack, OpenAI, Anthropic, Google, Stripe, JWTs and the rest of the table. It must
//! never return, log or put into an error any part of the text it judges: only the kind of
//! credential (the rule id) and the name of the field.

use legate_core::{Error, ErrorCode};

/// The kind of high-confidence credential `text` holds (a rule id such as
/// `aws-access-key-id`), never the value. Fails closed: a rule table that could not be
/// built answers `scanner-unavailable` for every text.
pub fn credential_in(text: &str) -> Option<&'static str> {
    if text.is_empty() {
        return None;
    }
    super::scan_content(text.as_bytes())
}

/// `Ok` when `text` holds no credential, else `INPUT_SECRET_DETECTED` naming `field` (a
/// fixed, caller-chosen label such as `prompt` or `decision 2`) and the kind only.
pub fn refuse_credential(field: &str, text: &str) -> Result<(), Error> {
    match credential_in(text) {
        None => Ok(()),
        Some(kind) => {
            tracing::warn!(field, kind, "input refused: it holds a credential");
            Err(Error::new(
                ErrorCode::InputSecretDetected,
                format!(
                    "{field} looks like it holds a credential ({kind}); nothing was stored or sent. Remove it: pass secrets through the agent's own configuration"
                ),
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fakes::fakes;
    use proptest::prelude::*;

    #[test]
    fn every_named_kind_is_found_and_reported_by_kind_only() {
        for (secret, kind) in fakes() {
            let text = format!("please deploy with this: {secret} and tell me");
            assert_eq!(credential_in(&text), Some(kind), "{kind}");
            let err = refuse_credential("prompt", &text).unwrap_err();
            assert_eq!(err.code, ErrorCode::InputSecretDetected);
            assert!(err.message.starts_with("prompt "), "{}", err.message);
            // No run of 8 characters of the value reaches the message.
            let s: Vec<char> = secret.chars().collect();
            for w in s.windows(8) {
                let w: String = w.iter().collect();
                if !w.contains(' ') && !w.contains('-') && !w.contains('\n') {
                    assert!(!err.message.contains(&w), "{kind} echoed {w}");
                }
            }
        }
    }

    #[test]
    fn ordinary_prompts_and_talk_about_credentials_pass() {
        for ok in [
            "",
            "Fix the failing test in src/lib.rs and explain why it failed.",
            "The parser must reject '-----BEGIN PRIVATE KEY-----' headers without a body.",
            "Read the key from $AWS_ACCESS_KEY_ID, never hard-code AKIAIOSFODNN7EXAMPLE.",
            "Set GITHUB_TOKEN=${GITHUB_TOKEN} in CI; tokens start with ghp_.",
            "sha512-Zm9vYmFyYmF6cXV4cXV1eGZvb2JhcmJhenF1eHF1dXhmb29iYXJiYXpxdXg=",
        ] {
            assert_eq!(credential_in(ok), None, "{ok}");
            assert!(refuse_credential("prompt", ok).is_ok());
        }
    }

    proptest! {
        #[test]
        fn a_planted_credential_is_found_anywhere_in_any_text(
            before in "[ -~\n]{0,200}",
            after in "[ -~\n]{0,200}",
            which in 0usize..12,
        ) {
            let (secret, _) = fakes().swap_remove(which);
            // Separate the token from surrounding word characters, as any prompt would.
            let text = format!("{before}\n{secret}\n{after}");
            prop_assert!(credential_in(&text).is_some());
        }

        #[test]
        fn arbitrary_text_never_panics_and_never_yields_its_bytes(text in "\\PC{0,400}") {
            if let Some(kind) = credential_in(&text) {
                prop_assert!(kind.bytes().all(|b| b.is_ascii_lowercase() || b == b'-' || b.is_ascii_digit()));
            }
        }
    }
}
