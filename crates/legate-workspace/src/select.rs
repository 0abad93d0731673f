//! The selection: which files of a project a copy gets.
//!
//! This module owns listing a project the way git sees it (tracked files plus untracked files
//! no ignore source excludes, minus tracked files that are now ignored), narrowing it by
//! include paths, leaving out unsafe paths (symlinks, non-regular files, paths under a
//! symlinked directory, unsafe names) and secret names, and measuring it against the limits
//! before anything is copied. Each file is measured by its name in its directory, opened
//! beneath the root without following a link (`measure`). Content is checked while copying
//! (`copy`), on the very bytes that are written.
//!
//! It must never follow a symlink, let an include path add an ignored file, or read a file's
//! content.

use crate::file_state::FileState;
use crate::git::{Git, require_git_root, split_z};
use crate::include::{covers, path_problem, validate_include_paths};
use crate::limits::CopyLimits;
use crate::measure::{Measured, measure};
use crate::secrets::{BlockReason, BlockedFile, SecretPatterns};
use legate_core::{Error, ErrorCode};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// A file chosen for the copy, with the identity it had when it was measured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SelectedFile {
    /// Relative path, `/`-separated.
    pub path: String,
    /// Size in bytes when measured.
    pub size: u64,
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) mtime: (i64, i64),
    pub(crate) ctime: (i64, i64),
    pub(crate) mode: u32,
    /// A name rule only the content can confirm (`*.key` unless a zip), decided at copy time.
    pub(crate) pending_rule: Option<&'static str>,
}

impl SelectedFile {
    /// The state the selection measured the file in (`lstat`).
    pub(crate) fn state(&self) -> FileState {
        FileState::from_parts(
            (self.dev, self.ino, self.size, self.mode),
            self.mtime,
            self.ctime,
        )
    }
}

/// What a copy of a project would hold.
#[derive(Debug, Clone)]
pub struct Selection {
    /// The project's root, canonical.
    pub root: PathBuf,
    /// The files to copy, sorted by path.
    pub files: Vec<SelectedFile>,
    /// Files left out before copying, by path and reason.
    pub blocked: Vec<BlockedFile>,
    /// The sum of the selected files' sizes.
    pub bytes: u64,
}

/// A project's eligible files, as `list_project_files` reports them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProjectFiles {
    /// The project's root, canonical.
    pub root: PathBuf,
    /// Eligible files (path and size), sorted.
    pub files: Vec<ProjectFile>,
    /// Files that would be left out, by name, path or content (the copy's own rules).
    pub blocked_files: Vec<BlockedFile>,
    /// Total bytes of the eligible files.
    pub total_bytes: u64,
}

/// One eligible file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ProjectFile {
    /// Relative path.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
}

impl From<&Selection> for ProjectFiles {
    fn from(s: &Selection) -> Self {
        Self {
            root: s.root.clone(),
            files: s
                .files
                .iter()
                .map(|f| ProjectFile {
                    path: f.path.clone(),
                    size: f.size,
                })
                .collect(),
            blocked_files: s.blocked.clone(),
            total_bytes: s.bytes,
        }
    }
}

