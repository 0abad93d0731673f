//! OTLP export as the standard `OTEL_*` variables ask for it, for traces and metrics alike:
//! whether a signal is on and over which protocol ([`choose`]), the resource every signal
//! carries ([`resource`]), the trace layer the binary installs ([`trace_layer`], which the
//! relay benchmark installs too) and the metric exporter ([`metric_exporter`]).
//!
//! A signal is on when `OTEL_<SIGNAL>_EXPORTER=otlp`, or when that is unset and an OTLP
//! endpoint is (`OTEL_EXPORTER_OTLP_<SIGNAL>_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`); off
//! when `OTEL_SDK_DISABLED=true`, `OTEL_<SIGNAL>_EXPORTER=none`, or nothing is set. The
//! protocol (`OTEL_EXPORTER_OTLP_<SIGNAL>_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`) is
//! `http/protobuf` (the default) or `grpc`. Endpoint, headers, timeout, sampler, batching,
//! export interval and resource attributes are read by the SDK from their own variables; the
//! service name is `OTEL_SERVICE_NAME`, else `legate`.
//!
//! This module builds exporters and the trace layer's filter (spans of Legate's own crates,
//! and their warnings and errors as span events). It never records a span or a number itself,
//! never reads a variable other than the `OTEL_*` ones, and keeps no global: the caller owns
//! the providers it gets and shuts them down.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{MetricExporter, SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// Where a signal goes, as the variables say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    /// No exporter: nothing recorded, nothing sent.
    Off,
    /// OTLP over HTTP, protobuf bodies (`/v1/traces`, `/v1/metrics`).
    HttpProtobuf,
    /// OTLP over gRPC.
    Grpc,
}

/// An OpenTelemetry signal Legate exports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// Spans.
    Traces,
    /// The engine's metrics.
    Metrics,
}

impl Signal {
    fn name(self) -> &'static str {
        match self {
            Self::Traces => "traces",
            Self::Metrics => "metrics",
        }
    }

    fn exporter_var(self) -> &'static str {
        match self {
            Self::Traces => "OTEL_TRACES_EXPORTER",
            Self::Metrics => "OTEL_METRICS_EXPORTER",
        }
    }

    fn endpoint_var(self) -> &'static str {
        match self {
            Self::Traces => "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            Self::Metrics => "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        }
    }

    fn protocol_var(self) -> &'static str {
        match self {
            Self::Traces => "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            Self::Metrics => "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        }
    }
}

/// Reads the variables for `signal` through `var`: the choice, and a warning when a variable
/// asks for what Legate cannot do (then the signal is off).
pub fn choose(signal: Signal, var: impl Fn(&str) -> Option<String>) -> (Export, Option<String>) {
    let set = |k: &str| {
        var(k)
            .map(|v| v.trim().to_ascii_lowercase())
            .filter(|v| !v.is_empty())
    };
    let what = signal.name();
    if set("OTEL_SDK_DISABLED").as_deref() == Some("true") {
        return (Export::Off, None);
    }
    match set(signal.exporter_var()).as_deref() {
        Some("none") => return (Export::Off, None),
        Some("otlp") => {}
        Some(other) => {
            return (
                Export::Off,
                Some(format!(
                    "{}={other:?} is not supported (otlp or none): {what} are off",
                    signal.exporter_var()
                )),
            );
        }
        None => {
            if set(signal.endpoint_var()).is_none() && set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
            {
                return (Export::Off, None);
            }
        }
    }
    let protocol = set(signal.protocol_var()).or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"));
    match protocol.as_deref() {
        None | Some("http/protobuf") => (Export::HttpProtobuf, None),
        Some("grpc") => (Export::Grpc, None),
        Some(other) => (
            Export::Off,
            Some(format!(
                "OTLP protocol {other:?} is not supported (http/protobuf or grpc): {what} are off"
            )),
        ),
    }
}

/// [`choose`] from the process's environment, the warning printed to stderr.
pub fn choose_from_env(signal: Signal) -> Export {
    let (export, warning) = choose(signal, |k| std::env::var(k).ok());
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    export
}

/// The resource of every signal of `process` (the log kind: serve, mcp, ui, cli): the service
/// name (`legate` unless the variables name one), Legate's version and the process kind.
pub fn resource(process: &'static str) -> Resource {
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none()
        && !names_service(std::env::var("OTEL_RESOURCE_ATTRIBUTES").ok())
    {
        resource = resource.with_service_name("legate");
    }
    resource
        .with_attributes([
            opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            opentelemetry::KeyValue::new("legate.process", process),
        ])
        .build()
}

/// Whether `OTEL_RESOURCE_ATTRIBUTES` names the service itself.
fn names_service(attributes: Option<String>) -> bool {
    attributes.is_some_and(|a| {
        a.split(',')
            .any(|kv| kv.trim_start().starts_with("service.name="))
    })
}

/// The OpenTelemetry layer for `process` and the provider behind it (shut it down to flush),
/// or `None` when traces are off or the exporter could not be built (said on stderr). Call it
/// inside a Tokio runtime (the gRPC exporter needs one).
pub fn trace_layer<S>(
    process: &'static str,
) -> Option<(impl Layer<S> + Send + Sync, SdkTracerProvider)>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let exporter = match choose_from_env(Signal::Traces) {
        Export::Off => return None,
        Export::HttpProtobuf => {
            install_crypto_provider();
            SpanExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .build()
        }
        Export::Grpc => SpanExporter::builder().with_tonic().build(),
    };
    let exporter = match exporter {
        Ok(e) => e,
        Err(e) => {
            eprintln!("warning: traces are off: the OTLP exporter could not be built: {e}");
            return None;
        }
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource(process))
        .build();
    let tracer = provider.tracer("legate");
    let filter = tracing_subscriber::filter::filter_fn(|m| {
        m.target().starts_with("legate") && (m.is_span() || *m.level() <= tracing::Level::WARN)
    });
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(filter);
    Some((layer, provider))
}

/// Makes `ring` the process's TLS provider unless one is already: the HTTP exporter's client
/// (reqwest, built with rustls and no provider of its own) panics without one.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The OTLP metric exporter `export` names, or `None` when it is [`Export::Off`] or could not
/// be built (said on stderr). Call it inside a Tokio runtime (the gRPC exporter needs one).
pub fn metric_exporter(export: Export) -> Option<MetricExporter> {
    let built = match export {
        Export::Off => return None,
        Export::HttpProtobuf => {
            install_crypto_provider();
            MetricExporter::builder()
                .with_http()
                .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                .build()
        }
        Export::Grpc => MetricExporter::builder().with_tonic().build(),
    };
    built
        .map_err(|e| {
            eprintln!("warning: metrics are off: the OTLP exporter could not be built: {e}");
        })
        .ok()
}

#[cfg(test)]
#[path = "export_tests.rs"]
mod tests;
