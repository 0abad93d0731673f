//! Skills staged in a task's copy (issue 17): owned by the skills engineer.

use super::not_yet;
use crate::engine::Engine;
use crate::request::SubmitRequest;
use legate_core::{Result, SkillRecord};

/// The skills `request` sends, checked; they are staged when the copy is made.
pub(super) fn check(_engine: &Engine, request: &SubmitRequest) -> Result<Vec<SkillRecord>> {
    if request.skills.is_empty() {
        Ok(Vec::new())
    } else {
        Err(not_yet("skills"))
    }
}
