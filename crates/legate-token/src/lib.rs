//! Who may call Legate's HTTP fronts (MCP over Streamable HTTP, A2A): the bearer token (32
//! random bytes in lowercase hex, kept in a file of mode 0600 (made on first use) or
//! configured, and compared in constant time), and the `Host`/`Origin` allowlist that comes
//! before it ([`allowlist`], [`guard`]), and the HTTP server both fronts run on, with its read
//! timeouts and connection cap ([`serve`]). Tokens belong to an audience, the caller's or the
//! supervisor's, and an endpoint of one refuses the other's ([`bearer`]).
//!
//! This crate never logs a token and never puts one in an error message.

pub mod allowlist;
pub mod bearer;
pub mod guard;
pub mod serve;

pub use allowlist::{Allowlist, Rejection};
pub use bearer::{Audience, Denied, Gate};

use legate_core::{Error, ErrorCode, Result};
use std::fmt;
use std::io::Write;
use std::path::Path;

/// How many random bytes a new token has.
pub const TOKEN_BYTES: usize = 32;
/// The shortest configured token accepted, in characters.
pub const MIN_TOKEN_CHARS: usize = 32;

/// A bearer token. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(…)")
    }
}

/// Where a token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenSource {
    /// A new token was written to the file.
    Created,
    /// The file existed.
    File,
    /// Configuration gave it.
    Configured,
}

impl Token {
    /// A configured token: at least [`MIN_TOKEN_CHARS`] visible ASCII characters.
    pub fn configured(value: &str) -> Result<Token> {
        let value = value.trim();
        if value.len() < MIN_TOKEN_CHARS || !value.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!("a token must be at least {MIN_TOKEN_CHARS} visible ASCII characters"),
            ));
        }
        Ok(Token(value.to_string()))
    }

    /// The token in `path`, or a new random one written there with mode 0600 (the directory
    /// must exist). A file readable by others is tightened to 0600 first.
    pub fn load_or_create(path: &Path) -> Result<(Token, TokenSource)> {
        let fail = |what: &str, e: std::io::Error| {
            Error::new(
                ErrorCode::ConfigInvalid,
                format!("could not {what} the token file {}: {e}", path.display()),
            )
        };
        match read_private(path) {
            Ok(text) => return Ok((Token::configured(&text)?, TokenSource::File)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(fail("read", e)),
        }
        let token = Token::random()?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(path) {
            Ok(mut file) => {
                file.write_all(format!("{}\n", token.0).as_bytes())
                    .and_then(|()| file.sync_all())
                    .map_err(|e| fail("write", e))?;
                Ok((token, TokenSource::Created))
            }
            // Another process made it between our read and our create: use theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let text = read_private(path).map_err(|e| fail("read", e))?;
                Ok((Token::configured(&text)?, TokenSource::File))
            }
            Err(e) => Err(fail("create", e)),
        }
    }

    /// A new token from the operating system's random source.
    pub fn random() -> Result<Token> {
        let mut bytes = [0u8; TOKEN_BYTES];
        getrandom::fill(&mut bytes)
            .map_err(|e| Error::quoting(ErrorCode::Internal, "no random bytes for a token", e))?;
        Ok(Token(hex(&bytes)))
    }

    /// The token, for printing client configuration to the person who started the server.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this token. Takes the same time for every candidate of a given
    /// length, wherever the first difference is.
    pub fn matches(&self, candidate: &str) -> bool {
        constant_time_eq(self.0.as_bytes(), candidate.as_bytes())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn read_private(path: &Path) -> std::io::Result<String> {
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(path)?;
    if meta.permissions().mode() & 0o077 != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    }
    std::fs::read_to_string(path)
}

/// Compares two byte strings without an early exit. Only the length may leak.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_new_token_is_64_hex_chars_in_a_0600_file_and_is_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let (token, source) = Token::load_or_create(&path).unwrap();
        assert_eq!(source, TokenSource::Created);
        assert_eq!(token.expose().len(), 64);
        assert!(token.expose().bytes().all(|b| b.is_ascii_hexdigit()));
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (again, source) = Token::load_or_create(&path).unwrap();
        assert_eq!(source, TokenSource::File);
        assert_eq!(again, token);
        assert_ne!(Token::random().unwrap(), token);
    }

    #[test]
    fn a_loose_file_is_tightened_and_a_short_one_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "x".repeat(40)).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        Token::load_or_create(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        std::fs::write(&path, "short").unwrap();
        let err = Token::load_or_create(&path).unwrap_err();
        assert_eq!(err.code, ErrorCode::ConfigInvalid);
        assert!(!err.message.contains("short"));
    }

    #[test]
    fn matching_is_exact() {
        let t = Token::configured(&"a".repeat(40)).unwrap();
        assert!(t.matches(&"a".repeat(40)));
        assert!(!t.matches(&"a".repeat(39)));
        assert!(!t.matches(&format!("{}b", "a".repeat(39))));
        assert!(!t.matches(""));
        assert_eq!(format!("{t:?}"), "Token(…)");
    }
}
