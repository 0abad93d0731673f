//! A project's base: on btrfs, one copy of the project kept under Legate's state, of which
//! every copy a task gets is a snapshot.
//!
//! This module owns `$LEGATE_HOME/bases/<sha256 of the project's root>/`: `tree` (a subvolume
//! holding the copy as `copy` makes it: the selection, cloned and scanned), `baseline` (a
//! subvolume holding that copy's private baseline, made by `staging` as for any copy), the
//! `manifest` that says which selection they hold, and `lock`, whose lock serializes
//! everything done to one base. A copy is then two snapshots, `tree` to the copy and
//! `baseline` to the copy's baseline: no file is made, copied or read, whatever the project's
//! size, and the copy shares every block with the base until the agent writes.
//!
//! A base is used only when it holds exactly what the selection asks for now. The manifest
//! names it by a sha256 over every selected file's path, name rule and [`FileState`], as the
//! base's copy took it: the state the scan verdict cache recorded it in (`scan_cache`, whose
//! rules make a state impossible to outlive its bytes: a trusted file system, no racily
//! clean time, dirty pages written back first), and over the files the selection left out;
//! and by the conditions every copy depends on (the verdicts' fingerprint, the limits, this
//! format). A file the cache could not record (written within the last second, on a file
//! system the cache does not trust) leaves the base without a manifest, so the next copy
//! makes it again. Any difference makes the base again, from the project as it is: into
//! `tree.next` and `baseline.next`, then the old ones removed and the new ones renamed in,
//! the manifest written last. A `kill -9` at any line leaves no manifest or a manifest of
//! what `tree` and `baseline` hold; whatever else is there is removed by the next copy.
//!
//! The selection's own `lstat`s say whether the base holds the project; a file written after
//! them and before the snapshot is in the copy as it was when measured, as a file written
//! after `copy` read it is.
//!
//! It must never hand out a snapshot of a base whose manifest does not match the selection,
//! write to a base outside its lock, or leave a half-made base where a later copy could
//! take it for a made one.

use crate::baseline::Baseline;
use crate::copy::{BaselineIn, CopyReport, Filled, fill_with_baseline, resolve_copy_dir};
use crate::file_state::FileState;
use crate::scan_cache::ScanCache;
use crate::select::Selection;
use crate::{CopyLimits, private_dir, subvolume};
use legate_core::{Error, ErrorCode};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

/// The manifest's format; any change to what it names needs a new number.
const VERSION: u32 = 1;

/// The base's copy, a subvolume.
const TREE: &str = "tree";
/// The base's copy's baseline, a subvolume.
const BASELINE: &str = "baseline";
/// What the two hold; written last.
const MANIFEST: &str = "manifest";
/// The file whose lock serializes work on the base.
const LOCK: &str = "lock";
/// Where a base is made before it replaces the old one.
const NEXT: [(&str, &str); 2] = [(TREE, "tree.next"), (BASELINE, "baseline.next")];

/// What a base's manifest says.
#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Manifest {
    version: u32,
    /// The sha256 of the conditions every copy depends on ([`conditions`]).
    conditions: String,
    /// The sha256 of the selection the base holds ([`selection_digest`]).
    selection: String,
    /// The base's copy's report (its directory the base's `tree`).
    report: CopyReport,
}

/// [`make_copy_with_baseline_cached`](crate::make_copy_with_baseline_cached), but as
/// snapshots of the project's base under `bases` where the copy's, its baseline's and the
/// bases' directories lie on one btrfs mount (see the module docs); elsewhere exactly that.
pub fn make_copy_with_base(
    selection: &Selection,
    copy_dir: &Path,
    baseline_dir: &Path,
    limits: &CopyLimits,
    cache: &ScanCache,
    bases: &Path,
) -> Result<(CopyReport, Baseline), Error> {
    if let (Some(copies), Some(baselines)) = (copy_dir.parent(), baseline_dir.parent())
        && usable(copies, baselines, bases)
    {
        return copy_from_base(selection, copy_dir, baseline_dir, limits, cache, bases);
    }
    crate::make_copy_with_baseline_cached(selection, copy_dir, baseline_dir, limits, Some(cache))
}

