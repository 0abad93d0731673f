//! One proxied connection, from its request head to its record: read the head, ask the gate,
//! refuse (record first, then `403`) or resolve, screen and connect, then relay both ways
//! counting bytes, and record at the close.
//!
//! This module never connects to an address [`crate::dial`] did not screen, and never logs a
//! header value or a byte of a body.

use crate::dial;
use crate::head::{self, HeadError, Target, Unserved};
use crate::lookups::Lookups;
use crate::respond;
use crate::{ConnectRequest, ConnectionEvent, Decided, Gate, Limits, Method};
use legate_core::Decision;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;

/// Buffer size of each relay direction.
const RELAY_BUFFER: usize = 64 * 1024;

/// Serves one accepted connection to its end.
pub(crate) async fn handle(
    mut client: TcpStream,
    gate: Arc<dyn Gate>,
    limits: Limits,
    lookups: Lookups,
) {
    let head = match tokio::time::timeout(
        limits.head_timeout,
        head::read(&mut client, limits.head_bytes),
    )
    .await
    {
        Ok(Ok(head)) => head,
        Ok(Err(error)) => {
            tracing::debug!(%error, "no request head");
            match error {
                HeadError::TooLarge(_) => {
                    respond::send(client, 431, &error.to_string(), false).await;
                }
                HeadError::Malformed(_) => {
                    respond::send(client, 400, &error.to_string(), false).await;
                }
                HeadError::Closed | HeadError::Io(_) => {}
            }
            return;
        }
        Err(_) => {
            tracing::debug!("request head timed out");
            let why = format!(
                "the request head did not arrive within {:?}",
                limits.head_timeout
            );
            respond::send(client, 408, &why, false).await;
            return;
        }
    };
    let (destination, method, forward) = match head::target(&head.method, &head.target) {
        Ok(Target::Connect(destination)) => (destination, Method::Connect, None),
        Ok(Target::Forward {
            destination,
            authority,
            origin,
        }) => {
            let method = Method::Http {
                method: head.method.clone(),
            };
            let rewritten = head::rewrite(&head, &authority, &origin);
            (destination, method, Some(rewritten))
        }
        Err(Unserved::BadRequest(why)) => {
            tracing::debug!(why, "request refused as malformed");
            respond::send(client, 400, &why, false).await;
            return;
        }
        Err(Unserved::NotAllowed(why)) => {
            tracing::debug!(why, "request method or target not served");
            respond::send(client, 405, &why, false).await;
            return;
        }
    };
    let request = ConnectRequest {
        destination,
        method,
        id: format!("net-{}", uuid::Uuid::new_v4()),
    };
    let span = tracing::info_span!("egress", id = %request.id, destination = %request.destination);
    tracing::Instrument::instrument(
        proxy(client, gate, limits, &lookups, request, head.rest, forward),
        span,
    )
    .await;
}

/// Decides, reaches and relays one request.
async fn proxy(
    client: TcpStream,
    gate: Arc<dyn Gate>,
    limits: Limits,
    lookups: &Lookups,
    request: ConnectRequest,
    rest: Vec<u8>,
    forward: Option<Vec<u8>>,
) {
    let started = Instant::now();
    let mut decided = gate.decide(&request).await;
    if decided.decision == Decision::Ask {
        decided.decision = Decision::Deny;
        decided.reason = format!("{} (an unanswered ask is refused)", decided.reason);
    }
    let record = |decided: &Decided,
                  decision,
                  address: Option<std::net::SocketAddr>,
                  reason: String,
                  counts: (u64, u64),
                  credentials_injected: bool| {
        let record = ConnectionEvent {
            id: request.id.clone(),
            destination: request.destination.to_string(),
            address: address.map(|a| a.to_string()),
            method: request.method.as_str().to_string(),
            decision,
            decider: decided.decider,
            rule_id: decided.rule_id.clone(),
            reason,
            sent: counts.0,
            received: counts.1,
            duration_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            credentials_injected,
        };
        tracing::info!(
            decision = ?record.decision,
            decider = %record.decider,
            rule_id = record.rule_id.as_deref().unwrap_or(""),
            address = ?record.address,
            sent = record.sent,
            received = record.received,
            duration_ms = record.duration_ms,
            credentials_injected = record.credentials_injected,
            "egress connection"
        );
        gate.record(record);
    };
    if decided.decision != Decision::Allow {
        record(
            &decided,
            Decision::Deny,
            None,
            decided.reason.clone(),
            (0, 0),
            false,
        );
        refuse(client, &request, &decided.reason).await;
        return;
    }
    let dialed = match dial::addresses(
        &request.destination,
        lookups,
        limits.resolve_timeout,
        |a, p| gate.names_exactly(a, p),
        |a, p| gate.denies_address(a, p),
    )
    .await
    {
        Ok(addrs) => {
            dial::connect(
                &request.destination,
                &addrs,
                limits.connect_timeout,
                |a, p| gate.names_exactly(a, p),
            )
            .await
        }
        Err(error) => Err(error),
    };
    let dialed = match dialed {
        Err(error @ (dial::DialError::Special { .. } | dial::DialError::Denied { .. })) => {
            record(
                &decided,
                Decision::Deny,
                None,
                error.to_string(),
                (0, 0),
                false,
            );
            refuse(client, &request, &error.to_string()).await;
            return;
        }
        other => other,
    };
    // Allowed, but not reached (no answer from the resolver or from any screened address).
    let (upstream, address) = match dialed {
        Ok(connected) => connected,
        Err(error) => {
            record(
                &decided,
                Decision::Allow,
                None,
                error.to_string(),
                (0, 0),
                false,
            );
            respond::send(client, 502, &error.to_string(), false).await;
            return;
        }
    };
    // The credentials the proxy sets, when this connection's rule is theirs.
    let credentials = gate
        .credentials()
        .filter(|c| c.applies(decided.rule_id.as_deref()));
    let tls = credentials.and_then(|c| c.tls().map(Arc::clone));
    let (counts, error, injected) = match (credentials, forward, tls) {
        (Some(credentials), Some(head), _) if credentials.plain_http() => {
            let (head, injected) = match credentials.head(&head) {
                Some(real) => (real, true),
                None => (head, false),
            };
            let (counts, error) = relay(client, upstream, Some(head), &rest).await;
            (counts, error.map(|e| e.to_string()), injected)
        }
        (Some(credentials), None, Some(tls)) => {
            let done = crate::intercept::relay(
                client,
                upstream,
                rest,
                &request.destination.host,
                credentials,
                &tls,
                limits.head_timeout,
            )
            .await;
            (done.counts, done.error, done.injected)
        }
        (_, forward, _) => {
            let (counts, error) = relay(client, upstream, forward, &rest).await;
            (counts, error.map(|e| e.to_string()), false)
        }
    };
    let mut reason = match error {
        None => decided.reason.clone(),
        Some(error) => format!("{}; the relay ended with an error: {error}", decided.reason),
    };
    if injected {
        reason.push_str("; credentials set by the proxy");
    }
    record(
        &decided,
        Decision::Allow,
        Some(address),
        reason,
        counts,
        injected,
    );
}

