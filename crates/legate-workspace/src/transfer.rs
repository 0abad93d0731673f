//! Copies that travel: Legate's copy-workspace extension, the file-system half of both sides.
//!
//! The client reads the files of a local copy ([`read_copy`]) to send them, and later applies
//! the remote's patch to that copy ([`apply_returned`]); the server makes a fresh copy from
//! the files it received, with them as its baseline ([`make_copy_from_files`]), and
//! describes the state its patch leads to ([`post_state`]).
//!
//! Every path read or written is resolved beneath the copy's held root (`legate-beneath`):
//! no symlink is followed, only regular files are read, and writes go by temporary file and
//! rename. A returned patch is hostile: it is applied to a scratch index first (never to the
//! copy), the resulting tree's paths and modes pass the same checks as any patch (`patch`:
//! safe relative paths, regular files only), and the bytes of every changed path are checked
//! against the remote's manifest before anything is written. After writing, the copy is
//! staged again and must be exactly that tree, and each changed file is read back and hashed;
//! on any mismatch the changed paths are put back as they were.
//!
//! It must never follow a link, write outside the copy, apply a patch to the copy with git,
//! or leave a half-applied patch behind.

use crate::baseline::Baseline;
use crate::changes::{FileChange, Preview};
use crate::copy::CopyReport;
use crate::include::check_path;
use crate::limits::CopyLimits;
use legate_beneath::{BeneathError, Root};
use legate_core::remote::{ManifestFile, PostState, ReturnedManifest, baseline_id, sha256_hex};
use legate_core::{Error, ErrorCode};
use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use std::collections::{BTreeMap, HashSet};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// One file of a copy, with its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileBytes {
    /// Its safe relative path.
    pub path: String,
    /// Its content.
    pub bytes: Vec<u8>,
    /// Whether it is executable.
    pub executable: bool,
}

fn unsafe_path(path: &str, why: impl std::fmt::Display) -> Error {
    Error::new(ErrorCode::UnsafePath, format!("{path}: {why}"))
}

fn beneath_error(path: &str, e: &BeneathError) -> Error {
    if e.is_refusal() || matches!(e, BeneathError::Symlink { .. }) {
        unsafe_path(path, e)
    } else {
        Error::internal(format!("{path}: {e}"))
    }
}

