//! Agent cards: what each served agent's card says (built once at boot from the agent's own
//! `initialize` answer and the front's options) and how it is served over HTTP: the card's
//! bytes are made once, in a canonical form (object keys sorted), and answered with
//! `Cache-Control`, a strong `ETag` that is the sha256 of those bytes (so it changes exactly
//! when the content does), `Last-Modified` (when those bytes were made), and `304 Not
//! Modified` to a conditional `GET` whose `If-None-Match` (or, without one,
//! `If-Modified-Since`) says the client's copy is current (RFC 9110 §13).
//!
//! This module owns the card's content and its HTTP caching; it never reads a request body
//! and never decides anything about a task.

use crate::{A2aOptions, PROTOCOL_VERSION};
use a2a::{
    AgentCapabilities, AgentCard, AgentExtension, AgentInterface, AgentSkill,
    HttpAuthSecurityScheme,
};
use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use legate_core::remote::{
    COPY_WORKSPACE_EXTENSION, PLAN_CHANGES_EXTENSION, SUPERVISION_EXTENSION,
};
use legate_engine::Engine;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long a client may keep a card without asking again (`Cache-Control: max-age`).
pub const CARD_MAX_AGE_SECS: u64 = 300;

/// The extensions every Legate card declares (`capabilities.extensions`), none required.
pub fn extensions() -> Vec<AgentExtension> {
    vec![
        AgentExtension {
            uri: SUPERVISION_EXTENSION.to_string(),
            description: Some(
                "This server supervises its agents' permission requests itself: every tool call \
             the agent asks permission for is decided by this Legate's supervisor, never \
             forwarded to the caller."
                    .into(),
            ),
            required: Some(false),
            params: None,
        },
        AgentExtension {
            uri: COPY_WORKSPACE_EXTENSION.to_string(),
            description: Some(
                "Copy tasks run here for a caller that reviews them itself: send a copy's files \
             with the message (file parts and a manifest data part, bounded by this server's \
             a2a.max_transfer_bytes); the task works on a fresh copy of exactly those files \
             and its patch artifact comes back with the resulting files' manifest."
                    .into(),
            ),
            required: Some(false),
            params: None,
        },
        AgentExtension {
            uri: PLAN_CHANGES_EXTENSION.to_string(),
            description: Some(
                "Plan updates as what changed: a message naming this extension gets, on its \
             stream, each plan after the first as the entries changed, added or removed \
             (with a whole plan whenever the changes would outgrow it); without it every \
             plan update is the whole plan."
                    .into(),
            ),
            required: Some(false),
            params: None,
        },
    ]
}

/// An agent's card, built from its own `initialize` answer.
pub fn card(
    engine: &Engine,
    agent: &str,
    info_name: Option<&str>,
    info_version: Option<&str>,
    options: &A2aOptions,
    path: &str,
) -> AgentCard {
    let description = engine
        .agents()
        .agent(agent)
        .ok()
        .and_then(|a| a.description.clone())
        .unwrap_or_else(|| {
            format!("Legate agent `{agent}`: delegated coding tasks, supervised and sandboxed.")
        });
    let url = format!("{}{}", options.public_url, path);
    let interface = |binding: &str| AgentInterface {
        url: url.clone(),
        protocol_binding: binding.to_string(),
        protocol_version: PROTOCOL_VERSION.to_string(),
        tenant: None,
    };
    let (security_schemes, security_requirements) = match &options.token {
        Some(_) => (
            Some(HashMap::from([(
                "bearer".to_string(),
                a2a::SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                    scheme: "bearer".into(),
                    description: Some("The token `legate serve` printed at start.".into()),
                    bearer_format: None,
                }),
            )])),
            Some(vec![HashMap::from([("bearer".to_string(), Vec::new())])]),
        ),
        None => (None, None),
    };
    AgentCard {
        name: info_name.unwrap_or(agent).to_string(),
        description,
        version: info_version.unwrap_or("unknown").to_string(),
        supported_interfaces: vec![
            interface(a2a::TRANSPORT_PROTOCOL_JSONRPC),
            interface(a2a::TRANSPORT_PROTOCOL_HTTP_JSON),
        ],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            push_notifications: Some(false),
            extensions: Some(extensions()),
            extended_agent_card: Some(false),
        },
        default_input_modes: vec!["text/plain".into()],
        default_output_modes: vec!["text/plain".into(), "application/json".into()],
        skills: vec![AgentSkill {
            id: "delegate".into(),
            name: "Delegated coding task".into(),
            description: format!(
                "Runs a coding task with `{agent}` in a sandbox it cannot leave; every permission is decided by Legate's supervisor. Continue a conversation with the same contextId."
            ),
            tags: vec!["coding".into(), "delegation".into(), "legate".into()],
            examples: Some(vec!["What is in this workspace?".into()]),
            input_modes: None,
            output_modes: None,
            security_requirements: None,
        }],
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_schemes,
        security_requirements,
        signatures: None,
    }
}

