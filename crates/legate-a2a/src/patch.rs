//! The `patch` artifact of a task that worked on a copy workspace: the change the agent made,
//! as a binary-safe `git diff`, with its preview (files A/M/D, line counts, totals, sha256).
//!
//! An A2A caller can apply it on its own side, or have it reviewed and integrated on the
//! server through the CLI or MCP (`legate verify|test|integrate <task>`), which are bound to the
//! same sha256. This module only reads the copy through the engine; it never changes the copy,
//! its baseline or the original.

use a2a::{Artifact, Part};
use legate_core::{Task, WorkspaceKind};
use legate_engine::Engine;
use serde_json::json;

/// The artifact's id and name.
pub const PATCH_ARTIFACT: &str = "patch";
/// The default of the engine's `fronts.inline_patch_max_bytes`: patches larger than that are
/// described but not carried; the data part says where to read them.
pub const MAX_INLINE_PATCH_BYTES: usize = 1 << 20;

/// The `patch` artifact of `task`, when it is a finished copy task; `None` otherwise. A patch
/// that cannot be computed (too many files, the copy discarded, …) gives an artifact whose
/// data part carries the error.
pub async fn artifact(engine: &Engine, task: &Task) -> Option<Artifact> {
    if task.workspace != WorkspaceKind::Copy || !task.is_terminal() {
        return None;
    }
    let review = format!(
        "review and integrate on the server: legate diff|verify|test|integrate {} (or the MCP tools preview, verify, test, integrate)",
        task.id
    );
    let parts = match engine.patch(task.id.as_str(), None).await {
        Ok(preview) => {
            let max = engine.config().fronts.inline_patch_max_bytes;
            let inline = preview.patch.len() <= max;
            let mut data = json!({
                "sha256": preview.sha256,
                "patchLength": preview.patch_length,
                "files": preview.files,
                "summary": preview.summary,
                "inline": inline,
                "review": review,
            });
            let mut parts = Vec::new();
            if inline && !preview.patch.is_empty() {
                let mut part = match String::from_utf8(preview.patch) {
                    Ok(text) => Part::text(text),
                    // A diff of files that are not UTF-8 travels as bytes.
                    Err(e) => Part::raw(e.into_bytes()),
                };
                part.media_type = Some("text/x-diff".into());
                part.filename = Some(format!("{}.patch", task.id));
                parts.push(part);
            } else if !inline {
                data["readWith"] = json!(format!(
                    "the patch is over {max} bytes; read it with `legate diff {}` or the MCP tool read_patch",
                    task.id
                ));
            }
            parts.push(Part::data(data));
            parts
        }
        Err(e) => vec![Part::data(json!({
            "error": {"code": e.code.as_str(), "message": e.message},
            "review": review,
        }))],
    };
    Some(Artifact {
        artifact_id: PATCH_ARTIFACT.into(),
        name: Some(PATCH_ARTIFACT.into()),
        description: Some(
            "The change the agent made to its copy of the project, as a git patch.".into(),
        ),
        parts,
        metadata: None,
        extensions: None,
    })
}
