//! Keeping the projects' bases (`base`) in order: whether this process may use them at all,
//! removing what a stopped copy left, and the retention sweep.
//!
//! This module owns the probe (a subvolume made, snapshotted and both removed under
//! `$LEGATE_HOME/bases/`, once per process and directory: where any of it is refused, by the
//! kernel, a security module or the mount, copies are made as they are elsewhere) and
//! [`prune`]: a base unused for long is removed under its lock, its manifest first (so that no
//! copy takes a half-removed base for a made one), then renamed away, so that a copy waiting
//! for its lock finds the lock file gone and takes a new one.
//!
//! It must never remove anything but a base's directory, a probe's or a removed base's under
//! the bases directory, nor a base whose lock another holds.

use crate::base::{MANIFEST, lock_file};
use crate::subvolume;
use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// How the names of probes begin.
const PROBE: &str = ".probe-";
/// How the names of bases renamed away to be removed begin.
const REMOVED: &str = ".removed-";

/// How long a refusal is believed before the probe is made again (a mount or a policy may
/// change under a long-running process).
const REFUSAL_KEPT: Duration = Duration::from_secs(600);

/// How old a probe's leftover must be before a sweep removes it: a live one (this process's,
/// or another's on the same home) takes milliseconds.
const PROBE_AGE: Duration = Duration::from_secs(3600);

/// Whether this process can make, snapshot and remove subvolumes in `bases` (asked once per
/// directory and process; a refusal is logged, and asked again after [`REFUSAL_KEPT`]).
pub(crate) fn probe(bases: &Path) -> bool {
    static SEEN: Mutex<Option<HashMap<PathBuf, (bool, Instant)>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    let seen = seen.get_or_insert_with(HashMap::new);
    if let Some((ok, at)) = seen.get(bases)
        && (*ok || at.elapsed() < REFUSAL_KEPT)
    {
        return *ok;
    }
    let name = format!("{PROBE}{}", unique_suffix());
    let (made, snap) = (bases.join(&name), bases.join(format!("{name}-s")));
    let tried = subvolume::create(&made)
        .and_then(|()| subvolume::snapshot(&made, &snap))
        .and_then(|()| fs::remove_dir(&snap))
        .and_then(|()| fs::remove_dir(&made));
    let ok = tried.is_ok();
    if let Err(e) = tried {
        tracing::warn!(error = %e, bases = %bases.display(), "subvolumes cannot be used here: copies are made in full");
        let _ = remove(&snap);
        let _ = remove(&made);
    }
    seen.insert(bases.to_path_buf(), (ok, Instant::now()));
    ok
}

/// A name part no other probe or removal uses: this process, the clock to the nanosecond,
/// and a counter (a reused process id meets another time).
fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{}-{nanos}-{n}", std::process::id())
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
/// directory's when there is none), skipping any whose lock is held, and what stopped probes
/// and removals left. Returns how many bases it removed.
pub fn prune(bases: &Path, unused_for: Duration) -> usize {
    let mut removed = 0;
    for (name, path, _) in crate::entries(bases) {
        let plain = fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
        if !plain {
            continue;
        }
        // A removal's leftover is no one's; a probe may be under way (here or in another
        // process on the same home) until it is old.
        let old = || {
            fs::symlink_metadata(&path)
                .and_then(|m| m.modified())
                .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > PROBE_AGE))
        };
        if name.starts_with(REMOVED) || (name.starts_with(PROBE) && old()) {
            let _ = remove(&path);
            continue;
        }
        let is_hash = name.len() == 64 && name.bytes().all(|b| b.is_ascii_hexdigit());
        if is_hash && prune_one(bases, &name, &path, unused_for) {
            removed += 1;
        }
    }
    removed
}

/// Removes the base `path` (named `name` in `bases`) when unused for `unused_for` and its lock
/// is free: its manifest, then the directory renamed away and removed.
fn prune_one(bases: &Path, name: &str, path: &Path, unused_for: Duration) -> bool {
    let lock = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(lock_file(path));
    let Ok(lock) = lock else {
        return false;
    };
    if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
        return false;
    }
    let used = fs::metadata(path.join(MANIFEST))
        .or_else(|_| fs::metadata(path))
        .and_then(|m| m.modified());
    if !used.is_ok_and(|t| t.elapsed().is_ok_and(|age| age > unused_for)) {
        return false;
    }
    // The manifest first: whatever happens next, no copy takes this base for a made one.
    match fs::remove_file(path.join(MANIFEST)) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return false,
    }
    let away = bases.join(format!("{REMOVED}{name}-{}", unique_suffix()));
    if fs::rename(path, &away).is_err() {
        return false;
    }
    drop(lock);
    remove(&away).is_ok()
}

#[cfg(test)]
#[path = "base_upkeep_tests.rs"]
mod tests;
