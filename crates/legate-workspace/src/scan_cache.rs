//! The scan verdict cache: the secret preflight's verdict on a project's file, kept from one
//! copy to the next, so that a file scanned before and unchanged since is not read again.
//!
//! This module owns the cache file (one per project under Legate's state, mode 0600 in a
//! 0700 directory), its format and its checks, and the rule for when a verdict may be
//! recorded at all. It trusts stat data the way git's index does (and `staging` with it),
//! with the conditions that make a verdict impossible to outlive its bytes:
//! - the key is the file's path in the project, its [`FileState`] (device, inode, size, mode,
//!   mtime and ctime to the nanosecond), and the name rule its content must confirm
//!   (`*.key`); the whole cache is also keyed on what every verdict depends on (the
//!   credential detector's version and rule table, the configured exclusions and
//!   exceptions): any difference is a miss;
//! - a verdict is recorded only on a file system whose every write moves the ctime, writes
//!   through a shared mapping included (ext2/3/4, xfs, btrfs, by `fstatfs`): tmpfs does not
//!   update times on a write through a mapping, so it (and every file system not named) gets
//!   no cache;
//! - before the file is measured for a verdict, its dirty pages are written back
//!   (`sync_file_range`), so none stays writable in someone's mapping: the kernel
//!   write-protects a page it writes back, and the next write through a mapping faults and
//!   moves the times;
//! - it is not racily clean: its ctime and mtime are earlier than the coarse clock read
//!   before that write-back by at least [`RACY_MARGIN`], so any later write gives it another
//!   ctime, and a `write` call that moved its times and was still copying bytes when the file
//!   was read would have to have been under way for that long;
//! - a verdict used for a copy holds only while the file measures as its key before and after
//!   its bytes are cloned or copied (the copy module checks);
//! - a verdict the detector could not make (its rule table unavailable: every file blocked,
//!   failing closed) says nothing about the file and is never kept.
//!
//! The cache is read at most once per copy, when a verdict is first asked for (a copy that
//! is a snapshot of the project's base asks for none), and written after the copy ends (a
//! temporary file renamed over the old one: a `kill -9` leaves one or the other). A file
//! that is truncated, corrupt (its sha256 does not match), of another version or for other
//! rules is ignored, and the copy scans every file: it is never trusted and never an error.
//!
//! It must never hold a file's content or any part of a match (a verdict is `clean`, or a
//! block reason and rule id), trust a verdict whose key differs in any field, or fail a copy.

use crate::file_state::FileState;
use crate::secrets::{BlockReason, BlockedFile, SecretPatterns};
use crate::select::SelectedFile;
use legate_credentials::SCANNER_UNAVAILABLE;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The most entries a cache keeps (a copy holds at most `max_files`, 10,000 by default; the
/// rest are files of the project copied by earlier, narrower copies).
pub const MAX_ENTRIES: usize = 100_000;

/// A cache file larger than this is not read.
const MAX_FILE_BYTES: u64 = 64 * 1024 * 1024;

/// How much earlier than the clock a file's times must be for a verdict to be recorded.
pub const RACY_MARGIN: Duration = Duration::from_secs(1);

/// The cache file's first bytes; the format's version is in it.
const MAGIC: &str = "legate-scan-verdicts 1 ";

/// The cache file's name in the project's directory.
const FILE: &str = "verdicts";

/// How the names of its temporary files begin (the cache file's, hidden, then the writer's
/// process id and a suffix).
const TEMP_PREFIX: &str = ".verdicts.tmp-";

/// File systems whose every write (a shared mapping's included) moves the ctime:
/// ext2/3/4, xfs, btrfs (`statfs` `f_type`).
const TRUSTED_FS: [u64; 3] = [0xEF53, 0x5846_5342, 0x9123_683E];

/// The preflight's verdict on a file's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum Verdict {
    /// Nothing matched: the file may be copied.
    Clean,
    /// Left out, by this reason and rule (never content).
    Blocked { reason: BlockReason, rule: String },
}

impl Verdict {
    /// The file at `path` this verdict leaves out, if it does.
    pub(crate) fn blocked(&self, path: &str) -> Option<BlockedFile> {
        match self {
            Verdict::Clean => None,
            Verdict::Blocked { reason, rule } => Some(BlockedFile {
                path: path.to_string(),
                reason: *reason,
                rule: rule.clone(),
            }),
        }
    }
}

