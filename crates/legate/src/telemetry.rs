//! Traces: OpenTelemetry spans exported over OTLP, configured only by the standard `OTEL_*`
//! variables, and off (no exporter, no thread, no connection: an absent layer) unless one of
//! them asks for it. See docs/operations.md, "Traces".
//!
//! On when `OTEL_TRACES_EXPORTER=otlp`, or when it is unset and an OTLP endpoint is
//! (`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` or `OTEL_EXPORTER_OTLP_ENDPOINT`); off when
//! `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`, or nothing is set. The protocol
//! (`OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`) is
//! `http/protobuf` (the default) or `grpc`. Endpoint, headers, timeout, sampler, batching and
//! resource attributes are read by the SDK from their own variables; the service name is
//! `OTEL_SERVICE_NAME`, else `legate`.
//!
//! This module owns the exporter's life (built once logging starts, flushed at exit) and the
//! layer's filter: spans of Legate's own crates, and their warnings and errors as span events.
//! It never records a span itself and never reads a variable other than the `OTEL_*` ones.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::sync::OnceLock;
use std::time::Duration;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The provider while traces are on; [`shutdown`] flushes it.
static PROVIDER: OnceLock<SdkTracerProvider> = OnceLock::new();

/// How long the flush at exit may take.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Where spans go, as the variables say.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Export {
    /// No exporter: nothing recorded, nothing sent.
    Off,
    /// OTLP over HTTP, protobuf bodies (`/v1/traces`).
    HttpProtobuf,
    /// OTLP over gRPC.
    Grpc,
}

/// Reads the variables through `var`: the choice, and a warning when a variable asks for what
/// Legate cannot do (then traces are off).
pub fn choose(var: impl Fn(&str) -> Option<String>) -> (Export, Option<String>) {
    let set = |k: &str| {
        var(k)
            .map(|v| v.trim().to_ascii_lowercase())
            .filter(|v| !v.is_empty())
    };
    if set("OTEL_SDK_DISABLED").as_deref() == Some("true") {
        return (Export::Off, None);
    }
    match set("OTEL_TRACES_EXPORTER").as_deref() {
        Some("none") => return (Export::Off, None),
        Some("otlp") => {}
        Some(other) => {
            return (
                Export::Off,
                Some(format!(
                    "OTEL_TRACES_EXPORTER={other:?} is not supported (otlp or none): traces are off"
                )),
            );
        }
        None => {
            if set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_none()
                && set("OTEL_EXPORTER_OTLP_ENDPOINT").is_none()
            {
                return (Export::Off, None);
            }
        }
    }
    let protocol =
        set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL").or_else(|| set("OTEL_EXPORTER_OTLP_PROTOCOL"));
    match protocol.as_deref() {
        None | Some("http/protobuf") => (Export::HttpProtobuf, None),
        Some("grpc") => (Export::Grpc, None),
        Some(other) => (
            Export::Off,
            Some(format!(
                "OTLP protocol {other:?} is not supported (http/protobuf or grpc): traces are off"
            )),
        ),
    }
}

/// The OpenTelemetry layer for `process` (the log kind: serve, mcp, ui, cli), or `None` when
/// traces are off. Call it once, inside the runtime (the gRPC exporter needs it).
pub fn layer<S>(process: &'static str) -> Option<impl Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a> + Send + Sync,
{
    let (export, warning) = choose(|k| std::env::var(k).ok());
    if let Some(w) = warning {
        eprintln!("warning: {w}");
    }
    let exporter = match export {
        Export::Off => return None,
        Export::HttpProtobuf => SpanExporter::builder()
            .with_http()
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .build(),
        Export::Grpc => SpanExporter::builder().with_tonic().build(),
    };
    let exporter = match exporter {
        Ok(e) => e,
        Err(e) => {
            eprintln!("warning: traces are off: the OTLP exporter could not be built: {e}");
            return None;
        }
    };
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none()
        && !names_service(std::env::var("OTEL_RESOURCE_ATTRIBUTES").ok())
    {
        resource = resource.with_service_name("legate");
    }
    let resource = resource
        .with_attributes([
            opentelemetry::KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            opentelemetry::KeyValue::new("legate.process", process),
        ])
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("legate");
    let _ = PROVIDER.set(provider);
    let filter = tracing_subscriber::filter::filter_fn(|m| {
        m.target().starts_with("legate") && (m.is_span() || *m.level() <= tracing::Level::WARN)
    });
    Some(
        tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_location(false)
            .with_threads(false)
            .with_tracked_inactivity(false)
            .with_filter(filter),
    )
}

/// Whether `OTEL_RESOURCE_ATTRIBUTES` names the service itself.
fn names_service(attributes: Option<String>) -> bool {
    attributes.is_some_and(|a| {
        a.split(',')
            .any(|kv| kv.trim_start().starts_with("service.name="))
    })
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> (Export, Option<String>) {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
            .collect();
        choose(|k| vars.get(k).cloned())
    }

    #[test]
    fn nothing_set_is_off_whatever_the_other_otel_variables_say() {
        assert_eq!(with(&[]), (Export::Off, None));
        assert_eq!(
            with(&[
                ("OTEL_SERVICE_NAME", "x"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            ]),
            (Export::Off, None)
        );
        assert_eq!(
            with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")]),
            (Export::Off, None)
        );
    }

    #[test]
    fn an_endpoint_or_the_otlp_exporter_turns_traces_on() {
        let on = (Export::HttpProtobuf, None);
        assert_eq!(
            with(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")]),
            on
        );
        assert_eq!(
            with(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h/v1/traces")]),
            on
        );
        assert_eq!(with(&[("OTEL_TRACES_EXPORTER", "otlp")]), on);
        assert_eq!(
            with(&[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            ]),
            (Export::Grpc, None)
        );
        // The signal's own protocol wins over the general one.
        assert_eq!(
            with(&[
                ("OTEL_TRACES_EXPORTER", "otlp"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            ]),
            on
        );
    }

    #[test]
    fn none_or_disabled_wins_over_an_endpoint() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1");
        assert_eq!(
            with(&[endpoint, ("OTEL_TRACES_EXPORTER", "none")]),
            (Export::Off, None)
        );
        assert_eq!(
            with(&[endpoint, ("OTEL_SDK_DISABLED", "TRUE")]),
            (Export::Off, None)
        );
    }

    #[test]
    fn what_legate_cannot_export_is_off_with_a_warning() {
        let (export, warning) = with(&[("OTEL_TRACES_EXPORTER", "zipkin")]);
        assert_eq!(export, Export::Off);
        assert!(warning.unwrap().contains("zipkin"));
        let (export, warning) = with(&[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ]);
        assert_eq!(export, Export::Off);
        assert!(warning.unwrap().contains("http/json"));
    }

    #[test]
    fn a_service_name_in_the_resource_attributes_is_kept() {
        assert!(names_service(Some("a=b, service.name=x".into())));
        assert!(!names_service(Some("legate.service.name=x".into())));
        assert!(!names_service(None));
    }
}