/// The files of the copy at `root`, sorted by path: every regular file beneath it, read
/// without following any link. A symlink, a FIFO or device, a `.git` entry or a name that is
/// not a safe UTF-8 path is `UNSAFE_PATH` (a copy Legate made holds none). More than
/// `max_bytes` in all, measured before the bytes are read, is `COPY_TOO_LARGE`; more than
/// `max_files` files is `COPY_TOO_LARGE` too.
pub fn read_copy(root: &Path, max_bytes: u64, max_files: usize) -> Result<Vec<FileBytes>, Error> {
    let held = Root::open(root)
        .map_err(|e| Error::caused_by(ErrorCode::CopyUnavailable, "the copy", e))?;
    let too_large = |what: String| Error::new(ErrorCode::CopyTooLarge, what);
    let mut found: Vec<(String, u64)> = Vec::new();
    let mut total = 0u64;
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let shown = rel.to_string_lossy().into_owned();
        let dir = held.open_dir(&rel).map_err(|e| beneath_error(&shown, &e))?;
        let unreadable = |e: rustix::io::Errno| Error::internal(format!("{shown:?}: {e}"));
        let readable = rfs::openat(
            &dir,
            c".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(unreadable)?;
        for entry in rfs::Dir::new(readable).map_err(unreadable)? {
            let entry = entry.map_err(unreadable)?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let child = rel.join(OsStr::from_bytes(name.to_bytes()));
            let path = child
                .to_str()
                .ok_or_else(|| unsafe_path(&child.to_string_lossy(), "is not UTF-8"))?
                .to_string();
            // The skills staging directory is Legate's, not the copy's files: the baseline
            // ignores it, so a remote is never sent it (see `skills`).
            if crate::is_staging_path(&path) {
                continue;
            }
            let kind = match entry.file_type() {
                FileType::Unknown => rfs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .map(|m| FileType::from_raw_mode(m.st_mode))
                    .map_err(unreadable)?,
                k => k,
            };
            check_path(&path)?;
            match kind {
                FileType::Directory => stack.push(child),
                FileType::RegularFile => {
                    let (_, size) = held
                        .open_file(&child)
                        .map_err(|e| beneath_error(&path, &e))?;
                    total = total.saturating_add(size);
                    if total > max_bytes {
                        return Err(too_large(format!(
                            "the copy holds more than {max_bytes} bytes; nothing was sent (raise max_transfer_bytes or narrow the copy with include paths)"
                        )));
                    }
                    found.push((path, size));
                    if found.len() > max_files {
                        return Err(too_large(format!(
                            "the copy holds more than {max_files} files; nothing was sent"
                        )));
                    }
                }
                _ => return Err(unsafe_path(&path, "is not a regular file or directory")),
            }
        }
    }
    found.sort();
    let mut out = Vec::with_capacity(found.len());
    let mut read = 0u64;
    for (path, _) in found {
        let (file, _) = held
            .open_file(Path::new(&path))
            .map_err(|e| beneath_error(&path, &e))?;
        let meta = file.metadata().map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                format!("{path} could not be measured"),
                e,
            )
        })?;
        let left = max_bytes.saturating_sub(read);
        let mut bytes = Vec::new();
        use std::io::Read;
        file.take(left.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| {
                Error::caused_by(ErrorCode::Internal, format!("{path} could not be read"), e)
            })?;
        read = read.saturating_add(bytes.len() as u64);
        if read > max_bytes {
            return Err(too_large(format!(
                "the copy grew past {max_bytes} bytes while it was read; nothing was sent"
            )));
        }
        out.push(FileBytes {
            path,
            bytes,
            executable: meta.permissions().mode() & 0o111 != 0,
        });
    }
    Ok(out)
}

/// Writes `bytes` at `path` beneath `held` (parents made), then sets its mode to 0755 or
/// 0644 on the open file: no name is followed.
pub(crate) fn write_file(
    held: &Root,
    path: &str,
    bytes: &[u8],
    executable: bool,
) -> Result<(), Error> {
    let rel = Path::new(path);
    held.write(rel, bytes, true)
        .map_err(|e| beneath_error(path, &e))?;
    let (file, _) = held.open_file(rel).map_err(|e| beneath_error(path, &e))?;
    let mode = if executable { 0o755 } else { 0o644 };
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                format!("{path}: its mode could not be set"),
                e,
            )
        })
}

/// Removes the file `path` beneath `held` (the name itself, never what it points to);
/// a name already gone is fine.
fn remove_file(held: &Root, path: &str) -> Result<(), Error> {
    let rel = Path::new(path);
    let parent = rel.parent().unwrap_or(Path::new(""));
    let Some(name) = rel.file_name() else {
        return Err(unsafe_path(path, "names no file"));
    };
    let dir = match held.open_dir(parent) {
        Ok(d) => d,
        Err(e) if e.is_not_found() => return Ok(()),
        Err(e) => return Err(beneath_error(path, &e)),
    };
    match rfs::unlinkat(&dir, name, AtFlags::empty()) {
        Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
        Err(e) => Err(Error::internal(format!("{path} could not be removed: {e}"))),
    }
}

