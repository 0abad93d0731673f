//! Streamable HTTP at `/mcp`: the guards in front of it (DNS-rebinding protection through
//! `legate_token::guard`, then the bearer token), and the listener.
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
use axum::response::Response;
use legate_core::{Error, Result};
use legate_token::guard::refusal;
use legate_token::{Allowlist, Token};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";

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
    next.run(request).await
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
        .layer(middleware::from_fn_with_state(Arc::new(options), guard));
    // Outermost: the allowlist runs before the token.
    legate_token::guard::allowlisted(router, allowlist)
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
