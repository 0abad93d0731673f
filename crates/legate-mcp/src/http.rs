//! Streamable HTTP at `/mcp`: the guards in front of it (DNS-rebinding protection through
//! `legate_token::guard`, then the bearer token), and the listener.
//!
//! Order matters and is fixed: a request whose `Host` (or `Origin`, when present) is not
//! allowed gets 403 before anything else, so a page a browser was tricked into loading learns
//! nothing, not even whether a token is needed; then a request without the right
//! `Authorization: Bearer` token gets 401 with `WWW-Authenticate` (a request that passes marks
//! its connection authenticated, see `legate_token::serve`). Then a JSON `POST` whose body is
//! not JSON gets 400 with a JSON-RPC parse error (`-32700`, `id: null`), and one that is JSON
//! but no JSON-RPC message gets 400 with `-32600` (rmcp would answer both 415 in plain text).
//! Only then does rmcp's Streamable HTTP service see it (configured with the same allowlists,
//! as a second check).
//!
//! The server itself (read timeouts, the connection cap) is `legate_token::serve`'s, shared
//! with the A2A front.
//!
//! This module never logs a token or a request body.

use crate::server::LegateMcp;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use legate_core::Result;
use legate_token::guard::refusal;
use legate_token::serve::ServeOptions;
use legate_token::{Allowlist, Token};
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";
/// The largest request body accepted (rmcp's own default, made explicit).
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// Who may talk to the HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The bearer token every request must carry.
    pub token: Token,
    /// The `Host` and `Origin` values the endpoint answers to.
    pub allowlist: Allowlist,
}

impl HttpOptions {
    /// Loopback only.
    pub fn loopback(token: Token) -> Self {
        Self {
            token,
            allowlist: Allowlist::loopback("mcp"),
        }
    }
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

async fn guard(State(options): State<Arc<HttpOptions>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
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
    legate_token::serve::mark_authenticated(request.extensions());
    next.run(request).await
}

fn jsonrpc_error(status: StatusCode, id: serde_json::Value, code: i64, message: &str) -> Response {
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}
    });
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A JSON `POST` must be a JSON-RPC message: otherwise 400 with `-32700` (not JSON) or
/// `-32600` (JSON, but no message), per JSON-RPC 2.0 §5.1. Other requests (and other content
/// types, which rmcp answers 415) pass untouched.
async fn parse_check(request: Request, next: Next) -> Response {
    let json = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            ct.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        });
    if request.method() != Method::POST || !json {
        return next.run(request).await;
    }
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, MAX_BODY_BYTES).await else {
        return jsonrpc_error(
            StatusCode::PAYLOAD_TOO_LARGE,
            serde_json::Value::Null,
            -32600,
            &format!("the request body is larger than {MAX_BODY_BYTES} bytes, or was cut short"),
        );
    };
    let value = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(v) => v,
        Err(_) => {
            tracing::info!("refused an MCP request: its body is not JSON");
            return jsonrpc_error(
                StatusCode::BAD_REQUEST,
                serde_json::Value::Null,
                -32700,
                "Parse error: the request body is not JSON",
            );
        }
    };
    if serde_json::from_value::<ClientJsonRpcMessage>(value.clone()).is_err() {
        let id = value
            .get("id")
            .filter(|id| id.is_string() || id.is_number())
            .cloned()
            .unwrap_or(serde_json::Value::Null);
        tracing::info!("refused an MCP request: its body is not a JSON-RPC message");
        return jsonrpc_error(
            StatusCode::BAD_REQUEST,
            id,
            -32600,
            "Invalid Request: the body is JSON but not a JSON-RPC request, notification or response",
        );
    }
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The HTTP application: `/mcp` behind the guard.
pub fn router(
    server: LegateMcp,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> axum::Router {
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(options.allowlist.hosts().to_vec())
        .with_allowed_origins(options.allowlist.origins().to_vec())
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(shutdown);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let allowlist = options.allowlist.clone();
    let router = axum::Router::new()
        .route_service(MCP_PATH, service)
        .fallback(|| async {
            refusal(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                "Legate serves MCP at /mcp only",
            )
        })
        .layer(middleware::from_fn(parse_check))
        .layer(middleware::from_fn_with_state(Arc::new(options), guard));
    // Outermost: the allowlist runs before the token.
    legate_token::guard::allowlisted(router, allowlist)
}

/// Serves `router` on `listener` with the default limits until `shutdown` is cancelled.
/// Clients that disconnect never cancel their tasks.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: CancellationToken,
) -> Result<()> {
    serve_with(listener, router, ServeOptions::default(), shutdown).await
}

/// [`serve`] with the given read timeouts and connection cap.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    options: ServeOptions,
    shutdown: CancellationToken,
) -> Result<()> {
    legate_token::serve::serve(listener, router, options, "mcp", shutdown).await;
    Ok(())
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
}