/// Whether copies under `copies` with baselines under `baselines` can be snapshots of bases
/// under `bases`: all three on one btrfs mount. Each is made (0700) when missing.
pub(crate) fn usable(copies: &Path, baselines: &Path, bases: &Path) -> bool {
    let made = [copies, baselines, bases]
        .iter()
        .all(|d| private_dir(d).is_ok());
    made && subvolume::is_btrfs(bases) && subvolume::one_mount(&[copies, baselines, bases])
}

/// Makes the copy `copy_dir` and its baseline `baseline_dir` (neither may exist; their
/// parents must, on the same btrfs mount as `bases`) as snapshots of the project's base
/// under `bases`, made again first unless it holds `selection` exactly.
///
/// Errors: those of a copy (`SOURCE_CHANGED`, `COPY_LIMIT_EXCEEDED`, `INVALID_WORKSPACE`)
/// while the base is made; `INVALID_WORKSPACE` when a snapshot cannot be made. On error
/// neither directory is left.
pub(crate) fn copy_from_base(
    selection: &Selection,
    copy_dir: &Path,
    baseline_dir: &Path,
    limits: &CopyLimits,
    cache: &ScanCache,
    bases: &Path,
) -> Result<(CopyReport, Baseline), Error> {
    let dir = base_dir(bases, &selection.root);
    private_dir(&dir)?;
    let _lock = lock(&dir)?;
    let conditions = conditions(selection, limits, cache);
    let wanted = selection_digest(selection, selection.files.iter().map(|f| Some(f.state())));
    let report = match held(&dir, &conditions, &wanted) {
        // Every file on the verdict the base was made on: none read now.
        Some(report) => CopyReport {
            scanned_files: 0,
            trusted_files: selection.files.len(),
            ..report
        },
        None => make(&dir, selection, limits, cache, &conditions, &mut |_| false)?,
    };
    hand_out(&dir, report, copy_dir, baseline_dir)
}

/// Takes the base's lock, waiting for whoever holds it (a copy making the base).
fn lock(dir: &Path) -> Result<File, Error> {
    let failed = |e: std::io::Error| {
        let message = format!("the base {} could not be locked", dir.display());
        Error::caused_by(ErrorCode::InvalidWorkspace, message, e)
    };
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK))
        .map_err(failed)?;
    rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
        .map_err(|e| failed(e.into()))?;
    Ok(f)
}

/// The report of the base in `dir` when its manifest names these conditions and selection.
fn held(dir: &Path, conditions: &str, wanted: &Option<String>) -> Option<CopyReport> {
    let wanted = wanted.as_deref()?;
    let bytes = fs::read(dir.join(MANIFEST)).ok()?;
    let m: Manifest = serde_json::from_slice(&bytes).ok()?;
    let same = m.version == VERSION && m.conditions == conditions && m.selection == wanted;
    if !same {
        tracing::debug!(base = %dir.display(), "the project's base is made again");
        return None;
    }
    // When it was last used, for the retention sweep ([`prune`]).
    if let Ok(f) = OpenOptions::new().write(true).open(dir.join(MANIFEST)) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
    Some(m.report)
}

