//! The request head: reading it (bounded in size), parsing it, reading its target as a
//! destination, and rewriting a plain HTTP request for the origin server.
//!
//! This module never decides whether a destination is allowed and never logs a header value.

use legate_supervisor::network::Destination;
use tokio::io::{AsyncRead, AsyncReadExt};

/// Most headers a request head may carry.
const MAX_HEADERS: usize = 100;
/// Hop-by-hop headers never forwarded (the proxy adds its own `Connection: close` and `Host`).
const DROPPED: &[&str] = &[
    "host",
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "keep-alive",
];

/// Why no request head was read.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeadError {
    /// Longer than the limit, or too many headers: `431`.
    #[error("the request head is larger than {0} bytes or has too many headers")]
    TooLarge(usize),
    /// Not HTTP/1.x: `400`.
    #[error("the request head is malformed: {0}")]
    Malformed(httparse::Error),
    /// The client closed before the head ended.
    #[error("the client closed before the request head ended")]
    Closed,
    /// Reading failed.
    #[error("reading the request head failed: {0}")]
    Io(#[from] std::io::Error),
}

/// One parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Head {
    /// The method, as sent.
    pub method: String,
    /// The request target, as sent.
    pub target: String,
    /// The minor HTTP version (`HTTP/1.x`).
    pub version: u8,
    /// Headers in order: name as sent, raw value.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Bytes the client sent after the head (a body's start, or a tunnel's first bytes).
    pub rest: Vec<u8>,
}

/// Parses `buf` as a request head: `Ok(None)` while it is incomplete.
pub(crate) fn parse(buf: &[u8], limit: usize) -> Result<Option<Head>, HeadError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(buf) {
        Ok(httparse::Status::Complete(len)) if len <= limit => Ok(Some(Head {
            method: request.method.unwrap_or_default().to_string(),
            target: request.path.unwrap_or_default().to_string(),
            version: request.version.unwrap_or(1),
            headers: request
                .headers
                .iter()
                .map(|h| (h.name.to_string(), h.value.to_vec()))
                .collect(),
            rest: buf[len..].to_vec(),
        })),
        Ok(httparse::Status::Complete(_)) => Err(HeadError::TooLarge(limit)),
        Ok(httparse::Status::Partial) if buf.len() >= limit => Err(HeadError::TooLarge(limit)),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(httparse::Error::TooManyHeaders) => Err(HeadError::TooLarge(limit)),
        Err(error) => Err(HeadError::Malformed(error)),
    }
}

/// Reads one request head of at most `limit` bytes (the caller bounds the time).
pub(crate) async fn read<R: AsyncRead + Unpin>(
    reader: &mut R,
    limit: usize,
) -> Result<Head, HeadError> {
    let mut buf = Vec::with_capacity(limit.min(4096));
    let mut chunk = vec![0u8; limit.clamp(1, 8192)];
    loop {
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            return Err(HeadError::Closed);
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(head) = parse(&buf, limit)? {
            return Ok(head);
        }
    }
}

/// What a request asks the proxy for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `CONNECT host:port`.
    Connect(Destination),
    /// An absolute-form `http://` request.
    Forward {
        /// Where it goes.
        destination: Destination,
        /// The URI's authority as sent (the forwarded `Host`).
        authority: String,
        /// The origin-form target (`/path?query`).
        origin: String,
    },
}

/// Why a request is not served: `400` or `405`, with a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unserved {
    /// `400 Bad Request`.
    BadRequest(String),
    /// `405 Method Not Allowed`.
    NotAllowed(String),
}

/// Reads a request's target.
pub(crate) fn target(method: &str, target: &str) -> Result<Target, Unserved> {
    if method == "CONNECT" {
        // Kept as text here and below: the words are the body of the 400 answer the agent
        // reads; an HTTP answer carries no source.
        return Destination::parse_authority(target, None)
            .map(Target::Connect)
            .map_err(|e| Unserved::BadRequest(format!("CONNECT needs host:port ({e})")));
    }
    if target.starts_with('/') {
        return Err(Unserved::BadRequest(
            "this is Legate's egress proxy: send CONNECT host:port or an absolute-form http:// request"
                .into(),
        ));
    }
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(Unserved::NotAllowed(
            "the proxy serves only CONNECT and absolute-form http:// requests".into(),
        ));
    };
    if scheme.eq_ignore_ascii_case("https") {
        return Err(Unserved::BadRequest(
            "send https:// requests through CONNECT host:443".into(),
        ));
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(Unserved::NotAllowed(format!(
            "the proxy serves only http:// and CONNECT, not {}://",
            scheme.chars().take(16).collect::<String>()
        )));
    }
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    if authority.contains('@') {
        return Err(Unserved::BadRequest(
            "user information in a request target is refused".into(),
        ));
    }
    let destination = Destination::parse_authority(authority, Some(80))
        .map_err(|e| Unserved::BadRequest(format!("the request target's host is invalid ({e})")))?;
    let tail = tail.split('#').next().unwrap_or_default();
    let origin = match tail.chars().next() {
        None => "/".to_string(),
        Some('?') => format!("/{tail}"),
        Some(_) => tail.to_string(),
    };
    Ok(Target::Forward {
        destination,
        authority: authority.to_string(),
        origin,
    })
}

