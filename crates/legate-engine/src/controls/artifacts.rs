//! Files collected from a task's workspace when it ends (issue 17): owned by the delivery
//! engineer.

use super::not_yet;
use crate::engine::Engine;
use crate::request::SubmitRequest;
use legate_core::Result;

/// The artifact paths `request` names, checked as safe relative paths.
pub(super) fn check(_engine: &Engine, request: &SubmitRequest) -> Result<Vec<String>> {
    if request.artifact_paths.is_empty() {
        Ok(Vec::new())
    } else {
        Err(not_yet("artifactPaths"))
    }
}