/// One file's recorded verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    path: String,
    /// The file's state when it was scanned (its serde form is part of this file's format).
    key: FileState,
    /// The name rule the content had to confirm, as the selection decided it.
    pending: Option<String>,
    verdict: Verdict,
}

impl Entry {
    /// The verdict `verdict` on `f`, measured as `meta`; `None` when it is not the file's
    /// own (the detector could not run: that says nothing about the file, and is not kept).
    pub(crate) fn new(f: &SelectedFile, meta: &Metadata, verdict: Verdict) -> Option<Self> {
        if matches!(&verdict, Verdict::Blocked { rule, .. } if rule == SCANNER_UNAVAILABLE) {
            return None;
        }
        Some(Self {
            path: f.path.clone(),
            key: FileState::of(meta),
            pending: f.pending_rule.map(str::to_string),
            verdict,
        })
    }

    /// The file's path in the project.
    pub(crate) fn path(&self) -> &str {
        &self.path
    }

    /// The state the file was in when its verdict was made.
    pub(crate) fn key(&self) -> FileState {
        self.key
    }

    /// What the verdict means: `None` for clean, else the blocked file.
    pub(crate) fn blocked(&self) -> Option<BlockedFile> {
        self.verdict.blocked(&self.path)
    }
}

/// What the file holds after its first line.
#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    fingerprint: String,
    entries: Vec<Entry>,
}

/// One project's verdicts, as read before a copy.
///
/// The file is read when a verdict is first asked for (or the cache is saved or counted), not
/// when it is opened: a copy that is a snapshot of the project's base (`base`) reads none.
#[derive(Debug)]
pub struct ScanCache {
    file: PathBuf,
    fingerprint: String,
    entries: OnceLock<HashMap<String, Entry>>,
}

impl ScanCache {
    /// The cache of the project at `root` (canonical) under `state` (Legate's directory of
    /// caches, one subdirectory per project, named by the sha256 of its root), for verdicts
    /// made under `secrets`. A missing or unusable file is an empty cache.
    pub fn open(state: &Path, root: &Path, secrets: &SecretPatterns) -> Self {
        let dir = state.join(crate::sha256_hex(root.as_os_str().as_encoded_bytes()));
        Self {
            file: dir.join(FILE),
            fingerprint: fingerprint(secrets),
            entries: OnceLock::new(),
        }
    }

    /// The verdicts, the file read the first time.
    fn entries(&self) -> &HashMap<String, Entry> {
        self.entries
            .get_or_init(|| match read(&self.file, &self.fingerprint) {
                Ok(entries) => entries.into_iter().map(|e| (e.path.clone(), e)).collect(),
                Err(why) => {
                    tracing::debug!(why, "the scan verdict cache is not used");
                    HashMap::new()
                }
            })
    }

    /// What its verdicts depend on besides each file (the detector and the patterns).
    pub(crate) fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    /// How many verdicts it holds.
    pub fn len(&self) -> usize {
        self.entries().len()
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.entries().is_empty()
    }

    /// The recorded verdict on `f`, opened and measured as `meta`, when its key matches in
    /// every field and its file system is trusted.
    pub(crate) fn lookup(&self, f: &SelectedFile, file: &File, meta: &Metadata) -> Option<&Entry> {
        let e = self.entries().get(&f.path)?;
        let hit = e.key.matches(meta) && e.pending.as_deref() == f.pending_rule && trusted_fs(file);
        hit.then_some(e)
    }

    /// Writes the verdicts of a copy just made (`fresh`) over the cache, keeping earlier
    /// verdicts on files this copy did not select (`selected`), up to [`MAX_ENTRIES`]. Never
    /// fails the copy: a cache that cannot be written is logged and left as it was.
    pub(crate) fn save(&self, selected: &[SelectedFile], fresh: Vec<Entry>) {
        let mut entries = fresh;
        entries.truncate(MAX_ENTRIES);
        let seen: std::collections::HashSet<&str> =
            selected.iter().map(|f| f.path.as_str()).collect();
        let room = MAX_ENTRIES - entries.len();
        let mut older: Vec<&Entry> = self
            .entries()
            .values()
            .filter(|e| !seen.contains(e.path.as_str()))
            .collect();
        older.sort_by(|a, b| a.path.cmp(&b.path));
        entries.extend(older.into_iter().take(room).cloned());
        if let Err(e) = write(&self.file, &self.fingerprint, entries) {
            tracing::warn!(error = %e, "the scan verdict cache could not be written");
        }
    }
}

