//! Legate's copy-workspace extension, the server side: a message that carries a copy's files
//! (`urn:legate:a2a:ext:copy-workspace:v1`, see `legate_core::remote`) becomes a copy task
//! whose copy is made from exactly those files.
//!
//! The extension is active for a message whose metadata has `legateCopyWorkspace`, or any of
//! whose parts is marked with it; a message without either is handled as before (its
//! `metadata.workspace`, see `workspace`). An active message holds text parts (the prompt),
//! one file part per file (`raw` bytes, `filename` the relative path, metadata
//! `legateCopyWorkspace: "file"`) and one data part with the [`SentManifest`] (metadata
//! `legateCopyWorkspace: "manifest"`); nothing else.
//!
//! Everything in it is hostile. The manifest is checked first ([`SentManifest::check`]: at
//! most `legate_core::remote::MAX_TRANSFER_FILES` files, each path through the workspace's
//! safe-relative-path rule and distinct ignoring case, the total at most the server's
//! `a2a.max_transfer_bytes`, `COPY_TOO_LARGE` past it, the baseline id its own); then each
//! file part must be named by the manifest exactly once, with the size and sha256 it gives.
//! This module only checks and translates; the engine makes the copy.

use a2a::{A2AError, Message, Part, PartContent};
use legate_core::remote::{MANIFEST_KEY, SentManifest, sha256_hex};
use legate_core::{Error, ErrorCode};
use legate_engine::{FileBytes, ReceivedFiles, WorkspaceRequest};
use std::collections::HashMap;
use std::sync::Arc;

/// What an active message asks for: its prompt and the copy to make.
#[derive(Debug)]
pub struct Bundle {
    /// The text parts, joined by newlines.
    pub text: String,
    /// The copy made from the files ([`WorkspaceRequest::Received`]).
    pub workspace: WorkspaceRequest,
}

fn refused(code: ErrorCode, message: impl Into<String>) -> A2AError {
    crate::convert::error(&Error::new(code, message))
}

fn invalid(message: impl Into<String>) -> A2AError {
    refused(ErrorCode::InvalidWorkspace, message)
}

/// What a part is marked as, under the extension's key.
fn mark(part: &Part) -> Option<&serde_json::Value> {
    part.metadata.as_ref().and_then(|m| m.get(MANIFEST_KEY))
}

/// Whether `message` uses the extension (see the module docs).
pub fn active(message: &Message) -> bool {
    message
        .metadata
        .as_ref()
        .is_some_and(|m| m.contains_key(MANIFEST_KEY))
        || message.parts.iter().any(|p| mark(p).is_some())
}

/// The bundle `message` carries, `None` when it does not use the extension. `max_bytes` is
/// the server's bound on the files' total (`a2a.max_transfer_bytes`).
pub fn received(message: &Message, max_bytes: u64) -> Result<Option<Bundle>, A2AError> {
    if !active(message) {
        return Ok(None);
    }
    if message
        .metadata
        .as_ref()
        .is_some_and(|m| m.contains_key(crate::workspace::KEY))
    {
        return Err(invalid(
            "a message that carries a copy's files names no other workspace (metadata.workspace)",
        ));
    }
    let mut text = Vec::new();
    let mut manifest: Option<SentManifest> = None;
    let mut files: HashMap<&str, &[u8]> = HashMap::new();
    for part in &message.parts {
        match (&part.content, mark(part).and_then(|v| v.as_str())) {
            (PartContent::Text(t), None) => text.push(t.as_str()),
            (PartContent::Data(v), Some("manifest")) => {
                let m: SentManifest = serde_json::from_value(v.clone()).map_err(|e| {
                    let sentence = "the copy's manifest is malformed";
                    let e = Error::quoting(ErrorCode::InvalidWorkspace, sentence, e);
                    crate::convert::error(&e)
                })?;
                if manifest.replace(m).is_some() {
                    return Err(invalid("the message carries two manifests"));
                }
            }
            (PartContent::Raw(bytes), Some("file")) => {
                let path = part
                    .filename
                    .as_deref()
                    .ok_or_else(|| invalid("a file part has no filename (its relative path)"))?;
                if files.insert(path, bytes.as_slice()).is_some() {
                    return Err(invalid(format!("{path:?} is sent twice")));
                }
            }
            _ => {
                return Err(A2AError::new(
                    a2a::error_code::CONTENT_TYPE_NOT_SUPPORTED,
                    "a copy-workspace message holds text parts, file parts (raw bytes) and one manifest data part",
                ));
            }
        }
    }
    let manifest = manifest.ok_or_else(|| invalid("the message carries files but no manifest"))?;
    manifest
        .check(max_bytes, &legate_engine::path_problem)
        .map_err(|e| crate::convert::error(&e))?;
    if let Some(id) = message
        .metadata
        .as_ref()
        .and_then(|m| m.get(MANIFEST_KEY))
        .and_then(|v| v.get("baselineId"))
        && id.as_str() != Some(manifest.baseline_id.as_str())
    {
        return Err(invalid(
            "metadata.legateCopyWorkspace.baselineId is not the manifest's",
        ));
    }
    if files.len() != manifest.files.len() {
        return Err(invalid(format!(
            "the message carries {} files but its manifest names {}",
            files.len(),
            manifest.files.len()
        )));
    }
    let mut out = Vec::with_capacity(manifest.files.len());
    for f in &manifest.files {
        let bytes = files
            .get(f.path.as_str())
            .ok_or_else(|| invalid(format!("{:?} is in the manifest but was not sent", f.path)))?;
        if bytes.len() as u64 != f.size || sha256_hex(bytes) != f.sha256 {
            return Err(invalid(format!(
                "{:?} does not match the size and sha256 its manifest gives",
                f.path
            )));
        }
        out.push(FileBytes {
            path: f.path.clone(),
            bytes: bytes.to_vec(),
            executable: f.executable,
        });
    }
    tracing::info!(
        files = out.len(),
        bytes = manifest.total_bytes,
        baseline = %manifest.baseline_id,
        "a copy's files received"
    );
    Ok(Some(Bundle {
        text: text.join("\n"),
        workspace: WorkspaceRequest::Received(Arc::new(ReceivedFiles {
            files: out,
            baseline_id: manifest.baseline_id,
        })),
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "bundle_tests.rs"]
mod tests;