/// Checks files that came from elsewhere (a remote Legate, a pod) before any is written:
/// each path safe (`check_path`) and given once ignoring case (`INVALID_WORKSPACE`), and
/// their count and bytes within `limits` (`COPY_LIMIT_EXCEEDED`). Returns their bytes.
pub(crate) fn check_files(files: &[FileBytes], limits: &CopyLimits) -> Result<u64, Error> {
    let mut seen = HashSet::new();
    let mut bytes = 0u64;
    for f in files {
        check_path(&f.path)?;
        if !seen.insert(f.path.to_lowercase()) {
            return Err(Error::new(
                ErrorCode::InvalidWorkspace,
                format!("{} is given twice (ignoring case)", f.path),
            ));
        }
        bytes = bytes.saturating_add(f.bytes.len() as u64);
    }
    if files.len() > limits.max_files || bytes > limits.max_bytes {
        return Err(Error::new(
            ErrorCode::CopyLimitExceeded,
            format!(
                "{} files, {bytes} bytes; the copy limits are {} files, {} bytes",
                files.len(),
                limits.max_files,
                limits.max_bytes
            ),
        ));
    }
    Ok(bytes)
}

/// Makes a copy in `copy_dir` from `files` (received from a remote Legate) and its baseline
/// in `baseline_dir`, self-contained, with exactly those files as its baseline commit.
/// Neither directory may exist yet. Each path must be a safe relative path, each once
/// (ignoring case); the files and bytes are bounded by `limits` (`COPY_LIMIT_EXCEEDED`).
/// Every file is written beneath the new root without following links. On any error
/// neither directory is left.
pub fn make_copy_from_files(
    files: &[FileBytes],
    copy_dir: &Path,
    baseline_dir: &Path,
    limits: &CopyLimits,
) -> Result<(CopyReport, Baseline), Error> {
    let bytes = check_files(files, limits)?;
    crate::copy::create_copy_dir(copy_dir)?;
    let made = (|| {
        let copy = crate::copy::resolve_copy_dir(copy_dir)?;
        let held = Root::open(&copy).map_err(|e| {
            Error::caused_by(ErrorCode::Internal, "the new copy could not be opened", e)
        })?;
        for f in files {
            write_file(&held, &f.path, &f.bytes, f.executable)?;
        }
        let baseline = Baseline::create(baseline_dir, &copy)?;
        Ok((
            CopyReport {
                copy_directory: copy.clone(),
                source: copy,
                included_files: files.len(),
                bytes,
                blocked_files: Vec::new(),
                reflinked_files: 0,
                scanned_files: 0,
                trusted_files: 0,
                snapshot: false,
            },
            baseline,
        ))
    })();
    if made.is_err() {
        let _ = std::fs::remove_dir_all(copy_dir);
    }
    made
}

/// The post-state of `preview`'s changed files, read from the tree the patch leads to (not
/// from the copy, which may change after): each path's sha256 and executable bit, or
/// deleted.
pub fn post_state(baseline: &Baseline, preview: &Preview) -> Result<Vec<PostState>, Error> {
    let ids: Vec<&str> = preview
        .files
        .iter()
        .filter_map(|f| f.new_blob.as_deref())
        .collect();
    let mut blobs = baseline.blobs(&ids)?.into_iter();
    let mut out = Vec::with_capacity(preview.files.len());
    for f in &preview.files {
        let sha256 = match &f.new_blob {
            Some(_) => Some(sha256_hex(&blobs.next().ok_or_else(|| {
                Error::internal(format!("the blob of {} is missing", f.path))
            })?)),
            None => None,
        };
        out.push(PostState {
            path: f.path.clone(),
            executable: sha256.is_some() && f.mode == Some(0o755),
            sha256,
        });
    }
    Ok(out)
}

/// The baseline of the copy at `copy`, where Legate keeps it: `$LEGATE_HOME/copies/<id>`
/// has its baseline at `$LEGATE_HOME/baselines/<id>`. `COPY_UNAVAILABLE` when it is not
/// there.
pub fn baseline_of_copy(copy: &Path) -> Result<Baseline, Error> {
    let gone = || {
        Error::new(
            ErrorCode::CopyUnavailable,
            format!("{} is not a copy Legate keeps", copy.display()),
        )
    };
    let id = copy.file_name().ok_or_else(gone)?;
    let home = copy.parent().and_then(Path::parent).ok_or_else(gone)?;
    Baseline::open(&home.join("baselines").join(id), copy)
}

