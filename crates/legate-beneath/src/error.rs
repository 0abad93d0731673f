//! The one error type of the crate: why a path was refused, or which system call failed.
//!
//! This module owns the wording and the stable [`ErrorCode`] of each refusal. It never
//! touches the file system.

use legate_core::ErrorCode;
use std::path::PathBuf;

/// Why a path could not be used beneath its root.
///
/// Every variant names the path as the caller gave it (relative to the root once stripped).
/// Refusals (`Absolute`, `Escapes`, `NotUnderRoot`, `Symlink`) are decided before or during
/// resolution and never touch anything outside the root.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// An absolute path was given where a path relative to the root was required.
    #[error("{} is absolute; only a path relative to the root is resolved beneath it", path.display())]
    Absolute {
        /// The path as given.
        path: PathBuf,
    },
    /// The path climbs out of the root with `..`.
    #[error("{} leaves the root through `..`", path.display())]
    Escapes {
        /// The path as given.
        path: PathBuf,
    },
    /// An absolute path that does not start with the root.
    #[error("{} is outside the root {}", path.display(), root.display())]
    NotUnderRoot {
        /// The path as given.
        path: PathBuf,
        /// The root it had to stay in.
        root: PathBuf,
    },
    /// A component of the path is a symlink (or a magic link), which is never followed.
    #[error("{} goes through a symlink, and symlinks are never followed beneath the root", path.display())]
    Symlink {
        /// The path as given.
        path: PathBuf,
    },
    /// The path names a directory where a file was needed.
    #[error("{} is a directory", path.display())]
    IsDirectory {
        /// The path as given.
        path: PathBuf,
    },
    /// The path names something that is neither a regular file nor a directory (a FIFO, a
    /// socket, a device), or a directory where a file was needed.
    #[error("{} is not a regular file", path.display())]
    NotRegular {
        /// The path as given.
        path: PathBuf,
    },
    /// The file is larger than the caller allows.
    #[error("{} is larger than {max} bytes", path.display())]
    TooLarge {
        /// The path as given.
        path: PathBuf,
        /// The limit.
        max: u64,
    },
    /// The root directory itself could not be opened.
    #[error("could not open the root {}", path.display())]
    Root {
        /// The root.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
    /// A system call failed on a path beneath the root.
    #[error("could not {op} {}", path.display())]
    Io {
        /// What was being done (`open`, `read`, `create`, `rename`, …).
        op: &'static str,
        /// The path as given.
        path: PathBuf,
        /// The failure.
        #[source]
        source: std::io::Error,
    },
}

impl BeneathError {
    /// The stable code of this error: refusals are [`ErrorCode::PathOutsideRoot`], a path
    /// of the wrong kind is [`ErrorCode::InvalidInput`], an unusable root is
    /// [`ErrorCode::InvalidWorkspace`] and a failed system call [`ErrorCode::Internal`].
    #[must_use]
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Absolute { .. }
            | Self::Escapes { .. }
            | Self::NotUnderRoot { .. }
            | Self::Symlink { .. } => ErrorCode::PathOutsideRoot,
            Self::IsDirectory { .. } | Self::NotRegular { .. } | Self::TooLarge { .. } => {
                ErrorCode::InvalidInput
            }
            Self::Root { .. } => ErrorCode::InvalidWorkspace,
            Self::Io { .. } => ErrorCode::Internal,
        }
    }

    /// Whether the refusal is about where the path leads (outside the root, or through a
    /// symlink), as opposed to what it names or a failed call.
    #[must_use]
    pub fn is_refusal(&self) -> bool {
        self.code() == ErrorCode::PathOutsideRoot
    }

    /// Whether the path (or one of its parents) does not exist.
    #[must_use]
    pub fn is_not_found(&self) -> bool {
        matches!(self, Self::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
    }

    /// The underlying I/O error, when a system call failed.
    #[must_use]
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            Self::Io { source, .. } | Self::Root { source, .. } => Some(source),
            _ => None,
        }
    }
}
