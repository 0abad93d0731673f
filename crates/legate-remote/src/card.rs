//! Finding a remote agent: its card (fetched bounded, from the configured URL or the
//! well-known path beneath it), the interface Legate talks to (JSON-RPC preferred, then
//! HTTP+JSON), whether the remote supervises its agent, and a check that the token is taken.
//!
//! A tapped task's connection records the card fetch and the token check on its wire tap
//! (`crate::tap`): each request as `GET <url>` (the URL without any user or password in it)
//! or its JSON-RPC body, each answer's body, or `HTTP <status>` for a refusal. Never a header:
//! the bearer token travels in one.
//!
//! This module owns the card fetch and every HTTP failure before a session exists, mapped to
//! `REMOTE_UNREACHABLE`, `REMOTE_UNAUTHENTICATED` or `REMOTE_PROTOCOL_ERROR` with the remote's
//! own (bounded, escaped) words. It never follows a card to another origin: an interface on a
//! host other than the card's would receive the bearer token, and is refused.

use crate::errors::{excerpt, protocol, unreachable};
use crate::tap::TapRoute;
use crate::token::Bearer;
use a2a::{AgentCard, AgentInterface};
use legate_core::remote::{
    COPY_WORKSPACE_EXTENSION, PLAN_CHANGES_EXTENSION, SUPERVISION_EXTENSION,
};
use legate_core::{Error, ErrorCode, Result, TapDirection};

/// The well-known card path under a base URL.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// The largest card read, in bytes.
pub const MAX_CARD_BYTES: usize = 1 << 20;
/// The largest error body read, in bytes (only an excerpt is ever shown).
pub const MAX_ERROR_BYTES: usize = 16 << 10;

/// What Legate learned from a remote agent's card.
#[derive(Debug, Clone)]
pub struct Found {
    /// The card, as the remote served it.
    pub card: AgentCard,
    /// Where it was read.
    pub card_url: String,
    /// The interface chosen.
    pub interface: AgentInterface,
    /// Whether the card declares [`SUPERVISION_EXTENSION`].
    pub supervised: bool,
    /// Whether the card declares [`COPY_WORKSPACE_EXTENSION`].
    pub copy_workspace: bool,
    /// Whether the card declares [`PLAN_CHANGES_EXTENSION`] (plans may travel as what
    /// changed).
    pub plan_changes: bool,
    /// Whether the card says it streams.
    pub streaming: bool,
}

/// The card URLs to try for `url` and `agent`, in order: the URL itself when it names a
/// card, else `<url>` (it may serve one) and `<url>/.well-known/agent-card.json`; with
/// `agent`, `<base>/agents/<agent>/.well-known/agent-card.json` only.
pub fn candidates(url: &str, agent: Option<&str>) -> Vec<String> {
    let trimmed = url.trim_end_matches('/');
    let base = trimmed.strip_suffix(CARD_PATH);
    match (agent, base) {
        (Some(a), Some(base)) => vec![format!("{base}/agents/{a}{CARD_PATH}")],
        (Some(a), None) => vec![format!("{trimmed}/agents/{a}{CARD_PATH}")],
        (None, Some(_)) => vec![trimmed.to_string()],
        (None, None) if trimmed.ends_with(".json") => vec![trimmed.to_string()],
        (None, None) => vec![trimmed.to_string(), format!("{trimmed}{CARD_PATH}")],
    }
}

/// The origin (`scheme://host:port`) of `url`, or `None` when it is not an http(s) URL.
pub fn origin(url: &str) -> Option<String> {
    let parsed = reqwest::Url::parse(url).ok()?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return None;
    }
    Some(format!(
        "{}://{}:{}",
        parsed.scheme(),
        parsed.host_str()?,
        parsed.port_or_known_default()?
    ))
}

/// Reads at most `max` bytes of `resp`'s body; `Err` with what was read so far's length when
/// it is longer.
pub async fn bounded_body(
    mut resp: reqwest::Response,
    max: usize,
) -> std::result::Result<Vec<u8>, BodyError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(BodyError::Read)? {
        if body.len() + chunk.len() > max {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Why a body could not be read.
#[derive(Debug)]
pub enum BodyError {
    /// The connection failed mid-body.
    Read(reqwest::Error),
    /// Longer than the bound.
    TooLarge,
}

/// A refused call's status as an error: 401/403 are `REMOTE_UNAUTHENTICATED`, others
/// `REMOTE_PROTOCOL_ERROR`, each quoting an excerpt of the remote's body.
pub async fn status_error(what: &str, resp: reqwest::Response) -> Error {
    let status = resp.status();
    let body = bounded_body(resp, MAX_ERROR_BYTES)
        .await
        .unwrap_or_default();
    let said = remote_words(&body);
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Error::new(
            ErrorCode::RemoteUnauthenticated,
            format!("{what}: the remote refused the bearer token (HTTP {status}){said}"),
        );
    }
    protocol(format!("{what}: HTTP {status}{said}"))
}

/// `: <what the remote said>` from an error body (an A2A or Legate error's `message`, else the
/// body's start), escaped and bounded; empty when it said nothing.
fn remote_words(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let message = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .and_then(|m| m.as_str())
                .map(str::to_owned)
        })
        .unwrap_or_else(|| text.into_owned());
    if message.trim().is_empty() {
        String::new()
    } else {
        format!(": {}", excerpt(&message))
    }
}

