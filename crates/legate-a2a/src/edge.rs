//! What the two bindings check at the HTTP edge, before the SDK parses a request, and how
//! the HTTP+JSON binding labels its answers.
//!
//! - JSON-RPC: a request that declares a `Content-Type` other than JSON is
//!   `ContentTypeNotSupportedError` (-32005, HTTP 415); a `SendMessage` or
//!   `SendStreamingMessage` without `params.message` is `-32602`. (The SDK would decode a
//!   missing message as an empty one with a generated id, which Legate accepts as a request
//!   for input: that must stay a choice of the caller.)
//! - HTTP+JSON: a `POST` that declares a `Content-Type` other than JSON is
//!   `ContentTypeNotSupportedError` (HTTP 415); `POST /message:send` or `/message:stream`
//!   without `message` is HTTP 400 (`INVALID_ARGUMENT`, AIP-193); an error answer gets the
//!   HTTP status and `error.status` of A2A's own mapping table (§5.4: the SDK answers 400 for
//!   `TaskNotCancelableError`, which is 409, and for `ContentTypeNotSupportedError`, which is
//!   415), read from the A2A `ErrorInfo` reason it carries; answers the SDK labels
//!   `application/a2a+json` or `application/problem+json` are relabelled `application/json`
//!   (A2A §11.1, §11.6).
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

/// The HTTP status and gRPC status name of an A2A error code in the HTTP+JSON binding: A2A's
/// mapping table (§5.4) for the A2A errors, AIP-193's for JSON-RPC's generic ones. `None`
/// for a code neither names.
pub fn rest_status(code: i32) -> Option<(StatusCode, &'static str)> {
    use a2a::error_code as c;
    Some(match code {
        c::TASK_NOT_FOUND => (StatusCode::NOT_FOUND, "NOT_FOUND"),
        c::TASK_NOT_CANCELABLE => (StatusCode::CONFLICT, "FAILED_PRECONDITION"),
        c::PUSH_NOTIFICATION_NOT_SUPPORTED => (StatusCode::BAD_REQUEST, "UNIMPLEMENTED"),
        c::UNSUPPORTED_OPERATION => (StatusCode::BAD_REQUEST, "UNIMPLEMENTED"),
        c::CONTENT_TYPE_NOT_SUPPORTED => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "INVALID_ARGUMENT"),
        c::INVALID_AGENT_RESPONSE => (StatusCode::BAD_GATEWAY, "INTERNAL"),
        c::EXTENDED_CARD_NOT_CONFIGURED => (StatusCode::BAD_REQUEST, "FAILED_PRECONDITION"),
        c::EXTENSION_SUPPORT_REQUIRED => (StatusCode::BAD_REQUEST, "FAILED_PRECONDITION"),
        c::VERSION_NOT_SUPPORTED => (StatusCode::BAD_REQUEST, "UNIMPLEMENTED"),
        c::PARSE_ERROR | c::INVALID_REQUEST | c::INVALID_PARAMS => {
            (StatusCode::BAD_REQUEST, "INVALID_ARGUMENT")
        }
        c::METHOD_NOT_FOUND => (StatusCode::NOT_IMPLEMENTED, "UNIMPLEMENTED"),
        c::INTERNAL_ERROR => (StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL"),
        _ => return None,
    })
}

/// The A2A error code an AIP-193 error body names: the reason of its `google.rpc.ErrorInfo`
/// detail in A2A's domain.
fn a2a_code(body: &Value) -> Option<i32> {
    body.get("error")?
        .get("details")?
        .as_array()?
        .iter()
        .filter(|d| d.get("domain").and_then(Value::as_str) == Some(a2a::PROTOCOL_DOMAIN))
        .find_map(|d| a2a::reason_to_error_code(d.get("reason")?.as_str()?))
}

/// An AIP-193 error answer of the HTTP+JSON binding.
fn rest_error(code: i32, message: String, legate_code: Option<&str>) -> Response {
    let (status, name) = rest_status(code).unwrap_or((StatusCode::BAD_REQUEST, "INVALID_ARGUMENT"));
    let meta = legate_code.map(|c| HashMap::from([("legateCode".to_string(), c.to_string())]));
    let info = a2a::TypedDetail::error_info(a2a::error_reason(code), a2a::PROTOCOL_DOMAIN, meta);
    json_response(
        status,
        &json!({"error": {
            "code": status.as_u16(),
            "status": name,
            "message": message,
            "details": [info],
        }}),
    )
}

