//! The patch: what the agent changed in its copy, against the private baseline.
//!
//! This module owns the preview (files as A/M/D, per-file insertions and deletions, totals,
//! the full binary-safe patch and its sha256), reading the patch by path or in chunks bound
//! to that sha256, and the read-only check. The copy's current state is staged into a
//! scratch index (the baseline's own index is never changed), written as a tree, and diffed
//! against the baseline's commit; that tree is the patch's identity and what integration
//! applies.
//!
//! It must never parse patch headers to find a file (git selects by literal pathspec), let a
//! changed file through that the secret policy blocks (`BLOCKED_FILE_DETECTED`), accept a
//! symlink or submodule in the result (`UNSAFE_PATH`), or pass the change limit
//! (`CHANGE_LIMIT_EXCEEDED`).

use crate::baseline::Baseline;
use crate::git::split_z;
use crate::include::path_problem;
use crate::limits::CopyLimits;
use crate::secrets::SecretPolicy;
use crate::sha256_hex;
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

/// Diff options: binary-safe, full ids, no renames, no external programs.
const DIFF: &[&str] = &[
    "diff-tree",
    "-r",
    "--no-renames",
    "--no-ext-diff",
    "--no-textconv",
    "--no-color",
];

/// Computes the preview of the copy behind `baseline` (see the module docs).
pub fn preview(
    baseline: &Baseline,
    policy: &SecretPolicy,
    limits: &CopyLimits,
) -> Result<Preview, Error> {
    let tree = stage_tree(baseline)?;
    let git = baseline.git();
    let raw = git.run(&[DIFF, &["--raw", "-z", "--no-abbrev", "HEAD", &tree]].concat())?;
    let mut files = parse_raw(&raw)?;
    if files.len() > limits.max_changed_files {
        return Err(Error::new(
            ErrorCode::ChangeLimitExceeded,
            format!(
                "{} files changed; the limit is {} (reduce the task or raise max_changed_files)",
                files.len(),
                limits.max_changed_files
            ),
        ));
    }
    check_blocked(baseline, policy, &files)?;
    confirm_beneath(baseline, &files)?;
    let numstat = git.run(&[DIFF, &["--numstat", "-z", "HEAD", &tree]].concat())?;
    apply_numstat(&mut files, &numstat);
    let patch = full_patch(baseline, &tree, None)?;
    let mut summary = PatchSummary {
        files_changed: files.len(),
        ..PatchSummary::default()
    };
    for f in &files {
        match f.status {
            ChangeStatus::A => summary.added += 1,
            ChangeStatus::M => summary.modified += 1,
            ChangeStatus::D => summary.deleted += 1,
        }
        if f.binary {
            summary.binary_files += 1;
        }
        summary.insertions += f.insertions.unwrap_or(0);
        summary.deletions += f.deletions.unwrap_or(0);
    }
    Ok(Preview {
        sha256: sha256_hex(&patch),
        patch_length: patch.len() as u64,
        tree,
        files,
        summary,
        patch,
    })
}

/// The patch from the baseline to `tree`, whole or for one `path` (selected by git with a
/// literal pathspec, never by parsing headers).
pub fn full_patch(baseline: &Baseline, tree: &str, path: Option<&str>) -> Result<Vec<u8>, Error> {
    let mut args: Vec<&str> = vec!["--literal-pathspecs"];
    args.extend_from_slice(DIFF);
    args.extend_from_slice(&[
        "-p",
        "--binary",
        "--full-index",
        "--src-prefix=a/",
        "--dst-prefix=b/",
        "HEAD",
        tree,
    ]);
    if let Some(p) = path {
        args.push("--");
        args.push(p);
    }
    baseline.git().run(&args)
}

/// Confirms that each added or modified file's blob is what the copy holds now, read beneath
/// the copy in the kernel without following any symlink.
///
/// `git add` lstat()s a file and opens it by path afterwards (and opens a directory by path
/// after lstat() said it was one), so an agent process still alive could swap a file or a
/// directory for a symlink in between and have git stage what the link points to. Whatever
/// git read is checked here against the copy's own file: a link now on the way, a file that
/// vanished or bytes that differ refuse the patch (`UNSAFE_PATH`).
fn confirm_beneath(baseline: &Baseline, files: &[FileChange]) -> Result<(), Error> {
    use sha1::{Digest, Sha1};
    for f in files {
        let Some(blob) = &f.new_blob else { continue };
        let changed = || {
            Error::new(
                ErrorCode::UnsafePath,
                format!(
                    "{} changed while the patch was made, or git read it through a link; preview again once nothing writes to the copy",
                    f.path
                ),
            )
        };
        let bytes = crate::copy::read_inside(baseline.copy(), &f.path)?.ok_or_else(changed)?;
        let mut hash = Sha1::new();
        hash.update(format!("blob {}\0", bytes.len()).as_bytes());
        hash.update(&bytes);
        let id: String = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        if &id != blob {
            return Err(changed());
        }
    }
    Ok(())
}

/// Stages the copy's current state into a scratch index and returns its tree id.
pub(crate) fn stage_tree(baseline: &Baseline) -> Result<String, Error> {
    let scratch = tempfile::Builder::new()
        .prefix("index-")
        .tempfile_in(baseline.dir())
        .map_err(|e| Error::internal(format!("a scratch index could not be made: {e}")))?;
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
    scratch
        .as_file()
        .set_modified(written)
        .map_err(|e| Error::internal(format!("a scratch index could not be made: {e}")))?;
    let git = baseline.git().with_index(scratch.path());
    git.run(&["add", "--all"])?;
    let tree = git.run(&["write-tree"])?;
    Ok(String::from_utf8_lossy(&tree).trim().to_string())
}

