//! The HTTP server both fronts run their router on: accepting connections, serving HTTP/1.1
//! on each, and the limits that keep a hostile client from starving everyone else.
//!
//! - **Header read timeout** ([`ServeOptions::header_timeout`]): a request's head must arrive
//!   whole within it, counted from when the connection is ready for one (just accepted, or
//!   the previous response finished). So it is also how long an idle keep-alive connection
//!   stays open. Enforced by hyper's HTTP/1 `header_read_timeout`.
//! - **Body read timeout** ([`ServeOptions::body_timeout`]): a request's body must arrive
//!   whole within it, counted from the end of its head. The connection's task closes a
//!   connection past it, whether or not a handler is reading the body (`body`).
//! - Neither applies while a response is being written: SSE streams and long MCP `wait` calls
//!   are never cut by them.
//! - **A cap on open connections** ([`ServeOptions::max_connections`], lowered to a quarter of
//!   the process's descriptor limit when that is smaller), with unauthenticated connections
//!   dropped first (`conns`). A connection refused because every open one is authenticated
//!   is answered `503` with `Retry-After: 1` and closed. Callers' connections count against
//!   the cap; [`SUPERVISOR_RESERVE`] more are kept for the supervisor, on which a caller's
//!   request is answered `503` ([`no_room`]) and a supervisor's served (`conns`).
//! - **Descriptor exhaustion**: when `accept` fails for want of a descriptor (`EMFILE`,
//!   `ENFILE`, `ENOBUFS`, `ENOMEM`), the idlest unauthenticated connection is closed to free
//!   one, and accepting backs off (at most a second) instead of spinning. No accept error ever
//!   stops the listener.
//!
//! - **TLS** ([`serve_tls`], `tls`): the handshake comes first on each admitted connection and
//!   must finish within the header read timeout; a connection the cap has no room for is
//!   closed without an answer (a plain `503` means nothing to a TLS client).
//!
//! This module never reads or logs a header value or a body; requests reach the router as
//! they came, with a [`Connection`] in their extensions.

mod body;
mod conns;
mod tls;

pub use conns::{Connection, mark_authenticated, mark_supervisor};
pub use tls::ServerTls;

use axum::Router;
use conns::{Admission, Conn, Registry};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tower_service::Service;

/// How long a request's head may take to arrive, by default.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a request's body may take to arrive, by default.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// How many connections a front keeps open at most, by default.
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;
/// How many connections beyond the cap are kept for the supervisor: a caller who holds the
/// cap's worth (event streams, say) cannot shut out the one who answers approvals.
pub const SUPERVISOR_RESERVE: usize = 8;
/// The fewest connections the descriptor limit can lower the cap to.
const MIN_CONNECTIONS: usize = 8;
/// The longest pause between two accepts that failed for want of a descriptor.
const MAX_ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// How many refused connections may be answered `503` at once; past that they are closed.
const MAX_REFUSING: usize = 32;

/// The limits a front is served with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServeOptions {
    /// How long a request's head may take to arrive (also the idle keep-alive time).
    pub header_timeout: Duration,
    /// How long a request's body may take to arrive after its head.
    pub body_timeout: Duration,
    /// How many connections may be open at once.
    pub max_connections: usize,
    /// How long a new connection is safe from being closed for a newcomer: the time a client
    /// has to send its first request (1 s by default).
    pub eviction_grace: Duration,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            eviction_grace: conns::GRACE,
        }
    }
}

/// `max_connections`, lowered to a quarter of the descriptor limit (never below
/// `MIN_CONNECTIONS`) so that idle connections alone cannot use up the process's
/// descriptors, which agents, the store and the other front need too.
pub fn effective_cap(max_connections: usize) -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let quarter = limit.map_or(usize::MAX, |l| usize::try_from(l / 4).unwrap_or(usize::MAX));
    max_connections.min(quarter.max(MIN_CONNECTIONS)).max(1)
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then lets open connections
/// finish their responses (graceful shutdown) and returns once all are closed. `front`
/// (`mcp`, `a2a`) names the front in logs.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    front: &'static str,
    shutdown: CancellationToken,
) {
    serve_on(listener, router, options, None, front, shutdown).await;
}

