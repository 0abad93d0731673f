//! A copy's result that came back as files (from an agent's pod), made into what a remote
//! Legate returns: a patch against the copy's baseline and its [`ReturnedManifest`], so that
//! it reaches the copy through the one checked path both use, `transfer::apply_returned`.
//!
//! The files are written beneath a scratch directory inside the baseline's directory (no
//! link followed, each path checked and given once, bounded by the copy limits), staged
//! against the baseline's commit with a scratch index, and diffed; the scratch directory is
//! removed whatever happens. This module never writes the copy itself.

use crate::baseline::Baseline;
use crate::limits::CopyLimits;
use crate::transfer::{FileBytes, baseline_files, changes_between, check_files, write_file};
use legate_beneath::Root;
use legate_core::remote::{PostState, ReturnedManifest, baseline_id, sha256_hex};
use legate_core::{Error, ErrorCode};

/// The patch from the baseline behind `baseline` to exactly `files`, and its manifest.
/// Errors: `UNSAFE_PATH` or `INVALID_WORKSPACE` for a path, `COPY_LIMIT_EXCEEDED` past
/// `limits`; nothing is left behind.
pub fn returned_from_files(
    baseline: &Baseline,
    files: &[FileBytes],
    limits: &CopyLimits,
) -> Result<(Vec<u8>, ReturnedManifest), Error> {
    check_files(files, limits)?;
    let scratch = tempfile::Builder::new()
        .prefix("returned-")
        .tempdir_in(baseline.dir())
        .map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                "a scratch directory could not be made",
                e,
            )
        })?;
    let held = Root::open(scratch.path()).map_err(|e| {
        Error::caused_by(
            ErrorCode::Internal,
            "the scratch directory could not be opened",
            e,
        )
    })?;
    for f in files {
        write_file(&held, &f.path, &f.bytes, f.executable)?;
    }
    let view = Baseline::open(baseline.dir(), scratch.path())?;
    let tree = crate::changes::stage_tree(&view)?;
    let git = view.git();
    let head = git.run(&["rev-parse", "--verify", "HEAD^{tree}"])?;
    let head = String::from_utf8_lossy(&head).trim().to_string();
    let patch = git.run(&[crate::changes::PATCH_DIFF, &[&head, &tree]].concat())?;
    let changes = changes_between(&view, &head, &tree)?;
    let ids: Vec<&str> = changes
        .iter()
        .filter_map(|c| c.new_blob.as_deref())
        .collect();
    let mut blobs = view.blobs(&ids)?.into_iter();
    let mut post_state = Vec::with_capacity(changes.len());
    for c in &changes {
        let sha256 = match &c.new_blob {
            Some(_) => Some(sha256_hex(
                &blobs
                    .next()
                    .ok_or_else(|| Error::internal("a blob is missing"))?,
            )),
            None => None,
        };
        post_state.push(PostState {
            path: c.path.clone(),
            executable: sha256.is_some() && c.mode == Some(0o755),
            sha256,
        });
    }
    let manifest = ReturnedManifest {
        baseline_id: baseline_id(&baseline_files(baseline)?),
        patch_sha256: sha256_hex(&patch),
        patch_length: patch.len() as u64,
        post_state,
    };
    Ok((patch, manifest))
}
