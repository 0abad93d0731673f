//! Traces: OpenTelemetry spans exported over OTLP, configured only by the standard `OTEL_*`
//! variables, and off (no exporter, no thread, no connection: an absent layer) unless one of
//! them asks for it. See docs/operations.md, "Traces"; which variables turn it on, and the
//! layer itself, are `legate_trace::export`'s (the relay benchmark installs the same one).
//!
//! This module owns the exporter's life in the binary (built once logging starts, flushed at
//! exit). It never records a span itself and never reads a variable.

use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::OnceLock;
use std::time::Duration;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The provider while traces are on; [`shutdown`] flushes it.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// How long the flush at exit may take.
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The OpenTelemetry layer for `process` (the log kind: serve, mcp, ui, cli), or `None` when
/// traces are off. Call it once, inside the runtime (the gRPC exporter needs it).
pub fn layer<S>(process: &'static str) -> Option<impl Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let (layer, provider) = legate_trace::export::trace_layer(process)?;
    let _ = PROVIDER.set(provider);
    Some(layer)
}

/// Flushes and stops the exporter (spans still queued are sent, within [`FLUSH_TIMEOUT`]).
/// Nothing to do when traces are off.
pub async fn shutdown() {
    let Some(provider) = PROVIDER.get().cloned() else {
        return;
    };
    // The flush blocks on the exporter's thread: off the runtime's workers.
    let flushed =
        tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT)).await;
    if let Ok(Err(e)) = flushed {
        eprintln!("warning: traces not all sent: {e}");
    }
}
