//! Integration: writing a reviewed patch's results into the original project, all or nothing,
//! even across a crash.
//!
//! This module owns the last step. Every result is built and checked first, in memory, before
//! the original is touched: each affected original file must still equal the baseline
//! (`SOURCE_CHANGED`), an added path must still be free, and modified files pass the line
//! ending and BOM rule (`line_endings`). Then, in this order:
//!
//! 1. The intent is committed to a journal (`journal`) outside the project, under
//!    `$LEGATE_HOME/run/integrations/<task>/`, with the pre-image of every modified or
//!    deleted original, all synced (files and directory) before the project is touched.
//! 2. Missing directories are created, and every result is written to a temporary file
//!    `.legate-<id>-<n>.tmp` in its directory (permissions of the original); the temporary
//!    files and their directories are synced together (in parallel, so the file system
//!    commits them in a few journal transactions rather than one per file).
//! 3. The `staged` marker is written and synced: from here on, the integration is decided.
//! 4. Each temporary file is renamed over its original after a last look that the original is
//!    still the file checked (the same `legate_workspace::FileState`: device, inode, size,
//!    mode, mtime and ctime); a deleted file is renamed aside (`.legate-<id>-<n>.del`). The
//!    directories are synced, the set-aside files removed (one that cannot be is listed in
//!    `leftover_files`).
//! 5. The caller records the integration, then [`Pending::finish`] removes the journal.
//!
//! If anything fails in 2–4, the `abort` marker is written and everything is put back
//! (`rollover`), and the error is `INTEGRATION_FAILED`; whatever could not be put back is
//! named. If the process dies instead, the next recovery ([`crate::recover_integrations`])
//! finishes the job by the rules in `rollover`: roll forward when `staged` is there without
//! `abort`, else roll back.
//!
//! It must never follow a symlink in the original, write outside the project root, or leave
//! the original half-changed, on an error it saw or on a crash. Every operation in the
//! project goes through `no_links`: a directory swapped for a link between the check and a
//! write (another writer of the project) fails that write, and the rest is put back.

use crate::journal::{self, Content, Intent, Journal, Step};
use crate::no_links;
use crate::rollover;
use legate_core::{Error, ErrorCode};
use legate_workspace::{
    Baseline, ChangeStatus, FileState, Preview, check_line_endings, check_path,
    read_inside_with_metadata, sha256_hex,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One file to integrate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Relative path.
    pub path: String,
    /// A, M or D.
    pub status: ChangeStatus,
    /// The baseline's bytes (M and D).
    pub baseline: Option<Vec<u8>>,
    /// The result's bytes (A and M).
    pub result: Option<Vec<u8>>,
    /// The result's mode (`0o644` or `0o755`): an added file's mode, and whether a modified
    /// file is executable.
    pub mode: Option<u32>,
}

/// What an integration did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Integrated {
    /// Every path written, created or deleted.
    pub files: Vec<String>,
    /// Files whose BOM the patch dropped and integration put back.
    pub restored_byte_order_marks: Vec<String>,
    /// Set-aside deleted files that could not be removed (relative paths).
    pub leftover_files: Vec<String>,
    /// The id of the integration's journal (empty in records older than journals).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub journal: String,
}

/// An integration written into the project whose journal is still there: the caller records
/// it, then calls [`Pending::finish`]. Dropped unfinished, the next recovery rolls it forward
/// (and finds it recorded).
#[derive(Debug)]
pub struct Pending {
    /// What was written.
    pub integrated: Integrated,
    journal: Journal,
}

impl Pending {
    /// Removes the journal; a failure is logged (the next recovery removes it).
    pub fn finish(self) {
        let id = self.integrated.journal.clone();
        if let Err(e) = self.journal.finish() {
            tracing::warn!(journal = %id, error = %e, "an integration journal could not be removed");
        }
    }
}

