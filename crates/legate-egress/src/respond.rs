//! The proxy's own answers: a status line, a one-line plain-text body starting `legate:`,
//! and `Connection: close`; then a close that lets the client read the answer.
//!
//! This module never puts a request's header value in an answer.

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long writing an answer and draining the client before the close may take.
const CLOSE_GRACE: Duration = Duration::from_secs(2);
/// How much unread input is drained before the close (so the close is not a reset that
/// destroys the answer before the client reads it).
const DRAIN_BYTES: usize = 256 * 1024;

/// `200 Connection Established`, the start of a tunnel.
pub(crate) const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

/// The bytes of one answer. `deny` adds `X-Legate-Decision: deny`.
pub(crate) fn answer(status: u16, body: &str, deny: bool) -> Vec<u8> {
    let body: String = body
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let body = format!("legate: {body}\n");
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let decision = if deny {
        "X-Legate-Decision: deny\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n{decision}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Writes an answer and closes: the write side is shut, then unread input is drained for a
/// moment so the client reads the answer instead of a reset.
pub(crate) async fn send(mut stream: TcpStream, status: u16, body: &str, deny: bool) {
    let bytes = answer(status, body, deny);
    let result = tokio::time::timeout(CLOSE_GRACE, async {
        stream.write_all(&bytes).await?;
        stream.shutdown().await?;
        let mut sink = [0u8; 8192];
        let mut drained = 0;
        while drained < DRAIN_BYTES {
            match stream.read(&mut sink).await? {
                0 => break,
                n => drained += n,
            }
        }
        Ok::<(), std::io::Error>(())
    })
    .await;
    if let Ok(Err(error)) = result {
        tracing::debug!(status, %error, "answering the client failed");
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_one_line() {
        let a = String::from_utf8(answer(403, "connection to a:1 refused: x\r\ny", true)).unwrap();
        assert!(a.starts_with("HTTP/1.1 403 Forbidden\r\n"));
        assert!(a.contains("\r\nX-Legate-Decision: deny\r\n"));
        assert!(a.ends_with("\r\n\r\nlegate: connection to a:1 refused: x  y\n"));
        let len: usize = a
            .split("Content-Length: ")
            .nth(1)
            .unwrap()
            .split("\r\n")
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(len, "legate: connection to a:1 refused: x  y\n".len());
        assert!(
            !String::from_utf8(answer(400, "x", false))
                .unwrap()
                .contains("X-Legate")
        );
    }
}