/// Gives an error answer of the SDK the status of A2A's table (see [`rest_status`]), in the
/// HTTP status line and in the body's `error.code` and `error.status`. Answers that are not
/// errors, or carry no A2A reason, pass unchanged.
async fn remap_status(resp: Response, limit: usize) -> Response {
    if resp.status().as_u16() < 400 {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, limit).await else {
        // An error body larger than a request may be is none of the SDK's: say so plainly.
        return rest_error(
            a2a::error_code::INTERNAL_ERROR,
            "the error answer could not be read".into(),
            None,
        );
    };
    let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    let Some((status, name)) = a2a_code(&value).and_then(rest_status) else {
        return Response::from_parts(parts, Body::from(bytes));
    };
    parts.status = status;
    if let Some(error) = value.get_mut("error").and_then(Value::as_object_mut) {
        error.insert("code".into(), json!(status.as_u16()));
        error.insert("status".into(), json!(name));
    }
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(value.to_string()))
}

/// The HTTP+JSON binding's checks and labels (see the module docs). `limit` bounds the body
/// read.
pub async fn rest(limit: usize, req: Request, next: Next) -> Response {
    if req.method() == Method::POST
        && let Some(ct) = req.headers().get(header::CONTENT_TYPE)
    {
        let ct = ct.to_str().unwrap_or("");
        if !is_json(ct) {
            return rest_error(
                a2a::error_code::CONTENT_TYPE_NOT_SUPPORTED,
                format!("the request's Content-Type is {ct:?}; send application/json"),
                None,
            );
        }
    }
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
    let mut resp = remap_status(next.run(req).await, limit).await;
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

    /// A2A §5.4, row by row, and the generic errors.
    #[test]
    fn the_rest_statuses_are_the_specifications() {
        use a2a::error_code as c;
        let table = [
            (c::TASK_NOT_FOUND, 404, "NOT_FOUND"),
            (c::TASK_NOT_CANCELABLE, 409, "FAILED_PRECONDITION"),
            (c::PUSH_NOTIFICATION_NOT_SUPPORTED, 400, "UNIMPLEMENTED"),
            (c::UNSUPPORTED_OPERATION, 400, "UNIMPLEMENTED"),
            (c::CONTENT_TYPE_NOT_SUPPORTED, 415, "INVALID_ARGUMENT"),
            (c::INVALID_AGENT_RESPONSE, 502, "INTERNAL"),
            (c::EXTENDED_CARD_NOT_CONFIGURED, 400, "FAILED_PRECONDITION"),
            (c::EXTENSION_SUPPORT_REQUIRED, 400, "FAILED_PRECONDITION"),
            (c::VERSION_NOT_SUPPORTED, 400, "UNIMPLEMENTED"),
            (c::INVALID_PARAMS, 400, "INVALID_ARGUMENT"),
            (c::INTERNAL_ERROR, 500, "INTERNAL"),
        ];
        for (code, status, name) in table {
            let (s, n) = rest_status(code).unwrap();
            assert_eq!((s.as_u16(), n), (status, name), "{code}");
        }
        assert!(rest_status(-1).is_none());
    }

    #[test]
    fn the_a2a_reason_is_read_from_its_domain_only() {
        let body = |domain: &str, reason: &str| {
            json!({"error": {"details": [
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": "TASK_NOT_FOUND", "domain": "legate"},
                {"@type": "type.googleapis.com/google.rpc.ErrorInfo", "reason": reason, "domain": domain}
            ]}})
        };
        assert_eq!(
            a2a_code(&body(a2a::PROTOCOL_DOMAIN, "TASK_NOT_CANCELABLE")),
            Some(a2a::error_code::TASK_NOT_CANCELABLE)
        );
        assert_eq!(a2a_code(&body("legate", "TASK_NOT_CANCELABLE")), None);
        assert_eq!(
            a2a_code(&body(a2a::PROTOCOL_DOMAIN, "NO_SUCH_REASON")),
            None
        );
        assert_eq!(a2a_code(&json!({"error": "x"})), None);
        assert_eq!(a2a_code(&json!([])), None);
    }

    #[test]
    fn a_send_needs_a_message_object() {
        assert!(lacks_message(None));
        assert!(lacks_message(Some(&json!({}))));
        assert!(lacks_message(Some(&json!({"message": "hi"}))));
        assert!(!lacks_message(Some(&json!({"message": {"parts": []}}))));
    }
}