/// Makes the base in `dir` again from `selection`: into the `.next` subvolumes, then renamed
/// over the old ones, the manifest written last (only when every file's state is one the
/// scan verdict cache recorded). Returns the base's copy's report.
fn make(
    dir: &Path,
    selection: &Selection,
    limits: &CopyLimits,
    cache: &ScanCache,
    conditions: &str,
    stop: &mut dyn FnMut(Step) -> bool,
) -> Result<CopyReport, Error> {
    let stopped = || Error::internal("stopped (a test's crash point)");
    let failed = |what: &str, e: std::io::Error| {
        let message = format!("the base {} could not {what}", dir.display());
        Error::caused_by(ErrorCode::InvalidWorkspace, message, e)
    };
    match fs::remove_file(dir.join(MANIFEST)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(failed("drop its manifest", e)),
    }
    for (_, next) in NEXT {
        remove(&dir.join(next)).map_err(|e| failed("remove what a stopped copy left", e))?;
    }
    let (tree, baseline) = (dir.join(NEXT[0].1), dir.join(NEXT[1].1));
    let filled = (|| {
        for d in [&tree, &baseline] {
            subvolume::create(d).map_err(|e| failed("make a subvolume", e))?;
            set_private(d).map_err(|e| failed("make a subvolume private", e))?;
        }
        let copy = resolve_copy_dir(&tree)?;
        fill_with_baseline(
            selection,
            &copy,
            &baseline,
            limits,
            Some(cache),
            Some(BaselineIn::Existing),
        )
    })();
    let Filled {
        report, settled, ..
    } = match filled {
        Ok(f) => f,
        Err(e) => {
            for d in [&tree, &baseline] {
                let _ = remove(d);
            }
            return Err(e);
        }
    };
    if stop(Step::Filled) {
        return Err(stopped());
    }
    for (now, next) in NEXT {
        let (now, next) = (dir.join(now), dir.join(next));
        remove(&now).map_err(|e| failed("remove its older copy", e))?;
        if stop(Step::Removed(now.clone())) {
            return Err(stopped());
        }
        fs::rename(&next, &now).map_err(|e| failed("take its new copy", e))?;
        if stop(Step::Renamed(now)) {
            return Err(stopped());
        }
    }
    let settled: HashMap<String, FileState> = settled.unwrap_or_default().into_iter().collect();
    let digest = selection_digest(
        selection,
        selection
            .files
            .iter()
            .map(|f| settled.get(&f.path).copied()),
    );
    let mut report = report;
    report.copy_directory = dir.join(TREE);
    match digest {
        Some(selection) => {
            let manifest = Manifest {
                version: VERSION,
                conditions: conditions.to_string(),
                selection,
                report: report.clone(),
            };
            write_manifest(dir, &manifest).map_err(|e| failed("write its manifest", e))?;
        }
        None => tracing::debug!(
            base = %dir.display(),
            "a file of the project is too recent to be trusted: its base is made again at the next copy"
        ),
    }
    Ok(report)
}

/// A point in [`make`] after which a test may stop it, as a `kill -9` there would: nothing
/// after it is done.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Step {
    /// The `.next` subvolumes are made and filled.
    Filled,
    /// The older subvolume of this name is removed.
    Removed(PathBuf),
    /// The new one is renamed to it.
    Renamed(PathBuf),
}

/// The copy and its baseline, snapshots of the base in `dir` whose copy `report` describes.
fn hand_out(
    dir: &Path,
    report: CopyReport,
    copy_dir: &Path,
    baseline_dir: &Path,
) -> Result<(CopyReport, Baseline), Error> {
    let failed = |what: &Path, e: std::io::Error| {
        let message = format!("{} could not be made as a snapshot", what.display());
        Error::caused_by(ErrorCode::InvalidWorkspace, message, e)
    };
    subvolume::snapshot(&dir.join(TREE), copy_dir).map_err(|e| failed(copy_dir, e))?;
    let made = (|| {
        subvolume::snapshot(&dir.join(BASELINE), baseline_dir)
            .map_err(|e| failed(baseline_dir, e))?;
        let copy = resolve_copy_dir(copy_dir)?;
        let baseline_dir = fs::canonicalize(baseline_dir).map_err(|e| failed(baseline_dir, e))?;
        let baseline = Baseline::open(&baseline_dir, &copy)?;
        let report = CopyReport {
            copy_directory: copy,
            snapshot: true,
            ..report
        };
        Ok((report, baseline))
    })();
    if made.is_err() {
        for d in [copy_dir, baseline_dir] {
            let _ = remove(d);
        }
    }
    made
}

