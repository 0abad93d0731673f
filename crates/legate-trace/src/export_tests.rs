use super::*;
use std::collections::HashMap;

fn with_signal(signal: Signal, vars: &[(&str, &str)]) -> (Export, Option<String>) {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    choose(signal, |k| vars.get(k).cloned())
}

fn with(vars: &[(&str, &str)]) -> (Export, Option<String>) {
    with_signal(Signal::Traces, vars)
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
fn metrics_decide_by_their_own_variables_and_the_shared_ones() {
    let m = |vars: &[(&str, &str)]| with_signal(Signal::Metrics, vars);
    assert_eq!(m(&[]), (Export::Off, None));
    // The traces' own variables say nothing about metrics.
    assert_eq!(m(&[("OTEL_TRACES_EXPORTER", "otlp")]), (Export::Off, None));
    assert_eq!(
        m(&[("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h/v1/traces")]),
        (Export::Off, None)
    );
    assert_eq!(
        m(&[("OTEL_METRICS_EXPORTER", "otlp")]),
        (Export::HttpProtobuf, None)
    );
    assert_eq!(
        m(&[("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://h/v1/metrics")]),
        (Export::HttpProtobuf, None)
    );
    assert_eq!(
        m(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ]),
        (Export::Grpc, None)
    );
    assert_eq!(
        m(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ]),
        (Export::Off, None)
    );
    let (export, warning) = m(&[("OTEL_METRICS_EXPORTER", "prometheus")]);
    assert_eq!(export, Export::Off);
    let warning = warning.unwrap();
    assert!(
        warning.contains("OTEL_METRICS_EXPORTER") && warning.contains("metrics are off"),
        "{warning}"
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
    assert_eq!(
        with_signal(Signal::Metrics, &[endpoint, ("OTEL_SDK_DISABLED", "true")]),
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