/// What every verdict depends on besides the file: the detector and the patterns.
fn fingerprint(secrets: &SecretPatterns) -> String {
    let (version, rules) = legate_credentials::detector_identity();
    let mut h = Sha256::new();
    for part in [version, rules] {
        h.update((part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    for list in [secrets.exclusions(), secrets.exceptions()] {
        h.update((list.len() as u64).to_le_bytes());
        for p in list {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p.as_bytes());
        }
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `file` lies on a file system whose every write moves its ctime.
pub(crate) fn trusted_fs(file: &File) -> bool {
    rustix::fs::fstatfs(file).is_ok_and(|s| TRUSTED_FS.contains(&(s.f_type as u64)))
}

/// The moment a file's times must precede for a verdict on it to be recorded: the coarse
/// clock (the one file systems stamp times with) now, less [`RACY_MARGIN`]. Read before the
/// file is written back and measured.
pub(crate) fn record_before() -> (i64, i64) {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::RealtimeCoarse);
    (now.tv_sec - RACY_MARGIN.as_secs() as i64, now.tv_nsec)
}

/// Whether a verdict on the file measured as `meta` may be recorded: both its times are
/// strictly earlier than `before` (from [`record_before`]).
pub(crate) fn settled(meta: &Metadata, before: (i64, i64)) -> bool {
    (meta.mtime(), meta.mtime_nsec()) < before && (meta.ctime(), meta.ctime_nsec()) < before
}

/// Writes back `file`'s dirty pages and waits for it: afterwards no page of it is writable
/// in a mapping without faulting first (which moves its times).
pub(crate) fn write_back(file: &File) -> bool {
    sys::sync_file_range(file).is_ok()
}

mod sys {
    #![allow(unsafe_code)]
    use std::fs::File;
    use std::os::fd::AsRawFd;

    /// `sync_file_range(fd, 0, 0, WAIT_BEFORE | WRITE | WAIT_AFTER)`.
    pub(super) fn sync_file_range(file: &File) -> std::io::Result<()> {
        let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        // SAFETY: the descriptor is open for the borrow's length; the call reads no memory
        // of ours.
        let r = unsafe { libc::sync_file_range(file.as_raw_fd(), 0, 0, flags) };
        if r == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// The entries of the cache file at `path`, when it is whole, of this version, and made for
/// `fingerprint`; why not otherwise.
fn read(path: &Path, fingerprint: &str) -> Result<Vec<Entry>, String> {
    let mut file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| e.to_string())?;
    let meta = file.metadata().map_err(|e| e.to_string())?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return Err("not a regular file of a bounded size".into());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    Read::by_ref(&mut file)
        .take(MAX_FILE_BYTES)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    parse(&bytes, fingerprint)
}

/// Parses a cache file's bytes: `MAGIC`, the body's sha256 in hex, a newline, the body.
pub(crate) fn parse(bytes: &[u8], fingerprint: &str) -> Result<Vec<Entry>, String> {
    let rest = bytes
        .strip_prefix(MAGIC.as_bytes())
        .ok_or("another format or version")?;
    let nl = rest
        .iter()
        .position(|b| *b == b'\n')
        .ok_or("no header line")?;
    let (sum, body) = (&rest[..nl], &rest[nl + 1..]);
    if sum != crate::sha256_hex(body).as_bytes() {
        return Err("its checksum does not match".into());
    }
    let body: Body = serde_json::from_slice(body).map_err(|e| e.to_string())?;
    if body.fingerprint != fingerprint {
        return Err("made for other rules or patterns".into());
    }
    if body.entries.len() > MAX_ENTRIES {
        return Err("too many entries".into());
    }
    Ok(body.entries)
}

/// The bytes of a cache file holding `entries`.
pub(crate) fn render(fingerprint: &str, entries: Vec<Entry>) -> Result<Vec<u8>, String> {
    let body = serde_json::to_vec(&Body {
        fingerprint: fingerprint.to_string(),
        entries,
    })
    .map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(body.len() + 100);
    out.extend_from_slice(MAGIC.as_bytes());
    out.extend_from_slice(crate::sha256_hex(&body).as_bytes());
    out.push(b'\n');
    out.extend_from_slice(&body);
    Ok(out)
}

/// Writes the cache file at `path` (its directory made 0700) through a temporary file
/// (0600) renamed over it. Not fsynced: a file cut short by a crash fails its checksum and
/// is ignored. Temporary files a killed writer left are removed.
fn write(path: &Path, fingerprint: &str, entries: Vec<Entry>) -> Result<(), String> {
    let dir = path.parent().ok_or("no directory")?;
    crate::private_dir(dir).map_err(|e| e.message)?;
    sweep(dir);
    let bytes = render(fingerprint, entries)?;
    let tmp = dir.join(format!(
        "{TEMP_PREFIX}{}-{:x}",
        std::process::id(),
        rand_suffix()
    ));
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        drop(f);
        fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e.to_string());
    }
    Ok(())
}

/// A suffix that keeps two writers of one process apart.
fn rand_suffix() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// Removes temporary files older than a minute in `dir` (left by a killed writer).
fn sweep(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let old = e
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > Duration::from_secs(60));
        if old && e.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Removes the caches of projects not copied for longer than `unused_for` from `state` (the
/// directory [`ScanCache::open`] was given): each project's directory whose cache file (or,
/// with none, the directory itself) was last written that long ago. Returns how many were
/// removed.
///
/// It removes only what this module writes: a directory named as a sha256, holding nothing
/// but the cache file and temporary files of it; anything else there (a link, another name,
/// another file inside) is left as it is. It works through descriptors of the directories it
/// opened without following a link, so a directory swapped for a link meanwhile redirects
/// nothing. A copy writing its cache meanwhile loses that cache at worst (its next copy reads
/// and scans every file), never fails. A cache file dated in the future is not pruned.
pub fn prune(state: &Path, unused_for: Duration) -> usize {
    let Ok(state) = open_dir(rustix::fs::CWD, state) else {
        return 0;
    };
    let Ok(projects) = names(&state) else {
        return 0;
    };
    let mut removed = 0;
    for name in projects {
        let bytes = name.to_bytes();
        let is_hash = bytes.len() == 64
            && bytes
                .iter()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b));
        if is_hash && prune_one(&state, &name, unused_for) {
            removed += 1;
        }
    }
    removed
}

/// A directory opened for reading its entries, never through a link.
fn open_dir(
    at: impl std::os::fd::AsFd,
    path: impl rustix::path::Arg,
) -> rustix::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{Mode, OFlags};
    rustix::fs::openat(
        at,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

/// The names in the directory `dir`, but `.` and `..`.
fn names(dir: &std::os::fd::OwnedFd) -> rustix::io::Result<Vec<std::ffi::CString>> {
    let mut out = Vec::new();
    for entry in rustix::fs::Dir::read_from(dir)? {
        let name = entry?.file_name().to_owned();
        if name.as_bytes() != b"." && name.as_bytes() != b".." {
            out.push(name);
        }
    }
    Ok(out)
}

/// Removes the project directory `name` in `state` when it is unused for `unused_for` and
/// holds nothing but regular files named as the cache file and its temporary files.
fn prune_one(state: &std::os::fd::OwnedFd, name: &std::ffi::CStr, unused_for: Duration) -> bool {
    use rustix::fs::{AtFlags, FileType};
    // A link is refused here (`ELOOP`, `ENOTDIR`): nothing is read or removed through it.
    let Ok(dir) = open_dir(state, name) else {
        return false;
    };
    let Ok(entries) = names(&dir) else {
        return false;
    };
    for e in &entries {
        let text = e.to_string_lossy();
        let regular = rustix::fs::statat(&dir, e.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)
            .is_ok_and(|st| FileType::from_raw_mode(st.st_mode) == FileType::RegularFile);
        if !regular || !(text == FILE || text.starts_with(TEMP_PREFIX)) {
            return false;
        }
    }
    let written = rustix::fs::statat(&dir, FILE, AtFlags::SYMLINK_NOFOLLOW)
        .or_else(|_| rustix::fs::fstat(&dir))
        .map(|st| st.st_mtime);
    let unused = written.ok().is_some_and(|secs| {
        let then = u64::try_from(secs).map_or(std::time::UNIX_EPOCH, |s| {
            std::time::UNIX_EPOCH + Duration::from_secs(s)
        });
        then.elapsed().is_ok_and(|age| age > unused_for)
    });
    if !unused {
        return false;
    }
    for e in &entries {
        if rustix::fs::unlinkat(&dir, e.as_c_str(), AtFlags::empty()).is_err() {
            return false;
        }
    }
    // Fails, leaving it, if a writer put a file in it meanwhile, or if the name is no longer
    // a directory.
    rustix::fs::unlinkat(state, name, AtFlags::REMOVEDIR).is_ok()
}

#[cfg(test)]
#[path = "scan_cache_tests.rs"]
mod tests;
