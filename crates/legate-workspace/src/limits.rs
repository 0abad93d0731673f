//! The limits of a copy workspace: how much may be copied, and how much may change.
//!
//! This module owns the numbers and their defaults only; the selection, the copy and the
//! preview enforce them.

use serde::{Deserialize, Serialize};

/// Limits on copies and patches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CopyLimits {
    /// At most this many files are selected for a copy (`COPY_LIMIT_EXCEEDED` beyond).
    pub max_files: usize,
    /// At most this many bytes are copied (`COPY_LIMIT_EXCEEDED` beyond).
    pub max_bytes: u64,
    /// At most this many files may change (`CHANGE_LIMIT_EXCEEDED` beyond).
    pub max_changed_files: usize,
}

impl Default for CopyLimits {
    fn default() -> Self {
        Self {
            max_files: 10_000,
            max_bytes: 256 * 1024 * 1024,
            max_changed_files: 100,
        }
    }
}
