//! The caller's W3C trace context at the HTTP edge: each authenticated request runs in a
//! `legate.a2a.request` span whose parent is the `traceparent` (and `tracestate`) the caller
//! sent, so a task it submits, and everything that task does, joins the caller's trace.
//!
//! This module only translates the two headers (bounded and validated by `legate_trace`);
//! it never reads a body, never records a header's value, and decides nothing about a task.

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use legate_trace::TraceContext;
use tracing::Instrument;

/// Runs `req` in a span that continues the caller's trace, when it sent one.
pub async fn request(req: Request, next: Next) -> Response {
    let span = tracing::info_span!(
        "legate.a2a.request",
        http.request.method = %req.method(),
        legate.caller.traced = tracing::field::Empty,
    );
    let headers = req.headers();
    if let Some(caller) =
        TraceContext::from_lookup(|k| headers.get(k).and_then(|v| v.to_str().ok()))
    {
        caller.adopt(&span);
        span.record("legate.caller.traced", true);
    }
    next.run(req).instrument(span).await
}
