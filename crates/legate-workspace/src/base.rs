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
//! A recorded state counts only when the selection measured the same (a `chmod` between the
//! two leaves no manifest), and a base is used three days at most ([`MAX_AGE`]: its baseline
//! borrows the project's git objects). A base whose snapshot fails is made again; one that
//! cannot be made or used leaves the copy made in full ([`make_copy_with_base`]).
//!
//! The selection's own `lstat`s say whether the base holds the project; a file written after
//! them and before the snapshot is in the copy as it was when measured, as a file written
//! after `copy` read it is. (`base_ahead` takes the snapshots while the selection runs, and
//! keeps them only once this module's comparison says the base holds it.)
//!
//! It must never hand out a snapshot of a base whose manifest does not match the selection,
//! write to a base outside its lock, or leave a half-made base where a later copy could
//! take it for a made one.

use crate::base_snapshots::Snapshots;
use crate::base_upkeep::remove;
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
const VERSION: u32 = 2;

/// The base's copy, a subvolume.
pub(crate) const TREE: &str = "tree";
/// The base's copy's baseline, a subvolume.
pub(crate) const BASELINE: &str = "baseline";
/// What the two hold; written last.
pub(crate) const MANIFEST: &str = "manifest";
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
    /// The base's copy's report, without its two paths.
    report: CopyReport,
    /// When the base was made (seconds since the epoch).
    made: u64,
}

/// How long a base is used after it was made: its baseline borrows the project's git objects,
/// which `git gc` may prune two weeks after they became unreachable, so a base and the copies
/// snapshotted from it (kept a week by default) stay within that.
const MAX_AGE: std::time::Duration = std::time::Duration::from_secs(3 * 24 * 3600);

/// Seconds since the epoch now.
fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
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
        match copy_from_base(selection, copy_dir, baseline_dir, limits, cache, bases) {
            Ok(made) => return Ok(made),
            // The base could not be made or used (a subvolume refused, an older one that
            // cannot be removed): the copy is made in full, as elsewhere.
            Err(e) if e.code == ErrorCode::InvalidWorkspace && !exists(copy_dir) => {
                tracing::warn!(error = %e, "the project's base cannot be used: the copy is made in full");
            }
            Err(e) => return Err(e),
        }
    }
    crate::make_copy_with_baseline_cached(selection, copy_dir, baseline_dir, limits, Some(cache))
}

/// Whether anything is at `path` (a link included).
pub(crate) fn exists(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// Whether copies under `copies` with baselines under `baselines` can be snapshots of bases
/// under `bases`: all three on one btrfs mount, where this process could make, snapshot and
/// remove a subvolume (`base_upkeep::probe`). Each is made (0700) when missing.
pub(crate) fn usable(copies: &Path, baselines: &Path, bases: &Path) -> bool {
    let made = [copies, baselines, bases]
        .iter()
        .all(|d| private_dir(d).is_ok());
    made && subvolume::is_btrfs(bases)
        && subvolume::one_mount(&[copies, baselines, bases])
        && crate::base_upkeep::probe(bases)
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
    for d in [copy_dir, baseline_dir] {
        if exists(d) {
            let message = format!("{} exists already", d.display());
            return Err(Error::new(ErrorCode::InvalidWorkspace, message));
        }
    }
    let dir = base_dir(bases, &selection.root);
    let _lock = lock(&dir)?;
    if let Some(report) = holds(&dir, selection, limits, cache) {
        match hand_out(&dir, report, copy_dir, baseline_dir) {
            Ok(made) => return Ok(made),
            // A base that cannot be snapshotted (its subvolumes damaged or gone, the home
            // copied elsewhere as plain directories) is made again.
            Err(Refused::Base(e)) => {
                tracing::warn!(error = %e, base = %dir.display(), "the project's base is made again")
            }
            Err(Refused::Other(e)) => return Err(e),
        }
    }
    let conditions = conditions(selection, limits, cache);
    let report = make(&dir, selection, limits, cache, &conditions, &mut |_| false)?;
    hand_out(&dir, report, copy_dir, baseline_dir).map_err(Refused::into_error)
}

/// The report of a copy snapshotted from the base in `dir`, when the base holds `selection`
/// under `limits` and `cache`'s rules. The caller holds the base's lock.
pub(crate) fn holds(
    dir: &Path,
    selection: &Selection,
    limits: &CopyLimits,
    cache: &ScanCache,
) -> Option<CopyReport> {
    let conditions = conditions(selection, limits, cache);
    let wanted = selection_digest(selection, selection.files.iter().map(|f| Some(f.state())));
    let report = held(dir, &selection.root, &conditions, &wanted)?;
    // Every file on the verdict the base was made on: none read now.
    Some(CopyReport {
        scanned_files: 0,
        trusted_files: selection.files.len(),
        ..report
    })
}

/// Why [`hand_out`] failed.
pub(crate) enum Refused {
    /// A subvolume of the base could not be snapshotted: the base is not usable as it is.
    Base(Error),
    /// Anything else.
    Other(Error),
}

impl Refused {
    fn into_error(self) -> Error {
        match self {
            Refused::Base(e) | Refused::Other(e) => e,
        }
    }
}

/// Takes the base's lock (the directory made when missing), waiting for whoever holds it (a
/// copy making the base). A lock taken on a file no longer at its place (a sweep removed the
/// base meanwhile: `base_upkeep::prune` renames it away under its lock) is taken again on the
/// new one.
pub(crate) fn lock(dir: &Path) -> Result<File, Error> {
    let failed = |e: std::io::Error| {
        let message = format!("the base {} could not be locked", dir.display());
        Error::caused_by(ErrorCode::InvalidWorkspace, message, e)
    };
    for _ in 0..100 {
        private_dir(dir)?;
        let f = match OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(lock_file(dir))
        {
            Ok(f) => f,
            // Removed between the two calls: try again.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(failed(e)),
        };
        loop {
            match rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive) {
                Ok(()) => break,
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(failed(e.into())),
            }
        }
        let held = rustix::fs::fstat(&f).map_err(|e| failed(e.into()))?;
        let there = rustix::fs::lstat(lock_file(dir));
        if there.is_ok_and(|t| t.st_dev == held.st_dev && t.st_ino == held.st_ino) {
            return Ok(f);
        }
    }
    Err(failed(std::io::Error::other(
        "its lock file kept being replaced",
    )))
}

