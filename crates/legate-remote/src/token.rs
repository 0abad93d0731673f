//! The bearer token a remote agent wants, read from where the configuration names it
//! (`token_env` or `token_file`), never from the configuration itself.
//!
//! This module owns reading and checking the token. It must never log it, print it, or put
//! it (or a part of it) in an error: errors name the variable or the file, never the value.

use legate_core::{Error, ErrorCode, Result, TokenRef};
use std::fmt;
use std::io::Read;
use std::path::Path;

/// The longest token accepted, in bytes.
pub const MAX_TOKEN_BYTES: usize = 4096;

/// A bearer token. `Debug` does not show it.
#[derive(Clone, PartialEq, Eq)]
pub struct Bearer(String);

impl fmt::Debug for Bearer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Bearer(…)")
    }
}

impl Bearer {
    /// The token, for the `Authorization` header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

fn invalid(agent: &str, what: String) -> Error {
    Error::new(ErrorCode::ConfigInvalid, format!("agents.{agent}: {what}"))
}

/// [`invalid`], ending with the OS's words for why.
fn invalid_by(agent: &str, what: String, e: std::io::Error) -> Error {
    Error::quoting(
        ErrorCode::ConfigInvalid,
        format!("agents.{agent}: {what}"),
        e,
    )
}

/// A token's text, checked: visible ASCII, 1 to [`MAX_TOKEN_BYTES`] bytes once trimmed.
fn check(agent: &str, source: &str, text: &str) -> Result<Bearer> {
    let value = text.trim();
    if value.is_empty()
        || value.len() > MAX_TOKEN_BYTES
        || !value.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(invalid(
            agent,
            format!(
                "the token in {source} must be 1 to {MAX_TOKEN_BYTES} visible ASCII characters on one line"
            ),
        ));
    }
    Ok(Bearer(value.to_string()))
}

/// Reads the token `token` names, for agent `agent`.
pub fn read(agent: &str, token: &TokenRef) -> Result<Bearer> {
    match token {
        TokenRef::Env(var) => {
            let source = format!("the variable {var}");
            match std::env::var(var) {
                Ok(value) => check(agent, &source, &value),
                Err(_) => Err(invalid(
                    agent,
                    format!("token_env names {var}, which is not set (or not UTF-8)"),
                )),
            }
        }
        TokenRef::File(path) => read_file(agent, path),
    }
}

/// A token file, read with the care Legate's own token files get: an absolute path to a
/// regular file (a symlink is not followed), of the user's only (no group or other
/// permission bits), of bounded size.
fn read_file(agent: &str, path: &Path) -> Result<Bearer> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
    let shown = path.display().to_string();
    let source = format!("the file {shown}");
    if !path.is_absolute() {
        return Err(invalid(
            agent,
            format!("token_file must be an absolute path (got {shown})"),
        ));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_o_nofollow())
        .open(path)
        .map_err(|e| invalid_by(agent, format!("could not open token_file {shown}"), e))?;
    let meta = file
        .metadata()
        .map_err(|e| invalid_by(agent, format!("could not read token_file {shown}"), e))?;
    if !meta.is_file() {
        return Err(invalid(
            agent,
            format!("token_file {shown} is not a regular file"),
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(invalid(
            agent,
            format!(
                "token_file {shown} is readable by others (mode {:o}); chmod 600 it",
                meta.mode() & 0o777
            ),
        ));
    }
    let mut text = String::new();
    file.take(MAX_TOKEN_BYTES as u64 + 2)
        .read_to_string(&mut text)
        .map_err(|_| invalid(agent, format!("token_file {shown} is not UTF-8 text")))?;
    check(agent, &source, &text)
}

/// `O_NOFOLLOW`: the last component of the path is not followed when it is a symlink.
const fn libc_o_nofollow() -> i32 {
    // Linux's value on every architecture Legate builds for (x86_64, aarch64).
    0o400000
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_token_file_is_read_with_care_and_never_echoed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, "sekret-token-value\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let e = read("r", &TokenRef::File(path.clone())).unwrap_err();
        assert_eq!(e.code, ErrorCode::ConfigInvalid);
        assert!(e.message.contains("chmod 600"), "{e}");
        assert!(!e.message.contains("sekret"), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            read("r", &TokenRef::File(path.clone())).unwrap().expose(),
            "sekret-token-value"
        );
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert!(read("r", &TokenRef::File(link)).is_err());
        std::fs::write(&path, "two words\n").unwrap();
        let e = read("r", &TokenRef::File(path.clone())).unwrap_err();
        assert!(!e.message.contains("two"), "{e}");
        assert!(read("r", &TokenRef::File("relative".into())).is_err());
        assert_eq!(format!("{:?}", Bearer("x".into())), "Bearer(…)");
    }
}