fn protocol(message: String) -> Error {
    Error::new(ErrorCode::RemoteProtocolError, message)
}

/// A file's state at one changed path: its bytes and executable bit, or no file.
type State = Option<(Vec<u8>, bool)>;

/// One changed path: the change, the state the patch gives it, the state it had before.
type Step<'a> = (&'a FileChange, State, State);

/// The manifest of the baseline's commit: the files the copy was made from, which is what
/// a remote copy task was sent (its id is the baseline id the remote answers for).
pub fn baseline_files(baseline: &Baseline) -> Result<Vec<ManifestFile>, Error> {
    let listing = baseline
        .git()
        .run(&["ls-tree", "-r", "-z", "--full-tree", "HEAD"])?;
    let mut entries = Vec::new();
    for item in crate::git::split_z(&listing) {
        let line = String::from_utf8_lossy(item);
        let (meta, path) = line
            .split_once('\t')
            .ok_or_else(|| Error::internal(format!("unexpected ls-tree line {line:?}")))?;
        let fields: Vec<&str> = meta.split(' ').collect();
        let [mode, _, id] = fields[..] else {
            return Err(Error::internal(format!("unexpected ls-tree line {line:?}")));
        };
        entries.push((path.to_string(), mode == "100755", id.to_string()));
    }
    let ids: Vec<&str> = entries.iter().map(|(_, _, id)| id.as_str()).collect();
    let blobs = baseline.blobs(&ids)?;
    Ok(entries
        .into_iter()
        .zip(blobs)
        .map(|((path, executable, _), bytes)| ManifestFile {
            path,
            size: bytes.len() as u64,
            sha256: sha256_hex(&bytes),
            executable,
        })
        .collect())
}

/// The changes from tree `from` to tree `to`, with paths and modes checked as any patch's
/// (`patch::parse_raw`: safe relative paths, regular files only).
pub(crate) fn changes_between(
    baseline: &Baseline,
    from: &str,
    to: &str,
) -> Result<Vec<FileChange>, Error> {
    let raw = baseline.git().run(&[
        "diff-tree",
        "-r",
        "--no-renames",
        "--raw",
        "-z",
        "--no-abbrev",
        from,
        to,
    ])?;
    // Kept as text here and in `apply`: the inner error's code (the parser's, git's) would
    // mislead under REMOTE_PROTOCOL_ERROR, so only its sentence is carried.
    crate::changes::parse_raw(&raw)
        .map_err(|e| protocol(format!("the remote's patch is refused: {}", e.message)))
}