/// The report of the base in `dir` when its manifest names these conditions and selection.
fn held(
    dir: &Path,
    source: &Path,
    conditions: &str,
    wanted: &Option<String>,
) -> Option<CopyReport> {
    let wanted = wanted.as_deref()?;
    let bytes = fs::read(dir.join(MANIFEST)).ok()?;
    let m: Manifest = serde_json::from_slice(&bytes).ok()?;
    // Made in the future (the clock set back since) is as good as old.
    let now = now_secs();
    let young = m.made <= now.saturating_add(60) && now.saturating_sub(m.made) < MAX_AGE.as_secs();
    let same = m.version == VERSION && m.conditions == conditions && m.selection == wanted && young;
    if !same {
        tracing::debug!(base = %dir.display(), "the project's base is made again");
        return None;
    }
    // When it was last used, for the retention sweep (`base_upkeep::prune`).
    if let Ok(f) = OpenOptions::new().write(true).open(dir.join(MANIFEST)) {
        let _ = f.set_modified(std::time::SystemTime::now());
    }
    Some(CopyReport {
        source: source.to_path_buf(),
        ..m.report
    })
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
            // Only a state the selection measured too: a file changed between the two (a
            // chmod) was copied as the selection saw it, which its recorded state does not say.
            .map(|f| settled.get(&f.path).copied().filter(|k| *k == f.state())),
    );
    let mut report = report;
    report.copy_directory = dir.join(TREE);
    match digest {
        Some(selection) => {
            let manifest = Manifest {
                version: VERSION,
                conditions: conditions.to_string(),
                selection,
                // Its paths are this copy's and the project's, given again at each use (and
                // JSON holds only UTF-8 ones).
                report: CopyReport {
                    copy_directory: PathBuf::new(),
                    source: PathBuf::new(),
                    ..report.clone()
                },
                made: now_secs(),
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
) -> Result<(CopyReport, Baseline), Refused> {
    let snapshots = Snapshots::take(dir, copy_dir, baseline_dir);
    snapshots.hand_out(report, copy_dir, baseline_dir)
}

/// Points the git configuration `config` at the work tree `copy` (`core.worktree`, which
/// `git init` wrote for the base's own copy): every other line is kept as its bytes, the
/// value quoted. A path that is not UTF-8 is left out (Legate names the work tree in every
/// git run anyway).
pub(crate) fn set_work_tree(config: &Path, copy: &Path) -> std::io::Result<()> {
    let bytes = fs::read(config)?;
    let mut out = Vec::with_capacity(bytes.len() + 64);
    for line in bytes.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        let key = line.trim_ascii_start().strip_prefix(b"worktree");
        let names_worktree = key.is_some_and(|rest| {
            let rest = rest.trim_ascii_start();
            rest.is_empty() || rest.starts_with(b"=")
        });
        if !names_worktree {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    if let Some(path) = copy.to_str() {
        let mut quoted = String::from("\"");
        for c in path.chars() {
            match c {
                '\\' => quoted.push_str("\\\\"),
                '"' => quoted.push_str("\\\""),
                '\n' => quoted.push_str("\\n"),
                '\t' => quoted.push_str("\\t"),
                c => quoted.push(c),
            }
        }
        quoted.push('"');
        out.extend_from_slice(format!("[core]\n\tworktree = {quoted}\n").as_bytes());
    }
    let tmp = config.with_extension("tmp");
    fs::write(&tmp, out)?;
    fs::rename(&tmp, config)
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

/// The file whose lock serializes work on the base in `dir`.
pub(crate) fn lock_file(dir: &Path) -> PathBuf {
    dir.join(LOCK)
}

/// Where the project at `root` (canonical) keeps its base under `bases`.
pub fn base_dir(bases: &Path, root: &Path) -> PathBuf {
    bases.join(crate::sha256_hex(root.as_os_str().as_encoded_bytes()))
}

#[cfg(test)]
#[path = "base_tests.rs"]
pub(crate) mod tests;