/// [`serve`] over TLS: each connection presents `tls`'s certificate before anything else.
pub async fn serve_tls(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    tls: ServerTls,
    front: &'static str,
    shutdown: CancellationToken,
) {
    serve_on(listener, router, options, Some(tls), front, shutdown).await;
}

async fn serve_on(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    tls: Option<ServerTls>,
    front: &'static str,
    shutdown: CancellationToken,
) {
    let cap = effective_cap(options.max_connections);
    if cap < options.max_connections {
        tracing::info!(
            front,
            configured = options.max_connections,
            cap,
            "connection cap lowered to a quarter of the descriptor limit"
        );
    }
    let registry = Arc::new(Registry::new(
        cap,
        SUPERVISOR_RESERVE,
        options.eviction_grace,
    ));
    let mut backoff = Duration::ZERO;
    let mut last_warned: Option<Instant> = None;
    let mut last_refused: Option<Instant> = None;
    let refusing = Arc::new(AtomicUsize::new(0));
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => {
                backoff = Duration::ZERO;
                stream
            }
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                let starved = is_resource_error(&e);
                if last_warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
                    tracing::warn!(front, error = %e, starved, open = registry.len(), "accepting a connection failed; retrying");
                    last_warned = Some(Instant::now());
                }
                // Free a descriptor from an unauthenticated connection, if any, and wait for
                // it (or a while) before trying again.
                let released = registry.released.notified();
                let freed = starved && registry.evict_one();
                backoff = (backoff * 2).clamp(Duration::from_millis(10), MAX_ACCEPT_BACKOFF);
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = released, if freed => {}
                    _ = tokio::time::sleep(backoff) => {}
                }
                continue;
            }
        };
        match registry.admit() {
            Admission::Admitted { conn, evicted } => {
                if evicted {
                    tracing::debug!(
                        front,
                        "closed an unauthenticated connection to admit a new one"
                    );
                }
                let (router, registry, shutdown) =
                    (router.clone(), registry.clone(), shutdown.clone());
                match &tls {
                    None => {
                        tokio::spawn(connection(
                            stream, router, options, conn, registry, shutdown,
                        ));
                    }
                    Some(tls) => {
                        let tls = tls.clone();
                        tokio::spawn(async move {
                            let handshake = tokio::select! {
                                s = tls.accept(stream, options.header_timeout) => s,
                                _ = conn.kill.cancelled() => None,
                                _ = shutdown.cancelled() => None,
                            };
                            match handshake {
                                Some(s) => {
                                    connection(s, router, options, conn, registry, shutdown).await;
                                }
                                None => registry.release(&conn),
                            }
                        });
                    }
                }
            }
            Admission::Full => {
                // At most one warning every 5 s: a flood must not become a log flood.
                if last_refused.is_none_or(|t| t.elapsed() >= Duration::from_secs(5)) {
                    tracing::warn!(
                        front,
                        cap,
                        "refused a connection: none open may be closed for it (authenticated, or too new)"
                    );
                    last_refused = Some(Instant::now());
                }
                // Answering takes a descriptor for a moment; past a few at once, just close.
                // Over TLS there is no plain answer to give: the connection is closed.
                if tls.is_some() {
                    drop(stream);
                } else if refusing.fetch_add(1, Ordering::Relaxed) < MAX_REFUSING {
                    let refusing = refusing.clone();
                    tokio::spawn(async move {
                        refuse(stream).await;
                        refusing.fetch_sub(1, Ordering::Relaxed);
                    });
                } else {
                    refusing.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }
    drop(listener);
    // Wait for every admitted connection to finish.
    loop {
        let released = registry.released.notified();
        if registry.len() == 0 {
            break;
        }
        released.await;
    }
}

/// Serves one connection until it closes, is evicted, overruns its body deadline, or (after
/// `shutdown`) finishes its response.
async fn connection<S>(
    stream: S,
    router: Router,
    options: ServeOptions,
    conn: Arc<Conn>,
    registry: Arc<Registry>,
    shutdown: CancellationToken,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let in_service = conn.clone();
    let service = hyper::service::service_fn(move |request: hyper::Request<Incoming>| {
        in_service.touch();
        let (parts, incoming) = request.into_parts();
        let body = body::TimedBody::new(incoming, in_service.clone(), options.body_timeout);
        let mut request = axum::extract::Request::from_parts(parts, axum::body::Body::new(body));
        request
            .extensions_mut()
            .insert(Connection(in_service.clone()));
        let mut router = router.clone();
        async move { Service::call(&mut router, request).await }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_timeout);
    let served = builder.serve_connection(TokioIo::new(stream), service);
    let mut served = std::pin::pin!(served);
    let mut stopping = false;
    loop {
        let deadline = conn.body_deadline();
        tokio::select! {
            done = served.as_mut() => {
                if let Err(e) = done {
                    tracing::debug!(error = %e, "a connection ended with an error");
                }
                break;
            }
            _ = conn.kill.cancelled() => break,
            _ = shutdown.cancelled(), if !stopping => {
                stopping = true;
                served.as_mut().graceful_shutdown();
            }
            _ = conn.body_changed.notified() => {}
            _ = until(deadline) => {
                if conn.body_deadline().is_some_and(|d| d <= Instant::now()) {
                    tracing::info!(
                        authenticated = conn.is_authenticated(),
                        "closed a connection: its request body did not arrive in time"
                    );
                    break;
                }
            }
        }
    }
    registry.release(&conn);
}

async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending::<()>().await,
    }
}

