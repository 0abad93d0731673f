//! [`RemoteRef`]: where a task's work runs when its agent is served by another server (an A2A
//! agent, another Legate among them).
//!
//! This module owns only the shape of the reference. It must never reach the network: the
//! remote backend records a reference as soon as the remote server names its task, and the
//! engine uses it after a restart to re-attach the local task to the remote one.
//!
//! It also declares, once for both sides, the wire types of Legate's copy-workspace extension
//! ([`COPY_WORKSPACE_EXTENSION`]): the [`SentManifest`] that travels with a message's file
//! parts, and the [`ReturnedManifest`] that comes back beside the `patch` artifact. Their
//! structural checks ([`SentManifest::check`], [`ReturnedManifest::check`]) are pure: a
//! manifest is hostile input on either side, and nothing here touches a file.

use crate::{Error, ErrorCode};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashSet;

/// The remote task a local task is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteRef {
    /// The A2A endpoint the task was sent to (the interface URL chosen from the card).
    pub url: String,
    /// The protocol binding of that endpoint, as the card names it (`JSONRPC`, `HTTP+JSON`).
    pub binding: String,
    /// The remote server's task id.
    pub task_id: String,
    /// The remote server's context id, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
}

/// Legate's A2A extension that says "this server supervises its agents' permission requests
/// itself": a remote agent whose card declares it is supervised by that server; any other
/// remote agent is unsupervised.
pub const SUPERVISION_EXTENSION: &str = "urn:legate:a2a:ext:supervision:v1";

/// Legate's A2A extension for copy tasks run remotely: the copy's files travel with the
/// message, and the remote's patch comes back to be reviewed and integrated locally.
pub const COPY_WORKSPACE_EXTENSION: &str = "urn:legate:a2a:ext:copy-workspace:v1";

/// Legate's A2A extension for plan updates as what changed: a caller whose message names it
/// gets, on that message's stream, each plan after the first as the hunks from the plan
/// before it (`legateEvent` `{"type":"plan_changes","n":…,"base":…,"hunks":[…]}`, its text
/// part the changed entries only), and whole when the changes since the last whole one would
/// outgrow it. Any other caller gets every plan whole.
pub const PLAN_CHANGES_EXTENSION: &str = "urn:legate:a2a:ext:plan-changes:v1";

/// The bound on the bytes a copy task sends (its files) or receives (its patch) under the
/// copy-workspace extension, by default: 64 MiB. Past it the task is refused with
/// `COPY_TOO_LARGE`, never truncated.
pub const DEFAULT_MAX_TRANSFER_BYTES: u64 = 64 << 20;

/// The most files one message may carry under the copy-workspace extension.
pub const MAX_TRANSFER_FILES: usize = 10_000;

/// The key, in a message's metadata and in the data parts, under which the extension's
/// manifests travel.
pub const MANIFEST_KEY: &str = "legateCopyWorkspace";

/// The longest relative path a manifest may name, in bytes.
pub const MAX_MANIFEST_PATH_BYTES: usize = 4096;

/// One file of a copy as it travels: its relative path (`/`-separated), its size, the sha256
/// of its bytes (lower-case hex) and whether it is executable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ManifestFile {
    /// The path relative to the copy's root.
    pub path: String,
    /// Its length in bytes.
    #[serde(deserialize_with = "whole_number")]
    pub size: u64,
    /// sha256 of its bytes, 64 lower-case hex digits.
    pub sha256: String,
    /// Whether its mode has an executable bit.
    pub executable: bool,
}

/// The manifest sent with a copy task's files: every file, sorted by path, their total, and
/// the baseline id both sides agree on ([`baseline_id`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SentManifest {
    /// The files, sorted by path, each once.
    pub files: Vec<ManifestFile>,
    /// The sum of their sizes.
    #[serde(deserialize_with = "whole_number")]
    pub total_bytes: u64,
    /// [`baseline_id`] of `files`.
    pub baseline_id: String,
}

/// The post-state of one path a returned patch changed: its sha256 after the patch, or
/// `None` when the patch deletes it, and its executable bit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PostState {
    /// The path relative to the copy's root.
    pub path: String,
    /// sha256 of the file after the patch; `None`: the patch deletes it.
    pub sha256: Option<String>,
    /// Whether the file is executable after the patch (`false` when deleted).
    #[serde(default)]
    pub executable: bool,
}

