//! Streamable HTTP at `/mcp`: the guard in front of it (DNS-rebinding protection, then the
//! bearer token), and the listener.
//!
//! Order matters and is fixed: a request whose `Host` (or `Origin`, when present) is not
//! allowed gets 403 before anything else, so a page a browser was tricked into loading learns
//! nothing, not even whether a token is needed; then a request without the right
//! `Authorization: Bearer` token gets 401 with `WWW-Authenticate`. Only then does rmcp's
//! Streamable HTTP service see it (configured with the same allowlists, as a second check).
//!
//! This module never logs a token or a request body.

use crate::server::LegateMcp;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use legate_core::{Error, ErrorCode, Result};
use legate_token::Token;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";

/// Hosts allowed by default: loopback names.
pub const LOOPBACK_HOSTS: &[&str] = &["localhost", "127.0.0.1", "::1"];
/// Origins allowed by default: loopback, any port, http or https.
pub const LOOPBACK_ORIGINS: &[&str] = &[
    "http://localhost:*",
    "http://127.0.0.1:*",
    "http://[::1]:*",
    "https://localhost:*",
    "https://127.0.0.1:*",
    "https://[::1]:*",
];

/// Who may talk to the HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The bearer token every request must carry.
    pub token: Token,
    /// Allowed `Host` values: a host name or address, optionally with `:port` (without one,
    /// any port matches).
    pub allowed_hosts: Vec<String>,
    /// Allowed `Origin` values, `scheme://host:port`, where the port may be `*`. A request
    /// without `Origin` passes this check.
    pub allowed_origins: Vec<String>,
}

