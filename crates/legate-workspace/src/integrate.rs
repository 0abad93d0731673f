//! Integration: writing a reviewed patch's results into the original project, all or nothing.
//!
//! This module owns the last step. Every result is built and checked first, in memory, before
//! the original is touched: each affected original file must still equal the baseline
//! (`SOURCE_CHANGED`), an added path must still be free, and modified files pass the line
//! ending and BOM rule (`line_endings`). Then every result is written to a temporary file in
//! its directory (permissions of the original), the temporary files are synced together (in
//! parallel, so the file system commits them in a few journal transactions rather than one
//! per file), and only then is each renamed over its original after a last look that the
//! original is still the file checked (same inode, size, mtime and ctime); a deleted file is
//! renamed aside in its directory. If anything fails, what was written
//! is put back (original bytes and modes restored, added files and directories removed,
//! deleted files renamed back) and the error is `INTEGRATION_FAILED`; whatever could not be
//! put back is named. Only when every write succeeded are the set-aside files removed; one
//! that cannot be is listed in `leftover_files`.
//!
//! It must never follow a symlink in the original, write outside the project root, or leave
//! the original half-changed on an error it saw. A crash of the process in the middle of the
//! writes is not recovered automatically.

use crate::baseline::Baseline;
use crate::copy::read_inside_with_metadata;
use crate::include::check_path;
use crate::line_endings;
use crate::patch::{ChangeStatus, Preview};
use legate_core::{Error, ErrorCode};
use serde::{Deserialize, Serialize};
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
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
    /// The result's mode for an added file (`0o644` or `0o755`).
    pub mode: Option<u32>,
}

/// What an integration did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Integrated {
    /// Every path written, created or deleted.
    pub files: Vec<String>,
    /// Files whose BOM the patch dropped and integration put back.
    pub restored_byte_order_marks: Vec<String>,
    /// Set-aside deleted files that could not be removed (relative paths).
    pub leftover_files: Vec<String>,
}

/// The file system operations integration performs, so that tests can make any one fail.
pub(crate) trait Ops {
    /// Creates a new, empty temporary file in `dir` and returns its path.
    fn create_temp(&mut self, dir: &Path) -> io::Result<PathBuf>;
    /// Writes `bytes` into the temporary file `path` and sets `mode` (no sync).
    fn fill(&mut self, path: &Path, bytes: &[u8], mode: u32) -> io::Result<()>;
    /// Makes the contents of the files `paths` durable (`fsync`).
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
    fn create_temp(&mut self, dir: &Path) -> io::Result<PathBuf> {
        let (_, path) = tempfile::Builder::new()
            .prefix(".legate-")
            .suffix(".tmp")
            .rand_bytes(8)
            .make_in(dir, |p| {
                OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .custom_flags(libc::O_NOFOLLOW)
                    .open(p)
            })?
            .keep()
            .map_err(|e| e.error)?;
        Ok(path)
    }

    fn fill(&mut self, path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)?;
        f.write_all(bytes)?;
        f.set_permissions(fs::Permissions::from_mode(mode))
    }

    fn sync(&mut self, paths: &[&Path]) -> io::Result<()> {
        // Concurrent fsyncs share journal commits; one at a time, each pays for its own.
        const THREADS: usize = 8;
        if paths.len() <= 1 {
            return paths.iter().try_for_each(|p| fs::File::open(p)?.sync_all());
        }
        let per = paths.len().div_ceil(THREADS);
        std::thread::scope(|scope| {
            let handles: Vec<_> = paths
                .chunks(per)
                .map(|chunk| {
                    scope
                        .spawn(move || chunk.iter().try_for_each(|p| fs::File::open(p)?.sync_all()))
                })
                .collect();
            handles.into_iter().try_for_each(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a sync thread panicked")))
            })
        })
    }

    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }

    fn create_dir(&mut self, path: &Path) -> io::Result<()> {
        fs::create_dir(path)
    }

    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
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

/// Integrates `changes` into the project at `root` (canonical). See the module docs.
pub fn integrate(root: &Path, changes: &[Change]) -> Result<Integrated, Error> {
    integrate_with(root, changes, &mut RealOps)
}