/// The manifest returned beside a remote copy task's `patch` artifact: which baseline the
/// patch applies to, the patch's own sha256 and length, and the post-state of every path it
/// changes, sorted by path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReturnedManifest {
    /// The baseline id of the files the remote copy was made from.
    pub baseline_id: String,
    /// sha256 of the patch bytes.
    pub patch_sha256: String,
    /// The patch's length in bytes.
    #[serde(deserialize_with = "whole_number")]
    pub patch_length: u64,
    /// Each changed path's state after the patch, sorted by path, each once.
    pub post_state: Vec<PostState>,
}

/// The largest integer a JSON number read as a double holds exactly (2^53).
const MAX_EXACT: f64 = 9_007_199_254_740_992.0;

/// A byte count as it arrives: an integer, or a double that is one. A2A's data parts travel
/// as protobuf `Struct` values in some SDKs (the server's among them), where every number is
/// a double, so `1` arrives as `1.0`; a fraction, a negative number or one past 2^53 is
/// refused.
fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let n = serde_json::Number::deserialize(d)?;
    if let Some(u) = n.as_u64() {
        return Ok(u);
    }
    match n.as_f64() {
        Some(f) if (0.0..=MAX_EXACT).contains(&f) && f.fract() == 0.0 => Ok(f as u64),
        _ => Err(serde::de::Error::custom(format!(
            "{n} is not a whole number of bytes"
        ))),
    }
}

/// Whether `s` is 64 lower-case hex digits (a sha256 as the manifests write it).
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// Lower-case hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

/// The baseline id of `files`: sha256 over the files sorted by path, each as its path's
/// length (u64, big-endian), the path, its executable bit (one byte), its size (u64,
/// big-endian) and its sha256 (the 64 hex digits). Both sides compute it from what they hold;
/// equal ids mean equal baselines.
pub fn baseline_id(files: &[ManifestFile]) -> String {
    let mut sorted: Vec<&ManifestFile> = files.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut hash = Sha256::new();
    for f in sorted {
        hash.update((f.path.len() as u64).to_be_bytes());
        hash.update(f.path.as_bytes());
        hash.update([u8::from(f.executable)]);
        hash.update(f.size.to_be_bytes());
        hash.update(f.sha256.as_bytes());
    }
    hex(&hash.finalize())
}

fn protocol(message: String) -> Error {
    Error::new(ErrorCode::RemoteProtocolError, message)
}

/// Checks one path of a manifest: `path_problem` is the workspace's safe-relative-path rule
/// (`legate_workspace::path_problem`), applied as given; on top, the length bound.
fn check_manifest_path(
    path: &str,
    path_problem: &dyn Fn(&str) -> Option<&'static str>,
    code: ErrorCode,
) -> Result<(), Error> {
    if path.len() > MAX_MANIFEST_PATH_BYTES {
        return Err(Error::new(
            code,
            format!("a manifest path is longer than {MAX_MANIFEST_PATH_BYTES} bytes"),
        ));
    }
    match path_problem(path) {
        None => Ok(()),
        Some(why) => Err(Error::new(
            code,
            format!("the manifest path {path:?} {why}"),
        )),
    }
}

/// Refuses two paths equal ignoring case, and a path that is both a file and a directory
/// of another (`a` and `a/b`): on a case-insensitive file system or in git's index they
/// would be one entry, and a hostile sender could make one path overwrite another.
fn check_distinct<'a>(paths: impl Iterator<Item = &'a str>, code: ErrorCode) -> Result<(), Error> {
    let mut seen = HashSet::new();
    for p in paths {
        if !seen.insert(p.to_lowercase()) {
            return Err(Error::new(
                code,
                format!("the manifest names {p:?} twice (ignoring case)"),
            ));
        }
    }
    for p in &seen {
        for (i, _) in p.match_indices('/') {
            if seen.contains(&p[..i]) {
                return Err(Error::new(
                    code,
                    format!(
                        "the manifest names {:?} both as a file and as a directory",
                        &p[..i]
                    ),
                ));
            }
        }
    }
    Ok(())
}