/// A card as served: its bytes, their `ETag` and their `Last-Modified`.
#[derive(Debug, Clone)]
pub struct CardDocument {
    bytes: Vec<u8>,
    etag: String,
    modified: SystemTime,
}

impl CardDocument {
    /// Serializes `card` canonically (object keys sorted, so the same content always gives
    /// the same bytes, whatever order its maps iterate in), made at `modified`.
    pub fn new(card: &AgentCard, modified: SystemTime) -> Result<Self, serde_json::Error> {
        let value = sorted(serde_json::to_value(card)?);
        let bytes = serde_json::to_vec(&value)?;
        let etag = format!("\"{}\"", hex(&Sha256::digest(&bytes)));
        // HTTP dates have whole seconds: a client echoes back the truncated time.
        let secs = modified
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        Ok(Self {
            bytes,
            etag,
            modified: UNIX_EPOCH + Duration::from_secs(secs),
        })
    }

    /// The strong entity tag, quoted: `"<sha256 of the bytes, hex>"`.
    pub fn etag(&self) -> &str {
        &self.etag
    }

    /// The card's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Whether a request with these headers already holds the current card (RFC 9110
    /// §13.1.2 and §13.1.3: `If-None-Match` decides when present; otherwise
    /// `If-Modified-Since`, when it is a valid date, not before the card's time).
    pub fn not_modified(&self, headers: &HeaderMap) -> bool {
        let inm: Vec<&str> = headers
            .get_all(header::IF_NONE_MATCH)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        if !inm.is_empty() {
            return inm.iter().any(|v| if_none_match_hits(v, &self.etag));
        }
        headers
            .get(header::IF_MODIFIED_SINCE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| httpdate::parse_http_date(v.trim()).ok())
            .is_some_and(|since| self.modified <= since)
    }

    /// The answer to a `GET` of the card with `headers`: the card, or `304` without a body.
    pub fn respond(&self, headers: &HeaderMap) -> Response {
        let mut resp = if self.not_modified(headers) {
            StatusCode::NOT_MODIFIED.into_response()
        } else {
            let mut r = Response::new(Body::from(self.bytes.clone()));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        };
        let h = resp.headers_mut();
        if let Ok(v) = HeaderValue::from_str(&format!("public, max-age={CARD_MAX_AGE_SECS}")) {
            h.insert(header::CACHE_CONTROL, v);
        }
        h.insert(
            header::ACCESS_CONTROL_ALLOW_ORIGIN,
            HeaderValue::from_static("*"),
        );
        if let Ok(v) = HeaderValue::from_str(&self.etag) {
            h.insert(header::ETAG, v);
        }
        if let Ok(v) = HeaderValue::from_str(&httpdate::fmt_http_date(self.modified)) {
            h.insert(header::LAST_MODIFIED, v);
        }
        resp
    }
}

/// Whether one `If-None-Match` field value names `etag` (weak comparison, §13.1.2): `*`, or
/// a comma-separated list of entity tags, each optionally `W/`-prefixed. Anything that is
/// not a well-formed list entry matches nothing.
pub fn if_none_match_hits(field: &str, etag: &str) -> bool {
    let field = field.trim();
    if field == "*" {
        return true;
    }
    field.split(',').any(|tag| {
        let tag = tag.trim();
        let tag = tag.strip_prefix("W/").unwrap_or(tag);
        tag.len() >= 2 && tag.starts_with('"') && tag.ends_with('"') && tag == etag
    })
}

