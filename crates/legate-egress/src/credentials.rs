//! Credentials the proxy sets itself: the agent holds a placeholder for each, the proxy the
//! real value, and for a connection allowed by one named rule (the preset's model host) a
//! placeholder is replaced by the real value in a credential's own slots only, and only where
//! the slot holds exactly the placeholder: the headers `x-api-key`, `x-goog-api-key` and
//! `authorization` (the placeholder, or `Bearer` and the placeholder), and a `key=` query
//! parameter. Nowhere else: a placeholder the agent puts in any other header, in the path or
//! in a body goes as it wrote it, so no error message of the model host can echo the real
//! value back; a request to any other destination is never touched. On plain HTTP the real
//! value is set only when the agent's model URL is explicitly `http://` (a local model
//! server): a request sent in clear to the public host would hand the key to whoever answers
//! for its address.
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
    /// Whether plain-HTTP requests get the real values (the model URL is `http://`).
    plain_http: bool,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credentials")
            .field("rule_id", &self.rule_id)
            .field("secrets", &self.secrets.len())
            .field("tls", &self.tls.is_some())
            .field("plain_http", &self.plain_http)
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
            plain_http: false,
        }
    }

    /// With the real values set on plain-HTTP requests too: only for a model URL that is
    /// explicitly `http://` (never the public host, reached over TLS).
    #[must_use]
    pub fn with_plain_http(mut self, plain_http: bool) -> Self {
        self.plain_http = plain_http;
        self
    }

    /// Whether plain-HTTP requests get the real values.
    pub(crate) fn plain_http(&self) -> bool {
        self.plain_http
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

    /// The real value for a header `name` whose value is exactly a placeholder (or, for
    /// `authorization`, `Bearer` and a placeholder); `None` for any other header or value.
    pub(crate) fn header(&self, name: &str, value: &[u8]) -> Option<Vec<u8>> {
        let name = name.to_ascii_lowercase();
        if !["x-api-key", "x-goog-api-key", "authorization"].contains(&name.as_str()) {
            return None;
        }
        for (placeholder, real) in &self.secrets {
            if value == placeholder.as_bytes() {
                return Some(real.as_bytes().to_vec());
            }
            if name == "authorization"
                && value.len() == 7 + placeholder.len()
                && value[..7].eq_ignore_ascii_case(b"bearer ")
                && &value[7..] == placeholder.as_bytes()
            {
                let mut out = value[..7].to_vec();
                out.extend_from_slice(real.as_bytes());
                return Some(out);
            }
        }
        None
    }

    /// A request target whose `key=` query parameter is exactly a placeholder, with the real
    /// value there; `None` when it has none.
    pub(crate) fn target(&self, target: &str) -> Option<String> {
        let (path, query) = target.split_once('?')?;
        let mut changed = false;
        let params: Vec<String> = query
            .split('&')
            .map(|param| {
                let real = param.strip_prefix("key=").and_then(|v| {
                    self.secrets
                        .iter()
                        .find(|(placeholder, _)| placeholder == v)
                        .map(|(_, real)| real)
                });
                match real {
                    Some(real) => {
                        changed = true;
                        format!("key={real}")
                    }
                    None => param.to_string(),
                }
            })
            .collect();
        changed.then(|| format!("{path}?{}", params.join("&")))
    }

    /// A plain-HTTP request head (request line, header lines, blank line) with
    /// [`Self::target`] and [`Self::header`] applied; `None` when nothing was replaced.
    pub(crate) fn head(&self, head: &[u8]) -> Option<Vec<u8>> {
        let text = std::str::from_utf8(head).ok()?;
        let mut changed = false;
        let mut out = String::with_capacity(head.len());
        for (n, line) in text.split("\r\n").enumerate() {
            if n > 0 {
                out.push_str("\r\n");
            }
            if n == 0 {
                let mut parts = line.splitn(3, ' ');
                let (method, target, version) = (parts.next(), parts.next(), parts.next());
                if let (Some(method), Some(target), Some(version)) = (method, target, version)
                    && let Some(real) = self.target(target)
                {
                    out.push_str(&format!("{method} {real} {version}"));
                    changed = true;
                    continue;
                }
            } else if let Some((name, value)) = line.split_once(':')
                && let Some(real) = self.header(name.trim(), value.trim().as_bytes())
                && let Ok(real) = String::from_utf8(real)
            {
                out.push_str(&format!("{name}: {real}"));
                changed = true;
                continue;
            }
            out.push_str(line);
        }
        changed.then(|| out.into_bytes())
    }
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
    fn substitutes_only_a_credential_slot_holding_exactly_a_placeholder() {
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
            .head(b"GET /v1/PH1?key=PH1&x=PH2 HTTP/1.1\r\nx-api-key: PH2\r\nAuthorization: Bearer PH1\r\nanthropic-beta: PH1\r\nA: PH1 PH2\r\nB: bad\r\n\r\n")
            .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "GET /v1/PH1?key=real-one&x=PH2 HTTP/1.1\r\nx-api-key: real-two\r\nAuthorization: Bearer real-one\r\nanthropic-beta: PH1\r\nA: PH1 PH2\r\nB: bad\r\n\r\n"
        );
        // A placeholder anywhere but a slot, or a slot holding more than the placeholder,
        // stays: nothing the host could echo back carries the real value.
        assert_eq!(
            c.head(b"GET /PH1 HTTP/1.1\r\nX-Debug: PH1\r\nx-api-key: PH1x\r\n\r\n"),
            None
        );
        assert_eq!(c.header("authorization", b"Basic PH1"), None);
        assert_eq!(c.target("/models/PH1:go?key=PH1x"), None);
        assert!(!format!("{c:?}").contains("real"));
        assert!(!Credentials::new("r", Vec::new()).applies(Some("r")));
        assert!(!c.plain_http());
        assert!(c.clone().with_plain_http(true).plain_http());
    }
}