/// What identifies a file's contents without reading them: a write changes its ctime, a
/// replacement its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Identity {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl Identity {
    fn of(m: &fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Self {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }
}

/// A result ready to write.
struct Planned<'a> {
    change: &'a Change,
    /// The original as checked (`None`: it did not exist).
    seen: Option<Identity>,
    /// Bytes to write (A, M).
    bytes: Option<Vec<u8>>,
    /// Mode to write with.
    mode: u32,
}

/// What was done, to undo it.
enum Done {
    Replaced {
        path: PathBuf,
        original: Vec<u8>,
        mode: u32,
    },
    Created(PathBuf),
    Dir(PathBuf),
    Aside {
        path: PathBuf,
        aside: PathBuf,
    },
}

pub(crate) fn integrate_with(
    root: &Path,
    changes: &[Change],
    ops: &mut dyn Ops,
) -> Result<Integrated, Error> {
    let mut report = Integrated::default();
    let mut plan = Vec::with_capacity(changes.len());
    for c in changes {
        check_path(&c.path)?;
        let (current, seen) = match read_inside_with_metadata(root, &c.path)? {
            Some((bytes, meta)) => (Some(bytes), Some(Identity::of(&meta))),
            None => (None, None),
        };
        let mode = current_mode(root, &c.path).unwrap_or(c.mode.unwrap_or(0o644));
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
                        let checked = line_endings::check(&c.path, base, result)?;
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
                });
            }
        }
    }

    let mut done: Vec<Done> = Vec::new();
    let mut temps: Vec<PathBuf> = Vec::new();
    let written = write_all(root, &plan, ops, &mut done, &mut temps);
    if let Err((path, e)) = written {
        // Temporary files not renamed into place yet; the renamed ones are gone already.
        for t in &temps {
            let _ = fs::remove_file(t);
        }
        let leftovers = rollback(root, done);
        let mut message = format!(
            "integration stopped at {path}: {}; everything written was put back",
            e.message
        );
        if !leftovers.is_empty() {
            message = format!(
                "integration stopped at {path}: {}; these could not be put back: {}",
                e.message,
                leftovers.join(", ")
            );
        }
        tracing::warn!(path = %path, code = %e.code, "integration rolled back");
        return Err(Error::new(ErrorCode::IntegrationFailed, message));
    }
    report.files = plan.iter().map(|p| p.change.path.clone()).collect();
    for d in done {
        if let Done::Aside { aside, .. } = d
            && ops.remove_file(&aside).is_err()
        {
            report.leftover_files.push(relative(root, &aside));
        }
    }
    Ok(report)
}