/// Applies the remote's `patch` to the copy behind `baseline`, checked against `expected`
/// (see the module docs). The patch is the remote copy's whole change against the files it
/// was sent, which are this copy's baseline commit: it is applied to that commit's tree in a
/// scratch index, the change from the baseline must be exactly the manifest's post-state,
/// and the copy is then brought from what it holds now to that result. Returns the paths the
/// patch changes against the baseline.
///
/// What the patch writes is bounded by `max_bytes`, one file and all together, before any of
/// it is read or written (`expansion`).
///
/// Errors: `REMOTE_PROTOCOL_ERROR` naming the problem (and the path, for a path's), or
/// `COPY_TOO_LARGE` past `max_bytes`, with the copy as it was before.
pub fn apply_returned(
    baseline: &Baseline,
    patch: &[u8],
    expected: &ReturnedManifest,
    max_bytes: u64,
) -> Result<Vec<FileChange>, Error> {
    if patch.len() as u64 != expected.patch_length || sha256_hex(patch) != expected.patch_sha256 {
        return Err(protocol(
            "the remote's patch does not match the sha256 and length its manifest gives".into(),
        ));
    }
    if baseline_id(&baseline_files(baseline)?) != expected.baseline_id {
        return Err(protocol(
            "the remote's patch is for another baseline than the files this copy sent".into(),
        ));
    }
    let head = baseline
        .git()
        .run(&["rev-parse", "--verify", "HEAD^{tree}"])?;
    let head = String::from_utf8_lossy(&head).trim().to_string();
    crate::expansion::declared(patch, max_bytes)?;
    crate::expansion::no_copies(patch)?;
    let after_tree = tree_after(baseline, &head, patch, max_bytes)?;
    let changes = changes_between(baseline, &head, &after_tree)?;
    let wanted: BTreeMap<&str, &PostState> = expected
        .post_state
        .iter()
        .map(|p| (p.path.as_str(), p))
        .collect();
    for c in &changes {
        if !wanted.contains_key(c.path.as_str()) {
            return Err(protocol(format!(
                "the remote's patch changes {} but its manifest does not name it",
                c.path
            )));
        }
    }
    let changed: HashSet<&str> = changes.iter().map(|c| c.path.as_str()).collect();
    if let Some(missing) = wanted.keys().find(|p| !changed.contains(*p)) {
        return Err(protocol(format!(
            "the remote's manifest names {missing} but its patch does not change it"
        )));
    }
    // The result of every changed path, checked against the manifest before any is written.
    let new_ids: Vec<&str> = changes
        .iter()
        .filter_map(|c| c.new_blob.as_deref())
        .collect();
    crate::expansion::resulting(baseline, &new_ids, max_bytes)?;
    let mut new_blobs = baseline.blobs(&new_ids)?.into_iter();
    for c in &changes {
        let want = wanted[c.path.as_str()];
        let got = match &c.new_blob {
            Some(_) => Some(sha256_hex(
                &new_blobs
                    .next()
                    .ok_or_else(|| Error::internal("a blob is missing"))?,
            )),
            None => None,
        };
        let executable = got.is_some() && c.mode == Some(0o755);
        if want.sha256 != got || want.executable != executable {
            return Err(protocol(format!(
                "{}: the patch's result does not match the sha256 or mode the remote's manifest gives",
                c.path
            )));
        }
    }
    // What the copy holds now (the baseline, or earlier turns' results) to the result.
    let now = stage_within(baseline, max_bytes)?;
    let steps = changes_between(baseline, &now, &after_tree)?;
    let step_ids: Vec<&str> = steps.iter().filter_map(|c| c.new_blob.as_deref()).collect();
    let mut step_blobs = baseline.blobs(&step_ids)?.into_iter();
    let held = Root::open(baseline.copy())
        .map_err(|e| Error::caused_by(ErrorCode::CopyUnavailable, "the copy", e))?;
    let mut plan: Vec<Step<'_>> = Vec::new();
    for c in &steps {
        let after = match &c.new_blob {
            Some(_) => Some((
                step_blobs
                    .next()
                    .ok_or_else(|| Error::internal("a blob is missing"))?,
                c.mode == Some(0o755),
            )),
            None => None,
        };
        let before = match &c.old_blob {
            Some(_) => Some(read_with_mode(&held, &c.path)?),
            None => None,
        };
        plan.push((c, after, before));
    }
    let applied = write_plan(&held, &plan).and_then(|()| {
        if stage_within(baseline, max_bytes)? != after_tree {
            return Err(protocol(
                "the copy does not hold the patch's result after it was written".into(),
            ));
        }
        for p in &expected.post_state {
            let on_disk = match read_with_mode(&held, &p.path) {
                Ok((b, x)) => Some((sha256_hex(&b), x)),
                Err(_) if held.kind(Path::new(&p.path)).ok().flatten().is_none() => None,
                Err(e) => return Err(e),
            };
            let want = p.sha256.clone().map(|h| (h, p.executable));
            if on_disk != want {
                return Err(protocol(format!(
                    "{}: the copy's file does not match the remote's manifest after the patch",
                    p.path
                )));
            }
        }
        Ok(())
    });
    if let Err(e) = applied {
        restore(&held, &plan);
        tracing::warn!(error = %e, "the remote's patch was refused; the copy is back as it was");
        return Err(if e.code == ErrorCode::RemoteProtocolError {
            e
        } else {
            protocol(format!(
                "the remote's patch could not be applied: {}",
                e.message
            ))
        });
    }
    Ok(changes)
}

