//! Legate's copy-workspace extension, the client side (issue 15, part 5: "remote work, local
//! review"): a copy task sent to a remote Legate carries the local copy's files, and the
//! remote's patch comes back to be applied to that copy, where `preview`, `verify`, `test`
//! and `integrate` then work as for a local agent.
//!
//! This module owns the extension's client half: [`require_extension`] (a remote whose card
//! does not declare [`COPY_WORKSPACE_EXTENSION`] gets no copy task,
//! `REMOTE_WORKSPACE_UNSUPPORTED`), [`outbound`] (the local copy's files, read beneath its
//! root without following links, bounded before anything is sent, as A2A file parts plus a
//! data part with the [`SentManifest`]) and [`apply_returned`] (the remote's `patch` artifact
//! and [`ReturnedManifest`], applied to the local copy confined and checked by sha256 on both
//! sides, see `legate_workspace::apply_returned`).
//!
//! The copy it reads was made by the engine after the local secret preflight, so what it
//! holds is what may leave the machine; this module never reads the original project. It
//! never reaches the network, never decides a task's state, and never leaves the local copy
//! half-patched: on any mismatch the copy is as it was and the error is
//! `REMOTE_PROTOCOL_ERROR` naming the path.

use a2a::{AgentCard, Message, Part, PartContent};
use legate_core::remote::{
    COPY_WORKSPACE_EXTENSION, DEFAULT_MAX_TRANSFER_BYTES, MANIFEST_KEY, MAX_TRANSFER_FILES,
    ManifestFile, ReturnedManifest, SentManifest, sha256_hex,
};
use legate_core::{Error, ErrorCode, Result};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::Path;

/// The id and name of the artifact a remote Legate returns a copy task's patch in (the
/// shape `legate-a2a`'s `patch` module writes).
pub const PATCH_ARTIFACT: &str = "patch";

/// What a part of a copy-workspace message is, in its `metadata[MANIFEST_KEY]`.
pub const FILE_PART: &str = "file";
/// The data part holding the [`SentManifest`].
pub const MANIFEST_PART: &str = "manifest";

/// A copy's files ready to travel with a message.
#[derive(Debug, Clone)]
pub struct Outbound {
    /// The manifest (also carried by the manifest part).
    pub manifest: SentManifest,
    /// One file part per file (bytes, base64 on the wire; `filename` is the relative path),
    /// then the manifest's data part.
    pub parts: Vec<Part>,
    /// The message metadata that activates the extension on the remote.
    pub metadata: HashMap<String, Value>,
    /// The extension URIs the message uses (`Message.extensions`).
    pub extensions: Vec<String>,
}

impl Outbound {
    /// Adds the files, the manifest, the metadata and the extension to `message` (whose
    /// text parts, the prompt, stay first).
    pub fn attach(self, message: &mut Message) {
        message.parts.extend(self.parts);
        message
            .metadata
            .get_or_insert_with(HashMap::new)
            .extend(self.metadata);
        let uris = message.extensions.get_or_insert_with(Vec::new);
        for uri in self.extensions {
            if !uris.contains(&uri) {
                uris.push(uri);
            }
        }
    }
}

/// The result of a returned patch applied to the local copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    /// The patch's sha256 (as the remote gave it, and checked).
    pub patch_sha256: String,
    /// Its length in bytes.
    pub patch_length: u64,
    /// The paths it changed, sorted, with their state now.
    pub post_state: Vec<legate_core::remote::PostState>,
}

/// Refuses a remote whose card does not declare the copy-workspace extension:
/// `REMOTE_WORKSPACE_UNSUPPORTED`, before anything of the copy is read or sent.
pub fn require_extension(card: &AgentCard) -> Result<()> {
    let declared = card
        .capabilities
        .extensions
        .as_ref()
        .is_some_and(|exts| exts.iter().any(|e| e.uri == COPY_WORKSPACE_EXTENSION));
    if declared {
        return Ok(());
    }
    Err(Error::new(
        ErrorCode::RemoteWorkspaceUnsupported,
        format!(
            "the remote agent {:?} does not declare {COPY_WORKSPACE_EXTENSION}; it cannot take a copy task (use a sandbox task, or a remote Legate)",
            card.name
        ),
    ))
}

