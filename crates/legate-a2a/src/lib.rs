//! Legate's A2A v1.0 front: every configured agent is an addressable A2A agent, served over
//! the JSON-RPC and HTTP+JSON bindings of the official `a2a-server-lf`.
//!
//! Layout: [`handler`] (the methods over the engine, one handler per agent), [`bundle`] (the
//! copy-workspace extension: a copy's files received with a message), [`convert`]
//! (Legate tasks and events as A2A objects), [`history`] (a task's messages over all its
//! turns), [`card`](mod@card) (agent cards and their HTTP caching),
//! [`edge`] (the bindings' checks before the SDK parses, and the HTTP+JSON status mapping),
//! [`trace`](mod@trace) (the caller's W3C trace context, the parent of its request's span),
//! and here: the router, the bearer
//! token guard, the body limit and [`serve`] (on `legate_token::serve`, the server with read
//! timeouts and a connection cap that both fronts share).
//!
//! Routes, for each agent that started at boot: `POST /agents/{name}` (JSON-RPC), the HTTP+JSON
//! routes under `/agents/{name}` (`/message:send`, `/message:stream`, `/tasks`, `/tasks/{id}`,
//! `/tasks/{id}:cancel`, `/tasks/{id}:subscribe`), and its card at
//! `/agents/{name}/.well-known/agent-card.json`. The default agent is also served at `/`.

pub mod bundle;
pub mod card;
pub mod continuation;
pub mod convert;
pub mod direct;
pub mod edge;
pub mod handler;
pub mod history;
pub mod patch;
pub mod scrub;
pub mod trace;
pub mod workspace;

pub use card::{CardDocument, card};
pub use handler::AgentHandler;
pub use legate_token::serve::ServeOptions;
pub use legate_token::{Token, TokenSource};

use a2a::AgentCard;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use legate_core::{Error, Result};
use legate_engine::Engine;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// The A2A protocol version served.
pub const PROTOCOL_VERSION: &str = "1.0";
/// The well-known card path.
pub const CARD_PATH: &str = "/.well-known/agent-card.json";
/// The largest request body accepted by default (a prompt is at most 1 MiB).
pub const DEFAULT_MAX_BODY_BYTES: usize = 2 << 20;
/// How long an agent may take to start at boot.
pub const DEFAULT_PROBE_LIMIT: Duration = Duration::from_secs(30);

/// How the front is served.
#[derive(Debug, Clone)]
pub struct A2aOptions {
    /// The bearer token every A2A call must carry; `None` serves without authentication.
    pub token: Option<Token>,
    /// The URL cards advertise, without a trailing slash (e.g. `http://127.0.0.1:8732`).
    pub public_url: String,
    /// Larger bodies are refused with a JSON-RPC error and HTTP 413.
    pub max_body_bytes: usize,
    /// How long each agent may take to start at boot.
    pub probe_limit: Duration,
    /// Directories under which a message may ask for a copy workspace of a project
    /// (`metadata.workspace`); empty refuses copies. See [`workspace`].
    pub copy_roots: Vec<std::path::PathBuf>,
    /// The agents to serve, by configured name (the binary serves those the configuration
    /// names, the default and `revisor`); names the engine does not know are skipped.
    pub agents: Vec<String>,
}

/// What boot found: the agents served and those that could not start.
#[derive(Debug, Clone, Default)]
pub struct BootReport {
    /// Agents served, with their card.
    pub served: Vec<(String, AgentCard)>,
    /// Agents that could not start, with the engine's error.
    pub failed: Vec<(String, Error)>,
    /// Whether the default agent is also served at `/`.
    pub default_at_root: bool,
}

/// Starts every agent of `options.agents` once (in parallel), builds the cards of those that
/// start, and the router serving them. Agents that cannot start are reported, not served.
pub async fn boot(engine: &Engine, options: &A2aOptions) -> (Router, BootReport) {
    let known = &engine.config().agents;
    let names: Vec<String> = options
        .agents
        .iter()
        .filter(|n| known.contains_key(*n))
        .cloned()
        .collect();
    let probes = futures::future::join_all(names.iter().map(|n| async move {
        (
            n.clone(),
            engine.agents().probe(n, options.probe_limit).await,
        )
    }))
    .await;
    let mut report = BootReport::default();
    let mut router = Router::new();
    let default = engine.config().default_agent.clone();
    for (name, probed) in probes {
        let info = match probed {
            Ok(info) => info,
            Err(e) => {
                tracing::warn!(agent = %name, code = e.code.as_str(), error = %e.detail(), "agent not served over A2A: it did not start");
                report.failed.push((name, e));
                continue;
            }
        };
        let path = format!("/agents/{name}");
        let c = card(
            engine,
            &name,
            info.name.as_deref(),
            info.version.as_deref(),
            options,
            &path,
        );
        let handler = Arc::new(
            AgentHandler::new(engine.clone(), name.clone())
                .with_copy_roots(options.copy_roots.clone()),
        );
        router = router.nest(&path, agent_router(handler.clone(), c.clone(), options));
        if name == default {
            let root = card(
                engine,
                &name,
                info.name.as_deref(),
                info.version.as_deref(),
                options,
                "",
            );
            router = router.merge(agent_router(handler, root, options));
            report.default_at_root = true;
        }
        report.served.push((name, c));
    }
    let limit = options.max_body_bytes;
    let router = router.layer(axum::middleware::from_fn(move |req, next| {
        body_limit(limit, req, next)
    }));
    (router, report)
}

