//! The binary's errors and the one place they are rendered.
//!
//! A command raises a typed error with a code, never a code written as text: a
//! `legate_core::Error` with one of Legate's stable `ErrorCode`s (`coded!`, `fail!`), or a
//! [`CliError`] for the two refusals only this binary makes (`UNAUTHORIZED`, `UNAVAILABLE`).
//! `anyhow` carries them to `main`, where [`report`] prints `error: CODE: message: cause…` on
//! stderr and chooses the exit status. This module decides nothing about what failed.

use std::process::ExitCode;

/// A code only the CLI reports (Legate's own are `legate_core::ErrorCode`s).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliCode {
    /// An answer for the supervisor without the supervisor's token.
    Unauthorized,
    /// Something the command needs is not running (the dashboard).
    Unavailable,
}

impl CliCode {
    /// The code as printed.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Unauthorized => "UNAUTHORIZED",
            Self::Unavailable => "UNAVAILABLE",
        }
    }
}

impl std::fmt::Display for CliCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal only the CLI makes: its code and one sentence.
#[derive(Debug, thiserror::Error)]
#[error("{code}: {message}")]
pub struct CliError {
    /// What kind of refusal.
    pub code: CliCode,
    /// One sentence for a person.
    pub message: String,
}

impl CliError {
    /// A refusal with this code and sentence.
    pub fn new(code: CliCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// A `legate_core::Error` with `ErrorCode::$code` and a formatted sentence, as an
/// `anyhow::Error`: `coded!(InvalidInput, "--reason must say why")`.
#[macro_export]
macro_rules! coded {
    ($code:ident, $($arg:tt)*) => {
        anyhow::Error::from(legate_core::Error::new(
            legate_core::ErrorCode::$code,
            format!($($arg)*),
        ))
    };
}

/// Returns early with `coded!`'s error.
#[macro_export]
macro_rules! fail {
    ($code:ident, $($arg:tt)*) => {
        return Err($crate::coded!($code, $($arg)*))
    };
}

/// Prints `e` the one way the binary prints an error (`error: ` and its chain) on stderr, and
/// returns the exit status of a command that failed (2).
pub fn report(e: &anyhow::Error) -> ExitCode {
    eprintln!("error: {}", error_chain(e));
    ExitCode::from(2)
}

/// The error and its causes, joined with `: ` like `{:#}`, leaving out a cause whose text the
/// sentence already quotes (Legate's sentences often end with their cause's own words).
pub(crate) fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.contains(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

/// Whether `e` is stdout closing under us (`legate tasks | head`): a normal end.
pub(crate) fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
