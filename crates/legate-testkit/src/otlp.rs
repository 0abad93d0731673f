//! An OTLP receiver on 127.0.0.1, for the tests of Legate's traces and metrics: over HTTP it
//! takes `POST /v1/traces` and `POST /v1/metrics` with a protobuf body, decodes it as the
//! official `ExportTraceServiceRequest` or `ExportMetricsServiceRequest` (the
//! `opentelemetry-proto` crate's types), keeps it, and answers `200` with an empty response,
//! as a collector does; over gRPC ([`OtlpReceiver::start_grpc`], `grpc`) it serves the
//! official `TraceService` and `MetricsService`. It also counts the connections it accepted,
//! so a test can say that nothing tried to export.
//!
//! This module owns the HTTP wire (HTTP/1.1 with `Content-Length` bodies, keep-alive) and the
//! flattening of what arrived into [`ReceivedSpan`]s and [`ReceivedPoint`]s; it never decides
//! what a test expects, and it only ever listens on the loopback interface.

mod grpc;
mod points;

pub use points::ReceivedPoint;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The largest request head read.
const MAX_HEAD: usize = 64 << 10;
/// The largest body read.
const MAX_BODY: usize = 16 << 20;

/// One span as it arrived, flattened: its resource's service name, its ids in hex, its name
/// and its attributes as text.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedSpan {
    /// `service.name` of the resource it came with.
    pub service: String,
    /// The trace id, 32 hex digits.
    pub trace_id: String,
    /// The span id, 16 hex digits.
    pub span_id: String,
    /// The parent's span id, 16 hex digits, or empty for a root.
    pub parent_span_id: String,
    /// The span's name (`legate.task`, …).
    pub name: String,
    /// Its attributes, each value as text.
    pub attributes: BTreeMap<String, String>,
    /// Its links: each linked span's trace id and span id, in hex.
    pub links: Vec<(String, String)>,
}

#[derive(Debug, Default)]
struct Received {
    requests: Mutex<Vec<ExportTraceServiceRequest>>,
    metrics: Mutex<Vec<ExportMetricsServiceRequest>>,
    connections: AtomicUsize,
    stop: AtomicBool,
}

/// A running receiver; it stops when dropped.
#[derive(Debug)]
pub struct OtlpReceiver {
    addr: SocketAddr,
    received: Arc<Received>,
    /// Stops the gRPC server (none for HTTP).
    grpc: Option<tokio::sync::oneshot::Sender<()>>,
}

impl OtlpReceiver {
    /// A receiver on a port the kernel picks.
    pub fn start() -> OtlpReceiver {
        Self::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("cannot listen on 127.0.0.1: {e}"))
    }

    /// A receiver on `addr` (a loopback address).
    pub fn bind(addr: &str) -> std::io::Result<OtlpReceiver> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        assert!(
            addr.ip().is_loopback(),
            "the receiver listens on loopback only"
        );
        let received = Arc::new(Received::default());
        let shared = received.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if shared.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                shared.connections.fetch_add(1, Ordering::SeqCst);
                let shared = shared.clone();
                std::thread::spawn(move || serve(conn, &shared));
            }
        });
        Ok(OtlpReceiver {
            addr,
            received,
            grpc: None,
        })
    }

    /// A receiver speaking OTLP/gRPC (`TraceService`, `MetricsService`) on a loopback port the
    /// kernel picks.
    pub fn start_grpc() -> OtlpReceiver {
        let received = Arc::new(Received::default());
        let (addr, stop) = grpc::serve(received.clone())
            .unwrap_or_else(|e| panic!("cannot serve gRPC on 127.0.0.1: {e}"));
        OtlpReceiver {
            addr,
            received,
            grpc: Some(stop),
        }
    }

    /// `http://127.0.0.1:PORT`, for `OTEL_EXPORTER_OTLP_ENDPOINT` (over HTTP the exporter
    /// appends `/v1/traces` or `/v1/metrics`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// How many connections it accepted.
    pub fn connections(&self) -> usize {
        self.received.connections.load(Ordering::SeqCst)
    }

    /// The export requests decoded so far.
    pub fn requests(&self) -> Vec<ExportTraceServiceRequest> {
        lock(&self.received.requests).clone()
    }

    /// The metric export requests decoded so far.
    pub fn metric_requests(&self) -> Vec<ExportMetricsServiceRequest> {
        lock(&self.received.metrics).clone()
    }

    /// Every number data point (gauges and sums) received so far, in the order they came.
    pub fn points(&self) -> Vec<ReceivedPoint> {
        points::flatten(&lock(&self.received.metrics))
    }

    /// Every span received so far, in the order they came.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        let mut out = Vec::new();
        for request in lock(&self.received.requests).iter() {
            for rs in &request.resource_spans {
                let service = rs
                    .resource
                    .as_ref()
                    .and_then(|r| attributes(&r.attributes).remove("service.name"))
                    .unwrap_or_default();
                for ss in &rs.scope_spans {
                    for span in &ss.spans {
                        out.push(ReceivedSpan {
                            service: service.clone(),
                            trace_id: hex(&span.trace_id),
                            span_id: hex(&span.span_id),
                            parent_span_id: hex(&span.parent_span_id),
                            name: span.name.clone(),
                            attributes: attributes(&span.attributes),
                            links: span
                                .links
                                .iter()
                                .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                                .collect(),
                        });
                    }
                }
            }
        }
        out
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.grpc.take() {
            let _ = stop.send(());
            return;
        }
        self.received.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.addr);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(AnyValue::StringValue(s)) => s.clone(),
                Some(AnyValue::BoolValue(b)) => b.to_string(),
                Some(AnyValue::IntValue(i)) => i.to_string(),
                Some(AnyValue::DoubleValue(d)) => d.to_string(),
                Some(other) => format!("{other:?}"),
                None => String::new(),
            };
            (kv.key.clone(), value)
        })
        .collect()
}

