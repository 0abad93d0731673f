//! The receiver's metrics, flattened: one [`ReceivedPoint`] per number data point of a gauge or
//! a sum, with its resource's service name, its metric's name and kind, and its attributes as
//! text. Histograms and summaries are skipped (Legate exports none over OTLP).
//!
//! This module only reads what arrived; it never decides what a test expects.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use opentelemetry_proto::tonic::metrics::v1::number_data_point::Value;
use std::collections::BTreeMap;

/// One number data point as it arrived.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedPoint {
    /// `service.name` of the resource it came with.
    pub service: String,
    /// The metric's name (`legate_tasks`, …).
    pub metric: String,
    /// `gauge`, or `sum` with `monotonic` telling a counter.
    pub kind: &'static str,
    /// Whether a sum only goes up (false for a gauge).
    pub monotonic: bool,
    /// Its attributes, each value as text.
    pub attributes: BTreeMap<String, String>,
    /// Its value (an integer as a float).
    pub value: f64,
}

pub(super) fn flatten(requests: &[ExportMetricsServiceRequest]) -> Vec<ReceivedPoint> {
    let mut out = Vec::new();
    for request in requests {
        for rm in &request.resource_metrics {
            let service = rm
                .resource
                .as_ref()
                .and_then(|r| super::attributes(&r.attributes).remove("service.name"))
                .unwrap_or_default();
            for sm in &rm.scope_metrics {
                for metric in &sm.metrics {
                    let (kind, monotonic, points) = match &metric.data {
                        Some(Data::Gauge(g)) => ("gauge", false, &g.data_points),
                        Some(Data::Sum(s)) => ("sum", s.is_monotonic, &s.data_points),
                        _ => continue,
                    };
                    for p in points {
                        let value = match p.value {
                            Some(Value::AsDouble(d)) => d,
                            Some(Value::AsInt(i)) => i as f64,
                            None => continue,
                        };
                        out.push(ReceivedPoint {
                            service: service.clone(),
                            metric: metric.name.clone(),
                            kind,
                            monotonic,
                            attributes: super::attributes(&p.attributes),
                            value,
                        });
                    }
                }
            }
        }
    }
    out
}
