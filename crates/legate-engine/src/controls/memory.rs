//! Memory snapshots for a task (issue 17): owned by the memory engineer.

use super::not_yet;
use crate::engine::Engine;
use crate::request::SubmitRequest;
use legate_core::{MemorySnapshot, Result};

/// The snapshots `request` selects, checked against the store.
pub(super) fn check(_engine: &Engine, request: &SubmitRequest) -> Result<Vec<MemorySnapshot>> {
    match &request.memory {
        Some(selection) if !selection.is_empty() => Err(not_yet("memory")),
        _ => Ok(Vec::new()),
    }
}
