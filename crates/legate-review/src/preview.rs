//! The patch: what the agent changed in its copy, against the private baseline.
//!
//! This module owns the preview (files as A/M/D, per-file insertions and deletions, totals,
//! the full binary-safe patch and its sha256), reading the patch by path or in chunks bound
//! to that sha256, and the read-only check. The copy's current state is staged into a
//! scratch index (the baseline's own index is never changed), written as a tree, and diffed
//! against the baseline's commit (the change model and the staging are `legate_workspace`'s);
//! that tree is the patch's identity and what integration applies.
//!
//! It must never parse patch headers to find a file (git selects by literal pathspec), let a
//! changed file through that the secret policy blocks (`BLOCKED_FILE_DETECTED`), accept a
//! symlink or submodule in the result (`UNSAFE_PATH`), or pass the change limit
//! (`CHANGE_LIMIT_EXCEEDED`), nor stage a copy past its limits (`legate_workspace`'s
//! `stage_tree_within`: measured while git writes, before any blob is read).

use legate_core::{Error, ErrorCode};
use legate_workspace::{
    Baseline, ChangeStatus, CopyLimits, FileChange, PatchSummary, Preview, SecretPatterns,
    parse_raw, sha256_hex, split_z, stage_tree_within,
};
use serde::{Deserialize, Serialize};

/// Diff options: binary-safe, full ids, no renames, no external programs.
const DIFF: &[&str] = legate_workspace::PATCH_DIFF.split_at(6).0;

/// Computes the preview of the copy behind `baseline` (see the module docs).
pub fn preview(
    baseline: &Baseline,
    secrets: &SecretPatterns,
    limits: &CopyLimits,
) -> Result<Preview, Error> {
    let tree = stage_tree_within(baseline, limits)?;
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
    written_within(baseline, &files, limits)?;
    check_blocked(baseline, secrets, &files)?;
    confirm_beneath(baseline, &files, limits.max_bytes)?;
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
    args.extend_from_slice(legate_workspace::PATCH_DIFF);
    args.extend_from_slice(&["HEAD", tree]);
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
fn confirm_beneath(baseline: &Baseline, files: &[FileChange], max: u64) -> Result<(), Error> {
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
        let bytes =
            legate_workspace::read_inside(baseline.copy(), &f.path, max)?.ok_or_else(changed)?;
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

/// Refuses a patch whose files hold more than the copy's `max_bytes` in all, counted per path
/// (`CHANGE_LIMIT_EXCEEDED`), by the sizes git gives, before any is read. Staging counts the
/// objects git writes, and git writes a content once however many files hold it (or not at
/// all, when the project's history has it): a hundred copies of one large file passed it,
/// and the preview, the patch and an integration each hold every path's bytes.
fn written_within(
    baseline: &Baseline,
    files: &[FileChange],
    limits: &CopyLimits,
) -> Result<(), Error> {
    let ids: Vec<&str> = files.iter().filter_map(|f| f.new_blob.as_deref()).collect();
    let total = baseline
        .blob_sizes(&ids)?
        .into_iter()
        .fold(0u64, u64::saturating_add);
    if total <= limits.max_bytes {
        return Ok(());
    }
    Err(Error::new(
        ErrorCode::ChangeLimitExceeded,
        format!(
            "the patch writes {total} bytes over {} files, past the copy limit of {} bytes (files of the same content count once each); reduce the task or raise [copies] max_bytes",
            ids.len(),
            limits.max_bytes
        ),
    ))
}

/// Refuses a patch that adds or changes a file the secret policy blocks.
fn check_blocked(
    baseline: &Baseline,
    secrets: &SecretPatterns,
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
        .filter_map(|(f, bytes)| secrets.check(&f.path, bytes))
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
///
/// `CHANGE_LIMIT_EXCEEDED` when the copy is past `limits` as it is staged
/// (`stage_tree_within`): the agent wrote more than a copy may hold.
pub fn read_only_changes(baseline: &Baseline, limits: &CopyLimits) -> Result<Vec<String>, Error> {
    let tree = stage_tree_within(baseline, limits)?;
    let git = baseline.git();
    let start = if baseline
        .git_dir()
        .join(legate_workspace::START_REF)
        .is_file()
    {
        legate_workspace::START_REF
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
        .chain(
            split_z(&ignored)
                .filter(|p| !legate_workspace::is_staging_path(&String::from_utf8_lossy(p))),
        )
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    // Git never lists a path named `.git`; a copy holds none until an agent writes one.
    out.extend(legate_workspace::dot_git_entries(baseline.copy())?);
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
            "the patch holds a text change with bytes that are not UTF-8; mark such files `binary` in the project's .gitattributes before the task (a copy's own are not read) to get a binary patch",
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