/// The local copy at `root` as the parts of a message (see the module docs). More than
/// `max_bytes` of files is `COPY_TOO_LARGE`, found before any byte is read for sending;
/// a link or special file in the copy is `UNSAFE_PATH`.
pub fn outbound(root: &Path, max_bytes: u64) -> Result<Outbound> {
    let files = legate_workspace::read_copy(root, max_bytes, MAX_TRANSFER_FILES)?;
    let mut listed = Vec::with_capacity(files.len());
    let mut parts = Vec::with_capacity(files.len() + 1);
    for f in files {
        listed.push(ManifestFile {
            path: f.path.clone(),
            size: f.bytes.len() as u64,
            sha256: sha256_hex(&f.bytes),
            executable: f.executable,
        });
        let mut part = Part::raw(f.bytes);
        part.filename = Some(f.path);
        part.media_type = Some("application/octet-stream".into());
        part.metadata = Some(HashMap::from([(
            MANIFEST_KEY.to_string(),
            json!(FILE_PART),
        )]));
        parts.push(part);
    }
    let manifest = SentManifest::of(listed);
    let value = serde_json::to_value(&manifest)
        .map_err(|e| Error::quoting(ErrorCode::Internal, "the manifest could not be written", e))?;
    let mut part = Part::data(value);
    part.metadata = Some(HashMap::from([(
        MANIFEST_KEY.to_string(),
        json!(MANIFEST_PART),
    )]));
    parts.push(part);
    tracing::info!(
        files = manifest.files.len(),
        bytes = manifest.total_bytes,
        baseline = %manifest.baseline_id,
        "copy files ready to send"
    );
    Ok(Outbound {
        metadata: HashMap::from([(
            MANIFEST_KEY.to_string(),
            json!({"baselineId": manifest.baseline_id}),
        )]),
        manifest,
        parts,
        extensions: vec![COPY_WORKSPACE_EXTENSION.to_string()],
    })
}

fn protocol(message: impl Into<String>) -> Error {
    Error::new(ErrorCode::RemoteProtocolError, message)
}

/// Finds the remote's `patch` artifact in `task` and its returned manifest, checks them,
/// and applies the patch to the local copy at `root` (see the module docs). The patch is
/// bounded by [`DEFAULT_MAX_TRANSFER_BYTES`]; [`apply_returned_bounded`] takes another bound.
pub fn apply_returned(root: &Path, task: &a2a::Task) -> Result<Applied> {
    apply_returned_bounded(root, task, DEFAULT_MAX_TRANSFER_BYTES)
}

/// [`apply_returned`] with the patch bounded by `max_bytes` (`COPY_TOO_LARGE` past it).
pub fn apply_returned_bounded(root: &Path, task: &a2a::Task, max_bytes: u64) -> Result<Applied> {
    let (patch, manifest) = returned(task, max_bytes)?;
    let baseline = legate_workspace::baseline_of_copy(root)?;
    legate_workspace::apply_returned(&baseline, &patch, &manifest, max_bytes)?;
    tracing::info!(
        files = manifest.post_state.len(),
        sha256 = %manifest.patch_sha256,
        "the remote's patch was applied to the local copy"
    );
    Ok(Applied {
        patch_sha256: manifest.patch_sha256,
        patch_length: manifest.patch_length,
        post_state: manifest.post_state,
    })
}

/// The patch bytes and the returned manifest of `task`'s `patch` artifact, checked for
/// shape, bound and sha256 (nothing is applied).
pub fn returned(task: &a2a::Task, max_bytes: u64) -> Result<(Vec<u8>, ReturnedManifest)> {
    let artifact = task
        .artifacts
        .iter()
        .flatten()
        .find(|a| a.artifact_id == PATCH_ARTIFACT)
        .ok_or_else(|| protocol("the remote's copy task returned no `patch` artifact"))?;
    let mut patch: Option<Vec<u8>> = None;
    let mut data: Option<&Value> = None;
    for part in &artifact.parts {
        let bytes = match &part.content {
            PartContent::Text(t) => t.as_bytes().to_vec(),
            PartContent::Raw(b) => b.clone(),
            PartContent::Data(v) => {
                if data.replace(v).is_some() {
                    return Err(protocol("the `patch` artifact has two data parts"));
                }
                continue;
            }
            PartContent::Url(_) => {
                return Err(protocol(
                    "the `patch` artifact names a URL; only an inline patch is applied",
                ));
            }
        };
        if patch.replace(bytes).is_some() {
            return Err(protocol("the `patch` artifact has two patch parts"));
        }
    }
    let data = data.ok_or_else(|| protocol("the `patch` artifact has no data part"))?;
    if let Some(err) = data.get("error") {
        let code = err.get("code").and_then(Value::as_str).unwrap_or("?");
        let message = err.get("message").and_then(Value::as_str).unwrap_or("");
        return Err(protocol(format!(
            "the remote could not make its patch: {code}: {message}"
        )));
    }
    let manifest: ReturnedManifest = serde_json::from_value(
        data.get(MANIFEST_KEY)
            .cloned()
            .ok_or_else(|| protocol(format!("the `patch` artifact carries no {MANIFEST_KEY}")))?,
    )
    .map_err(|e| {
        Error::quoting(
            ErrorCode::RemoteProtocolError,
            "the returned manifest is malformed",
            e,
        )
    })?;
    manifest.check(max_bytes, &legate_workspace::path_problem)?;
    let patch = patch.unwrap_or_default();
    if patch.len() as u64 > max_bytes {
        return Err(Error::new(
            ErrorCode::CopyTooLarge,
            format!("the remote's patch is over {max_bytes} bytes"),
        ));
    }
    if patch.len() as u64 != manifest.patch_length || sha256_hex(&patch) != manifest.patch_sha256 {
        return Err(protocol(
            "the remote's patch does not match the sha256 and length its manifest gives",
        ));
    }
    Ok((patch, manifest))
}