/// What `list_project_files` reports: the [`select`]ion, with each selected file's content
/// scanned by the same rules a copy applies, so that no file is listed as eligible that the
/// copy would leave out. Files are read beneath the root (no symlink followed); one that
/// vanished since it was listed is not eligible.
pub fn list_project_files(
    source: &Path,
    include_paths: &[String],
    secrets: &SecretPatterns,
    limits: &CopyLimits,
) -> Result<ProjectFiles, Error> {
    let sel = select(source, include_paths, secrets, limits)?;
    let mut out = ProjectFiles {
        root: sel.root.clone(),
        files: Vec::with_capacity(sel.files.len()),
        blocked_files: sel.blocked.clone(),
        total_bytes: 0,
    };
    for f in &sel.files {
        let Some(content) = crate::read_inside::read_inside(&sel.root, &f.path, limits.max_bytes)?
        else {
            continue;
        };
        if let Some((reason, rule)) = crate::secrets::scan_selected(f.pending_rule, &content) {
            out.blocked_files.push(BlockedFile {
                path: f.path.clone(),
                reason,
                rule: rule.to_string(),
            });
            continue;
        }
        out.total_bytes = out.total_bytes.saturating_add(f.size);
        out.files.push(ProjectFile {
            path: f.path.clone(),
            size: f.size,
        });
    }
    out.blocked_files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The canonical root of the project at `source`: an existing directory that is the top of
/// a git work tree (`INVALID_WORKSPACE` otherwise).
pub fn project_root(source: &Path) -> Result<PathBuf, Error> {
    let invalid = |why: String| {
        Error::new(
            ErrorCode::InvalidWorkspace,
            format!("the project {} {why}", source.display()),
        )
    };
    if !source.is_absolute() {
        return Err(invalid("is not an absolute path".into()));
    }
    let root = fs::canonicalize(source).map_err(|e| {
        Error::caused_by(
            ErrorCode::InvalidWorkspace,
            format!("the project {} cannot be resolved", source.display()),
            e,
        )
    })?;
    if !fs::metadata(&root).map(|m| m.is_dir()).unwrap_or(false) {
        return Err(invalid("is not a directory".into()));
    }
    require_git_root(&root)?;
    Ok(root)
}

/// Selects the files of the project at `source` for a copy. See the module docs.
///
/// Errors: `INVALID_WORKSPACE` (not a git root), `INVALID_INCLUDE_PATH` (a bad include path,
/// or one that matches no eligible file), `COPY_LIMIT_EXCEEDED`.
pub fn select(
    source: &Path,
    include_paths: &[String],
    secrets: &SecretPatterns,
    limits: &CopyLimits,
) -> Result<Selection, Error> {
    let includes = validate_include_paths(include_paths)?;
    let root = project_root(source)?;
    select_in(&Git::source(&root), root, &includes, secrets, limits)
}

/// [`select`] over `root` as `git` sees it (the user's project, or a copy through its
/// private baseline), with `includes` already validated.
pub(crate) fn select_in(
    git: &Git,
    root: PathBuf,
    includes: &[String],
    secrets: &SecretPatterns,
    limits: &CopyLimits,
) -> Result<Selection, Error> {
    refuse_linked_includes(&root, includes)?;
    // Both listings at once: each walks the index (the first also the work tree). The second
    // `lstat`s every tracked file in git when an ignore rule names only directories
    // (`target/`), so the files the first lists are measured while it runs.
    let list_ignored = || {
        git.run(&[
            "ls-files",
            "-z",
            "--cached",
            "--ignored",
            "--exclude-standard",
        ])
    };
    std::thread::scope(|s| {
        let ignored = std::thread::Builder::new().spawn_scoped(s, list_ignored);
        let listed = git.run(&[
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
        ]);
        let listed = listed?;
        let candidates: BTreeSet<&[u8]> = split_z(&listed).collect();
        let looked = look(&root, includes, secrets, &candidates);
        let tracked_ignored = match ignored {
            Ok(ignored) => ignored
                .join()
                .unwrap_or_else(|_| Err(Error::internal("git ls-files --ignored stopped")))?,
            // No thread to be had: one after the other.
            Err(_) => list_ignored()?,
        };
        let ignored: BTreeSet<&[u8]> = split_z(&tracked_ignored).collect();
        finish(root.clone(), includes, limits, looked, &ignored)
    })
}

/// What the selection found of one listed path (`look`), kept until the tracked files that
/// are now ignored are known.
enum Seen {
    /// Not part of what the project is now (deleted in the work tree).
    Gone,
    Blocked(BlockedFile),
    Selected(SelectedFile),
    /// The path could not be measured: an error unless the path turns out to be ignored.
    Failed(Error),
}

/// Each of `candidates` covered by `includes`, judged by name and measured (`measure`), with
/// the raw path git listed and the path as text (`None` when it is not UTF-8).
fn look<'a>(
    root: &Path,
    includes: &[String],
    secrets: &SecretPatterns,
    candidates: &BTreeSet<&'a [u8]>,
) -> Vec<(&'a [u8], Option<&'a str>, Seen)> {
    let mut seen = Vec::with_capacity(candidates.len());
    let mut to_measure: Vec<&str> = Vec::with_capacity(candidates.len());
    let mut measured_at = Vec::with_capacity(candidates.len());
    for &raw in candidates {
        let Ok(path) = std::str::from_utf8(raw) else {
            let path = String::from_utf8_lossy(raw).into_owned();
            seen.push((raw, None, Seen::Blocked(unsafe_path(path, "non-utf8-name"))));
            continue;
        };
        let path = path.strip_suffix('/').unwrap_or(path);
        if !includes.is_empty() && !includes.iter().any(|inc| covers(inc, path)) {
            continue;
        }
        if path_problem(path).is_some() {
            let blocked = unsafe_path(path.to_string(), "unsafe-name");
            seen.push((raw, Some(path), Seen::Blocked(blocked)));
            continue;
        }
        measured_at.push(seen.len());
        to_measure.push(path);
        seen.push((raw, Some(path), Seen::Gone));
    }
    for (at, measured) in measured_at.into_iter().zip(measure(root, &to_measure)) {
        let (_, Some(path), _) = seen[at] else {
            continue;
        };
        seen[at].2 = judge(path, measured, secrets);
    }
    seen
}

