//! How much of a tapped task's wire the tap keeps (`[tap]`): the bytes of frames per task
//! and the bytes of one frame, with their defaults and bounds.
//!
//! This module only holds the values and checks their ranges; the recorder enforces them
//! (`crate::core::tap`). It never reads a file.

use legate_core::{Error, ErrorCode, Result};

/// What the wire tap keeps of one task (`[tap]`), counted on frames as stored (redacted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TapLimits {
    /// The bytes of frames one task keeps (default 16 MiB; 1 MiB to 1 GiB, `max_task_mb`).
    /// Past it, frames are dropped and one marker frame says how many.
    pub max_task_bytes: u64,
    /// The bytes kept of one frame (default 256 KiB; 1 KiB to 8 MiB, `max_frame_kb`); a
    /// longer frame is cut and marked truncated, its size on the wire kept.
    pub max_frame_bytes: u64,
}

impl Default for TapLimits {
    fn default() -> Self {
        Self {
            max_task_bytes: 16 << 20,
            max_frame_bytes: 256 << 10,
        }
    }
}

impl TapLimits {
    /// `CONFIG_INVALID` naming the first limit outside its range.
    pub fn validate(&self) -> Result<()> {
        for (key, value, min, max) in [
            ("tap.max_task_mb", self.max_task_bytes, 1 << 20, 1 << 30),
            ("tap.max_frame_kb", self.max_frame_bytes, 1 << 10, 8 << 20),
        ] {
            if !(min..=max).contains(&value) {
                return Err(Error::new(
                    ErrorCode::ConfigInvalid,
                    format!(
                        "{key} must be between {} and {} (got {})",
                        min >> 10,
                        max >> 10,
                        value >> 10
                    ),
                ));
            }
        }
        Ok(())
    }
}