/// The file system operations integration performs in the project, so that tests can make
/// any one fail.
pub(crate) trait Ops {
    /// Creates the new, empty file `path` (never following a link).
    fn create_temp(&mut self, path: &Path) -> io::Result<()>;
    /// Writes `bytes` into the temporary file `path` and sets `mode` (no sync).
    fn fill(&mut self, path: &Path, bytes: &[u8], mode: u32) -> io::Result<()>;
    /// Makes the files or directories `paths` durable (`fsync`).
    fn sync(&mut self, paths: &[&Path]) -> io::Result<()>;
    /// Renames `from` to `to` (same directory).
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()>;
    /// Creates the directory `path` (its parent exists).
    fn create_dir(&mut self, path: &Path) -> io::Result<()>;
    /// Removes the file `path`.
    fn remove_file(&mut self, path: &Path) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default)]
pub(crate) struct RealOps;

impl Ops for RealOps {
    fn create_temp(&mut self, path: &Path) -> io::Result<()> {
        no_links::create_new(path, 0o600).map(drop)
    }

    fn fill(&mut self, path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
        let mut f = no_links::open_fresh(path)?;
        f.write_all(bytes)?;
        f.set_permissions(fs::Permissions::from_mode(mode))
    }

    fn sync(&mut self, paths: &[&Path]) -> io::Result<()> {
        sync_parallel(paths, |p| no_links::open_read(p)?.sync_all())
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        no_links::rename_within(from, to)
    }

    fn create_dir(&mut self, path: &Path) -> io::Result<()> {
        no_links::create_dir(path)
    }

    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        no_links::remove_file(path)
    }
}

/// Syncs files or directories with `one`, several at a time: concurrent fsyncs share journal
/// commits; one at a time, each pays for its own.
pub(crate) fn sync_parallel(
    paths: &[&Path],
    one: impl Fn(&Path) -> io::Result<()> + Sync,
) -> io::Result<()> {
    const THREADS: usize = 8;
    let one = |p: &&Path| one(p);
    if paths.len() <= 1 {
        return paths.iter().try_for_each(one);
    }
    let per = paths.len().div_ceil(THREADS);
    std::thread::scope(|scope| {
        let handles: Vec<_> = paths
            .chunks(per)
            .map(|chunk| scope.spawn(move || chunk.iter().try_for_each(one)))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(io::Error::other("a sync thread panicked")))
        })
    })
}

/// The changes a preview stands for, with the baseline's and the result's bytes read from
/// the private baseline (never from the copy's work tree, which may have moved on).
pub fn plan(baseline: &Baseline, preview: &Preview) -> Result<Vec<Change>, Error> {
    let old_ids: Vec<&str> = preview
        .files
        .iter()
        .filter_map(|f| f.old_blob.as_deref())
        .collect();
    let new_ids: Vec<&str> = preview
        .files
        .iter()
        .filter_map(|f| f.new_blob.as_deref())
        .collect();
    // One `cat-file` for both sides.
    let all: Vec<&str> = old_ids.iter().chain(&new_ids).copied().collect();
    let mut blobs = baseline.blobs(&all)?;
    let new_blobs = blobs.split_off(old_ids.len().min(blobs.len()));
    let mut old = blobs.into_iter();
    let mut new = new_blobs.into_iter();
    Ok(preview
        .files
        .iter()
        .map(|f| Change {
            path: f.path.clone(),
            status: f.status,
            baseline: f.old_blob.as_ref().and_then(|_| old.next()),
            result: f.new_blob.as_ref().and_then(|_| new.next()),
            mode: f.mode,
        })
        .collect())
}

/// Integrates `changes` into the project at `root` (canonical), journaled in `journal_dir`
/// (`$LEGATE_HOME/run/integrations/<task>`) with the caller's `meta`. See the module docs.
pub fn integrate(
    root: &Path,
    changes: &[Change],
    journal_dir: &Path,
    meta: serde_json::Value,
) -> Result<Pending, Error> {
    integrate_with(root, changes, journal_dir, meta, &mut RealOps)
}

/// A result ready to write.
struct Planned<'a> {
    change: &'a Change,
    /// The original as checked (`None`: it did not exist).
    seen: Option<FileState>,
    /// Bytes to write (A, M).
    bytes: Option<Vec<u8>>,
    /// Mode to write with.
    mode: u32,
    /// The original's mode as read (set-id bits included), what a rollback restores.
    original_mode: u32,
}

