//! W3C trace context (`traceparent`, `tracestate`) between Legate's `tracing` spans and the
//! wire: HTTP headers (A2A, both ways), `_meta` of ACP and MCP requests, and a task's stored
//! context. A [`TraceContext`] is only ever made from a span that OpenTelemetry records, or
//! from text that parses as W3C trace context within [`MAX_TRACEPARENT`] and
//! [`MAX_TRACESTATE`] bytes; anything else is `None`, so with tracing off (no OpenTelemetry
//! layer: see the binary's `telemetry`) nothing is sent and nothing received is kept.
//!
//! This module owns that translation and the bounds on what a caller or a remote may send
//! (the OTLP exporters, built as the `OTEL_*` variables say, are [`export`]'s). It
//! never starts an exporter, never decides what a span records, and never carries anything but
//! the two W3C fields (ids and flags, the tracestate's vendor keys): no prompt, no token.

pub mod export;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use serde_json::{Map, Value};
use std::collections::HashMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;

/// The W3C header (and `_meta` key) for the parent's ids.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C header (and `_meta` key) for vendors' state.
pub const TRACESTATE: &str = "tracestate";
/// The longest `traceparent` read (version `00` is 55 bytes; a later version may append).
pub const MAX_TRACEPARENT: usize = 256;
/// The longest `tracestate` kept (W3C: 32 members, at least 512 bytes propagated); a longer
/// one is dropped, the `traceparent` kept.
pub const MAX_TRACESTATE: usize = 512;

/// One span's W3C trace context, valid by construction.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    traceparent: String,
    tracestate: Option<String>,
}

impl TraceContext {
    /// Parses `traceparent` (and `tracestate`, dropped when over [`MAX_TRACESTATE`] or not
    /// W3C): `None` unless it names a valid trace and span.
    pub fn new(traceparent: &str, tracestate: Option<&str>) -> Option<Self> {
        if traceparent.len() > MAX_TRACEPARENT {
            return None;
        }
        let mut carrier = HashMap::with_capacity(2);
        carrier.insert(TRACEPARENT.to_string(), traceparent.to_string());
        if let Some(state) = tracestate.filter(|s| s.len() <= MAX_TRACESTATE) {
            carrier.insert(TRACESTATE.to_string(), state.to_string());
        }
        let cx = TraceContextPropagator::new().extract(&carrier);
        Self::of_context(&cx)
    }

    /// The context of `span`, when OpenTelemetry records it.
    pub fn of(span: &tracing::Span) -> Option<Self> {
        if span.is_disabled() {
            return None;
        }
        Self::of_context(&span.context())
    }

    /// The context of the current span, when OpenTelemetry records it.
    pub fn current() -> Option<Self> {
        Self::of(&tracing::Span::current())
    }

    /// Reads the two fields through `get` (an HTTP header map's lookup, case as sent).
    pub fn from_lookup<'a>(get: impl Fn(&str) -> Option<&'a str>) -> Option<Self> {
        Self::new(get(TRACEPARENT)?, get(TRACESTATE))
    }

    /// Reads `_meta.traceparent` (and `_meta.tracestate`) of an ACP or MCP request.
    pub fn from_meta(meta: Option<&Map<String, Value>>) -> Option<Self> {
        let meta = meta?;
        Self::from_lookup(|k| meta.get(k).and_then(Value::as_str))
    }

    /// Writes the fields into a request's `_meta`.
    pub fn to_meta(&self, meta: &mut Map<String, Value>) {
        for (k, v) in self.pairs() {
            meta.insert(k.to_string(), Value::String(v.to_string()));
        }
    }

    /// The fields as (header name, value) pairs: `traceparent`, then `tracestate` if any.
    pub fn pairs(&self) -> impl Iterator<Item = (&'static str, &str)> {
        std::iter::once((TRACEPARENT, self.traceparent.as_str()))
            .chain(self.tracestate.as_deref().map(|s| (TRACESTATE, s)))
    }

    /// The `traceparent` value.
    pub fn traceparent(&self) -> &str {
        &self.traceparent
    }

    /// The `tracestate` value, if any.
    pub fn tracestate(&self) -> Option<&str> {
        self.tracestate.as_deref()
    }

    /// The trace id (32 hex digits).
    pub fn trace_id(&self) -> &str {
        // Valid by construction: `00-<32 hex>-<16 hex>-<2 hex>`.
        self.traceparent.get(3..35).unwrap_or_default()
    }

    /// Makes this context the parent of `span`, which must not have started yet (just made,
    /// never entered). `false` when it could not (tracing off, or the span already started).
    pub fn adopt(&self, span: &tracing::Span) -> bool {
        span.set_parent(self.context()).is_ok()
    }

    /// Links `span` to this context (a caller's trace that is not the span's parent).
    pub fn link(&self, span: &tracing::Span) {
        let cx = self.context();
        span.add_link(cx.span().span_context().clone());
    }

    /// The OpenTelemetry context this names (a remote parent).
    fn context(&self) -> opentelemetry::Context {
        let mut carrier = HashMap::with_capacity(2);
        for (k, v) in self.pairs() {
            carrier.insert(k.to_string(), v.to_string());
        }
        TraceContextPropagator::new().extract(&carrier)
    }

    fn of_context(cx: &opentelemetry::Context) -> Option<Self> {
        if !cx.span().span_context().is_valid() {
            return None;
        }
        let mut carrier: HashMap<String, String> = HashMap::with_capacity(2);
        TraceContextPropagator::new().inject_context(cx, &mut carrier);
        let traceparent = carrier.remove(TRACEPARENT)?;
        let tracestate = carrier
            .remove(TRACESTATE)
            .filter(|s| !s.is_empty() && s.len() <= MAX_TRACESTATE);
        Some(TraceContext {
            traceparent,
            tracestate,
        })
    }
}

#[cfg(test)]
mod tests;