impl HttpOptions {
    /// Loopback only.
    pub fn loopback(token: Token) -> Self {
        Self {
            token,
            allowed_hosts: LOOPBACK_HOSTS.iter().map(|s| s.to_string()).collect(),
            allowed_origins: LOOPBACK_ORIGINS.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// Checks every entry, so that a typo stops the server instead of locking everyone out.
    pub fn validate(&self) -> Result<()> {
        for h in &self.allowed_hosts {
            if parse_host(h).is_none() {
                return Err(Error::new(
                    ErrorCode::ConfigInvalid,
                    format!("mcp.allowed_hosts has an entry that is not a host[:port]: {h:?}"),
                ));
            }
        }
        for o in &self.allowed_origins {
            if parse_origin(o).is_none() {
                return Err(Error::new(
                    ErrorCode::ConfigInvalid,
                    format!(
                        "mcp.allowed_origins has an entry that is not scheme://host[:port|:*]: {o:?}"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A host and an optional port, normalized (lowercase, IPv6 without brackets).
#[derive(Debug, PartialEq, Eq)]
struct HostPort {
    host: String,
    port: Option<u16>,
}

fn parse_host(value: &str) -> Option<HostPort> {
    let value = value.trim();
    if value.is_empty() {
        return None;
    }
    let authority: axum::http::uri::Authority = value.parse().ok().or_else(|| {
        // A bare IPv6 address ("::1") is not an authority; bracket it.
        value
            .contains(':')
            .then(|| format!("[{value}]").parse().ok())?
    })?;
    if authority.as_str().contains('@') {
        return None;
    }
    Some(HostPort {
        host: authority
            .host()
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_ascii_lowercase(),
        port: authority.port_u16(),
    })
}

/// An origin: scheme, host, and a port (`None` for `*`).
#[derive(Debug, PartialEq, Eq)]
struct OriginSpec {
    scheme: String,
    host: String,
    port: Option<u16>,
}

fn default_port(scheme: &str) -> Option<u16> {
    match scheme {
        "http" => Some(80),
        "https" => Some(443),
        _ => None,
    }
}

fn parse_origin(value: &str) -> Option<OriginSpec> {
    let (scheme, rest) = value.trim().split_once("://")?;
    let scheme = scheme.to_ascii_lowercase();
    if let Some(host) = rest.strip_suffix(":*") {
        let h = parse_host(host)?;
        return Some(OriginSpec {
            scheme,
            host: h.host,
            port: None,
        });
    }
    let h = parse_host(rest.trim_end_matches('/'))?;
    let port = h.port.or_else(|| default_port(&scheme))?;
    Some(OriginSpec {
        scheme,
        host: h.host,
        port: Some(port),
    })
}

fn host_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(host) = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_host)
    else {
        return false;
    };
    allowed
        .iter()
        .filter_map(|a| parse_host(a))
        .any(|a| a.host == host.host && (a.port.is_none() || a.port == host.port))
}

fn origin_allowed(headers: &HeaderMap, allowed: &[String]) -> bool {
    let Some(origin) = headers.get(header::ORIGIN) else {
        return true;
    };
    let Some(origin) = origin.to_str().ok().and_then(parse_origin) else {
        return false;
    };
    allowed.iter().filter_map(|a| parse_origin(a)).any(|a| {
        a.scheme == origin.scheme
            && a.host == origin.host
            && (a.port.is_none() || a.port == origin.port)
    })
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

fn refusal(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({ "error": { "code": code, "message": message } }).to_string();
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

async fn guard(State(options): State<Arc<HttpOptions>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    if !host_allowed(headers, &options.allowed_hosts) {
        tracing::warn!("refused an MCP request: Host not allowed");
        return refusal(
            StatusCode::FORBIDDEN,
            "HOST_NOT_ALLOWED",
            "this Host is not allowed (DNS-rebinding protection); see mcp.allowed_hosts",
        );
    }
    if !origin_allowed(headers, &options.allowed_origins) {
        tracing::warn!("refused an MCP request: Origin not allowed");
        return refusal(
            StatusCode::FORBIDDEN,
            "ORIGIN_NOT_ALLOWED",
            "this Origin is not allowed; see mcp.allowed_origins",
        );
    }
    let presented = bearer(headers);
    if !presented.is_some_and(|t| options.token.matches(t)) {
        let challenge = if presented.is_some() {
            "Bearer realm=\"legate\", error=\"invalid_token\""
        } else {
            "Bearer realm=\"legate\""
        };
        tracing::info!(
            token_present = presented.is_some(),
            "refused an MCP request: no valid bearer token"
        );
        let mut response = refusal(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "a valid bearer token is required (Authorization: Bearer <token>; see $LEGATE_HOME/mcp-token)",
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
        return response;
    }
    next.run(request).await
}

/// The HTTP application: `/mcp` behind the guard.
pub fn router(
    server: LegateMcp,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> axum::Router {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(options.allowed_hosts.clone())
        .with_allowed_origins(options.allowed_origins.clone())
        .with_cancellation_token(shutdown);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new()
        .route_service(MCP_PATH, service)
        .fallback(|| async {
            refusal(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                "Legate serves MCP at /mcp only",
            )
        })
        .layer(middleware::from_fn_with_state(Arc::new(options), guard))
}

/// Serves `router` on `listener` until `shutdown` is cancelled. Clients that disconnect never
/// cancel their tasks.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
) -> Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move { shutdown.cancelled().await })
        .await
        .map_err(|e| Error::internal(format!("the MCP HTTP server stopped: {e}")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn loopback() -> HttpOptions {
        HttpOptions::loopback(Token::configured(&"t".repeat(64)).unwrap())
    }

    #[test]
    fn loopback_hosts_pass_with_any_port_and_others_do_not() {
        let o = loopback();
        for ok in [
            "localhost",
            "localhost:8731",
            "127.0.0.1:1",
            "[::1]:8731",
            "LOCALHOST",
        ] {
            assert!(
                host_allowed(&headers(&[("host", ok)]), &o.allowed_hosts),
                "{ok}"
            );
        }
        for bad in [
            "evil.example",
            "evil.example:8731",
            "127.0.0.2",
            "localhost.evil.example",
        ] {
            assert!(
                !host_allowed(&headers(&[("host", bad)]), &o.allowed_hosts),
                "{bad}"
            );
        }
        assert!(!host_allowed(&HeaderMap::new(), &o.allowed_hosts));
        let pinned = vec!["example.com:8080".to_string()];
        assert!(host_allowed(
            &headers(&[("host", "example.com:8080")]),
            &pinned
        ));
        assert!(!host_allowed(
            &headers(&[("host", "example.com:8081")]),
            &pinned
        ));
    }

    #[test]
    fn origins_are_checked_only_when_sent() {
        let o = loopback();
        assert!(origin_allowed(&HeaderMap::new(), &o.allowed_origins));
        for ok in [
            "http://localhost:6274",
            "http://127.0.0.1",
            "https://[::1]:9",
        ] {
            assert!(
                origin_allowed(&headers(&[("origin", ok)]), &o.allowed_origins),
                "{ok}"
            );
        }
        for bad in [
            "http://evil.example",
            "null",
            "http://evil.example:6274",
            "ftp://localhost:1",
        ] {
            assert!(
                !origin_allowed(&headers(&[("origin", bad)]), &o.allowed_origins),
                "{bad}"
            );
        }
    }

    #[test]
    fn bearer_tokens_are_read_case_insensitively_by_scheme() {
        assert_eq!(
            bearer(&headers(&[("authorization", "Bearer abc")])),
            Some("abc")
        );
        assert_eq!(
            bearer(&headers(&[("authorization", "bearer abc")])),
            Some("abc")
        );
        assert_eq!(bearer(&headers(&[("authorization", "Basic abc")])), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }

    #[test]
    fn bad_allowlist_entries_stop_the_server() {
        let mut o = loopback();
        o.validate().unwrap();
        o.allowed_origins.push("localhost".into());
        assert_eq!(o.validate().unwrap_err().code, ErrorCode::ConfigInvalid);
        let mut o = loopback();
        o.allowed_hosts.push(String::new());
        assert_eq!(o.validate().unwrap_err().code, ErrorCode::ConfigInvalid);
    }
}