/// Checks every change against the original and builds the results (nothing is written).
fn check_all<'a>(
    root: &Path,
    changes: &'a [Change],
    report: &mut Integrated,
) -> Result<Vec<Planned<'a>>, Error> {
    let mut plan = Vec::with_capacity(changes.len());
    for c in changes {
        check_path(&c.path)?;
        // The original as it is now: larger than the baseline it must equal, it differs.
        let bound = c.baseline.as_ref().map_or(0, |b| b.len() as u64);
        let read = match read_inside_with_metadata(root, &c.path, bound) {
            Err(e) if e.code == ErrorCode::CopyLimitExceeded => {
                let why = if c.status == ChangeStatus::A {
                    "it exists in the original now"
                } else {
                    "the original no longer equals the baseline"
                };
                return Err(source_changed(&c.path, why));
            }
            read => read?,
        };
        let (current, seen, current_mode) = match read {
            Some((bytes, meta)) => (
                Some(bytes),
                Some(FileState::of(&meta)),
                Some(meta.permissions().mode()),
            ),
            None => (None, None, None),
        };
        // A modified file keeps the original's permission bits, read from the file just read
        // (never through a link), but for the executable bit, which follows the patch: a
        // 644 → 755 change is applied (issue 29: it was reported integrated and left as it
        // was). Set-user-id, set-group-id and sticky bits are dropped, as the kernel drops the
        // first two when anyone but root writes a file: new content never inherits them.
        let mode = follow_exec(
            current_mode.map_or(c.mode.unwrap_or(0o644), |m| m & 0o777),
            c.mode,
        );
        let original_mode = current_mode.map_or(mode, |m| m & 0o7777);
        match c.status {
            ChangeStatus::A => {
                if current.is_some() {
                    return Err(source_changed(&c.path, "it exists in the original now"));
                }
                let bytes = c
                    .result
                    .clone()
                    .ok_or_else(|| Error::internal(format!("{}: no result bytes", c.path)))?;
                plan.push(Planned {
                    change: c,
                    seen,
                    bytes: Some(bytes),
                    mode: c.mode.unwrap_or(0o644),
                    original_mode,
                });
            }
            ChangeStatus::M | ChangeStatus::D => {
                if current.as_deref() != c.baseline.as_deref() {
                    return Err(source_changed(
                        &c.path,
                        "the original no longer equals the baseline",
                    ));
                }
                let bytes = match (c.status, &c.baseline, &c.result) {
                    (ChangeStatus::M, Some(base), Some(result)) => {
                        let checked = check_line_endings(&c.path, base, result)?;
                        if checked.restored_bom {
                            report.restored_byte_order_marks.push(c.path.clone());
                        }
                        Some(checked.bytes)
                    }
                    (ChangeStatus::D, _, _) => None,
                    _ => return Err(Error::internal(format!("{}: missing bytes", c.path))),
                };
                plan.push(Planned {
                    change: c,
                    seen,
                    bytes,
                    mode,
                    original_mode,
                });
            }
        }
    }
    Ok(plan)
}