/// The verdict on one measured path.
fn judge(path: &str, measured: Measured, secrets: &SecretPatterns) -> Seen {
    let stat = match measured {
        Measured::Found(stat) => stat,
        // Tracked but deleted in the work tree: not part of what the project is now.
        Measured::Gone => return Seen::Gone,
        Measured::LinkedDirectory => {
            return Seen::Blocked(unsafe_path(path.to_string(), "symlinked-directory"));
        }
        Measured::Failed(e) => {
            return Seen::Failed(Error::caused_by(
                ErrorCode::SourceChanged,
                format!("{path} could not be measured"),
                e,
            ));
        }
    };
    if stat.is_symlink() {
        return Seen::Blocked(unsafe_path(path.to_string(), "symlink"));
    }
    if !stat.is_file() {
        return Seen::Blocked(unsafe_path(path.to_string(), "not-a-regular-file"));
    }
    if let Some((reason, rule)) = secrets.check_name(path) {
        return Seen::Blocked(BlockedFile {
            path: path.to_string(),
            reason,
            rule,
        });
    }
    let ((dev, ino, size, mode), mtime, ctime) = stat.parts();
    Seen::Selected(SelectedFile {
        path: path.to_string(),
        size,
        dev,
        ino,
        mtime,
        ctime,
        mode,
        pending_rule: secrets.content_confirmed_name(path),
    })
}

/// The selection: what `look` found of every path git does not now ignore, measured against
/// the include paths and the limits.
fn finish(
    root: PathBuf,
    includes: &[String],
    limits: &CopyLimits,
    looked: Vec<(&[u8], Option<&str>, Seen)>,
    ignored: &BTreeSet<&[u8]>,
) -> Result<Selection, Error> {
    let mut matched = vec![false; includes.len()];
    let mut files = Vec::new();
    let mut blocked = Vec::new();
    let mut bytes = 0u64;
    for (raw, path, seen) in looked {
        if ignored.contains(raw) {
            continue;
        }
        if let Some(path) = path {
            for (i, inc) in includes.iter().enumerate() {
                if covers(inc, path) {
                    matched[i] = true;
                }
            }
        }
        match seen {
            Seen::Gone => {}
            Seen::Blocked(b) => blocked.push(b),
            Seen::Selected(f) => {
                bytes = bytes.saturating_add(f.size);
                files.push(f);
            }
            Seen::Failed(e) => return Err(e),
        }
    }
    if let Some(i) = matched.iter().position(|m| !m) {
        return Err(Error::new(
            ErrorCode::InvalidIncludePath,
            format!(
                "the include path {:?} matches no file git would copy (it is missing, ignored, or outside the project)",
                includes[i]
            ),
        ));
    }
    if files.len() > limits.max_files {
        return Err(Error::new(
            ErrorCode::CopyLimitExceeded,
            format!(
                "the selection has {} files; the limit is {} (narrow it with include paths)",
                files.len(),
                limits.max_files
            ),
        ));
    }
    if bytes > limits.max_bytes {
        return Err(Error::new(
            ErrorCode::CopyLimitExceeded,
            format!(
                "the selection has {bytes} bytes; the limit is {} (narrow it with include paths)",
                limits.max_bytes
            ),
        ));
    }
    Ok(Selection {
        root,
        files,
        blocked,
        bytes,
    })
}

fn unsafe_path(path: String, rule: &str) -> BlockedFile {
    BlockedFile {
        path,
        reason: BlockReason::UnsafePath,
        rule: rule.to_string(),
    }
}

/// `INVALID_INCLUDE_PATH` when an include path is, or passes through, a symbolic link in
/// `root`: a link is never followed, so naming one can only select nothing the caller meant
/// (its target may lie outside the project).
fn refuse_linked_includes(root: &Path, includes: &[String]) -> Result<(), Error> {
    for include in includes {
        let mut at = root.to_path_buf();
        for part in include.split('/').filter(|p| !p.is_empty()) {
            at.push(part);
            match fs::symlink_metadata(&at) {
                Ok(m) if m.file_type().is_symlink() => {
                    return Err(Error::new(
                        ErrorCode::InvalidIncludePath,
                        format!(
                            "the include path {include:?} is or passes through a symbolic link; links are never followed, so name the files themselves"
                        ),
                    ));
                }
                Ok(_) => {}
                // What does not exist is judged by the selection (it matches no file).
                Err(_) => break,
            }
        }
    }
    Ok(())
}
