//! The patch of a copy task as a readable diff (u2 owns this module): files with A/M/D and
//! line counts, and a per-file unified diff with line numbers.
//!
//! Until u2's view lands this renders the file list the engine's preview gives, escaped.

use legate_core::Task;
use legate_engine::{Engine, PreviewReport};
use maud::{Markup, html};

/// The diff section of `task`, whose current preview is `report`.
pub async fn view(_engine: &Engine, _task: &Task, report: &PreviewReport) -> Markup {
    html! {
        h3 { "Patch" }
        p { (report.patch.files.len()) " files, sha256 " code { (report.patch.sha256) } }
    }
}
