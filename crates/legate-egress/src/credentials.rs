//! Credentials the proxy sets itself: the agent holds a placeholder for each, the proxy the
//! real value, and for a connection allowed by one named rule (the preset's model host) every
//! placeholder in a request head (its target and its header values) is replaced by the real
//! value before the head goes upstream. Nowhere else: a request to any other destination, and
//! every request body, goes as the agent wrote it.
//!
//! This module never logs a value, placeholder or real, and never shows one in `Debug`.

use crate::intercept::Interception;
use std::sync::Arc;

/// The prefix of every placeholder ([`Credentials::placeholder`]).
pub const PLACEHOLDER_PREFIX: &str = "legate-credential-";

/// What one session's proxy substitutes, and where.
#[derive(Clone)]
pub struct Credentials {
    /// The id of the rule whose connections get the real values (`preset:claude`, …).
    rule_id: String,
    /// (placeholder, real value) pairs.
    secrets: Vec<(String, String)>,
    /// How TLS to those destinations is terminated and re-originated; `None`: a `CONNECT`
    /// is relayed as it is (its placeholders reach the destination unchanged).
    tls: Option<Arc<Interception>>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("rule_id", &self.rule_id)
            .field("secrets", &self.secrets.len())
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Credentials {
    /// Substitutes `secrets` ((placeholder, real value) pairs) on connections the rule
    /// `rule_id` allows. A pair whose placeholder is empty, or whose real value has a control
    /// character (it could end a header line), is dropped, with a warning naming neither.
    pub fn new(rule_id: impl Into<String>, secrets: Vec<(String, String)>) -> Self {
        let secrets = secrets
            .into_iter()
            .filter(|(placeholder, real)| {
                let fit = !placeholder.is_empty() && !real.bytes().any(|b| b.is_ascii_control());
                if !fit {
                    tracing::warn!(
                        "a credential the proxy was to set holds a control character; it is not set"
                    );
                }
                fit
            })
            .collect();
        Self {
            rule_id: rule_id.into(),
            secrets,
            tls: None,
        }
    }

    /// With TLS to the rule's destinations terminated by `tls` (so that requests inside a
    /// `CONNECT` get their heads rewritten too).
    #[must_use]
    pub fn with_tls(mut self, tls: Arc<Interception>) -> Self {
        self.tls = Some(tls);
        self
    }

    /// A fresh placeholder: [`PLACEHOLDER_PREFIX`] and 32 random hex digits.
    pub fn placeholder() -> String {
        format!("{PLACEHOLDER_PREFIX}{}", uuid::Uuid::new_v4().simple())
    }

    /// The rule whose connections get the real values.
    pub fn rule_id(&self) -> &str {
        &self.rule_id
    }

    /// Whether a connection the gate allowed under `rule_id` gets the real values.
    pub(crate) fn applies(&self, rule_id: Option<&str>) -> bool {
        !self.secrets.is_empty() && rule_id == Some(self.rule_id.as_str())
    }

    /// The TLS interception, when there is one.
    pub(crate) fn tls(&self) -> Option<&Arc<Interception>> {
        self.tls.as_ref()
    }

    /// `bytes` with every placeholder replaced by its real value; `None` when none occurs.
    pub(crate) fn substitute(&self, bytes: &[u8]) -> Option<Vec<u8>> {
        let mut out: Option<Vec<u8>> = None;
        for (placeholder, real) in &self.secrets {
            let current = out.as_deref().unwrap_or(bytes);
            if let Some(replaced) = replace(current, placeholder.as_bytes(), real.as_bytes()) {
                out = Some(replaced);
            }
        }
        out
    }
}

/// `haystack` with every `needle` replaced by `with`; `None` when there is none.
fn replace(haystack: &[u8], needle: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    if needle.is_empty() || haystack.len() < needle.len() {
        return None;
    }
    let mut out = Vec::new();
    let mut last = 0;
    let mut i = 0;
    let mut found = false;
    while i + needle.len() <= haystack.len() {
        if &haystack[i..i + needle.len()] == needle {
            out.extend_from_slice(&haystack[last..i]);
            out.extend_from_slice(with);
            i += needle.len();
            last = i;
            found = true;
        } else {
            i += 1;
        }
    }
    if !found {
        return None;
    }
    out.extend_from_slice(&haystack[last..]);
    Some(out)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_fresh_and_shaped() {
        let (a, b) = (Credentials::placeholder(), Credentials::placeholder());
        assert_ne!(a, b);
        let hex = a.strip_prefix(PLACEHOLDER_PREFIX).unwrap();
        assert_eq!(hex.len(), 32);
        assert!(hex.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn substitutes_every_occurrence_of_every_placeholder() {
        let c = Credentials::new(
            "preset:gemini",
            vec![
                ("PH1".into(), "real-one".into()),
                ("PH2".into(), "real-two".into()),
                ("bad".into(), "x\r\nInjected: 1".into()),
            ],
        );
        assert!(c.applies(Some("preset:gemini")));
        assert!(!c.applies(Some("network.allow[0]")));
        assert!(!c.applies(None));
        let out = c
            .substitute(b"GET /?key=PH1 HTTP/1.1\r\nA: PH1 PH2\r\nB: bad\r\n\r\n")
            .unwrap();
        assert_eq!(
            out,
            b"GET /?key=real-one HTTP/1.1\r\nA: real-one real-two\r\nB: bad\r\n\r\n"
        );
        assert_eq!(c.substitute(b"nothing here"), None);
        assert!(!format!("{c:?}").contains("real"));
        assert!(!Credentials::new("r", Vec::new()).applies(Some("r")));
    }
}
