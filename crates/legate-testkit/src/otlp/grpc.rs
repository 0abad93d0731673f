//! The receiver's OTLP/gRPC side: the official `TraceService` and `MetricsService` (the
//! `opentelemetry-proto` crate's generated tonic servers) on 127.0.0.1, on a thread with a
//! runtime of its own, keeping what arrives where the HTTP side keeps it.
//!
//! It only ever listens on loopback and never decides what a test expects.

use super::{Received, lock};
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use tonic::{Request, Response, Status};

/// The largest message decoded (as the HTTP side's body bound).
const MAX_MESSAGE: usize = super::MAX_BODY;

#[derive(Debug, Clone)]
struct Collector(Arc<Received>);

#[tonic::async_trait]
impl TraceService for Collector {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        lock(&self.0.requests).push(request.into_inner());
        Ok(Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for Collector {
    async fn export(
        &self,
        request: Request<ExportMetricsServiceRequest>,
    ) -> Result<Response<ExportMetricsServiceResponse>, Status> {
        lock(&self.0.metrics).push(request.into_inner());
        Ok(Response::new(ExportMetricsServiceResponse::default()))
    }
}

/// Serves gRPC on a loopback port the kernel picks until the returned sender is sent to or
/// dropped; returns the address.
pub(super) fn serve(
    received: Arc<Received>,
) -> std::io::Result<(SocketAddr, tokio::sync::oneshot::Sender<()>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::spawn(move || {
        runtime.block_on(async move {
            let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
                return;
            };
            let counted = received.clone();
            let collector = Collector(received);
            let incoming = futures::StreamExt::inspect(
                tokio_stream::wrappers::TcpListenerStream::new(listener),
                move |_| {
                    counted.connections.fetch_add(1, Ordering::SeqCst);
                },
            );
            let shutdown = async move {
                let _ = stop_rx.await;
            };
            let _ = tonic::transport::Server::builder()
                .add_service(
                    TraceServiceServer::new(collector.clone())
                        .max_decoding_message_size(MAX_MESSAGE),
                )
                .add_service(
                    MetricsServiceServer::new(collector).max_decoding_message_size(MAX_MESSAGE),
                )
                .serve_with_incoming_shutdown(incoming, shutdown)
                .await;
        });
    });
    Ok((addr, stop_tx))
}