/// What a connection the cap has no room for is answered.
const NO_ROOM: &str =
    r#"{"error":{"code":"UNAVAILABLE","message":"too many open connections; retry shortly"}}"#;

/// The answer to a caller's request on a connection in the supervisor's reserve (when
/// [`mark_authenticated`] said `false`): `503` with `Retry-After: 1`, and the connection
/// closed, which gives the room back.
pub fn no_room() -> axum::response::Response {
    use axum::http::{HeaderValue, StatusCode, header};
    let mut response = axum::response::Response::new(axum::body::Body::from(NO_ROOM));
    *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    h.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// Answers a connection the cap has no room for with `503` and closes it. Never waits on the
/// client for more than a second and a quarter.
async fn refuse(stream: TcpStream) {
    use tokio::io::AsyncWriteExt;
    const BODY: &str = NO_ROOM;
    let response = format!(
        "HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nretry-after: 1\r\nconnection: close\r\ncontent-length: {}\r\n\r\n{BODY}",
        BODY.len()
    );
    let mut stream = stream;
    let _ = tokio::time::timeout(Duration::from_secs(1), async {
        stream.write_all(response.as_bytes()).await?;
        stream.shutdown().await
    })
    .await;
    // Dropping it with unread bytes would send a reset that can discard the answer before the
    // client reads it: read (and discard) what it sent, briefly.
    let _ = tokio::time::timeout(Duration::from_millis(250), async {
        let mut sink = [0u8; 1024];
        use tokio::io::AsyncReadExt;
        while stream.read(&mut sink).await.is_ok_and(|n| n > 0) {}
    })
    .await;
}

fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Whether accepting failed for want of a descriptor or memory.
fn is_resource_error(e: &io::Error) -> bool {
    let Some(code) = e.raw_os_error() else {
        return false;
    };
    [
        rustix::io::Errno::MFILE,
        rustix::io::Errno::NFILE,
        rustix::io::Errno::NOBUFS,
        rustix::io::Errno::NOMEM,
    ]
    .iter()
    .any(|errno| errno.raw_os_error() == code)
}