/// `url` as the tap shows it: without a user name or password (a URL that does not parse is
/// shown as its origin cannot be, by its scheme only).
fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        Err(_) => "<a URL that does not parse>".to_string(),
    }
}

/// `HTTP <status>` on the tap, for an answer whose body is not recorded.
fn tap_status(tap: &TapRoute, status: reqwest::StatusCode) {
    tap.record(TapDirection::FromAgent, &format!("HTTP {status}"));
}

/// Fetches the card of `url` (and `agent`), with `token` when given, and chooses the
/// interface; the requests and answers go to `tap` (nothing when it is not routed).
pub async fn fetch(
    http: &reqwest::Client,
    url: &str,
    agent: Option<&str>,
    token: Option<&Bearer>,
    tap: &TapRoute,
) -> Result<Found> {
    let mut last = None;
    for candidate in candidates(url, agent) {
        if origin(&candidate).is_none() {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "the remote agent's url must be http:// or https:// (got {})",
                    excerpt(url)
                ),
            ));
        }
        let mut req = http.get(&candidate).header("Accept", "application/json");
        if let Some(t) = token {
            req = req.bearer_auth(t.expose());
        }
        tap.record(TapDirection::ToAgent, &format!("GET {}", shown(&candidate)));
        let resp = req.send().await.map_err(|e| unreachable(&candidate, &e))?;
        if !resp.status().is_success() {
            tap_status(tap, resp.status());
            last = Some(status_error(&format!("no agent card at {candidate}"), resp).await);
            continue;
        }
        let body = match bounded_body(resp, MAX_CARD_BYTES).await {
            Ok(b) => b,
            Err(BodyError::Read(e)) => return Err(unreachable(&candidate, &e)),
            Err(BodyError::TooLarge) => {
                return Err(protocol(format!(
                    "the agent card at {candidate} is larger than {MAX_CARD_BYTES} bytes"
                )));
            }
        };
        tap.record(TapDirection::FromAgent, &String::from_utf8_lossy(&body));
        match serde_json::from_slice::<AgentCard>(&body) {
            Ok(card) => return choose(card, candidate),
            Err(e) => {
                last = Some(protocol(format!(
                    "{candidate} did not answer with an A2A agent card: {}",
                    excerpt(&e.to_string())
                )));
            }
        }
    }
    Err(last.unwrap_or_else(|| protocol(format!("no agent card found at {}", excerpt(url)))))
}

/// The interface to use: JSON-RPC, else HTTP+JSON, of protocol major version 1, on the
/// card's own origin.
pub fn choose(card: AgentCard, card_url: String) -> Result<Found> {
    let card_origin = origin(&card_url);
    let major_one = |i: &AgentInterface| {
        i.protocol_version.is_empty() || i.protocol_version.split('.').next() == Some("1")
    };
    let mut offered = Vec::new();
    let mut chosen = None;
    for binding in [
        a2a::TRANSPORT_PROTOCOL_JSONRPC,
        a2a::TRANSPORT_PROTOCOL_HTTP_JSON,
    ] {
        for i in card.supported_interfaces.iter().take(64) {
            if i.protocol_binding != binding || !major_one(i) {
                continue;
            }
            if origin(&i.url) != card_origin {
                offered.push(excerpt(&i.url));
                continue;
            }
            chosen = Some(i.clone());
            break;
        }
        if chosen.is_some() {
            break;
        }
    }
    let Some(interface) = chosen else {
        let why = if offered.is_empty() {
            "offers neither JSON-RPC nor HTTP+JSON at A2A 1.x".to_string()
        } else {
            format!(
                "offers interfaces only on another origin than its own ({}), which would receive the token",
                offered.join(", ")
            )
        };
        return Err(protocol(format!("the agent card at {card_url} {why}")));
    };
    let extensions: Vec<&str> = card
        .capabilities
        .extensions
        .iter()
        .flatten()
        .map(|e| e.uri.as_str())
        .collect();
    Ok(Found {
        supervised: extensions.contains(&SUPERVISION_EXTENSION),
        copy_workspace: extensions.contains(&COPY_WORKSPACE_EXTENSION),
        plan_changes: extensions.contains(&PLAN_CHANGES_EXTENSION),
        streaming: card.capabilities.streaming == Some(true),
        card,
        card_url,
        interface,
    })
}