fn agent_router(handler: Arc<AgentHandler>, card: AgentCard, options: &A2aOptions) -> Router {
    let token = options.token.clone().map(Arc::new);
    let limit = options.max_body_bytes;
    let protected = a2a_server::jsonrpc::jsonrpc_router(handler.clone())
        .layer(axum::middleware::from_fn(move |req, next| {
            edge::jsonrpc(limit, req, next)
        }))
        .merge(
            a2a_server::rest::rest_router(handler).layer(axum::middleware::from_fn(
                move |req, next| edge::rest(limit, req, next),
            )),
        )
        .layer(axum::middleware::from_fn(trace::request))
        .layer(axum::middleware::from_fn_with_state(token, auth));
    let public = match CardDocument::new(&card, std::time::SystemTime::now()) {
        Ok(doc) => {
            let doc = Arc::new(doc);
            Router::new().route(
                CARD_PATH,
                axum::routing::get(move |headers: axum::http::HeaderMap| {
                    let doc = doc.clone();
                    async move { doc.respond(&headers) }
                }),
            )
        }
        Err(e) => {
            tracing::error!(agent = %card.name, error = %e, "the agent card cannot be serialized");
            Router::new().route(
                CARD_PATH,
                axum::routing::get(|| async { StatusCode::INTERNAL_SERVER_ERROR.into_response() }),
            )
        }
    };
    protected.merge(public)
}

fn json_response(status: StatusCode, value: serde_json::Value) -> Response {
    let mut resp = Response::new(Body::from(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// The bearer token guard: `401` with `WWW-Authenticate` on a missing or wrong token. A request
/// that passes (any request, when the front serves without a token) marks its connection
/// authenticated, so the connection cap drops it last (`legate_token::serve`).
async fn auth(State(token): State<Option<Arc<Token>>>, req: Request, next: Next) -> Response {
    let Some(token) = token else {
        if !legate_token::serve::mark_authenticated(req.extensions()) {
            return legate_token::serve::no_room();
        }
        return next.run(req).await;
    };
    let given = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        });
    let (challenge, message) = match given {
        Some(t) if token.matches(t.trim()) => {
            if !legate_token::serve::mark_authenticated(req.extensions()) {
                return legate_token::serve::no_room();
            }
            return next.run(req).await;
        }
        Some(_) => (
            "Bearer realm=\"legate\", error=\"invalid_token\"",
            "the bearer token is wrong",
        ),
        None => (
            "Bearer realm=\"legate\"",
            "send Authorization: Bearer <token> (the token `legate serve` printed)",
        ),
    };
    let mut resp = json_response(
        StatusCode::UNAUTHORIZED,
        serde_json::json!({"error": {"code": "UNAUTHENTICATED", "message": message}}),
    );
    resp.headers_mut().insert(
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static(challenge),
    );
    resp
}

/// Refuses a body larger than `limit` (by its `Content-Length`) with a JSON-RPC error, before
/// anything reads it.
async fn body_limit(limit: usize, req: Request, next: Next) -> Response {
    let length = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if length.is_some_and(|n| n > limit) {
        return json_response(
            StatusCode::PAYLOAD_TOO_LARGE,
            serde_json::json!({
                "jsonrpc": "2.0", "id": null,
                "error": {"code": a2a::error_code::INVALID_REQUEST,
                          "message": format!("the request body is larger than {limit} bytes")}
            }),
        );
    }
    next.run(req).await
}

/// Serves `router` on `listener` with the default limits until `shutdown` is cancelled.
pub async fn serve(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> Result<()> {
    serve_with(listener, router, ServeOptions::default(), shutdown).await
}

/// [`serve`] with the given read timeouts and connection cap (the server is
/// `legate_token::serve`'s, shared with the MCP front).
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: Router,
    options: ServeOptions,
    shutdown: CancellationToken,
) -> Result<()> {
    legate_token::serve::serve(listener, router, options, "a2a", shutdown).await;
    Ok(())
}
