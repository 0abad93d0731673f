//! Memory snapshots for a task (issue 17): the caller's selection, checked against the store
//! (`crate::memory::selection` owns the rules and takes the snapshots when the task is
//! stored).

use crate::core::Core;
use crate::core::request::SubmitRequest;
use legate_core::{MemorySnapshot, Result};

/// The snapshots `request` selects, checked against the store.
pub(super) fn check(engine: &Core, request: &SubmitRequest) -> Result<Vec<MemorySnapshot>> {
    engine.check_memory(request)
}
