//! The bytes of a remote's answers, read bounded: an A2A transport (JSON-RPC and HTTP+JSON,
//! the two bindings Legate speaks) for the official `a2a-client-lf` client, reading every
//! answer body, every error body and every Server-Sent Events stream within a bound, where
//! the official transports read a whole body into memory, however large.
//!
//! The wire protocol is the SDK's: the same requests (a JSON-RPC 2.0 envelope, or the
//! HTTP+JSON paths), the same ProtoJSON payloads (`a2a-pb`'s conversion), the same SSE
//! framing. Only the calls Legate makes are carried (send, streaming send, get, cancel,
//! subscribe); the others answer `unsupported operation`.
//!
//! The bounds ([`Limits`]): one answer that is not a stream, [`MAX_ANSWER_BYTES`] or, for the
//! one `GetTask` that brings a copy task's patch back, room for the agent's
//! `max_transfer_bytes` in base64; one SSE event, [`MAX_EVENT_BYTES`]; one whole stream, [`MAX_STREAM_BYTES`]; an
//! error body, [`crate::card::MAX_ERROR_BYTES`]. Past a bound the call fails with
//! [`TOO_LARGE`] (reported as `REMOTE_PROTOCOL_ERROR`) and the rest is never read.
//!
//! Each request carries the W3C trace context (`traceparent`, `tracestate`) of the span that
//! makes it, when traces are on.
//!
//! This module never retries, never logs a body or a header, and never decides anything
//! about the task: time bounds are the caller's (`connect::timed`, the task's timeout).

use crate::card::MAX_ERROR_BYTES;
use crate::tap::TapRoute;
use a2a::jsonrpc::{JsonRpcId, JsonRpcRequest, JsonRpcResponse};
use a2a::*;
use a2a_client::{BoxStream, ServiceParams, Transport, TransportFactory};
use a2a_pb::protojson_conv::{self, ProtoJsonPayload};
use async_trait::async_trait;
use legate_core::TapDirection;
use serde_json::Value;

/// The largest answer that is not a stream, in bytes (unless [`Limits::for_transfer`]
/// gives more room for a copy task's patch).
pub const MAX_ANSWER_BYTES: usize = 16 << 20;
/// The largest one Server-Sent Event, in bytes.
pub const MAX_EVENT_BYTES: usize = 16 << 20;
/// The most bytes one stream may carry in all.
pub const MAX_STREAM_BYTES: usize = 256 << 20;
/// The A2A error code this module reports a bound with (outside the A2A and JSON-RPC
/// ranges), so that `errors::from_a2a` can say so.
pub const TOO_LARGE: i32 = -32_990;

/// What one connection reads at most.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// One answer that is not a stream.
    pub answer: usize,
    /// One SSE event.
    pub event: usize,
    /// One stream in all.
    pub stream: usize,
    /// One error body.
    pub error: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            answer: MAX_ANSWER_BYTES,
            event: MAX_EVENT_BYTES,
            stream: MAX_STREAM_BYTES,
            error: MAX_ERROR_BYTES,
        }
    }
}

impl Limits {
    /// The default limits, with room in one answer for a copy task's patch of up to
    /// `max_transfer_bytes` (base64 on the wire, a third larger) and its manifest.
    pub fn for_transfer(max_transfer_bytes: u64) -> Self {
        let patch = usize::try_from(max_transfer_bytes / 3 * 4 + (1 << 20)).unwrap_or(usize::MAX);
        Self {
            answer: MAX_ANSWER_BYTES.max(patch),
            ..Self::default()
        }
    }
}

fn too_large(what: &str, max: usize) -> A2AError {
    A2AError::new(
        TOO_LARGE,
        format!("{what} is larger than {max} bytes; the rest was not read"),
    )
}

fn failed(e: &reqwest::Error) -> A2AError {
    // The SDK's words for a failed connection, which `errors::from_a2a` recognizes.
    A2AError::internal(format!("HTTP request failed: {e}"))
}