/// Serves one connection's requests until it closes.
fn serve(conn: TcpStream, received: &Received) {
    let Ok(mut writer) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    loop {
        let Some((path, length, close)) = read_head(&mut reader) else {
            return;
        };
        if length > MAX_BODY {
            let _ = respond(&mut writer, "413 Payload Too Large");
            return;
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let status = match path.as_str() {
            "/v1/traces" => match ExportTraceServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    lock(&received.requests).push(request);
                    "200 OK"
                }
                Err(_) => "400 Bad Request",
            },
            "/v1/metrics" => match ExportMetricsServiceRequest::decode(body.as_slice()) {
                Ok(request) => {
                    lock(&received.metrics).push(request);
                    "200 OK"
                }
                Err(_) => "400 Bad Request",
            },
            _ => "404 Not Found",
        };
        if respond(&mut writer, status).is_err() || close {
            return;
        }
    }
}

/// The path, `Content-Length` and whether the client asked to close, of the next request.
fn read_head(reader: &mut BufReader<TcpStream>) -> Option<(String, usize, bool)> {
    let mut line = String::new();
    let mut read = reader.read_line(&mut line).ok()?;
    if read == 0 {
        return None;
    }
    let path = line.split_whitespace().nth(1)?.to_string();
    let mut length = 0;
    let mut close = false;
    loop {
        line.clear();
        let n = reader.read_line(&mut line).ok()?;
        read += n;
        if n == 0 || read > MAX_HEAD {
            return None;
        }
        let header = line.trim_end();
        if header.is_empty() {
            return Some((path, length, close));
        }
        let (name, value) = header.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse().ok()?;
        } else if name.eq_ignore_ascii_case("connection") && value.eq_ignore_ascii_case("close") {
            close = true;
        }
    }
}

fn respond(writer: &mut TcpStream, status: &str) -> std::io::Result<()> {
    // An empty body is an empty `Export*ServiceResponse` (no partial success).
    write!(
        writer,
        "HTTP/1.1 {status}\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\n\r\n"
    )?;
    writer.flush()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use opentelemetry_proto::tonic::common::v1::AnyValue as Any;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(Any {
                value: Some(AnyValue::StringValue(value.into())),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn an_export_posted_over_http_is_decoded_and_flattened() {
        let receiver = OtlpReceiver::start();
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![kv("service.name", "front")],
                    ..Default::default()
                }),
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span {
                        trace_id: vec![0xab; 16],
                        span_id: vec![0x01; 8],
                        name: "legate.task".into(),
                        attributes: vec![kv("legate.task.id", "t-1")],
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let body = request.encode_to_vec();
        let mut conn = TcpStream::connect(receiver.addr).unwrap();
        for _ in 0..2 {
            write!(
                conn,
                "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .unwrap();
            conn.write_all(&body).unwrap();
            let mut reader = BufReader::new(conn.try_clone().unwrap());
            let mut status = String::new();
            reader.read_line(&mut status).unwrap();
            assert!(status.starts_with("HTTP/1.1 200"), "{status}");
            let mut line = String::new();
            while line != "\r\n" {
                line.clear();
                reader.read_line(&mut line).unwrap();
            }
        }
        let spans = receiver.spans();
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[0].service, "front");
        assert_eq!(spans[0].trace_id, "ab".repeat(16));
        assert_eq!(spans[0].parent_span_id, "");
        assert_eq!(spans[0].attributes["legate.task.id"], "t-1");
        assert_eq!(receiver.connections(), 1);
    }
}
