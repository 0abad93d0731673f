//! Streamable HTTP at `/mcp` (the caller's) and `/supervisor/mcp` (the supervisor profile):
//! the guards in front of them (DNS-rebinding protection through `legate_token::guard`, then
//! each path's own bearer token, `legate_token::bearer`: a path refuses the other audience's
//! token), and the listener.
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
//! Routes the binary serves beside MCP on the same port ([`Beside`]: `legate serve --mcp`'s
//! `/metrics`) sit behind the same allowlist and the caller's guard, so they refuse what
//! `/mcp` refuses; this module mounts them and never renders what they answer.
//!
//! The server itself (read timeouts, the connection cap) is `legate_token::serve`'s, shared
//! with the A2A front.
//!
//! This module never logs a token or a request body.

use crate::server::LegateMcp;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::Response;
use legate_core::Result;
use legate_token::guard::refusal;
use legate_token::serve::ServeOptions;
use legate_token::{Allowlist, Audience, Denied, Gate, Token};
use rmcp::ServerHandler;
use rmcp::model::ClientJsonRpcMessage;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The path MCP is served at.
pub const MCP_PATH: &str = "/mcp";
/// The largest request body accepted (rmcp's own default, made explicit).
pub const MAX_BODY_BYTES: usize = 4 << 20;

/// The path the supervisor profile is served at, behind the supervisor token.
pub const SUPERVISOR_PATH: &str = "/supervisor/mcp";

/// Who may talk to the HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpOptions {
    /// The caller's bearer token: every request to [`MCP_PATH`] must carry it.
    pub token: Token,
    /// The `Host` and `Origin` values the endpoint answers to.
    pub allowlist: Allowlist,
    /// The supervisor's token, when [`SUPERVISOR_PATH`] is served: the only token accepted
    /// there, and refused at [`MCP_PATH`].
    pub supervisor_token: Option<Token>,
}

impl HttpOptions {
    /// Loopback only, no supervisor endpoint.
    pub fn loopback(token: Token) -> Self {
        Self {
            token,
            allowlist: Allowlist::loopback("mcp"),
            supervisor_token: None,
        }
    }

    /// The gate of `/mcp` (the caller's) and, when served, of `/supervisor/mcp`; each refuses
    /// the other's token by name.
    fn gates(&self) -> (Gate, Option<Gate>) {
        let mut caller = Gate::new(Audience::Caller, self.token.clone());
        let supervisor = self.supervisor_token.as_ref().map(|s| {
            caller = caller.clone().refusing(Audience::Supervisor, s.clone());
            Gate::new(Audience::Supervisor, s.clone())
                .refusing(Audience::Caller, self.token.clone())
        });
        (caller, supervisor)
    }
}

async fn guard(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let authorization = request
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""));
    if let Err(denied) = gate.check(authorization) {
        let challenge = if denied == Denied::Missing {
            "Bearer realm=\"legate\""
        } else {
            "Bearer realm=\"legate\", error=\"invalid_token\""
        };
        tracing::info!(
            endpoint = gate.audience().as_str(),
            token_present = denied != Denied::Missing,
            other_audience = matches!(denied, Denied::OtherAudience(_)),
            "refused an MCP request: no valid bearer token for this endpoint"
        );
        let file = match gate.audience() {
            Audience::Caller => "$LEGATE_HOME/mcp-token",
            Audience::Supervisor => "$LEGATE_HOME/supervisor-token",
        };
        let mut response = refusal(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            &format!("{}; see {file}", denied.message(gate.audience())),
        );
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
        return response;
    }
    // The supervisor's connections may use the room kept beyond the callers' cap.
    if gate.audience() == Audience::Supervisor {
        legate_token::serve::mark_supervisor(request.extensions());
    } else if !legate_token::serve::mark_authenticated(request.extensions()) {
        return legate_token::serve::no_room();
    }
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

/// Routes served beside MCP on its port, behind the caller's token and the allowlist (the
/// same guard as [`MCP_PATH`]): the binary's `/metrics`, say. Empty by default.
#[derive(Debug, Clone, Default)]
pub struct Beside {
    router: Option<axum::Router>,
    paths: Vec<String>,
}

