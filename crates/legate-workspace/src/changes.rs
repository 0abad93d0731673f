//! A copy's change against its private baseline, as data: which files were added, modified
//! or deleted, with their modes and blob ids, and the tree the copy's current state stages to.
//!
//! This module owns the change model every later step shares (review's preview, handoffs,
//! transfers and integration): staging the copy into a scratch index ([`stage_tree`], the
//! baseline's own index is never changed; every entry whose file's stat data differ to the
//! nanosecond smudged first by `smudge`, as git compares times to the second only) and
//! reading git's raw diff into [`FileChange`]s
//! with their paths and modes checked ([`parse_raw`]). The [`Preview`] and [`PatchSummary`]
//! types live here so that integration and transfer can name them without the review crate.
//!
//! It must never parse patch headers, accept a path that is not a safe relative path, or
//! accept a symlink or submodule in the result (`UNSAFE_PATH`). Computing a preview, reading
//! a patch and the read-only check are review's (`legate-review`).

use crate::baseline::Baseline;
use crate::git::split_z;
use crate::include::path_problem;
use legate_core::{Error, ErrorCode};
use serde::{Deserialize, Serialize};

legate_core::wire_enum! {
    /// How a file changed.
    #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub enum ChangeStatus {
        /// Added.
        A => "A",
        /// Modified.
        M => "M",
        /// Deleted.
        D => "D",
    }
}

/// One changed file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FileChange {
    /// Relative path.
    pub path: String,
    /// A, M or D.
    pub status: ChangeStatus,
    /// Lines added; `None` for a binary file.
    pub insertions: Option<u64>,
    /// Lines removed; `None` for a binary file.
    pub deletions: Option<u64>,
    /// Whether git sees the file as binary.
    pub binary: bool,
    /// The file's mode in the result (`0o644` or `0o755`); `None` when deleted.
    pub mode: Option<u32>,
    /// The baseline blob id; `None` when added.
    pub old_blob: Option<String>,
    /// The result blob id; `None` when deleted.
    pub new_blob: Option<String>,
}

/// Totals over a patch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PatchSummary {
    /// Files changed.
    pub files_changed: usize,
    /// Files added.
    pub added: usize,
    /// Files modified.
    pub modified: usize,
    /// Files deleted.
    pub deleted: usize,
    /// Lines added (text files).
    pub insertions: u64,
    /// Lines removed (text files).
    pub deletions: u64,
    /// Binary files changed.
    pub binary_files: usize,
}

/// A preview of a copy's patch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Preview {
    /// sha256 of the full patch, lower-case hex.
    pub sha256: String,
    /// The patch's length in bytes.
    pub patch_length: u64,
    /// The git tree of the copy's state this patch leads to (in the private baseline).
    pub tree: String,
    /// Changed files, sorted by path.
    pub files: Vec<FileChange>,
    /// Totals.
    pub summary: PatchSummary,
    /// The full patch (`git diff --binary`), not serialized.
    #[serde(skip)]
    pub patch: Vec<u8>,
}

/// A new, empty scratch index file beside the baseline (removed when dropped).
pub(crate) fn scratch_index(baseline: &Baseline) -> Result<tempfile::NamedTempFile, Error> {
    tempfile::Builder::new()
        .prefix("index-")
        .tempfile_in(baseline.dir())
        .map_err(|e| Error::caused_by(ErrorCode::Internal, "a scratch index could not be made", e))
}

/// `git diff-tree` for a whole binary-safe patch between two trees (both given after it):
/// full ids, no renames, no external programs, `a/` and `b/` prefixes. The preview's patch
/// and a pod's returned patch are both made with it, so the same change is the same bytes.
pub const PATCH_DIFF: &[&str] = &[
    "diff-tree",
    "-r",
    "--no-renames",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
    "-p",
    "--binary",
    "--full-index",
    "--src-prefix=a/",
    "--dst-prefix=b/",
];

/// Stages the copy's current state into a scratch index and returns its tree id.
///
/// The scratch index starts as a copy of the baseline's, its entries whose files changed in
/// any stat field (nanoseconds included) smudged so that git hashes those files again, and
/// then `git add --all` runs with it.
pub fn stage_tree(baseline: &Baseline) -> Result<String, Error> {
    stage_tree_with(baseline, None, None, None)
}

