//! Legate's log files: one JSON line per event, one file per process kind
//! (`$LEGATE_HOME/logs/<kind>.log`: `serve`, `mcp`, `ui`, `cli`), rotated by size into
//! `<kind>.<millis>.log` and bounded by count, age and total size ([`Rotation`]).
//!
//! Every line passes through the credential detector (`legate_credentials::redact`) before it
//! reaches the disk, whatever level wrote it: a token an agent printed, a key in a prompt
//! logged at `debug`, never lands in a file. [`LogFile`] is the writer a `tracing` JSON layer
//! writes into; [`read`] and [`Follow`] read the lines back, oldest first, optionally only a
//! task's.
//!
//! This crate never decides what is logged (the binary's filter does) and never deletes a
//! file that is not a log of its own naming under the directory it was given.
//!
//! ```no_run
//! use legate_logs::{LogFile, Rotation};
//! let file = LogFile::open("/home/me/.legate/logs".as_ref(), "serve", Rotation::default())?;
//! // tracing_subscriber::fmt().json().with_writer(file).init();
//! # Ok::<(), std::io::Error>(())
//! ```

mod reader;
mod writer;

pub use reader::{Follow, Line, read};
pub use writer::LogFile;

use std::time::Duration;

/// How big the logs may grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rotation {
    /// A file is rotated once it holds this many bytes.
    pub max_file_bytes: u64,
    /// Rotated files kept per kind.
    pub max_files: usize,
    /// Rotated files older than this are removed.
    pub max_age: Duration,
    /// All the logs' files together; the oldest rotated ones go first.
    pub max_total_bytes: u64,
}

impl Default for Rotation {
    fn default() -> Self {
        Self {
            max_file_bytes: 8 << 20,
            max_files: 5,
            max_age: Duration::from_secs(14 * 24 * 60 * 60),
            max_total_bytes: 64 << 20,
        }
    }
}

/// Whether `name` is a log file of this crate's naming: `<kind>.log` or `<kind>.<millis>.log`,
/// `kind` lowercase letters. Returns the kind and the rotation stamp (`None`: current).
pub(crate) fn parse_name(name: &str) -> Option<(&str, Option<u64>)> {
    let stem = name.strip_suffix(".log")?;
    let (kind, stamp) = match stem.split_once('.') {
        Some((kind, stamp)) => (kind, Some(stamp.parse().ok()?)),
        None => (stem, None),
    };
    (!kind.is_empty() && kind.bytes().all(|b| b.is_ascii_lowercase())).then_some((kind, stamp))
}

#[cfg(test)]
mod tests {
    use super::parse_name;

    #[test]
    fn only_names_of_its_own_are_logs() {
        assert_eq!(parse_name("serve.log"), Some(("serve", None)));
        assert_eq!(
            parse_name("cli.1700000000000.log"),
            Some(("cli", Some(1700000000000)))
        );
        for other in [
            "serve.txt",
            "x.y.log",
            ".log",
            "Serve.log",
            "a.1.2.log",
            "../cli.log",
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }
}
