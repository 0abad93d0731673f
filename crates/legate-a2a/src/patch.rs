//! The `patch` artifact of a task that worked on a copy workspace: the change the agent made,
//! as a binary-safe `git diff`, with its preview (files A/M/D, line counts, totals, sha256).
//!
//! An A2A caller can apply it on its own side, or have it reviewed and integrated on the
//! server through the CLI or MCP (`legate verify|test|integrate <task>`), which are bound to the
//! same sha256. This module only reads the copy through the engine; it never changes the copy,
//! its baseline or the original.
//!
//! A copy made from files a remote Legate sent (the copy-workspace extension, see `bundle`)
//! is reviewed by that Legate: its artifact's data part also carries the returned manifest
//! under `legateCopyWorkspace` (the baseline id, the patch's sha256 and length, each changed
//! path's post-state sha256 or deleted), and the patch is inline up to
//! `a2a.max_transfer_bytes` rather than `fronts.inline_patch_max_bytes`.

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
    // A copy made from files a remote Legate sent goes back with its returned manifest
    // (the copy-workspace extension), inline up to the transfer bound.
    let patch = match engine.reviews().returned_patch(task.id.as_str()).await {
        Ok(Some((preview, manifest))) => Ok((preview, Some(manifest))),
        Ok(None) => engine
            .reviews()
            .patch(task.id.as_str(), None)
            .await
            .map(|p| (p, None)),
        Err(e) => Err(e),
    };
    let parts = match patch {
        Ok((preview, returned)) => {
            let fronts = &engine.config().fronts;
            let max = match &returned {
                Some(_) => usize::try_from(fronts.max_transfer_bytes).unwrap_or(usize::MAX),
                None => fronts.inline_patch_max_bytes,
            };
            let inline = preview.patch.len() <= max;
            let mut data = json!({
                "sha256": preview.sha256,
                "patchLength": preview.patch_length,
                "files": preview.files,
                "summary": preview.summary,
                "inline": inline,
                "review": review,
            });
            if let Some(m) = returned {
                data[legate_core::remote::MANIFEST_KEY] = json!(m);
            }
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
            "error": {"code": e.code.as_str(), "message": e.detail()},
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