/// [`stage_tree`], its new objects written into `apart` (the baseline's own read as its
/// alternate) when given, and `git add` stopped when `watch` answers an error (asked while it
/// runs, and once after it ends, before the trees are written).
pub(crate) fn stage_tree_with(
    baseline: &Baseline,
    apart: Option<&std::path::Path>,
    watch: Option<crate::git_run::Watch<'_>>,
    max_new_entries: Option<usize>,
) -> Result<String, Error> {
    let scratch = scratch_index(baseline)?;
    let index = baseline.git_dir().join("index");
    let unreadable =
        |e: std::io::Error| Error::internal(format!("the baseline index could not be read: {e}"));
    // Git re-reads a file whose entry is not older than the index file (racily clean: it
    // may have changed in the second the index was written, keeping its stat data). The
    // scratch copy keeps the baseline index's mtime, taken before copying (an older time
    // only makes more entries racy), so that a copy made now does not hide such a change.
    let written = std::fs::metadata(&index)
        .and_then(|m| m.modified())
        .map_err(unreadable)?;
    std::fs::copy(&index, scratch.path()).map_err(unreadable)?;
    // Git compares times to the second only: a file rewritten in its entry's second, its
    // mtime set back, would look clean. Every entry whose file differs in any field, to the
    // nanosecond, is smudged first so that git hashes that file again (`smudge`); the mtime
    // is set after, as the rewrite moves it.
    let smudged = crate::smudge::smudge(scratch.path(), baseline.copy())?;
    scratch
        .as_file()
        .set_modified(smudged.index_mtime(written))
        .map_err(|e| {
            Error::caused_by(ErrorCode::Internal, "a scratch index could not be made", e)
        })?;
    let mut git = baseline.git().with_index(scratch.path());
    if let Some(apart) = apart {
        git = git.with_objects_apart(apart, &baseline.git_dir().join("objects"));
    }
    git.run_watched(&["add", "--all"], None, watch)?;
    // Git may end between two looks: what it wrote last is measured before the trees are.
    if let Some(error) = watch.and_then(|watch| watch()) {
        return Err(error);
    }
    // Files of one content are one object, so the watch does not count them: a million
    // empty files would pass it and make a diff of a million lines. The index says how
    // many entries staging added.
    if let Some(max) = max_new_entries {
        let (before, after) = (index_entries(&index)?, index_entries(scratch.path())?);
        if after > before.saturating_add(max as u64) {
            return Err(Error::new(
                ErrorCode::ChangeLimitExceeded,
                format!(
                    "the copy has {} more files than its baseline, past the limit of {max} changed files; nothing was staged",
                    after - before
                ),
            ));
        }
    }
    let tree = git.run(&["write-tree"])?;
    Ok(String::from_utf8_lossy(&tree).trim().to_string())
}

/// How many entries the git index at `path` holds (its header: `DIRC`, the version, the
/// count).
fn index_entries(path: &std::path::Path) -> Result<u64, Error> {
    use std::io::Read;
    let mut header = [0u8; 12];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut header))
        .map_err(|e| Error::caused_by(ErrorCode::Internal, "a git index could not be read", e))?;
    if &header[..4] != b"DIRC" {
        return Err(Error::internal("a git index has no DIRC header"));
    }
    Ok(u64::from(u32::from_be_bytes([
        header[8], header[9], header[10], header[11],
    ])))
}

/// Reads `git diff-tree --raw -z --no-abbrev` output into changes sorted by path, each path
/// and mode checked (`UNSAFE_PATH` for an unsafe path, a non-UTF-8 name, a symlink or a
/// submodule).
pub fn parse_raw(raw: &[u8]) -> Result<Vec<FileChange>, Error> {
    let mut items = split_z(raw);
    let mut files = Vec::new();
    while let Some(meta) = items.next() {
        let meta = String::from_utf8_lossy(meta);
        let path = items
            .next()
            .ok_or_else(|| Error::internal("git diff-tree --raw ended early"))?;
        let path = std::str::from_utf8(path)
            .map_err(|_| {
                Error::new(
                    ErrorCode::UnsafePath,
                    format!(
                        "the agent created a file whose name is not UTF-8: {}",
                        String::from_utf8_lossy(path)
                    ),
                )
            })?
            .to_string();
        let fields: Vec<&str> = meta.trim_start_matches(':').split(' ').collect();
        let [old_mode, new_mode, old_id, new_id, status] = fields[..] else {
            return Err(Error::internal(format!(
                "unexpected diff-tree line {meta:?}"
            )));
        };
        if let Some(why) = path_problem(&path) {
            return Err(Error::new(
                ErrorCode::UnsafePath,
                format!("the changed path {path:?} {why}"),
            ));
        }
        for mode in [old_mode, new_mode] {
            if !matches!(mode, "000000" | "100644" | "100755") {
                return Err(Error::new(
                    ErrorCode::UnsafePath,
                    format!(
                        "{path} became a symbolic link or a submodule; only regular files can be integrated"
                    ),
                ));
            }
        }
        let status = match status {
            "A" => ChangeStatus::A,
            "M" => ChangeStatus::M,
            "D" => ChangeStatus::D,
            other => {
                return Err(Error::new(
                    ErrorCode::UnsafePath,
                    format!("{path} changed in a way that cannot be integrated ({other})"),
                ));
            }
        };
        let blob = |id: &str| (!id.bytes().all(|b| b == b'0')).then(|| id.to_string());
        files.push(FileChange {
            path,
            status,
            insertions: None,
            deletions: None,
            binary: false,
            mode: match new_mode {
                "100755" => Some(0o755),
                "100644" => Some(0o644),
                _ => None,
            },
            old_blob: blob(old_id),
            new_blob: blob(new_id),
        });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}