/// The head forwarded to the origin server: origin-form target, `Host` from the request
/// target, hop-by-hop and proxy headers dropped, `Connection: close`.
pub(crate) fn rewrite(head: &Head, authority: &str, origin: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(256 + head.headers.len() * 48);
    out.extend_from_slice(
        format!(
            "{} {} HTTP/1.{}\r\nHost: {}\r\n",
            head.method, origin, head.version, authority
        )
        .as_bytes(),
    );
    for (name, value) in &head.headers {
        if DROPPED.iter().any(|d| name.eq_ignore_ascii_case(d)) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_supervisor::network::Host;
    use proptest::prelude::*;

    fn head(s: &str) -> Head {
        parse(s.as_bytes(), 16 * 1024).unwrap().unwrap()
    }

    #[test]
    fn parses_and_keeps_the_rest() {
        let h = head("CONNECT a.com:443 HTTP/1.1\r\nHost: a.com:443\r\n\r\n\x16\x03\x01");
        assert_eq!(h.method, "CONNECT");
        assert_eq!(h.target, "a.com:443");
        assert_eq!(h.rest, b"\x16\x03\x01");
        assert!(
            parse(b"GET http://a/ HTTP/1.1\r\nHost: a", 1024)
                .unwrap()
                .is_none()
        );
        assert!(matches!(
            parse(&[b'a'; 100], 100),
            Err(HeadError::Malformed(_)) | Err(HeadError::TooLarge(_))
        ));
        let long = format!("GET http://a/ HTTP/1.1\r\nX: {}\r\n\r\n", "y".repeat(200));
        assert!(matches!(
            parse(long.as_bytes(), 100),
            Err(HeadError::TooLarge(100))
        ));
        assert!(matches!(
            parse(b"\x00\x01garbage\r\n\r\n", 100),
            Err(HeadError::Malformed(_))
        ));
    }

    #[test]
    fn targets() {
        assert_eq!(
            target("CONNECT", "API.example.com:443"),
            Ok(Target::Connect(Destination::new(
                Host::Name("api.example.com".into()),
                443
            )))
        );
        assert!(matches!(
            target("CONNECT", "example.com"),
            Err(Unserved::BadRequest(_))
        ));
        assert_eq!(
            target("GET", "http://example.com?q=1#frag"),
            Ok(Target::Forward {
                destination: Destination::new(Host::Name("example.com".into()), 80),
                authority: "example.com".into(),
                origin: "/?q=1".into(),
            })
        );
        assert_eq!(
            target("POST", "HTTP://127.0.0.1:8080/a/b?c"),
            Ok(Target::Forward {
                destination: Destination::new(Host::Ip("127.0.0.1".parse().unwrap()), 8080),
                authority: "127.0.0.1:8080".into(),
                origin: "/a/b?c".into(),
            })
        );
        for (m, t) in [
            ("GET", "https://example.com/"),
            ("GET", "/"),
            ("GET", "http://u:p@example.com/"),
            ("GET", "http:///x"),
            ("GET", "http://exa_mple..com/"),
        ] {
            assert!(matches!(target(m, t), Err(Unserved::BadRequest(_))), "{t}");
        }
        assert!(matches!(
            target("OPTIONS", "*"),
            Err(Unserved::NotAllowed(_))
        ));
        assert!(matches!(
            target("GET", "ftp://example.com/"),
            Err(Unserved::NotAllowed(_))
        ));
    }

    #[test]
    fn rewrites_for_the_origin() {
        let h = head(
            "POST http://example.com:8080/x HTTP/1.1\r\nHost: evil.test\r\nProxy-Authorization: Basic eA==\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\nContent-Length: 2\r\nX-Other: v\r\n\r\nhi",
        );
        let out = String::from_utf8(rewrite(&h, "example.com:8080", "/x")).unwrap();
        assert_eq!(
            out,
            "POST /x HTTP/1.1\r\nHost: example.com:8080\r\nContent-Length: 2\r\nX-Other: v\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(h.rest, b"hi");
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..512), limit in 1usize..600) {
            if let Ok(Some(h)) = parse(&bytes, limit)
                && let Ok(Target::Forward { authority, origin, .. }) = target(&h.method, &h.target)
            {
                let _ = rewrite(&h, &authority, &origin);
            }
        }

        #[test]
        fn request_like_heads_never_panic(
            method in "(CONNECT|GET|POST|[A-Z]{1,6})",
            t in "(http://|https://|/|)[a-z0-9.:\\[\\]@/?#%*-]{0,40}",
            extra in "[ -~]{0,40}",
        ) {
            let raw = format!("{method} {t} HTTP/1.1\r\nX: {extra}\r\n\r\n");
            if let Ok(Some(h)) = parse(raw.as_bytes(), 16 * 1024)
                && let Ok(Target::Forward { authority, origin, .. }) = target(&h.method, &h.target)
            {
                let out = rewrite(&h, &authority, &origin);
                prop_assert!(out.ends_with(b"Connection: close\r\n\r\n"));
            }
        }
    }
}