impl Beside {
    /// `router`'s routes, at `paths` (named in the answer to a path nobody serves).
    pub fn new(router: axum::Router, paths: &[&str]) -> Self {
        Self {
            router: Some(router),
            paths: paths.iter().map(|p| (*p).to_string()).collect(),
        }
    }
}

/// The HTTP application: `/mcp` behind the caller's token.
pub fn router(
    server: LegateMcp,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> axum::Router {
    router_with_supervisor::<LegateMcp>(server, None, options, shutdown)
}

/// The HTTP application: `/mcp` behind the caller's token and, when `supervisor` is given
/// (with [`HttpOptions::supervisor_token`]), `/supervisor/mcp` behind the supervisor's. Each
/// path has its own guard; the allowlist runs before both. A supervisor handler without a
/// supervisor token is not served (it would have no gate).
pub fn router_with_supervisor<S>(
    server: LegateMcp,
    supervisor: Option<S>,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> axum::Router
where
    S: ServerHandler + Clone + Send + Sync + 'static,
{
    router_beside(server, supervisor, Beside::default(), options, shutdown)
}

/// [`router_with_supervisor`], with `beside`'s routes served behind the caller's guard too.
pub fn router_beside<S>(
    server: LegateMcp,
    supervisor: Option<S>,
    beside: Beside,
    options: HttpOptions,
    shutdown: CancellationToken,
) -> axum::Router
where
    S: ServerHandler + Clone + Send + Sync + 'static,
{
    let config = StreamableHttpServerConfig::default()
        .with_allowed_hosts(options.allowlist.hosts().to_vec())
        .with_allowed_origins(options.allowlist.origins().to_vec())
        .with_max_request_body_bytes(MAX_BODY_BYTES)
        .with_cancellation_token(shutdown);
    let (caller_gate, supervisor_gate) = options.gates();
    let caller_gate = Arc::new(caller_gate);
    let service = StreamableHttpService::new(
        move || Ok(server.clone()),
        Arc::new(LocalSessionManager::default()),
        config.clone(),
    );
    let caller = axum::Router::new()
        .route_service(MCP_PATH, service)
        .layer(middleware::from_fn(parse_check))
        .layer(middleware::from_fn_with_state(caller_gate.clone(), guard));
    let mut router = caller;
    let mut paths = MCP_PATH.to_string();
    if let Some(extra) = beside.router {
        router = router.merge(extra.layer(middleware::from_fn_with_state(caller_gate, guard)));
    }
    if let (Some(handler), Some(gate)) = (supervisor, supervisor_gate) {
        let service = StreamableHttpService::new(
            move || Ok(handler.clone()),
            Arc::new(LocalSessionManager::default()),
            config,
        );
        let supervised = axum::Router::new()
            .route_service(SUPERVISOR_PATH, service)
            .layer(middleware::from_fn(parse_check))
            .layer(middleware::from_fn_with_state(Arc::new(gate), guard));
        router = router.merge(supervised);
        paths = format!("{MCP_PATH}, {SUPERVISOR_PATH}");
    }
    for path in &beside.paths {
        paths = format!("{paths}, {path}");
    }
    let router = router.fallback(move || {
        let message = format!("Legate serves {paths} only");
        async move { refusal(StatusCode::NOT_FOUND, "NOT_FOUND", &message) }
    });
    // Outermost: the allowlist runs before the token.
    legate_token::guard::allowlisted(router, options.allowlist)
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

    #[test]
    fn each_path_refuses_the_other_audience() {
        let caller = Token::configured(&"c".repeat(40)).unwrap();
        let supervisor = Token::configured(&"s".repeat(40)).unwrap();
        let options = HttpOptions {
            supervisor_token: Some(supervisor),
            ..HttpOptions::loopback(caller)
        };
        let (c, s) = options.gates();
        let s = s.unwrap();
        assert_eq!(c.check_token(&"c".repeat(40)), Ok(()));
        assert_eq!(
            c.check_token(&"s".repeat(40)),
            Err(Denied::OtherAudience(Audience::Supervisor))
        );
        assert_eq!(s.check_token(&"s".repeat(40)), Ok(()));
        assert_eq!(
            s.check_token(&"c".repeat(40)),
            Err(Denied::OtherAudience(Audience::Caller))
        );
        let (_, none) = HttpOptions::loopback(Token::configured(&"c".repeat(40)).unwrap()).gates();
        assert!(none.is_none());
    }
}
