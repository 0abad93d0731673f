#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use opentelemetry::trace::TracerProvider as _;
use tracing_subscriber::layer::SubscriberExt;

const PARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// Runs `f` under a subscriber that records spans with OpenTelemetry (no exporter).
fn traced<T>(f: impl FnOnce() -> T) -> T {
    let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder().build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("test"));
    let subscriber = tracing_subscriber::registry().with(layer);
    tracing::subscriber::with_default(subscriber, f)
}

#[test]
fn a_w3c_traceparent_parses_and_names_its_trace() {
    let cx = TraceContext::new(PARENT, Some("vendor=abc")).unwrap();
    assert_eq!(cx.traceparent(), PARENT);
    assert_eq!(cx.tracestate(), Some("vendor=abc"));
    assert_eq!(cx.trace_id(), "4bf92f3577b34da6a3ce929d0e0e4736");
}

#[test]
fn anything_but_a_valid_traceparent_is_refused() {
    for bad in [
        "",
        "garbage",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01\n",
    ] {
        assert_eq!(TraceContext::new(bad, None), None, "{bad:?}");
    }
    let long = format!("{PARENT}-{}", "a".repeat(MAX_TRACEPARENT));
    assert_eq!(TraceContext::new(&long, None), None);
}

#[test]
fn an_oversized_tracestate_is_dropped_and_the_parent_kept() {
    let state = format!("v={}", "a".repeat(MAX_TRACESTATE));
    let cx = TraceContext::new(PARENT, Some(&state)).unwrap();
    assert_eq!(cx.traceparent(), PARENT);
    assert_eq!(cx.tracestate(), None);
}

#[test]
fn meta_round_trips_the_two_fields_and_ignores_non_strings() {
    let cx = TraceContext::new(PARENT, Some("vendor=abc")).unwrap();
    let mut meta = Map::new();
    meta.insert("other".into(), Value::Bool(true));
    cx.to_meta(&mut meta);
    assert_eq!(meta[TRACEPARENT], PARENT);
    assert_eq!(TraceContext::from_meta(Some(&meta)), Some(cx));
    meta.insert(TRACEPARENT.into(), Value::from(7));
    assert_eq!(TraceContext::from_meta(Some(&meta)), None);
    assert_eq!(TraceContext::from_meta(None), None);
}

#[test]
fn with_tracing_off_a_span_has_no_context_and_adopts_none() {
    let span = tracing::info_span!("legate.test");
    assert_eq!(TraceContext::of(&span), None);
    assert!(!TraceContext::new(PARENT, None).unwrap().adopt(&span));
    assert_eq!(TraceContext::current(), None);
}

#[test]
fn an_adopted_parent_gives_the_span_its_trace_and_a_new_span_id() {
    traced(|| {
        let parent = TraceContext::new(PARENT, Some("vendor=abc")).unwrap();
        let span = tracing::info_span!("legate.test");
        assert!(parent.adopt(&span));
        let own = TraceContext::of(&span).unwrap();
        assert_eq!(own.trace_id(), parent.trace_id());
        assert_ne!(own.traceparent(), parent.traceparent());
        assert_eq!(own.tracestate(), Some("vendor=abc"));
        // A child made inside it is in the same trace, and is what `current` names.
        let _in = span.enter();
        let child = tracing::info_span!("legate.child");
        let _child = child.enter();
        let current = TraceContext::current().unwrap();
        assert_eq!(current.trace_id(), parent.trace_id());
        assert_ne!(current, own);
    });
}

#[test]
fn a_started_span_keeps_its_parent() {
    traced(|| {
        let span = tracing::info_span!("legate.test");
        let own = TraceContext::of(&span).unwrap();
        let other = TraceContext::new(PARENT, None).unwrap();
        assert!(!other.adopt(&span));
        assert_eq!(TraceContext::of(&span).unwrap(), own);
    });
}
