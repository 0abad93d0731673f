//! The configuration's errors: each has a stable [`ErrorCode`] and keeps what caused it as
//! its source, never as text in its own sentence.
//!
//! A rule that refuses a value is a [`legate_core::Error`] (`CONFIG_INVALID`, or
//! `POLICY_INVALID` for the policy, naming the key); the others say which file or setting could
//! not be read. This module renders nothing: the binary prints the chain.

use legate_core::ErrorCode;
use std::path::PathBuf;

/// A configuration that could not be read or was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value a rule refused: `CODE: sentence naming the key`, its cause kept.
    #[error(transparent)]
    Invalid(#[from] legate_core::Error),
    /// An error in a file (`legate.toml` or the policy file), naming the file.
    #[error("in {}", path.display())]
    In {
        /// The file.
        path: PathBuf,
        /// What was wrong in it.
        #[source]
        source: legate_core::Error,
    },
    /// A file that exists but could not be read.
    #[error("could not read {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// `LEGATE_HOME` is set to a relative path.
    #[error("LEGATE_HOME must be an absolute path (got {})", .0.display())]
    RelativeHome(PathBuf),
    /// Neither `LEGATE_HOME` nor `HOME` says where Legate's home is.
    #[error("neither LEGATE_HOME nor HOME is set")]
    NoHome,
    /// The running executable (which the built-in agents are) could not be found.
    #[error("could not find the legate executable")]
    NoExecutable(#[source] std::io::Error),
}

impl Error {
    /// A `CONFIG_INVALID` error with this sentence.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(legate_core::Error::new(ErrorCode::ConfigInvalid, message))
    }

    /// A `CONFIG_INVALID` error with this sentence, caused by `cause`.
    pub fn invalid_because(
        message: impl Into<String>,
        cause: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Invalid(legate_core::Error::caused_by(
            ErrorCode::ConfigInvalid,
            message,
            cause,
        ))
    }

    /// The error's stable code.
    pub fn code(&self) -> ErrorCode {
        match self {
            Self::Invalid(e) => e.code,
            Self::In { source, .. } => source.code,
            Self::Read { .. } | Self::RelativeHome(_) | Self::NoHome => ErrorCode::ConfigInvalid,
            Self::NoExecutable(_) => ErrorCode::Internal,
        }
    }
}

/// A configuration result.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `CONFIG_INVALID` with a formatted sentence.
macro_rules! invalid {
    ($($arg:tt)*) => {
        $crate::Error::invalid(format!($($arg)*))
    };
}

/// Returns `CONFIG_INVALID` with a formatted sentence.
macro_rules! refuse {
    ($($arg:tt)*) => {
        return Err($crate::error::invalid!($($arg)*))
    };
}

pub(crate) use {invalid, refuse};
