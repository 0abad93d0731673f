//! What the two bindings check at the HTTP edge, before the SDK parses a request, and how
//! the HTTP+JSON binding labels its answers.
//!
//! - JSON-RPC: a request that declares a `Content-Type` other than JSON is
//!   `ContentTypeNotSupportedError` (-32005, HTTP 415); a `SendMessage` or
//!   `SendStreamingMessage` without `params.message` is `-32602`. (The SDK would decode a
//!   missing message as an empty one with a generated id, which Legate accepts as a request
//!   for input: that must stay a choice of the caller.)
//! - HTTP+JSON: `POST /message:send` or `/message:stream` without `message` is HTTP 400
//!   (`INVALID_ARGUMENT`, AIP-193); answers the SDK labels `application/a2a+json` or
//!   `application/problem+json` are relabelled `application/json` (A2A §11.1, §11.6).
//!
//! This module only looks at the request's shape; it never decides anything about a task
//! and never logs a body.

use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use serde_json::{Value, json};
use std::collections::HashMap;

fn json_response(status: StatusCode, value: &Value) -> Response {
    let mut resp = Response::new(Body::from(value.to_string()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

/// Whether a `Content-Type` value names JSON (`application/json`, or any
/// `application/…+json`).
pub fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// Whether a decoded request body lacks the message a send needs: `message` (under
/// `params` for JSON-RPC) is absent or not an object.
fn lacks_message(container: Option<&Value>) -> bool {
    !container
        .and_then(|c| c.get("message"))
        .is_some_and(Value::is_object)
}

/// Reads a request's body (at most `limit` bytes; larger ones were refused by their
/// `Content-Length` already) and gives it back with the request rebuilt around it. `None`
/// when the body cannot be read: the request is then answered by the caller.
async fn buffered(req: Request, limit: usize) -> Option<(Request, Bytes)> {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, limit).await.ok()?;
    Some((Request::from_parts(parts, Body::from(bytes.clone())), bytes))
}

fn too_large(limit: usize) -> Response {
    json_response(
        StatusCode::PAYLOAD_TOO_LARGE,
        &json!({
            "jsonrpc": "2.0", "id": null,
            "error": {"code": a2a::error_code::INVALID_REQUEST,
                      "message": format!("the request body is larger than {limit} bytes")}
        }),
    )
}

/// The JSON-RPC binding's checks (see the module docs). `limit` bounds the body read.
pub async fn jsonrpc(limit: usize, req: Request, next: Next) -> Response {
    if req.method() != Method::POST {
        return next.run(req).await;
    }
    if let Some(ct) = req.headers().get(header::CONTENT_TYPE) {
        let ct = ct.to_str().unwrap_or("");
        if !is_json(ct) {
            let error = a2a::A2AError::new(
                a2a::error_code::CONTENT_TYPE_NOT_SUPPORTED,
                format!("the request's Content-Type is {ct:?}; send application/json"),
            );
            return json_response(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                &json!({"jsonrpc": "2.0", "id": null, "error": error.to_jsonrpc_error()}),
            );
        }
    }
    let Some((req, bytes)) = buffered(req, limit).await else {
        return too_large(limit);
    };
    if let Ok(body) = serde_json::from_slice::<Value>(&bytes) {
        let sends = matches!(
            body.get("method").and_then(Value::as_str),
            Some("SendMessage" | "SendStreamingMessage")
        );
        if sends && lacks_message(body.get("params")) {
            let error = a2a::A2AError::invalid_params("INVALID_INPUT: params.message is required");
            let id = body.get("id").cloned().unwrap_or(Value::Null);
            return json_response(
                StatusCode::OK,
                &json!({"jsonrpc": "2.0", "id": id, "error": error.to_jsonrpc_error()}),
            );
        }
    }
    next.run(req).await
}

/// The HTTP+JSON binding's checks and labels (see the module docs). `limit` bounds the body
/// read.
pub async fn rest(limit: usize, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let sends = req.method() == Method::POST
        && [
            "/message:send",
            "/message:stream",
            "/message/send",
            "/message/stream",
        ]
        .iter()
        .any(|p| path.ends_with(p));
    let req = if sends {
        let Some((req, bytes)) = buffered(req, limit).await else {
            return too_large(limit);
        };
        if let Ok(body) = serde_json::from_slice::<Value>(&bytes)
            && lacks_message(Some(&body))
        {
            let info = a2a::TypedDetail::error_info(
                a2a::error_reason(a2a::error_code::INVALID_PARAMS),
                a2a::PROTOCOL_DOMAIN,
                Some(HashMap::from([(
                    "legateCode".to_string(),
                    "INVALID_INPUT".to_string(),
                )])),
            );
            return json_response(
                StatusCode::BAD_REQUEST,
                &json!({"error": {
                    "code": 400,
                    "status": "INVALID_ARGUMENT",
                    "message": "INVALID_INPUT: message is required",
                    "details": [info],
                }}),
            );
        }
        req
    } else {
        req
    };
    let mut resp = next.run(req).await;
    let relabel = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|ct| {
            let ct = ct.to_ascii_lowercase();
            ct.starts_with("application/a2a+json") || ct.starts_with("application/problem+json")
        });
    if relabel {
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_content_types() {
        for ct in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/a2a+json",
        ] {
            assert!(is_json(ct), "{ct}");
        }
        for ct in [
            "text/plain",
            "",
            "application/x-www-form-urlencoded",
            "text/json+x",
        ] {
            assert!(!is_json(ct), "{ct}");
        }
    }

    #[test]
    fn a_send_needs_a_message_object() {
        assert!(lacks_message(None));
        assert!(lacks_message(Some(&json!({}))));
        assert!(lacks_message(Some(&json!({"message": "hi"}))));
        assert!(!lacks_message(Some(&json!({"message": {"parts": []}}))));
    }
}
