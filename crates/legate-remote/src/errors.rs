//! Errors of the remote backend: a transport failure, a refused token, or an answer that is
//! not A2A become `REMOTE_UNREACHABLE`, `REMOTE_UNAUTHENTICATED` and `REMOTE_PROTOCOL_ERROR`,
//! quoting what the remote said (escaped, bounded: it is hostile text).
//!
//! This module never includes a token or a request body in a message.

use legate_core::{Error, ErrorCode};

/// The longest excerpt of a remote's words put in an error, in characters.
pub const MAX_EXCERPT_CHARS: usize = 300;

/// `text` on one line, control characters escaped, at most [`MAX_EXCERPT_CHARS`] characters.
pub fn excerpt(text: &str) -> String {
    legate_core::text::excerpt(text, MAX_EXCERPT_CHARS)
}

/// `REMOTE_PROTOCOL_ERROR`.
pub fn protocol(message: String) -> Error {
    Error::new(ErrorCode::RemoteProtocolError, message)
}

/// `REMOTE_UNREACHABLE` for a request to `url` that failed on the way.
pub fn unreachable(url: &str, e: &reqwest::Error) -> Error {
    let what = if e.is_connect() {
        "could not connect"
    } else if e.is_timeout() {
        "timed out"
    } else {
        "the connection failed"
    };
    Error::new(
        ErrorCode::RemoteUnreachable,
        // A refused certificate is said only by a cause.
        format!(
            "{}: {what} ({})",
            excerpt(url),
            excerpt(&legate_core::error::with_causes(
                e.to_string(),
                std::error::Error::source(e)
            ))
        ),
    )
}

/// An error `a2a-client` returned, for the call `what` to `url`. The client reports a failed
/// connection as "HTTP request failed", an HTTP 401/403 with its status, and an A2A error
/// with the remote's code and message.
pub fn from_a2a(url: &str, what: &str, e: &a2a::A2AError) -> Error {
    let said = excerpt(&e.message);
    if e.code == crate::wire::TOO_LARGE {
        return protocol(format!("{what} at {}: {said}", excerpt(url)));
    }
    let lower = e.message.to_ascii_lowercase();
    if lower.starts_with("http request failed") || lower.starts_with("sse stream error") {
        return Error::new(
            ErrorCode::RemoteUnreachable,
            format!("{what} at {}: {said}", excerpt(url)),
        );
    }
    if lower.contains("401") || lower.contains("403") || lower.contains("unauthenticated") {
        return Error::new(
            ErrorCode::RemoteUnauthenticated,
            format!(
                "{what} at {}: the remote refused the token: {said}",
                excerpt(url)
            ),
        );
    }
    protocol(format!(
        "{what} at {}: the remote answered with A2A error {}: {said}",
        excerpt(url),
        e.code
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a remote says, its excerpt is one bounded line with no control character.
        #[test]
        fn an_excerpt_is_one_bounded_line(s in "\\PC{0,400}|[\\x00-\\x1f\\x7f]{0,50}|.{0,10}\\x1b\\[2J.{0,10}") {
            let e = excerpt(&s);
            prop_assert!(e.chars().count() <= MAX_EXCERPT_CHARS * 6 + 1);
            prop_assert!(!e.chars().any(char::is_control));
        }
    }
}