/// Reads at most `max` bytes of `resp`'s body ([`TOO_LARGE`] past it, nothing kept).
pub async fn read_bounded(
    mut resp: reqwest::Response,
    max: usize,
    what: &str,
) -> Result<Vec<u8>, A2AError> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| failed(&e))? {
        if body.len() + chunk.len() > max {
            return Err(too_large(what, max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The error a failed HTTP status stands for, from a bounded read of its body.
async fn status_error(resp: reqwest::Response, limits: &Limits) -> A2AError {
    let status = resp.status();
    let body = read_bounded(resp, limits.error, "an error answer")
        .await
        .unwrap_or_default();
    let text = String::from_utf8_lossy(&body);
    let said = serde_json::from_str::<Value>(&text)
        .ok()
        .and_then(|v| {
            v.pointer("/error/message")
                .or_else(|| v.get("message"))
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .unwrap_or_else(|| text.into_owned());
    A2AError::internal(format!("HTTP {status}: {said}"))
}

fn decode<T: ProtoJsonPayload>(value: Value) -> Result<T, A2AError> {
    protojson_conv::from_value(value)
        .map_err(|e| A2AError::internal(format!("failed to deserialize result: {e}")))
}

fn encode<T: ProtoJsonPayload>(value: &T) -> Result<Value, A2AError> {
    protojson_conv::to_value(value)
        .map_err(|e| A2AError::internal(format!("failed to serialize request as ProtoJSON: {e}")))
}

/// The two bindings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binding {
    JsonRpc,
    Rest,
}

/// A bounded transport on one interface.
#[derive(Debug, Clone)]
pub struct Bounded {
    http: reqwest::Client,
    url: String,
    binding: Binding,
    limits: Limits,
    /// Where the requests and answers go when the running turn's task is tapped.
    tap: TapRoute,
}

impl Bounded {
    fn request(
        &self,
        method: reqwest::Method,
        url: &str,
        params: &ServiceParams,
    ) -> reqwest::RequestBuilder {
        let mut builder = self.http.request(method, url);
        for (key, values) in params {
            for v in values {
                builder = builder.header(key, v);
            }
        }
        // The W3C trace context of the turn calling, when traces are on: the remote
        // Legate's task span becomes a child of it.
        if let Some(trace) = legate_trace::TraceContext::current() {
            for (key, value) in trace.pairs() {
                builder = builder.header(key, value);
            }
        }
        builder
    }

    /// The request for `method` (JSON-RPC) or `verb path` (HTTP+JSON) with `payload`, its
    /// body recorded on the tap first (an HTTP+JSON request as `VERB /path BODY`).
    fn outgoing(
        &self,
        params: &ServiceParams,
        method: &str,
        rest: (reqwest::Method, String),
        payload: Option<Value>,
    ) -> Result<reqwest::RequestBuilder, A2AError> {
        Ok(match self.binding {
            Binding::JsonRpc => {
                let body = json_text(&rpc(method, payload))?;
                self.tap.record(TapDirection::ToAgent, &body);
                self.request(reqwest::Method::POST, &self.url, params)
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(body)
            }
            Binding::Rest => {
                let url = format!("{}{}", self.url.trim_end_matches('/'), rest.1);
                let body = payload.as_ref().map(json_text).transpose()?;
                self.tap.record(
                    TapDirection::ToAgent,
                    &format!("{} {} {}", rest.0, rest.1, body.as_deref().unwrap_or("")),
                );
                let b = self.request(rest.0, &url, params);
                match body {
                    Some(body) => b
                        .header(reqwest::header::CONTENT_TYPE, "application/json")
                        .body(body),
                    None => b,
                }
            }
        })
    }

    /// Sends `builder`, reads the answer bounded and returns its JSON (the JSON-RPC result,
    /// or the HTTP+JSON body).
    async fn answer(&self, builder: reqwest::RequestBuilder) -> Result<Value, A2AError> {
        let resp = builder.send().await.map_err(|e| failed(&e))?;
        if !resp.status().is_success() {
            return Err(status_error(resp, &self.limits).await);
        }
        let body = read_bounded(resp, self.limits.answer, "the remote's answer").await?;
        self.tap
            .record(TapDirection::FromAgent, &String::from_utf8_lossy(&body));
        crate::json_shape::check(&body, "the remote's answer")?;
        match self.binding {
            Binding::Rest => serde_json::from_slice(&body)
                .map_err(|e| A2AError::internal(format!("failed to parse response: {e}"))),
            Binding::JsonRpc => envelope(&body),
        }
    }

    /// A unary call: `method` (JSON-RPC) or `verb path` (HTTP+JSON) with `payload`.
    async fn call<T: ProtoJsonPayload>(
        &self,
        params: &ServiceParams,
        method: &str,
        rest: (reqwest::Method, String),
        payload: Option<Value>,
    ) -> Result<T, A2AError> {
        let builder = self.outgoing(params, method, rest, payload)?;
        decode(self.answer(builder).await?)
    }

    /// A streaming call, read as bounded Server-Sent Events.
    async fn stream(
        &self,
        params: &ServiceParams,
        method: &str,
        rest: (reqwest::Method, String),
        payload: Option<Value>,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        let builder = self
            .outgoing(params, method, rest, payload)?
            .header("Accept", "text/event-stream");
        let resp = builder.send().await.map_err(|e| failed(&e))?;
        if !resp.status().is_success() {
            return Err(status_error(resp, &self.limits).await);
        }
        let is_events = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .is_none_or(|v| v.as_bytes().starts_with(b"text/event-stream"));
        if !is_events {
            // A JSON-RPC error answering a stream comes as a plain JSON body.
            let body = read_bounded(resp, self.limits.answer, "the remote's answer").await?;
            return Err(match envelope(&body) {
                Err(e) => e,
                Ok(_) => A2AError::internal(
                    "expected streaming response but got non-streaming JSON-RPC result",
                ),
            });
        }
        Ok(crate::events::parse(
            resp.bytes_stream(),
            self.limits,
            self.binding == Binding::JsonRpc,
            Some(self.tap.clone()),
        ))
    }
}

/// `value` as JSON text: a request's body, as sent and as tapped.
fn json_text<T: serde::Serialize>(value: &T) -> Result<String, A2AError> {
    serde_json::to_string(value)
        .map_err(|e| A2AError::internal(format!("failed to serialize request: {e}")))
}

/// A JSON-RPC 2.0 request for `method`.
fn rpc(method: &str, params: Option<Value>) -> JsonRpcRequest {
    JsonRpcRequest::new(
        JsonRpcId::String(format!("legate-{}", std::process::id())),
        method,
        params,
    )
}

/// The result of a JSON-RPC envelope, or its error.
pub fn envelope(body: &[u8]) -> Result<Value, A2AError> {
    crate::json_shape::check(body, "the remote's answer")?;
    let rpc: JsonRpcResponse = serde_json::from_slice(body)
        .map_err(|e| A2AError::internal(format!("failed to parse JSON-RPC response: {e}")))?;
    if let Some(err) = rpc.error {
        return Err(A2AError::new(err.code, err.message));
    }
    rpc.result
        .ok_or_else(|| A2AError::internal("JSON-RPC response missing result"))
}

fn unsupported<T>() -> Result<T, A2AError> {
    Err(A2AError::unsupported_operation(
        "Legate's remote backend does not make this call",
    ))
}

#[async_trait]
impl Transport for Bounded {
    async fn send_message(
        &self,
        params: &ServiceParams,
        req: &SendMessageRequest,
    ) -> Result<SendMessageResponse, A2AError> {
        let post = (reqwest::Method::POST, "/message:send".to_string());
        self.call(params, "SendMessage", post, Some(encode(req)?))
            .await
    }

    async fn send_streaming_message(
        &self,
        params: &ServiceParams,
        req: &SendMessageRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        let post = (reqwest::Method::POST, "/message:stream".to_string());
        self.stream(params, "SendStreamingMessage", post, Some(encode(req)?))
            .await
    }

    async fn get_task(
        &self,
        params: &ServiceParams,
        req: &GetTaskRequest,
    ) -> Result<Task, A2AError> {
        let mut path = format!("/tasks/{}", req.id);
        if let Some(n) = req.history_length {
            path.push_str(&format!("?historyLength={n}"));
        }
        let (payload, get) = match self.binding {
            Binding::JsonRpc => (Some(encode(req)?), (reqwest::Method::GET, path)),
            Binding::Rest => (None, (reqwest::Method::GET, path)),
        };
        self.call(params, "GetTask", get, payload).await
    }

    async fn list_tasks(
        &self,
        _: &ServiceParams,
        _: &ListTasksRequest,
    ) -> Result<ListTasksResponse, A2AError> {
        unsupported()
    }

    async fn cancel_task(
        &self,
        params: &ServiceParams,
        req: &CancelTaskRequest,
    ) -> Result<Task, A2AError> {
        let post = (reqwest::Method::POST, format!("/tasks/{}:cancel", req.id));
        self.call(params, "CancelTask", post, Some(encode(req)?))
            .await
    }

    async fn subscribe_to_task(
        &self,
        params: &ServiceParams,
        req: &SubscribeToTaskRequest,
    ) -> Result<BoxStream<'static, Result<StreamResponse, A2AError>>, A2AError> {
        let (payload, get) = match self.binding {
            Binding::JsonRpc => (Some(encode(req)?), (reqwest::Method::GET, String::new())),
            Binding::Rest => (
                None,
                (reqwest::Method::GET, format!("/tasks/{}:subscribe", req.id)),
            ),
        };
        self.stream(params, "SubscribeToTask", get, payload).await
    }

    async fn create_push_config(
        &self,
        _: &ServiceParams,
        _: &TaskPushNotificationConfig,
    ) -> Result<TaskPushNotificationConfig, A2AError> {
        unsupported()
    }

    async fn get_push_config(
        &self,
        _: &ServiceParams,
        _: &GetTaskPushNotificationConfigRequest,
    ) -> Result<TaskPushNotificationConfig, A2AError> {
        unsupported()
    }

    async fn list_push_configs(
        &self,
        _: &ServiceParams,
        _: &ListTaskPushNotificationConfigsRequest,
    ) -> Result<ListTaskPushNotificationConfigsResponse, A2AError> {
        unsupported()
    }

    async fn delete_push_config(
        &self,
        _: &ServiceParams,
        _: &DeleteTaskPushNotificationConfigRequest,
    ) -> Result<(), A2AError> {
        unsupported()
    }

    async fn get_extended_agent_card(
        &self,
        _: &ServiceParams,
        _: &GetExtendedAgentCardRequest,
    ) -> Result<AgentCard, A2AError> {
        unsupported()
    }

    async fn destroy(&self) -> Result<(), A2AError> {
        Ok(())
    }
}

/// Makes [`Bounded`] transports for one binding.
#[derive(Debug, Clone)]
pub struct BoundedFactory {
    http: reqwest::Client,
    binding: Binding,
    limits: Limits,
    tap: TapRoute,
}

impl BoundedFactory {
    /// The JSON-RPC binding's factory.
    pub fn json_rpc(http: reqwest::Client, limits: Limits, tap: TapRoute) -> Self {
        Self {
            http,
            binding: Binding::JsonRpc,
            limits,
            tap,
        }
    }

    /// The HTTP+JSON binding's factory.
    pub fn rest(http: reqwest::Client, limits: Limits, tap: TapRoute) -> Self {
        Self {
            http,
            binding: Binding::Rest,
            limits,
            tap,
        }
    }
}

#[async_trait]
impl TransportFactory for BoundedFactory {
    fn protocol(&self) -> &str {
        match self.binding {
            Binding::JsonRpc => TRANSPORT_PROTOCOL_JSONRPC,
            Binding::Rest => TRANSPORT_PROTOCOL_HTTP_JSON,
        }
    }

    async fn create(
        &self,
        _card: &AgentCard,
        iface: &AgentInterface,
    ) -> Result<Box<dyn Transport>, A2AError> {
        Ok(Box::new(Bounded {
            http: self.http.clone(),
            url: iface.url.clone(),
            binding: self.binding,
            limits: self.limits,
            tap: self.tap.clone(),
        }))
    }
}
