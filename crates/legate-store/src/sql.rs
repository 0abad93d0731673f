//! Mapping SQLite and JSON failures to [`legate_core::Error`] with `STORE_ERROR`.
//!
//! Messages are one sentence and never carry stored content: SQLite's own messages name
//! tables and constraints, not values, and JSON errors (which may quote their input) are
//! never passed through.

use legate_core::{Error, ErrorCode, Result};

/// `.ctx("append events")` turns a SQLite failure into
/// `STORE_ERROR: the store could not append events: <sqlite's reason>.`
pub(crate) trait SqlContext<T> {
    fn ctx(self, what: &str) -> Result<T>;
}

impl<T> SqlContext<T> for rusqlite::Result<T> {
    fn ctx(self, what: &str) -> Result<T> {
        self.map_err(|e| {
            let before = format!("the store could not {what}: ");
            Error::quoting_between(ErrorCode::StoreError, before, e, ".")
        })
    }
}

/// A `STORE_ERROR` with the given sentence.
pub(crate) fn store_error(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::StoreError, message)
}

/// `TASK_NOT_FOUND` for an id (or prefix) the caller gave.
pub(crate) fn task_not_found(id: &str) -> Error {
    Error::new(
        ErrorCode::TaskNotFound,
        format!("no task has the id {}.", shorten(id)),
    )
}

/// Caller-supplied text, cut to a length fit for an error sentence.
pub(crate) fn shorten(s: &str) -> String {
    const MAX: usize = 80;
    match s.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_owned(),
    }
}

/// A value that must fit SQLite's signed 64-bit integer.
pub(crate) fn to_i64(n: u64, what: &str) -> Result<i64> {
    i64::try_from(n).map_err(|_| store_error(format!("{what} is too large to store.")))
}

/// A count or limit for SQL; anything beyond `i64::MAX` means "no limit" anyway.
pub(crate) fn clamp_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A stored integer that must not be negative.
pub(crate) fn to_u64(n: i64, what: &str) -> Result<u64> {
    u64::try_from(n).map_err(|_| store_error(format!("a stored {what} is negative.")))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn long_input_is_shortened_on_a_char_boundary() {
        let s = "é".repeat(200);
        let short = shorten(&s);
        assert_eq!(short.chars().count(), 81);
        assert_eq!(shorten("abcd"), "abcd");
    }
}
