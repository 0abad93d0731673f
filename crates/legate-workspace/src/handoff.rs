//! Handing a copy on: the selection of a copy's current files, their `treeSha256`, and a
//! new copy of those files that keeps the original project's baseline.
//!
//! A handoff gives the next role an independent copy of what the previous role left (its
//! uncommitted changes included) whose private baseline is the *original* project's, so the
//! patch keeps accumulating against the original and integration still checks the project
//! against what the first copy was made from. The new baseline also remembers the tree it
//! was handed (`refs/legate/start`), which the read-only check compares a planner's or
//! reviewer's copy against (see `patch::read_only_changes`).
//!
//! The selection follows the same rules as a project's (`select`): what git sees through the
//! copy's baseline (tracked files plus untracked files no ignore rule excludes), no symlink,
//! no unsafe name, no secret name, within the copy limits; content is scanned again when the
//! new copy is made. It must never follow a symlink, read outside the copy, change the source
//! copy or its baseline, or make the new baseline depend on the source's (its objects are
//! copied, so discarding the source copy leaves the new one whole).

use crate::baseline::Baseline;
use crate::copy::{CopyReport, make_copy};
use crate::git_index::{OID_LEN, Oid};
use crate::limits::CopyLimits;
use crate::read_inside::read_inside;
use crate::secrets::SecretPatterns;
use crate::select::{Selection, select_in};
use legate_core::{Error, ErrorCode};
use sha2::{Digest, Sha256};
use std::fs;
use std::path::{Path, PathBuf};

/// The ref in a handed-off copy's baseline naming the tree the copy was handed.
pub const START_REF: &str = "refs/legate/start";

/// The files of the copy behind `baseline` that a handoff would carry (see the module docs).
///
/// Errors: `COPY_LIMIT_EXCEEDED` past the limits; `COPY_UNAVAILABLE` when the copy is gone.
pub fn copy_selection(
    baseline: &Baseline,
    secrets: &SecretPatterns,
    limits: &CopyLimits,
) -> Result<Selection, Error> {
    let root = fs::canonicalize(baseline.copy()).map_err(|e| {
        Error::caused_by(
            ErrorCode::CopyUnavailable,
            format!("the copy {} cannot be resolved", baseline.copy().display()),
            e,
        )
    })?;
    select_in(&baseline.git(), root, &[], secrets, limits)
}