/// The intent of `plan`: its steps, and the directories added files need, parents first.
fn intent_of(root: &Path, plan: &[Planned<'_>], meta: serde_json::Value) -> Result<Intent, Error> {
    let mut dirs = BTreeSet::new();
    let mut steps = Vec::with_capacity(plan.len());
    for p in plan {
        if p.change.status == ChangeStatus::A {
            let parent = root
                .join(&p.change.path)
                .parent()
                .map(Path::to_path_buf)
                .ok_or_else(|| Error::internal("a path without a parent"))?;
            for d in missing_dirs(root, &parent)? {
                dirs.insert(relative(root, &d));
            }
        }
        let before = (p.change.status != ChangeStatus::A).then(|| Content {
            sha256: sha256_hex(p.change.baseline.as_deref().unwrap_or_default()),
            mode: p.original_mode,
        });
        let after = p.bytes.as_deref().map(|b| Content {
            sha256: sha256_hex(b),
            mode: p.mode,
        });
        steps.push(Step {
            path: p.change.path.clone(),
            status: p.change.status,
            before,
            after,
        });
    }
    let mut dirs: Vec<String> = dirs.into_iter().collect();
    dirs.sort_by_key(|d| (d.matches('/').count(), d.clone()));
    Ok(Intent {
        version: journal::VERSION,
        id: new_id(),
        root: root.to_path_buf(),
        meta,
        dirs,
        steps,
    })
}

pub(crate) fn integrate_with(
    root: &Path,
    changes: &[Change],
    journal_dir: &Path,
    meta: serde_json::Value,
    ops: &mut dyn Ops,
) -> Result<Pending, Error> {
    let mut report = Integrated::default();
    let plan = check_all(root, changes, &mut report)?;
    let intent = intent_of(root, &plan, meta)?;
    let pre: Vec<(usize, &[u8])> = plan
        .iter()
        .enumerate()
        .filter(|(_, p)| p.change.status != ChangeStatus::A)
        .map(|(i, p)| (i, p.change.baseline.as_deref().unwrap_or_default()))
        .collect();
    let journal = Journal::begin(journal_dir, intent, &pre)?;
    report.journal = journal.intent.id.clone();
    let mut committed = 0;
    if let Err((path, e)) = write_all(root, &plan, &journal, ops, &mut committed) {
        if let Err(marked) = journal.mark(journal::ABORT) {
            tracing::warn!(error = %marked, "the abort marker could not be written");
        }
        let undone = rollover::roll_back(&journal, committed);
        let mut message = format!(
            "integration stopped at {path}: {}; everything written was put back",
            e.message
        );
        if undone.conflicts.is_empty() {
            if let Err(e) = journal.finish() {
                tracing::warn!(error = %e, "an integration journal could not be removed");
            }
        } else {
            // The journal stays: the next recovery tries again.
            message = format!(
                "integration stopped at {path}: {}; these could not be put back: {}",
                e.message,
                undone.conflicts.join(", ")
            );
        }
        tracing::warn!(path = %path, code = %e.code, "integration rolled back");
        return Err(Error::new(ErrorCode::IntegrationFailed, message));
    }
    report.files = plan.iter().map(|p| p.change.path.clone()).collect();
    for (i, p) in plan.iter().enumerate() {
        if p.change.status == ChangeStatus::D
            && let Some(aside) = journal.intent.aside(i)
            && ops.remove_file(&root.join(&aside)).is_err()
        {
            report.leftover_files.push(aside);
        }
    }
    Ok(Pending {
        integrated: report,
        journal,
    })
}

/// Stages every result, syncs, marks the journal staged, then puts each in place and syncs
/// the directories. On error, names the path it stopped at.
fn write_all(
    root: &Path,
    plan: &[Planned<'_>],
    journal: &Journal,
    ops: &mut dyn Ops,
    committed: &mut usize,
) -> Result<(), (String, Error)> {
    let io = |what: &str, e: io::Error| Error::internal(format!("{what}: {e}"));
    let first = || {
        plan.first()
            .map(|p| p.change.path.clone())
            .unwrap_or_default()
    };
    let intent = &journal.intent;
    for d in &intent.dirs {
        ops.create_dir(&root.join(d))
            .map_err(|e| (d.clone(), io("could not create a directory", e)))?;
    }
    let mut sync: Vec<PathBuf> = Vec::with_capacity(plan.len() * 2);
    let mut dirs = BTreeSet::new();
    for (i, p) in plan.iter().enumerate() {
        let at = |e: Error| (p.change.path.clone(), e);
        let parent = root
            .join(&p.change.path)
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| at(Error::internal("a path without a parent")))?;
        dirs.insert(parent);
        let Some(bytes) = p.bytes.as_deref() else {
            continue;
        };
        let tmp = root.join(
            intent
                .staged(i)
                .ok_or_else(|| at(Error::internal("a step without a name")))?,
        );
        ops.create_temp(&tmp)
            .map_err(|e| at(io("could not create a temporary file", e)))?;
        ops.fill(&tmp, bytes, p.mode)
            .map_err(|e| at(io("could not write the temporary file", e)))?;
        sync.push(tmp);
    }
    // The created directories' own entries live in their parents.
    for d in &intent.dirs {
        if let Some(parent) = root.join(d).parent() {
            dirs.insert(parent.to_path_buf());
        }
    }
    sync.extend(dirs.iter().cloned());
    let all: Vec<&Path> = sync.iter().map(PathBuf::as_path).collect();
    ops.sync(&all)
        .map_err(|e| (first(), io("could not sync the temporary files", e)))?;
    journal
        .mark(journal::STAGED)
        .map_err(|e| (first(), io("could not mark the journal staged", e)))?;
    for (i, p) in plan.iter().enumerate() {
        commit_one(root, i, p, intent, ops).map_err(|e| (p.change.path.clone(), e))?;
        *committed = i + 1;
    }
    let dirs: Vec<&Path> = dirs.iter().map(PathBuf::as_path).collect();
    ops.sync(&dirs)
        .map_err(|e| (first(), io("could not sync the directories", e)))
}

/// Puts one staged result in place (or sets a deleted file aside), after a last look that the
/// original is still the file checked.
fn commit_one(
    root: &Path,
    index: usize,
    p: &Planned<'_>,
    intent: &Intent,
    ops: &mut dyn Ops,
) -> Result<(), Error> {
    let path = root.join(&p.change.path);
    let io = |what: &str, e: io::Error| Error::internal(format!("{what}: {e}"));
    let now = match no_links::metadata(&path) {
        Ok(Some(m)) if m.file_type().is_file() => Some(FileState::of(&m)),
        Ok(Some(_)) => {
            return Err(source_changed(
                &p.change.path,
                "it changed during integration",
            ));
        }
        Ok(None) => None,
        Err(e) => return Err(io("could not look at the original", e)),
    };
    if now != p.seen {
        return Err(source_changed(
            &p.change.path,
            "it changed during integration",
        ));
    }
    let name = |n: Option<String>| n.ok_or_else(|| Error::internal("a step without a name"));
    if p.change.status == ChangeStatus::D {
        let aside = root.join(name(intent.aside(index))?);
        ops.rename(&path, &aside)
            .map_err(|e| io("could not set the file aside", e))
    } else {
        let tmp = root.join(name(intent.staged(index))?);
        ops.rename(&tmp, &path)
            .map_err(|e| io("could not rename the temporary file into place", e))
    }
}

/// Directories from the highest missing one down to `dir`; `UNSAFE_PATH` when something on
/// the way exists but is not a plain directory.
fn missing_dirs(root: &Path, dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let mut missing = Vec::new();
    let mut cur = dir.to_path_buf();
    while cur != root {
        match fs::symlink_metadata(&cur) {
            Ok(m) if m.file_type().is_dir() => break,
            Ok(_) => {
                return Err(Error::new(
                    ErrorCode::UnsafePath,
                    format!("{} is not a plain directory", relative(root, &cur)),
                ));
            }
            Err(_) => missing.push(cur.clone()),
        }
        if !cur.pop() {
            break;
        }
    }
    missing.reverse();
    Ok(missing)
}

/// `current` with its executable bits set where it has read bits when `result` is
/// executable, or cleared when it is not; unchanged when the two agree or `result` is unknown.
fn follow_exec(current: u32, result: Option<u32>) -> u32 {
    match result {
        Some(m) if m & 0o111 != 0 && current & 0o111 == 0 => current | ((current & 0o444) >> 2),
        Some(m) if m & 0o111 == 0 && current & 0o111 != 0 => current & !0o111,
        _ => current,
    }
}

/// A fresh journal id: 16 hex digits from the clock, the pid and the kernel's randomness.
fn new_id() -> String {
    let mut seed = [0u8; 16];
    let random = fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut seed)
    });
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    let mixed = format!("{random:?}{seed:?}{t}{}", std::process::id());
    sha256_hex(mixed.as_bytes())[..16].to_string()
}

fn relative(root: &Path, p: &Path) -> String {
    p.strip_prefix(root)
        .unwrap_or(p)
        .to_string_lossy()
        .into_owned()
}

fn source_changed(path: &str, why: &str) -> Error {
    Error::new(
        ErrorCode::SourceChanged,
        format!("{path}: {why}; nothing was integrated"),
    )
}

#[cfg(test)]
#[path = "integrate_tests.rs"]
mod tests;