/// Checks that the remote takes `token` on the chosen interface, with a read that changes
/// nothing (`GetTask` of a task that does not exist): `REMOTE_UNAUTHENTICATED` on 401/403,
/// `REMOTE_UNREACHABLE` when the endpoint does not answer. Any other answer passes: the
/// remote's A2A errors are reported by the calls that follow. The probe and its answer go
/// to `tap`.
pub async fn check_token(
    http: &reqwest::Client,
    found: &Found,
    token: Option<&Bearer>,
    tap: &TapRoute,
) -> Result<()> {
    let url = &found.interface.url;
    let probe_id = "legate-token-check";
    let mut req = if found.interface.protocol_binding == a2a::TRANSPORT_PROTOCOL_JSONRPC {
        let body = serde_json::json!({
            "jsonrpc": "2.0", "id": probe_id, "method": "GetTask", "params": {"id": probe_id}
        });
        tap.record(TapDirection::ToAgent, &body.to_string());
        http.post(url).json(&body)
    } else {
        let probe = format!("{}/tasks/{probe_id}", url.trim_end_matches('/'));
        tap.record(TapDirection::ToAgent, &format!("GET {}", shown(&probe)));
        http.get(probe)
    };
    req = req.header(a2a::SVC_PARAM_VERSION, a2a::VERSION);
    if let Some(t) = token {
        req = req.bearer_auth(t.expose());
    }
    let resp = req.send().await.map_err(|e| unreachable(url, &e))?;
    let status = resp.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        tap_status(tap, status);
        return Err(status_error(url, resp).await);
    }
    // Read (bounded) and drop the body so the connection can be reused.
    match bounded_body(resp, MAX_ERROR_BYTES).await {
        Ok(body) => tap.record(
            TapDirection::FromAgent,
            &format!("HTTP {status} {}", String::from_utf8_lossy(&body)),
        ),
        Err(_) => tap_status(tap, status),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn card_urls_are_tried_in_order() {
        assert_eq!(
            candidates("http://h:1/", None),
            ["http://h:1", "http://h:1/.well-known/agent-card.json"]
        );
        assert_eq!(
            candidates("http://h:1/.well-known/agent-card.json", Some("coder")),
            ["http://h:1/agents/coder/.well-known/agent-card.json"]
        );
        assert_eq!(
            candidates("http://h:1", Some("coder")),
            ["http://h:1/agents/coder/.well-known/agent-card.json"]
        );
        assert_eq!(
            candidates("http://h:1/card.json", None),
            ["http://h:1/card.json"]
        );
    }

    fn card(interfaces: &[(&str, &str)], extensions: &[&str]) -> AgentCard {
        serde_json::from_value(serde_json::json!({
            "name": "n", "description": "d", "version": "1",
            "supportedInterfaces": interfaces.iter().map(|(u, b)| serde_json::json!({
                "url": u, "protocolBinding": b, "protocolVersion": "1.0"
            })).collect::<Vec<_>>(),
            "capabilities": {"streaming": true, "extensions": extensions.iter().map(|u| serde_json::json!({"uri": u})).collect::<Vec<_>>()},
            "defaultInputModes": [], "defaultOutputModes": [], "skills": []
        }))
        .unwrap()
    }

    #[test]
    fn json_rpc_is_preferred_and_another_origin_is_refused() {
        let c = card(
            &[("http://h:1/a", "HTTP+JSON"), ("http://h:1/a", "JSONRPC")],
            &[SUPERVISION_EXTENSION],
        );
        let f = choose(c, "http://h:1/a/.well-known/agent-card.json".into()).unwrap();
        assert_eq!(f.interface.protocol_binding, "JSONRPC");
        assert!(f.supervised && !f.copy_workspace && f.streaming);
        // A hostile card pointing its interface elsewhere would get the token: refused.
        let c = card(&[("http://evil:1/a", "JSONRPC")], &[]);
        let e = choose(c, "http://h:1/.well-known/agent-card.json".into()).unwrap_err();
        assert_eq!(e.code, ErrorCode::RemoteProtocolError);
        assert!(e.message.contains("another origin"), "{e}");
        let c = card(&[("http://h:1/a", "GRPC")], &[]);
        assert!(choose(c, "http://h:1/x".into()).is_err());
    }

    proptest! {
        /// Whatever a card's interface URL says, one is chosen only on the card's own origin.
        #[test]
        fn an_interface_is_chosen_only_on_the_cards_origin(u in "\\PC{0,60}", host in "[a-z]{1,8}") {
            let c = card(&[(&u, "JSONRPC")], &[]);
            let card_url = format!("http://{host}:8080/.well-known/agent-card.json");
            if let Ok(f) = choose(c, card_url.clone()) {
                prop_assert_eq!(origin(&f.interface.url), origin(&card_url));
            }
        }
    }
}