/// The sha256 of `selection`'s files as they are now: for each file in path order, its path,
/// whether it is executable, its length and its bytes, each read beneath the root without
/// following a link; a file the copy's content scan would leave out is left out here too, so
/// the hash of a source copy and of the copy handed on from it agree. The bytes read are
/// bounded by the copy limit again.
///
/// Errors: `SOURCE_CHANGED` when a selected file vanished, `COPY_LIMIT_EXCEEDED` when the
/// files grew past the limit while read, `UNSAFE_PATH` for a link on the way.
pub fn tree_sha256(selection: &Selection, limits: &CopyLimits) -> Result<String, Error> {
    let mut hash = Sha256::new();
    let mut total = 0u64;
    for f in &selection.files {
        let left = limits.max_bytes.saturating_sub(total);
        let bytes = read_inside(&selection.root, &f.path, left)?.ok_or_else(|| {
            Error::new(
                ErrorCode::SourceChanged,
                format!("{} vanished while the copy was hashed", f.path),
            )
        })?;
        total = total.saturating_add(bytes.len() as u64);
        if total > limits.max_bytes {
            return Err(Error::new(
                ErrorCode::CopyLimitExceeded,
                format!(
                    "the copy grew past {} bytes while it was hashed",
                    limits.max_bytes
                ),
            ));
        }
        // A file the content scan blocks is never carried, so it is not part of the tree.
        if crate::secrets::scan_selected(f.pending_rule, &bytes).is_some() {
            continue;
        }
        let executable = f.mode & 0o111 != 0;
        hash.update((f.path.len() as u64).to_be_bytes());
        hash.update(f.path.as_bytes());
        hash.update([u8::from(executable)]);
        hash.update((bytes.len() as u64).to_be_bytes());
        hash.update(&bytes);
    }
    Ok(hash.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Copies `selection` (from [`copy_selection`] of `from`) into `copy_dir` and makes its
/// baseline in `baseline_dir` (neither may exist yet) as `from`'s original baseline: same
/// commit tree, same borrowed project objects, `from`'s own objects copied. The new
/// baseline's `refs/legate/start` names the tree of the new copy as handed. On any error
/// neither directory is left.
///
/// `BLOCKED_FILE_DETECTED`, naming them, when the files handed on add or change any file an
/// agent loads as its own instructions or settings (`agent_files`) against the original
/// project: the next agent would follow an earlier agent's instructions, or run its hooks,
/// before anyone reviewed them.
pub fn make_handoff_copy(
    from: &Baseline,
    selection: &Selection,
    copy_dir: &Path,
    baseline_dir: &Path,
    limits: &CopyLimits,
) -> Result<(CopyReport, Baseline), Error> {
    let report = make_copy(selection, copy_dir, limits)?;
    let made = (|| {
        let copy = crate::copy::resolve_copy_dir(copy_dir)?;
        let from_objects = from.git_dir().join("objects");
        let borrow = alternates(&from_objects)?;
        let baseline = Baseline::init(baseline_dir, &copy, borrow)?;
        let kept = (|| {
            copy_objects(&from_objects, &baseline.git_dir().join("objects"))?;
            let tree = from.git().run(&["rev-parse", "--verify", "HEAD^{tree}"])?;
            let tree = String::from_utf8_lossy(&tree).trim().to_string();
            let oid = parse_oid(&tree)?;
            baseline.git().run(&["read-tree", &tree])?;
            baseline.commit_tree(&oid)?;
            let start = crate::changes::stage_tree(&baseline)?;
            refuse_agent_files(&baseline, &tree, &start)?;
            let start_commit = crate::git_objects::write_commit(
                &baseline.git_dir().join("objects"),
                &parse_oid(&start)?,
            )?;
            baseline.git().run(&[
                "update-ref",
                START_REF,
                &crate::git_objects::hex(&start_commit),
            ])?;
            Ok(())
        })();
        match kept {
            Ok(()) => Ok(baseline),
            Err(e) => {
                let _ = fs::remove_dir_all(baseline.dir());
                Err(e)
            }
        }
    })();
    match made {
        Ok(baseline) => Ok((report, baseline)),
        Err(e) => {
            let _ = fs::remove_dir_all(copy_dir);
            Err(e)
        }
    }
}

/// `BLOCKED_FILE_DETECTED` when the tree `handed` adds, changes or deletes, against the
/// original tree `original`, a file agents load as their own instructions or settings (a
/// deleted one may be the project's guard: a hook that refuses, a rule that restricts).
fn refuse_agent_files(baseline: &Baseline, original: &str, handed: &str) -> Result<(), Error> {
    let out = baseline.git().run(&[
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--name-only",
        "--diff-filter=ADMT",
        original,
        handed,
    ])?;
    let found: Vec<String> = out
        .split(|b| *b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .filter(|p| crate::agent_files::is_agent_file(p))
        .collect();
    if found.is_empty() {
        return Ok(());
    }
    let shown: Vec<&str> = found.iter().take(5).map(String::as_str).collect();
    let more = found.len().saturating_sub(shown.len());
    Err(Error::new(
        ErrorCode::BlockedFileDetected,
        format!(
            "an earlier agent added, changed or deleted {}{}, which the next agent would load as its own instructions or settings before anyone reviewed them; review the patch and integrate it, or have the copy's task restore them, then hand it on",
            shown.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ),
    ))
}

/// The object directory `objects` borrows from (its first alternate), if any.
fn alternates(objects: &Path) -> Result<Option<PathBuf>, Error> {
    match fs::read(objects.join("info/alternates")) {
        Ok(bytes) => Ok(bytes
            .split(|b| *b == b'\n')
            .find(|l| !l.is_empty())
            .map(|l| {
                use std::os::unix::ffi::OsStrExt;
                PathBuf::from(std::ffi::OsStr::from_bytes(l))
            })),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::internal(format!(
            "the baseline's alternates could not be read: {e}"
        ))),
    }
}

/// Copies the loose objects and packs of `from` into `to` (both object directories Legate
/// owns). Only plain files are copied; objects are immutable, so a copy is always whole.
fn copy_objects(from: &Path, to: &Path) -> Result<(), Error> {
    let fail = |e: std::io::Error| {
        Error::internal(format!("the baseline's objects could not be copied: {e}"))
    };
    for entry in fs::read_dir(from).map_err(fail)? {
        let entry = entry.map_err(fail)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let is_fanout = name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit());
        if !(is_fanout || name == "pack") || !entry.file_type().map_err(fail)?.is_dir() {
            continue;
        }
        let target = to.join(&*name);
        fs::create_dir_all(&target).map_err(fail)?;
        for file in fs::read_dir(entry.path()).map_err(fail)? {
            let file = file.map_err(fail)?;
            if file.file_type().map_err(fail)?.is_file() {
                fs::copy(file.path(), target.join(file.file_name())).map_err(fail)?;
            }
        }
    }
    Ok(())
}

fn parse_oid(hex: &str) -> Result<Oid, Error> {
    let bad = || Error::internal(format!("git answered {hex:?}, not a SHA-1 object id"));
    if hex.len() != 2 * OID_LEN {
        return Err(bad());
    }
    let mut oid = [0u8; OID_LEN];
    for (i, byte) in oid.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(oid)
}