/// Stages the copy within `max_bytes` (`staged_size`): a file in it an agent's process made or
/// grew (an earlier local turn's) costs the baseline no more than the transfer bound. Past
/// it, `COPY_TOO_LARGE`, nothing staged or applied. The number of changed files is bounded by
/// the transfers that brought them, not here.
fn stage_within(baseline: &Baseline, max_bytes: u64) -> Result<String, Error> {
    let limits = CopyLimits {
        max_files: usize::MAX,
        max_bytes,
        max_changed_files: usize::MAX,
    };
    crate::staged_size::stage_tree_within(baseline, &limits).map_err(|e| {
        if e.code == ErrorCode::ChangeLimitExceeded {
            Error::caused_by(
                ErrorCode::CopyTooLarge,
                format!(
                    "the local copy's changes grew past {max_bytes} bytes, the transfer bound, as they were staged; nothing was applied"
                ),
                e,
            )
        } else {
            e
        }
    })
}

/// The tree `patch` leads to from `before`, applied to a scratch index (`git apply
/// --cached`), never to the copy. Git refuses a patch path outside the tree and one beyond
/// a symbolic link. No allocation of git's may pass twice `max_bytes` and a mebibyte (room
/// for the patch itself): a file the patch would make larger fails git, not the machine.
fn tree_after(
    baseline: &Baseline,
    before: &str,
    patch: &[u8],
    max_bytes: u64,
) -> Result<String, Error> {
    let scratch = crate::changes::scratch_index(baseline)?;
    let git = baseline
        .git()
        .with_index(scratch.path())
        .with_alloc_limit(max_bytes.saturating_mul(2).saturating_add(1 << 20));
    git.run(&["read-tree", before])?;
    if !patch.is_empty() {
        git.run_input(
            &["apply", "--cached", "--binary", "--whitespace=nowarn", "-"],
            Some(patch),
        )
        .map_err(|e| protocol(format!("the remote's patch does not apply: {}", e.message)))?;
    }
    let tree = git.run(&["write-tree"])?;
    Ok(String::from_utf8_lossy(&tree).trim().to_string())
}

/// The bytes and executable bit of the file `path` beneath `held`, read without following
/// a link.
fn read_with_mode(held: &Root, path: &str) -> Result<(Vec<u8>, bool), Error> {
    use std::io::Read;
    let (mut file, _) = held
        .open_file(Path::new(path))
        .map_err(|e| beneath_error(path, &e))?;
    let meta = file.metadata().map_err(|e| {
        Error::caused_by(
            ErrorCode::Internal,
            format!("{path} could not be measured"),
            e,
        )
    })?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).map_err(|e| {
        Error::caused_by(ErrorCode::Internal, format!("{path} could not be read"), e)
    })?;
    Ok((bytes, meta.permissions().mode() & 0o111 != 0))
}

fn write_plan(held: &Root, plan: &[Step<'_>]) -> Result<(), Error> {
    for (c, after, _) in plan {
        match after {
            Some((bytes, executable)) => write_file(held, &c.path, bytes, *executable)?,
            None => remove_file(held, &c.path)?,
        }
    }
    Ok(())
}

/// Puts every path of `plan` back as it was; what cannot be put back is logged (the copy
/// then fails its next preview, which is checked against the same baseline).
fn restore(held: &Root, plan: &[Step<'_>]) {
    for (c, _, before) in plan {
        let put = match before {
            Some((bytes, executable)) => write_file(held, &c.path, bytes, *executable),
            None => remove_file(held, &c.path),
        };
        if let Err(e) = put {
            tracing::error!(path = %c.path, error = %e, "a path of the copy could not be put back");
        }
    }
}