/// The sha256 of what every copy of the project depends on besides its files.
fn conditions(selection: &Selection, limits: &CopyLimits, cache: &ScanCache) -> String {
    let mut h = Sha256::new();
    let limits = serde_json::to_string(limits).unwrap_or_default();
    let root = selection.root.as_os_str().as_encoded_bytes();
    for part in [
        env!("CARGO_PKG_VERSION").as_bytes(),
        cache.fingerprint().as_bytes(),
        limits.as_bytes(),
        root,
    ] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part);
    }
    hex(h)
}

/// The sha256 over the selection's left-out files and, for each selected file, its path,
/// its name rule and `states`' entry for it; `None` when a state is missing.
fn selection_digest(
    selection: &Selection,
    states: impl Iterator<Item = Option<FileState>>,
) -> Option<String> {
    let mut h = Sha256::new();
    let field = |h: &mut Sha256, b: &[u8]| {
        h.update((b.len() as u64).to_le_bytes());
        h.update(b);
    };
    h.update((selection.blocked.len() as u64).to_le_bytes());
    for b in &selection.blocked {
        field(&mut h, b.path.as_bytes());
        field(&mut h, b.reason.as_str().as_bytes());
        field(&mut h, b.rule.as_bytes());
    }
    h.update((selection.files.len() as u64).to_le_bytes());
    for (f, state) in selection.files.iter().zip(states) {
        field(&mut h, f.path.as_bytes());
        field(&mut h, f.pending_rule.unwrap_or("").as_bytes());
        h.update(state?.to_bytes());
    }
    Some(hex(h))
}

fn hex(h: Sha256) -> String {
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes the manifest beside a temporary name, then renames it in.
fn write_manifest(dir: &Path, m: &Manifest) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(m).map_err(std::io::Error::other)?;
    let tmp = dir.join(format!(".{MANIFEST}.tmp"));
    let mut f = File::create(&tmp)?;
    f.write_all(&bytes)?;
    f.sync_all()?;
    fs::rename(&tmp, dir.join(MANIFEST))
}

/// Makes `dir` 0700.
fn set_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
}

/// Removes `path` (a subvolume, a directory or a file) if it exists, links not followed.
pub(crate) fn remove(path: &Path) -> std::io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
    }
}

/// Removes what is inside `dir`, leaving it (a subvolume made for a baseline).
pub(crate) fn empty_dir(dir: &Path) {
    if let Ok(rd) = fs::read_dir(dir) {
        for e in rd.flatten() {
            let _ = remove(&e.path());
        }
    }
}

/// Removes the bases under `bases` not used for `unused_for` (their manifest's time, or the
/// directory's when there is none), skipping any whose lock is held. Returns how many.
pub fn prune(bases: &Path, unused_for: std::time::Duration) -> usize {
    let mut removed = 0;
    for (name, path, _) in crate::entries(bases) {
        let is_hash = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
        let plain = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if !is_hash || !plain {
            continue;
        }
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path.join(LOCK));
        let Ok(lock) = lock else {
            continue;
        };
        let free = rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive);
        if free.is_err() {
            continue;
        }
        let used = fs::metadata(path.join(MANIFEST))
            .or_else(|_| fs::metadata(&path))
            .and_then(|m| m.modified());
        let unused = used.is_ok_and(|t| t.elapsed().is_ok_and(|age| age > unused_for));
        if unused && remove(&path).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Where the project at `root` (canonical) keeps its base under `bases`.
pub fn base_dir(bases: &Path, root: &Path) -> PathBuf {
    bases.join(crate::sha256_hex(root.as_os_str().as_encoded_bytes()))
}

#[cfg(test)]
#[path = "base_tests.rs"]
mod tests;