/// Answers `403` with the one-line refusal, after the record was written.
async fn refuse(client: TcpStream, request: &ConnectRequest, reason: &str) {
    let body = format!("connection to {} refused: {reason}", request.destination);
    respond::send(client, 403, &body, true).await;
}

/// Relays between the client and the upstream until both sides close: for a tunnel, first
/// `200 Connection Established`; for a plain request, first the rewritten head. Bytes the
/// client sent after its head go first. Returns (sent, received) and the error that ended
/// it, if one did.
async fn relay(
    client: TcpStream,
    mut upstream: TcpStream,
    forward: Option<Vec<u8>>,
    rest: &[u8],
) -> ((u64, u64), Option<io::Error>) {
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let mut client = client;
    let mut prefix = 0u64;
    let opened = async {
        match &forward {
            None => client.write_all(respond::ESTABLISHED).await?,
            Some(head) => {
                upstream.write_all(head).await?;
                prefix += head.len() as u64;
            }
        }
        if !rest.is_empty() {
            upstream.write_all(rest).await?;
            prefix += rest.len() as u64;
        }
        Ok::<(), io::Error>(())
    }
    .await;
    if let Err(error) = opened {
        return ((prefix, 0), Some(error));
    }
    #[cfg(target_os = "linux")]
    match crate::splice::relay(&client, &upstream).await {
        Ok(((sent, received), error)) => return ((prefix + sent, received), error),
        Err(error) => tracing::debug!(%error, "no pipe for splice; relaying by copy"),
    }
    let counts = Arc::new(Counts::default());
    let mut client = Counted::new(client, Vec::new(), Arc::clone(&counts));
    let result = tokio::io::copy_bidirectional_with_sizes(
        &mut client,
        &mut upstream,
        RELAY_BUFFER,
        RELAY_BUFFER,
    )
    .await;
    let (read, written) = counts.get();
    ((prefix + read, written), result.err())
}

/// The bytes read from and written to a [`Counted`] stream, readable while it is in use.
#[derive(Debug, Default)]
pub(crate) struct Counts {
    read: AtomicU64,
    written: AtomicU64,
}

impl Counts {
    /// (read, written) so far.
    pub(crate) fn get(&self) -> (u64, u64) {
        (
            self.read.load(Ordering::Relaxed),
            self.written.load(Ordering::Relaxed),
        )
    }
}

/// A client's stream that counts the bytes read from it and written to it in its
/// [`Counts`], and that first reads back `prefix`: bytes the client sent before it was
/// wrapped (counted as read).
#[derive(Debug)]
pub(crate) struct Counted {
    inner: TcpStream,
    prefix: Vec<u8>,
    at: usize,
    counts: Arc<Counts>,
}

impl Counted {
    pub(crate) fn new(inner: TcpStream, prefix: Vec<u8>, counts: Arc<Counts>) -> Self {
        Self {
            inner,
            prefix,
            at: 0,
            counts,
        }
    }
}

impl AsyncRead for Counted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if self.at < self.prefix.len() {
            let n = buf.remaining().min(self.prefix.len() - self.at);
            let at = self.at;
            buf.put_slice(&self.prefix[at..at + n]);
            self.at += n;
            self.counts.read.fetch_add(n as u64, Ordering::Relaxed);
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let poll = Pin::new(&mut self.inner).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = poll {
            let n = (buf.filled().len() - before) as u64;
            self.counts.read.fetch_add(n, Ordering::Relaxed);
        }
        poll
    }
}

impl AsyncWrite for Counted {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let poll = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = poll {
            self.counts.written.fetch_add(n as u64, Ordering::Relaxed);
        }
        poll
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
