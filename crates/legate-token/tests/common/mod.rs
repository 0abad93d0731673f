//! Raw HTTP/1.1 over real sockets, and a small router behind the real guard and token check,
//! for the tests of `legate_token::serve`.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use axum::Router;
use axum::body::Bytes;
use axum::extract::Request;
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use legate_token::Allowlist;
use legate_token::serve::ServeOptions;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

pub const TOKEN: &str = "secret-token-of-the-test";
/// The supervisor's token: its connections may use the room kept beyond the callers' cap.
pub const SUPERVISOR_TOKEN: &str = "supervisor-token-of-the-test";
/// How long a test waits for something that must happen (never an assertion on speed).
pub const BOUND: Duration = Duration::from_secs(20);

async fn auth(request: Request, next: Next) -> Response {
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    if presented == Some(&format!("Bearer {SUPERVISOR_TOKEN}")) {
        legate_token::serve::mark_supervisor(request.extensions());
        return next.run(request).await;
    }
    if presented != Some(&format!("Bearer {TOKEN}")) {
        return StatusCode::UNAUTHORIZED.into_response();
    }
    if !legate_token::serve::mark_authenticated(request.extensions()) {
        return legate_token::serve::no_room();
    }
    next.run(request).await
}

/// `GET /` answers `ok`, `POST /echo` answers the body's length; both need the token, and the
/// loopback allowlist comes first.
pub fn router() -> Router {
    let inner = Router::new()
        .route("/", get(|| async { "ok" }))
        .route(
            "/echo",
            post(|body: Bytes| async move { body.len().to_string() }),
        )
        .layer(axum::middleware::from_fn(auth));
    legate_token::guard::allowlisted(inner, Allowlist::loopback("test"))
}

/// A server on 127.0.0.1 with `options`, stopped when the returned token is cancelled.
pub async fn start(options: ServeOptions) -> (SocketAddr, CancellationToken) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let s = stop.clone();
    tokio::spawn(legate_token::serve::serve(
        listener,
        router(),
        options,
        "test",
        s,
    ));
    (addr, stop)
}

/// A request head for `GET /` with the supervisor's token, keeping the connection open.
pub fn supervisor_get() -> String {
    format!("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {SUPERVISOR_TOKEN}\r\n\r\n")
}

/// A request head for `GET /` with the token, keeping the connection open.
pub fn authorized_get() -> String {
    format!("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n")
}

/// Reads one response (head and a `Content-Length` body): status and body.
pub async fn response(stream: &mut TcpStream) -> (u16, String) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = tokio::time::timeout(BOUND, stream.read(&mut chunk))
            .await
            .expect("no response in time")
            .unwrap();
        assert!(
            n > 0,
            "closed before a response: {:?}",
            String::from_utf8_lossy(&buf)
        );
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let status: u16 = head.split(' ').nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = tokio::time::timeout(BOUND, stream.read(&mut chunk))
            .await
            .expect("no body in time")
            .unwrap();
        assert!(n > 0, "closed inside a body");
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).to_string();
    (status, body)
}

/// Sends `request` on a new connection and reads the response.
pub async fn call(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    response(&mut stream).await
}

/// Waits (at most `bound`) for the server to close `stream`: a read of 0 bytes or a reset.
/// Whatever the server sends first is discarded. `false` if it stayed open.
pub async fn closed_within(stream: &mut TcpStream, bound: Duration) -> bool {
    let mut sink = [0u8; 4096];
    tokio::time::timeout(bound, async {
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}