pub(crate) fn parse_raw(raw: &[u8]) -> Result<Vec<FileChange>, Error> {
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

fn apply_numstat(files: &mut [FileChange], numstat: &[u8]) {
    for item in split_z(numstat) {
        let line = String::from_utf8_lossy(item);
        let mut parts = line.splitn(3, '\t');
        let (Some(ins), Some(del), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        if let Ok(i) = files.binary_search_by(|f| f.path.as_str().cmp(path)) {
            let f = &mut files[i];
            match (ins.parse::<u64>(), del.parse::<u64>()) {
                (Ok(a), Ok(d)) => {
                    f.insertions = Some(a);
                    f.deletions = Some(d);
                }
                _ => f.binary = true,
            }
        }
    }
}

/// Refuses a patch that adds or changes a file the secret policy blocks.
fn check_blocked(
    baseline: &Baseline,
    policy: &SecretPolicy,
    files: &[FileChange],
) -> Result<(), Error> {
    let written: Vec<&FileChange> = files.iter().filter(|f| f.new_blob.is_some()).collect();
    let ids: Vec<&str> = written
        .iter()
        .filter_map(|f| f.new_blob.as_deref())
        .collect();
    let contents = baseline.blobs(&ids)?;
    let blocked: Vec<String> = written
        .iter()
        .zip(contents.iter())
        .filter_map(|(f, bytes)| policy.check(&f.path, bytes))
        .map(|b| format!("{} ({}: {})", b.path, b.reason.as_str(), b.rule))
        .collect();
    if blocked.is_empty() {
        return Ok(());
    }
    Err(Error::new(
        ErrorCode::BlockedFileDetected,
        format!(
            "the patch writes files the secret policy blocks: {}",
            blocked.join(", ")
        ),
    ))
}

/// Everything a read-only task may not have done: each changed path (A/M/D), each new
/// file that git ignores and each path named `.git` (which git never lists), sorted. Empty when the copy is exactly its baseline.
/// A handed-off copy is compared with the tree it was handed (`refs/legate/start`, see
/// `handoff`), not with the original project's baseline.
pub fn read_only_changes(baseline: &Baseline) -> Result<Vec<String>, Error> {
    let tree = stage_tree(baseline)?;
    let git = baseline.git();
    let start = if baseline.git_dir().join(crate::handoff::START_REF).is_file() {
        crate::handoff::START_REF
    } else {
        "HEAD"
    };
    let names = git.run(&[DIFF, &["--name-only", "-z", start, &tree]].concat())?;
    let ignored = git.run(&[
        "ls-files",
        "-z",
        "--others",
        "--ignored",
        "--exclude-standard",
    ])?;
    // The skills staging directory is ignored by the baseline (see `baseline::EXCLUDE`):
    // what is there was staged by Legate or written where nothing reaches a patch.
    let mut out: Vec<String> = split_z(&names)
        .chain(split_z(&ignored).filter(|p| !crate::is_staging_path(&String::from_utf8_lossy(p))))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    // Git never lists a path named `.git`; a copy holds none until an agent writes one.
    out.extend(crate::hidden::dot_git_entries(baseline.copy())?);
    out.sort();
    out.dedup();
    Ok(out)
}

/// A window of a patch, bound to its sha256.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PatchChunk {
    /// The text of the window (the patch is read as UTF-8).
    pub text: String,
    /// Where the window starts, in bytes.
    pub offset: u64,
    /// Where the next window starts.
    pub next_offset: u64,
    /// Whether more follows.
    pub has_more: bool,
    /// The length of what is being read (the whole patch, or one file's part), in bytes.
    pub total_length: u64,
    /// sha256 of the whole patch this was read from.
    pub sha256: String,
    /// sha256 of what is being read (equal to `sha256` without a path).
    pub content_sha256: String,
}

/// The default window, in bytes.
pub const DEFAULT_CHUNK: usize = 10_000;
/// The largest window, in bytes.
pub const MAX_CHUNK: usize = 50_000;

/// Cuts `bytes` at `offset` into a window of at most `limit` bytes (2 to [`MAX_CHUNK`]),
/// never splitting a UTF-8 character. `UNSUPPORTED_PATCH_ENCODING` when the bytes are not
/// UTF-8 text.
pub fn chunk(
    bytes: &[u8],
    offset: u64,
    limit: Option<usize>,
    sha256: &str,
) -> Result<PatchChunk, Error> {
    let limit = limit.unwrap_or(DEFAULT_CHUNK);
    if !(2..=MAX_CHUNK).contains(&limit) {
        return Err(Error::invalid_input(format!(
            "limit must be between 2 and {MAX_CHUNK} bytes"
        )));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| {
        Error::new(
            ErrorCode::UnsupportedPatchEncoding,
            "the patch holds a text change with bytes that are not UTF-8; mark such files `binary` in .gitattributes to get a binary patch",
        )
    })?;
    let total = text.len();
    let start = usize::try_from(offset).unwrap_or(usize::MAX);
    if start > total || !text.is_char_boundary(start) {
        return Err(Error::invalid_input(format!(
            "offset {offset} is not a character boundary inside a {total}-byte patch; use the nextOffset returned"
        )));
    }
    let mut end = (start + limit).min(total);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Ok(PatchChunk {
        text: text[start..end].to_string(),
        offset,
        next_offset: end as u64,
        has_more: end < total,
        total_length: total as u64,
        sha256: sha256.to_string(),
        content_sha256: sha256_hex(bytes),
    })
}