/// `value` with every object's keys in sorted order.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut s, b| {
        // Writing to a String cannot fail.
        let _ = write!(s, "{b:02x}");
        s
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn doc(name: &str, at: u64) -> CardDocument {
        let card: AgentCard = serde_json::from_value(serde_json::json!({
            "name": name, "description": "d", "version": "1",
            "supportedInterfaces": [], "capabilities": {},
            "defaultInputModes": [], "defaultOutputModes": [], "skills": []
        }))
        .unwrap();
        CardDocument::new(&card, UNIX_EPOCH + Duration::from_millis(at)).unwrap()
    }

    #[test]
    fn the_etag_follows_the_content_not_the_version() {
        let a = doc("a", 0);
        assert_eq!(a.etag(), doc("a", 5_000).etag());
        assert_ne!(a.etag(), doc("b", 0).etag());
        assert_eq!(a.etag().len(), 66);
    }

    #[test]
    fn conditional_requests() {
        let d = doc("a", 1_500_700);
        let mut h = HeaderMap::new();
        assert!(!d.not_modified(&h));
        h.insert(header::IF_NONE_MATCH, d.etag().parse().unwrap());
        assert!(d.not_modified(&h));
        // If-None-Match decides, even when If-Modified-Since would say "current".
        h.insert(header::IF_NONE_MATCH, "\"other\"".parse().unwrap());
        h.insert(
            header::IF_MODIFIED_SINCE,
            httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(10_000))
                .parse()
                .unwrap(),
        );
        assert!(!d.not_modified(&h));
        h.remove(header::IF_NONE_MATCH);
        assert!(d.not_modified(&h));
        // The card's time is truncated to seconds: the date it gave back is current.
        let given = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(1_500));
        h.insert(header::IF_MODIFIED_SINCE, given.parse().unwrap());
        assert!(d.not_modified(&h));
        let older = httpdate::fmt_http_date(UNIX_EPOCH + Duration::from_secs(1_499));
        h.insert(header::IF_MODIFIED_SINCE, older.parse().unwrap());
        assert!(!d.not_modified(&h));
        h.insert(header::IF_MODIFIED_SINCE, "yesterday".parse().unwrap());
        assert!(!d.not_modified(&h));
    }

    #[test]
    fn if_none_match_lists() {
        let tag = "\"abc\"";
        for hit in ["*", "\"abc\"", "W/\"abc\"", "\"x\", \"abc\"", " \"abc\" "] {
            assert!(if_none_match_hits(hit, tag), "{hit}");
        }
        for miss in ["", "abc", "\"ab\"", "\"abc", "W/abc", "\"x\",", "\"", "**"] {
            assert!(!if_none_match_hits(miss, tag), "{miss}");
        }
    }

    proptest! {
        /// Any header text the client sends matches only when it names the tag (or is `*`).
        #[test]
        fn if_none_match_never_matches_without_the_tag(field in "[ -~]{0,80}") {
            let tag = "\"0123456789abcdef\"";
            let hit = if_none_match_hits(&field, tag);
            if !field.contains(tag) {
                prop_assert_eq!(hit, field.trim() == "*");
            }
        }

        /// The same content gives the same bytes and tag, whatever the key order.
        #[test]
        fn canonical_bytes(keys in proptest::collection::vec("[a-z]{1,6}", 0..8)) {
            let forward: serde_json::Map<String, Value> =
                keys.iter().map(|k| (k.clone(), Value::from(k.len()))).collect();
            let backward: serde_json::Map<String, Value> =
                keys.iter().rev().map(|k| (k.clone(), Value::from(k.len()))).collect();
            prop_assert_eq!(
                serde_json::to_vec(&sorted(Value::Object(forward))).unwrap(),
                serde_json::to_vec(&sorted(Value::Object(backward))).unwrap()
            );
        }
    }
}