/// Stages every result in a temporary file, syncs them together, then puts each in place.
/// On error, names the path it stopped at; `done` and `temps` say what to undo.
fn write_all(
    root: &Path,
    plan: &[Planned<'_>],
    ops: &mut dyn Ops,
    done: &mut Vec<Done>,
    temps: &mut Vec<PathBuf>,
) -> Result<(), (String, Error)> {
    let io = |what: &str, e: io::Error| Error::internal(format!("{what}: {e}"));
    let mut staged: Vec<Option<usize>> = Vec::with_capacity(plan.len());
    for p in plan {
        let at = |e: Error| (p.change.path.clone(), e);
        if p.change.status == ChangeStatus::D {
            staged.push(None);
            continue;
        }
        let path = root.join(&p.change.path);
        let parent = path
            .parent()
            .ok_or_else(|| at(Error::internal("a path without a parent")))?
            .to_path_buf();
        if p.change.status == ChangeStatus::A {
            for dir in missing_dirs(root, &parent).map_err(at)? {
                ops.create_dir(&dir)
                    .map_err(|e| at(io("could not create a directory", e)))?;
                done.push(Done::Dir(dir));
            }
        }
        let tmp = ops
            .create_temp(&parent)
            .map_err(|e| at(io("could not create a temporary file", e)))?;
        temps.push(tmp.clone());
        ops.fill(&tmp, p.bytes.as_deref().unwrap_or_default(), p.mode)
            .map_err(|e| at(io("could not write the temporary file", e)))?;
        staged.push(Some(temps.len() - 1));
    }
    let all: Vec<&Path> = temps.iter().map(PathBuf::as_path).collect();
    ops.sync(&all).map_err(|e| {
        let first = plan
            .first()
            .map(|p| p.change.path.clone())
            .unwrap_or_default();
        (first, io("could not sync the temporary files", e))
    })?;
    for (p, tmp) in plan.iter().zip(staged) {
        let tmp = tmp.and_then(|i| temps.get(i)).cloned();
        commit_one(root, p, tmp.as_deref(), ops, done).map_err(|e| (p.change.path.clone(), e))?;
    }
    Ok(())
}

/// Puts one staged result in place (or sets a deleted file aside), after a last look that the
/// original is still the file checked.
fn commit_one(
    root: &Path,
    p: &Planned<'_>,
    tmp: Option<&Path>,
    ops: &mut dyn Ops,
    done: &mut Vec<Done>,
) -> Result<(), Error> {
    let path = root.join(&p.change.path);
    let io = |what: &str, e: io::Error| Error::internal(format!("{what}: {e}"));
    let now = match fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_file() => Some(Identity::of(&m)),
        Ok(_) => {
            return Err(source_changed(
                &p.change.path,
                "it changed during integration",
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(io("could not look at the original", e)),
    };
    if now != p.seen {
        return Err(source_changed(
            &p.change.path,
            "it changed during integration",
        ));
    }
    match (p.change.status, tmp) {
        (ChangeStatus::D, _) => {
            let aside = aside_name(&path);
            ops.rename(&path, &aside)
                .map_err(|e| io("could not set the file aside", e))?;
            done.push(Done::Aside { path, aside });
        }
        (_, Some(tmp)) => {
            ops.rename(tmp, &path)
                .map_err(|e| io("could not rename the temporary file into place", e))?;
            done.push(match &p.change.baseline {
                Some(original) if p.change.status == ChangeStatus::M => Done::Replaced {
                    path,
                    original: original.clone(),
                    mode: p.mode,
                },
                _ => Done::Created(path),
            });
        }
        (_, None) => return Err(Error::internal("a result without its temporary file")),
    }
    Ok(())
}

/// Undoes `done`, newest first, on the real file system. Returns what could not be undone.
fn rollback(root: &Path, done: Vec<Done>) -> Vec<String> {
    let mut real = RealOps;
    let mut left = Vec::new();
    for d in done.into_iter().rev() {
        match d {
            Done::Replaced {
                path,
                original,
                mode,
            } => {
                let restored = path
                    .parent()
                    .ok_or_else(|| io::Error::other("no parent"))
                    .and_then(|dir| real.create_temp(dir))
                    .and_then(|tmp| {
                        real.fill(&tmp, &original, mode)
                            .and_then(|()| real.sync(&[&tmp]))
                            .and_then(|()| real.rename(&tmp, &path))
                            .inspect_err(|_| {
                                let _ = fs::remove_file(&tmp);
                            })
                    });
                if restored.is_err() {
                    left.push(relative(root, &path));
                }
            }
            Done::Created(path) => {
                if fs::remove_file(&path).is_err() {
                    left.push(relative(root, &path));
                }
            }
            Done::Dir(path) => {
                if fs::remove_dir(&path).is_err() {
                    left.push(relative(root, &path));
                }
            }
            Done::Aside { path, aside } => {
                if fs::rename(&aside, &path).is_err() {
                    left.push(relative(root, &aside));
                }
            }
        }
    }
    left
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

fn current_mode(root: &Path, path: &str) -> Option<u32> {
    fs::symlink_metadata(root.join(path))
        .ok()
        .filter(|m| m.file_type().is_file())
        .map(|m| m.permissions().mode() & 0o7777)
}

fn aside_name(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nonce = uuid_like();
    path.with_file_name(format!(".legate-deleted-{name}-{nonce}"))
}

fn uuid_like() -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}", std::process::id(), t)
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
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Real operations, failing at the `fail_at`-th call (1-based); `fill` writes half the
    /// bytes before failing, like a full disk.
    struct Faulty {
        fail_at: usize,
        calls: usize,
    }

    impl Faulty {
        fn tick(&mut self) -> io::Result<()> {
            self.calls += 1;
            if self.calls == self.fail_at {
                Err(io::Error::other("injected failure"))
            } else {
                Ok(())
            }
        }
    }

    impl Ops for Faulty {
        fn create_temp(&mut self, dir: &Path) -> io::Result<PathBuf> {
            self.tick()?;
            RealOps.create_temp(dir)
        }
        fn fill(&mut self, path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
            if let Err(e) = self.tick() {
                fs::write(path, &bytes[..bytes.len() / 2])?;
                return Err(e);
            }
            RealOps.fill(path, bytes, mode)
        }
        fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
            self.tick()?;
            RealOps.rename(from, to)
        }
        fn sync(&mut self, paths: &[&Path]) -> io::Result<()> {
            self.tick()?;
            RealOps.sync(paths)
        }
        fn create_dir(&mut self, path: &Path) -> io::Result<()> {
            self.tick()?;
            RealOps.create_dir(path)
        }
        fn remove_file(&mut self, path: &Path) -> io::Result<()> {
            self.tick()?;
            RealOps.remove_file(path)
        }
    }

    /// Every entry under `root`: path → (mode, bytes) for files, mode for directories.
    fn snapshot(root: &Path) -> BTreeMap<String, (u32, Option<Vec<u8>>)> {
        fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (u32, Option<Vec<u8>>)>) {
            for e in fs::read_dir(dir).unwrap() {
                let e = e.unwrap();
                let p = e.path();
                let m = fs::symlink_metadata(&p).unwrap();
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                if m.is_dir() {
                    out.insert(rel, (m.permissions().mode(), None));
                    walk(root, &p, out);
                } else {
                    out.insert(rel, (m.permissions().mode(), Some(fs::read(&p).unwrap())));
                }
            }
        }
        let mut out = BTreeMap::new();
        walk(root, root, &mut out);
        out
    }

    fn fixture() -> (tempfile::TempDir, PathBuf, Vec<Change>) {
        let tmp = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir_all(root.join("src")).unwrap();
        fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
        fs::set_permissions(root.join("src/a.rs"), fs::Permissions::from_mode(0o640)).unwrap();
        fs::write(root.join("b.txt"), "b\r\nline\r\n").unwrap();
        fs::write(root.join("gone.txt"), "bye\n").unwrap();
        fs::write(root.join("bom.txt"), "\u{feff}x\n").unwrap();
        let changes = vec![
            Change {
                path: "b.txt".into(),
                status: ChangeStatus::M,
                baseline: Some(b"b\r\nline\r\n".to_vec()),
                result: Some(b"B\r\nline\r\n".to_vec()),
                mode: Some(0o644),
            },
            Change {
                path: "bom.txt".into(),
                status: ChangeStatus::M,
                baseline: Some("\u{feff}x\n".into()),
                result: Some(b"y\n".to_vec()),
                mode: Some(0o644),
            },
            Change {
                path: "gone.txt".into(),
                status: ChangeStatus::D,
                baseline: Some(b"bye\n".to_vec()),
                result: None,
                mode: None,
            },
            Change {
                path: "new/deep/c.sh".into(),
                status: ChangeStatus::A,
                baseline: None,
                result: Some(b"#!/bin/sh\n".to_vec()),
                mode: Some(0o755),
            },
            Change {
                path: "src/a.rs".into(),
                status: ChangeStatus::M,
                baseline: Some(b"fn a() {}\n".to_vec()),
                result: Some(b"fn a() { 1 }\n".to_vec()),
                mode: Some(0o644),
            },
        ];
        (tmp, root, changes)
    }

    #[test]
    fn a_clean_integration_writes_everything_and_keeps_modes() {
        let (_t, root, changes) = fixture();
        let r = integrate(&root, &changes).unwrap();
        assert_eq!(r.files.len(), 5);
        assert_eq!(r.restored_byte_order_marks, ["bom.txt"]);
        assert!(r.leftover_files.is_empty());
        assert_eq!(fs::read(root.join("b.txt")).unwrap(), b"B\r\nline\r\n");
        assert_eq!(
            fs::read(root.join("bom.txt")).unwrap(),
            "\u{feff}y\n".as_bytes()
        );
        assert!(!root.join("gone.txt").exists());
        assert_eq!(
            fs::read(root.join("new/deep/c.sh")).unwrap(),
            b"#!/bin/sh\n"
        );
        let mode = |p: &str| fs::metadata(root.join(p)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode("src/a.rs"), 0o640);
        assert_eq!(mode("new/deep/c.sh"), 0o755);
        let names: Vec<_> = fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names.iter().all(|n| !n.starts_with(".legate-")),
            "{names:?}"
        );
    }

    #[test]
    fn a_write_failing_at_each_position_leaves_the_original_byte_identical() {
        // Count the operations of a clean run first.
        let (_t, root, changes) = fixture();
        let mut counting = Faulty {
            fail_at: usize::MAX,
            calls: 0,
        };
        integrate_with(&root, &changes, &mut counting).unwrap();
        let total = counting.calls;
        // The last operations remove set-aside files; a failure there is a leftover, not a
        // rollback, and is tested below.
        let removals = changes
            .iter()
            .filter(|c| c.status == ChangeStatus::D)
            .count();
        assert!(total > 10, "{total}");
        for fail_at in 1..=total - removals {
            let (_t, root, changes) = fixture();
            let before = snapshot(&root);
            let mut ops = Faulty { fail_at, calls: 0 };
            let err = integrate_with(&root, &changes, &mut ops).unwrap_err();
            assert_eq!(err.code, ErrorCode::IntegrationFailed, "at {fail_at}");
            assert!(err.message.contains("put back"), "{}", err.message);
            assert_eq!(snapshot(&root), before, "failure at operation {fail_at}");
        }
        // A removal that fails leaves the set-aside file listed, and the integration done.
        let (_t, root, changes) = fixture();
        let mut ops = Faulty {
            fail_at: total,
            calls: 0,
        };
        let r = integrate_with(&root, &changes, &mut ops).unwrap();
        assert_eq!(r.leftover_files.len(), 1);
        assert!(r.leftover_files[0].starts_with(".legate-deleted-gone.txt-"));
        assert!(root.join(&r.leftover_files[0]).exists());
    }

    #[test]
    fn a_changed_original_is_source_changed_and_untouched() {
        let (_t, root, changes) = fixture();
        fs::write(root.join("src/a.rs"), "fn a() { edited by hand }\n").unwrap();
        let before = snapshot(&root);
        let err = integrate(&root, &changes).unwrap_err();
        assert_eq!(err.code, ErrorCode::SourceChanged);
        assert_eq!(snapshot(&root), before);
        let (_t, root, changes) = fixture();
        fs::create_dir_all(root.join("new/deep")).unwrap();
        fs::write(root.join("new/deep/c.sh"), "mine").unwrap();
        assert_eq!(
            integrate(&root, &changes).unwrap_err().code,
            ErrorCode::SourceChanged
        );
    }

    #[test]
    fn symlinks_in_the_original_are_never_followed() {
        let (_t, root, changes) = fixture();
        let outside = tempfile::tempdir().unwrap();
        fs::write(outside.path().join("a.rs"), "fn a() {}\n").unwrap();
        fs::remove_dir_all(root.join("src")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("src")).unwrap();
        let err = integrate(&root, &changes).unwrap_err();
        assert_eq!(err.code, ErrorCode::UnsafePath);
        assert_eq!(
            fs::read(outside.path().join("a.rs")).unwrap(),
            b"fn a() {}\n"
        );
        let (_t, root, changes) = fixture();
        fs::remove_file(root.join("b.txt")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("a.rs"), root.join("b.txt")).unwrap();
        assert_eq!(
            integrate(&root, &changes).unwrap_err().code,
            ErrorCode::UnsafePath
        );
        let bad = Change {
            path: "../escape".into(),
            ..changes[3].clone()
        };
        assert_eq!(
            integrate(&root, &[bad]).unwrap_err().code,
            ErrorCode::UnsafePath
        );
    }

    #[test]
    fn a_line_ending_change_touches_nothing() {
        let (_t, root, mut changes) = fixture();
        changes[0].result = Some(b"B\nline\n".to_vec());
        let before = snapshot(&root);
        let err = integrate(&root, &changes).unwrap_err();
        assert_eq!(err.code, ErrorCode::LineEndingsChanged);
        assert_eq!(snapshot(&root), before);
    }
}
