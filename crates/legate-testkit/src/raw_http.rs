//! Raw HTTP/1.1 on real sockets, for tests that attack Legate's HTTP fronts the way a hostile
//! client would: requests written byte by byte as given (repeated headers, bodies shorter
//! than their `Content-Length`, heads that never end), responses read as they come.
//!
//! Nothing here is a mock: it is a minimal client, with no retries and no normalisation, so a
//! test sees exactly what the server sent. Every wait is bounded by [`BOUND`]; none is a
//! timing assertion.

use std::net::SocketAddr;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long a helper waits for something that must happen.
pub const BOUND: Duration = Duration::from_secs(30);

/// The bearer token the edge suites give the front they start.
pub const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef";
/// [`TOKEN`] as a request header line.
pub const AUTH: &str = "Authorization: Bearer 0123456789abcdef0123456789abcdef0123456789abcdef";
/// The `Host` header line of a loopback request.
pub const HOST: &str = "Host: 127.0.0.1";
/// The `Content-Type` header line of a JSON body.
pub const JSON: &str = "Content-Type: application/json";

/// A response: status, headers (names lowercased) and the body, de-chunked.
#[derive(Debug, Clone)]
pub struct RawResponse {
    /// The status code.
    pub status: u16,
    /// `(name, value)` pairs, names lowercased, in order.
    pub headers: Vec<(String, String)>,
    /// The body, with chunked transfer coding removed.
    pub body: String,
}

impl RawResponse {
    /// The first value of header `name` (lowercase).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Builds a request: `method path`, the given header lines (`Name: value`, repeated ones
/// kept), and a body with its `Content-Length` unless a header line sets one.
pub fn request(method: &str, path: &str, headers: &[&str], body: &str) -> String {
    let mut text = format!("{method} {path} HTTP/1.1\r\n");
    for h in headers {
        text.push_str(h);
        text.push_str("\r\n");
    }
    let has_length = headers
        .iter()
        .any(|h| h.to_ascii_lowercase().starts_with("content-length:"));
    if !has_length && (!body.is_empty() || method == "POST") {
        text.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    text.push_str("\r\n");
    text.push_str(body);
    text
}

/// Connects to `addr`.
pub async fn connect(addr: SocketAddr) -> std::io::Result<TcpStream> {
    TcpStream::connect(addr).await
}

/// Sends `request` on a new connection and reads one response.
pub async fn call(addr: SocketAddr, request: &str) -> std::io::Result<RawResponse> {
    let mut stream = connect(addr).await?;
    stream.write_all(request.as_bytes()).await?;
    read_response(&mut stream).await
}

fn timed_out() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer within the bound")
}

async fn more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<usize> {
    let mut chunk = [0u8; 8192];
    let n = tokio::time::timeout(BOUND, stream.read(&mut chunk))
        .await
        .map_err(|_| timed_out())??;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// Reads one whole response from `stream`: its head, then a `Content-Length` body, a chunked
/// body to its last chunk, or (neither) everything until the server closes.
pub async fn read_response(stream: &mut TcpStream) -> std::io::Result<RawResponse> {
    let mut buf = Vec::new();
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if more(stream, &mut buf).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "closed before a whole response head",
            ));
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP status line: {head:?}")))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let find = |name: &str| {
        headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    };
    let mut rest = buf.split_off(head_end);
    let body = if let Some(length) = find("content-length").and_then(|v| v.parse::<usize>().ok()) {
        while rest.len() < length {
            if more(stream, &mut rest).await? == 0 {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "closed inside a body",
                ));
            }
        }
        rest.truncate(length);
        rest
    } else if find("transfer-encoding").is_some_and(|v| v.eq_ignore_ascii_case("chunked")) {
        dechunk(stream, rest).await?
    } else {
        while more(stream, &mut rest).await? > 0 {}
        rest
    };
    Ok(RawResponse {
        status,
        headers,
        body: String::from_utf8_lossy(&body).to_string(),
    })
}

async fn dechunk(stream: &mut TcpStream, mut raw: Vec<u8>) -> std::io::Result<Vec<u8>> {
    let mut body = Vec::new();
    loop {
        let line_end = loop {
            if let Some(i) = raw.windows(2).position(|w| w == b"\r\n") {
                break i;
            }
            if more(stream, &mut raw).await? == 0 {
                return Err(std::io::Error::other("closed inside a chunk size"));
            }
        };
        let size_text = String::from_utf8_lossy(&raw[..line_end]).to_string();
        let size = usize::from_str_radix(size_text.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|_| std::io::Error::other(format!("bad chunk size {size_text:?}")))?;
        raw.drain(..line_end + 2);
        while raw.len() < size + 2 {
            if more(stream, &mut raw).await? == 0 {
                return Err(std::io::Error::other("closed inside a chunk"));
            }
        }
        body.extend_from_slice(&raw[..size]);
        raw.drain(..size + 2);
        if size == 0 {
            return Ok(body);
        }
    }
}

/// Reads from `stream` until the bytes read contain `needle` (then `Ok(everything read)`),
/// the server closes, or [`BOUND`] passes (both errors). For following an SSE stream.
pub async fn read_until(stream: &mut TcpStream, needle: &str) -> std::io::Result<String> {
    let mut buf = Vec::new();
    loop {
        if String::from_utf8_lossy(&buf).contains(needle) {
            return Ok(String::from_utf8_lossy(&buf).to_string());
        }
        if more(stream, &mut buf).await? == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!(
                    "closed before {needle:?} arrived: {:?}",
                    String::from_utf8_lossy(&buf)
                ),
            ));
        }
    }
}

/// Waits (at most `bound`) for the server to close `stream`: a read of 0 bytes or a reset.
/// Whatever it sends first is discarded. `false` if the connection stayed open.
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