impl SentManifest {
    /// Builds the manifest of `files` (sorted here), with its total and baseline id.
    pub fn of(mut files: Vec<ManifestFile>) -> Self {
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let total_bytes = files.iter().map(|f| f.size).fold(0u64, u64::saturating_add);
        let baseline_id = baseline_id(&files);
        Self {
            files,
            total_bytes,
            baseline_id,
        }
    }

    /// Checks a manifest received from a hostile sender, before any byte is written: at most
    /// [`MAX_TRANSFER_FILES`] files, each path safe (`path_problem`, the workspace's rule)
    /// and distinct from every other ignoring case, each sha256 well-formed, the total equal
    /// to the sum and at most `max_bytes` (`COPY_TOO_LARGE` past it), the baseline id equal to
    /// the one computed. Any other problem is `INVALID_WORKSPACE` naming it.
    pub fn check(
        &self,
        max_bytes: u64,
        path_problem: &dyn Fn(&str) -> Option<&'static str>,
    ) -> Result<(), Error> {
        let bad = |m: String| Error::new(ErrorCode::InvalidWorkspace, m);
        if self.files.len() > MAX_TRANSFER_FILES {
            return Err(bad(format!(
                "the manifest names {} files; the limit is {MAX_TRANSFER_FILES}",
                self.files.len()
            )));
        }
        let mut total = 0u64;
        for f in &self.files {
            check_manifest_path(&f.path, path_problem, ErrorCode::InvalidWorkspace)?;
            if !is_sha256_hex(&f.sha256) {
                return Err(bad(format!(
                    "the sha256 of {:?} is not 64 hex digits",
                    f.path
                )));
            }
            total = total.checked_add(f.size).ok_or_else(|| {
                Error::new(ErrorCode::CopyTooLarge, "the manifest's sizes overflow")
            })?;
        }
        check_distinct(
            self.files.iter().map(|f| f.path.as_str()),
            ErrorCode::InvalidWorkspace,
        )?;
        if total != self.total_bytes {
            return Err(bad(format!(
                "the manifest's total is {} bytes but its files add up to {total}",
                self.total_bytes
            )));
        }
        if total > max_bytes {
            return Err(Error::new(
                ErrorCode::CopyTooLarge,
                format!("the copy is {total} bytes; this server accepts at most {max_bytes}"),
            ));
        }
        if baseline_id(&self.files) != self.baseline_id {
            return Err(bad(
                "the manifest's baseline id does not match its files".into()
            ));
        }
        Ok(())
    }
}

impl ReturnedManifest {
    /// Checks a returned manifest from a hostile remote: well-formed hashes, the patch at most
    /// `max_bytes` (`COPY_TOO_LARGE`), every path safe and distinct, a deleted path not
    /// executable. Anything else is `REMOTE_PROTOCOL_ERROR` naming it.
    pub fn check(
        &self,
        max_bytes: u64,
        path_problem: &dyn Fn(&str) -> Option<&'static str>,
    ) -> Result<(), Error> {
        if !is_sha256_hex(&self.baseline_id) || !is_sha256_hex(&self.patch_sha256) {
            return Err(protocol(
                "the returned manifest's baseline id or patch sha256 is not 64 hex digits".into(),
            ));
        }
        if self.patch_length > max_bytes {
            return Err(Error::new(
                ErrorCode::CopyTooLarge,
                format!(
                    "the remote's patch is {} bytes; at most {max_bytes} are accepted",
                    self.patch_length
                ),
            ));
        }
        if self.post_state.len() > MAX_TRANSFER_FILES {
            return Err(protocol(format!(
                "the returned manifest names {} paths; the limit is {MAX_TRANSFER_FILES}",
                self.post_state.len()
            )));
        }
        for p in &self.post_state {
            check_manifest_path(&p.path, path_problem, ErrorCode::RemoteProtocolError)?;
            match &p.sha256 {
                Some(h) if !is_sha256_hex(h) => {
                    return Err(protocol(format!(
                        "the post-state sha256 of {:?} is not 64 hex digits",
                        p.path
                    )));
                }
                None if p.executable => {
                    return Err(protocol(format!(
                        "{:?} is deleted and executable at once",
                        p.path
                    )));
                }
                _ => {}
            }
        }
        check_distinct(
            self.post_state.iter().map(|p| p.path.as_str()),
            ErrorCode::RemoteProtocolError,
        )
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
#[path = "remote_tests.rs"]
mod tests;
