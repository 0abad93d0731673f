//! The axum middleware that puts an [`Allowlist`] in front of a router, and the JSON refusal
//! both HTTP fronts answer with.
//!
//! It runs first (outermost), before body limits and the bearer token. It never reads a body
//! and never logs header values (a `Host` can carry anything a client chose).

use crate::allowlist::{Allowlist, Rejection};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::sync::Arc;

/// A JSON refusal: `{"error": {"code": …, "message": …}}` with `status`.
pub fn refusal(status: StatusCode, code: &str, message: &str) -> Response {
    let body = serde_json::json!({ "error": { "code": code, "message": message } }).to_string();
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Wraps `router` so that every request passes `list` first: `400 INVALID_REQUEST` when `Host`
/// or `Origin` is repeated, `403 HOST_NOT_ALLOWED` or `403 ORIGIN_NOT_ALLOWED` when one is not
/// allowed.
pub fn allowlisted(router: axum::Router, list: Allowlist) -> axum::Router {
    router.layer(axum::middleware::from_fn_with_state(Arc::new(list), check))
}

async fn check(State(list): State<Arc<Allowlist>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    // RFC 9112 §3.2: a request with more than one Host is answered 400. Two Origins are just as
    // ambiguous (which one would be checked?).
    for (name, what) in [(header::HOST, "Host"), (header::ORIGIN, "Origin")] {
        if headers.get_all(&name).iter().nth(1).is_some() {
            tracing::warn!(
                front = list.front(),
                header = what,
                "refused a request: a header that must be single was repeated"
            );
            return refusal(
                StatusCode::BAD_REQUEST,
                "INVALID_REQUEST",
                &format!("a request carries at most one {what} header (RFC 9112 §3.2)"),
            );
        }
    }
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    // HTTP/2 and absolute-form requests carry the authority in the URI instead.
    let host = host.or_else(|| request.uri().authority().map(|a| a.as_str()));
    let origin = headers
        .get(header::ORIGIN)
        .map(|v| v.to_str().unwrap_or(""));
    match list.check(host, origin) {
        Ok(()) => next.run(request).await,
        Err(Rejection::Host) => {
            tracing::warn!(front = list.front(), "refused a request: Host not allowed");
            refusal(
                StatusCode::FORBIDDEN,
                "HOST_NOT_ALLOWED",
                &format!(
                    "this Host is not allowed (DNS-rebinding protection); see {}.allowed_hosts",
                    list.front()
                ),
            )
        }
        Err(Rejection::Origin) => {
            tracing::warn!(
                front = list.front(),
                "refused a request: Origin not allowed"
            );
            refusal(
                StatusCode::FORBIDDEN,
                "ORIGIN_NOT_ALLOWED",
                &format!(
                    "this Origin is not allowed; see {}.allowed_origins",
                    list.front()
                ),
            )
        }
    }
}
