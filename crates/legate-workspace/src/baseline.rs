//! The private baseline: a git repository outside the copy that remembers the copy's bytes
//! as they were handed to the agent.
//!
//! This module owns making and opening it under `$LEGATE_HOME/baselines/<task>/`: `git/` is
//! the repository (its work tree is the copy), `home/` an empty private `HOME` for git,
//! `lock` the file whose lock serializes operations on one copy, and `clock` the
//! file whose change time a stamp of the copy reads (`stamp`). Git runs isolated (see
//! `git`); `info/attributes` unsets `text`, `eol`, `filter`, `ident` and
//! `working-tree-encoding` for every path, so a project's `.gitattributes` can never convert
//! bytes; `info/exclude` leaves the skills staging directory out of every patch.
//!
//! To make it fast, a baseline may borrow the source repository's objects
//! ([`Baseline::create_from`], and the copy's own staging in `staging`):
//! `objects/info/alternates` names the source's object directory, so an object is written
//! only for what the source lacks (untracked and modified files); a tracked file the source's
//! index shows clean is not even hashed (see `staging`). The borrowing adds nothing to the
//! source (new objects go to the baseline's own store), and is only done when the source is a
//! SHA-1 repository. It makes the baseline depend on the source keeping those objects:
//! `git gc` keeps unreachable objects two weeks by default (`gc.pruneExpire`), longer than a
//! copy's default retention of a week; a `git gc --prune=now` after the source's history was
//! rewritten or a staged change dropped, or deleting the repository, leaves the baseline
//! unable to answer (an internal error names the missing object; nothing is integrated).
//!
//! It must never live inside the copy (the agent could reach it), run a hook, or read the
//! user's git configuration.

use crate::git::Git;
use crate::git_index::{OID_LEN, Oid};
use crate::git_objects;
use crate::private_dir;
use legate_core::{Error, ErrorCode};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// How long taking a copy's lock waits before `COPY_BUSY`.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Attributes that make git treat every file as bytes.
const ATTRIBUTES: &str = "* -text -eol -filter -ident -working-tree-encoding\n";

/// The baseline's own attributes for a git of `version`: [`ATTRIBUTES`], and where the
/// baseline's git cannot read attributes from its commit (`attr.tree`, before git 2.43),
/// `diff` unset for every file too: the copy's work tree, where the agent writes, would
/// otherwise choose which files diff as binary (`* -diff` hides every edit). On such a git
/// a file marked `binary` in the project diffs by its bytes.
fn attributes_for(version: Option<(u32, u32)>) -> String {
    if version.is_some_and(|v| v >= crate::git_check::ATTR_TREE_VERSION) {
        ATTRIBUTES.to_string()
    } else {
        format!("{ATTRIBUTES}* !diff\n")
    }
}

/// What git leaves out of every copy's patch, whatever the project's own ignore files say:
/// the skills staging directory, in every letter case, as a file or a directory (see
/// `skills`), and the two files Legate stages for agy's tool controls, `.agents/hooks.json`
/// and `.agents/mcp_config.json` (`legate_backend::agy::staging`). A file the project tracks there stays tracked; nothing new there is ever
/// staged, so neither a staged skill, nor the agent's change to one, nor a file the agent
/// adds there reaches a preview, a patch or an integration.
pub(crate) const EXCLUDE: &str = "/.[aA][gG][eE][nN][tT][sS]/[sS][kK][iI][lL][lL][sS]\n\
/.[aA][gG][eE][nN][tT][sS]/[hH][oO][oO][kK][sS].[jJ][sS][oO][nN]\n\
/.[aA][gG][eE][nN][tT][sS]/[mM][cC][pP]_[cC][oO][nN][fF][iI][gG].[jJ][sS][oO][nN]\n";

/// `INVALID_WORKSPACE`: the baseline in `dir` could not `what`.
fn init_failed(dir: &Path, what: &str, e: std::io::Error) -> Error {
    let message = format!("the baseline {} could not {what}", dir.display());
    Error::caused_by(ErrorCode::InvalidWorkspace, message, e)
}

/// A copy's private baseline.
#[derive(Debug, Clone)]
pub struct Baseline {
    dir: PathBuf,
    copy: PathBuf,
}

impl Baseline {
    /// Makes the baseline of `copy` in `dir`, which must not exist yet (its parent is made
    /// 0700 when missing): init, stage every file of the copy, one commit. Self-contained:
    /// every object is written into the baseline.
    pub fn create(dir: &Path, copy: &Path) -> Result<Baseline, Error> {
        Self::make(dir, copy, None)
    }

    /// Like [`Baseline::create`], borrowing the objects of the git project at `source` (the
    /// project the copy was made from) so that only files it lacks are written (see the
    /// module docs). When the source's object directory cannot be found, or the source is not
    /// a SHA-1 repository, the baseline is made self-contained instead.
    pub fn create_from(dir: &Path, copy: &Path, source: &Path) -> Result<Baseline, Error> {
        Self::make(dir, copy, source_repo(source).map(|s| s.objects))
    }

    fn make(dir: &Path, copy: &Path, borrow: Option<PathBuf>) -> Result<Baseline, Error> {
        let b = Self::init(dir, copy, borrow)?;
        let made = b.git().run(&["add", "--all"]).and_then(|_| b.commit());
        match made {
            Ok(()) => Ok(b),
            Err(e) => {
                let _ = fs::remove_dir_all(&b.dir);
                Err(e)
            }
        }
    }

    /// Makes the repository in `dir` (which must not exist yet; its parent is made 0700 when
    /// missing), its private home and attributes, and borrows `borrow`'s objects. Nothing is
    /// staged yet. On error nothing is left.
    pub(crate) fn init(
        dir: &Path,
        copy: &Path,
        borrow: Option<PathBuf>,
    ) -> Result<Baseline, Error> {
        if let Some(parent) = dir.parent() {
            private_dir(parent)?;
        }
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| init_failed(dir, "be created", e))?;
        let made = Self::init_in(dir, copy, borrow);
        if made.is_err() {
            let _ = fs::remove_dir_all(dir);
        }
        made
    }

    /// [`Baseline::init`] in `dir`, which exists and is empty (a project's base makes it a
    /// subvolume first). On error what it made in `dir` may be left: the caller removes it.
    pub(crate) fn init_in(
        dir: &Path,
        copy: &Path,
        borrow: Option<PathBuf>,
    ) -> Result<Baseline, Error> {
        let fail = |what: &str, e: std::io::Error| init_failed(dir, what, e);
        let dir = fs::canonicalize(dir).map_err(|e| fail("be resolved", e))?;
        let b = Baseline {
            dir,
            copy: copy.to_path_buf(),
        };
        fs::DirBuilder::new()
            .mode(0o700)
            .create(b.home())
            .map_err(|e| fail("get its home", e))?;
        // No template: nothing but what git needs (no sample hooks, no description).
        b.git().run(&["init", "--quiet", "--template="])?;
        let info = b.git_dir().join("info");
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&info)
            .map_err(|e| fail("get info/", e))?;
        let attributes = attributes_for(crate::git_check::git_version());
        fs::write(info.join("attributes"), attributes)
            .map_err(|e| fail("write its attributes", e))?;
        fs::write(info.join("exclude"), EXCLUDE).map_err(|e| fail("write its excludes", e))?;
        if let Some(objects) = &borrow {
            let mut line = objects.as_os_str().as_encoded_bytes().to_vec();
            line.push(b'\n');
            fs::write(b.git_dir().join("objects/info/alternates"), line)
                .map_err(|e| fail("borrow the source's objects", e))?;
        }
        Ok(b)
    }

    /// Writes the baseline commit of `tree` (already written) and points the new branch at
    /// it; `git update-ref` refuses when the branch already exists.
    pub(crate) fn commit_tree(&self, tree: &Oid) -> Result<(), Error> {
        let commit = git_objects::write_commit(&self.git_dir().join("objects"), tree)?;
        self.git().run(&[
            "update-ref",
            "HEAD",
            &git_objects::hex(&commit),
            &"0".repeat(2 * OID_LEN),
        ])?;
        Ok(())
    }

    /// Commits what is staged: the baseline commit.
    fn commit(&self) -> Result<(), Error> {
        self.git().run(&[
            "commit",
            "--quiet",
            "--allow-empty",
            "--no-verify",
            "--no-gpg-sign",
            "-m",
            "baseline",
        ])?;
        Ok(())
    }

    /// Opens an existing baseline; `COPY_UNAVAILABLE` when `dir` or `copy` is gone or is not
    /// a plain directory, `GIT_CLEANUP_UNVERIFIED` while a git process of the copy could not
    /// be shown gone (see `git_run`).
    pub fn open(dir: &Path, copy: &Path) -> Result<Baseline, Error> {
        for (what, d) in [("baseline", dir), ("copy", copy)] {
            let ok = fs::symlink_metadata(d)
                .map(|m| m.file_type().is_dir())
                .unwrap_or(false);
            if !ok {
                return Err(Error::new(
                    ErrorCode::CopyUnavailable,
                    format!(
                        "the {what} {} is gone (discarded or cleaned up)",
                        d.display()
                    ),
                ));
            }
        }
        crate::git_run::check_unblocked(dir)?;
        let b = Baseline {
            dir: dir.to_path_buf(),
            copy: copy.to_path_buf(),
        };
        if !b.git_dir().join("HEAD").is_file() {
            return Err(Error::new(
                ErrorCode::CopyUnavailable,
                format!("the baseline {} has no repository", dir.display()),
            ));
        }
        Ok(b)
    }

    /// The baseline directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The copy it belongs to.
    pub fn copy(&self) -> &Path {
        &self.copy
    }

    /// The private repository.
    pub fn git_dir(&self) -> PathBuf {
        self.dir.join("git")
    }

    fn home(&self) -> PathBuf {
        self.dir.join("home")
    }

    /// A private scratch directory for tests run in this copy, emptied first.
    pub fn scratch(&self) -> Result<PathBuf, Error> {
        let s = self.dir.join("scratch");
        if fs::symlink_metadata(&s).is_ok() {
            fs::remove_dir_all(&s).map_err(|e| {
                Error::caused_by(
                    ErrorCode::Internal,
                    "the scratch directory could not be emptied",
                    e,
                )
            })?;
        }
        fs::DirBuilder::new().mode(0o700).create(&s).map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                "the scratch directory could not be made",
                e,
            )
        })?;
        Ok(s)
    }

    /// Git run on the private baseline, with the copy as its work tree.
    pub fn git(&self) -> Git {
        Git::private(&self.git_dir(), &self.copy, &self.home())
    }

    /// Takes this copy's lock, waiting at most two seconds; `COPY_BUSY` when another operation
    /// holds it longer, `GIT_CLEANUP_UNVERIFIED` once the copy is blocked (checked again under
    /// the lock, as the operation that held it may have blocked it).
    /// The lock is released when the returned file is dropped (or the process dies).
    pub fn lock(&self) -> Result<File, Error> {
        let f = self.lock_file()?;
        // A short grace: an operation that just ended may still be letting go.
        let deadline = std::time::Instant::now() + LOCK_GRACE;
        loop {
            match f.try_lock() {
                Ok(()) => return crate::git_run::check_unblocked(&self.dir).map(|()| f),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                Err(std::fs::TryLockError::WouldBlock) => {
                    return Err(Error::new(
                        ErrorCode::CopyBusy,
                        "another operation (a test, a verification or an integration) is using this copy; try again when it ends",
                    ));
                }
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(Error::internal(format!("the copy's lock failed: {e}")));
                }
            }
        }
    }

    /// Takes this copy's lock if no operation holds it, without waiting: `None` when one
    /// does, `GIT_CLEANUP_UNVERIFIED` once the copy is blocked. For a caller that passes a
    /// busy copy by (retention) rather than waiting for it.
    pub fn try_lock(&self) -> Result<Option<File>, Error> {
        let f = self.lock_file()?;
        match f.try_lock() {
            Ok(()) => crate::git_run::check_unblocked(&self.dir).map(|()| Some(f)),
            Err(std::fs::TryLockError::WouldBlock) => Ok(None),
            Err(std::fs::TryLockError::Error(e)) => Err(Error::caused_by(
                ErrorCode::Internal,
                "the copy's lock failed",
                e,
            )),
        }
    }

    /// The copy's lock file, made if missing.
    fn lock_file(&self) -> Result<File, Error> {
        OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join("lock"))
            .map_err(|e| {
                Error::caused_by(
                    ErrorCode::Internal,
                    "the copy's lock could not be opened",
                    e,
                )
            })
    }

    /// The sizes of blobs by id, in order, as git gives them (`cat-file --batch-check`),
    /// nothing read; an id the baseline lacks is an error.
    pub fn blob_sizes(&self, ids: &[&str]) -> Result<Vec<u64>, Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let input: Vec<u8> = ids
            .iter()
            .flat_map(|id| format!("{id}\n").into_bytes())
            .collect();
        let out = self
            .git()
            .run_input(&["cat-file", "--batch-check=%(objectsize)"], Some(&input))?;
        let sizes: Vec<u64> = String::from_utf8_lossy(&out)
            .lines()
            .map(|line| {
                line.trim()
                    .parse()
                    .map_err(|_| Error::internal(format!("unexpected cat-file line {line:?}")))
            })
            .collect::<Result<_, _>>()?;
        if sizes.len() != ids.len() {
            return Err(Error::internal(
                "git cat-file answered another number of sizes",
            ));
        }
        Ok(sizes)
    }

    /// The contents of blobs by id, in order (`git cat-file --batch`).
    pub fn blobs(&self, ids: &[&str]) -> Result<Vec<Vec<u8>>, Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut child = self.git().spawn_piped(&["cat-file", "--batch"], false)?;
        let input: Vec<u8> = ids
            .iter()
            .flat_map(|id| format!("{id}\n").into_bytes())
            .collect();
        let mut stdin = child
            .stdin
            .take()
            .ok_or_else(|| Error::internal("git cat-file has no stdin"))?;
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&input);
        });
        let stdout = child
            .stdout
            .take()
            .ok_or_else(|| Error::internal("git cat-file has no stdout"))?;
        let mut reader = BufReader::new(stdout);
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let mut header = String::new();
            reader
                .read_line(&mut header)
                .map_err(|e| Error::caused_by(ErrorCode::Internal, "git cat-file failed", e))?;
            let size: usize = header
                .trim_end()
                .rsplit(' ')
                .next()
                .and_then(|s| s.parse().ok())
                .filter(|_| !header.ends_with(" missing\n"))
                .ok_or_else(|| Error::internal(format!("the baseline lacks the object {id}")))?;
            let mut body = vec![0u8; size + 1];
            reader
                .read_exact(&mut body)
                .map_err(|e| Error::caused_by(ErrorCode::Internal, "git cat-file failed", e))?;
            body.truncate(size);
            out.push(body);
        }
        let _ = writer.join();
        let _ = child.wait();
        Ok(out)
    }
}

/// Where a SHA-1 source repository keeps what a baseline borrows.
#[derive(Debug, Clone)]
pub(crate) struct SourceRepo {
    /// Its object directory, canonical, nameable in an alternates file (absolute, no
    /// newline).
    pub(crate) objects: PathBuf,
    /// Its index file (the work tree's own, for a linked worktree).
    pub(crate) index: PathBuf,
}

/// The object directory and index of the SHA-1 git project at `source` (one `git
/// rev-parse`); `None` when it is not a SHA-1 repository or its objects cannot be named in
/// an alternates file.
pub(crate) fn source_repo(source: &Path) -> Option<SourceRepo> {
    let out = Git::source(source)
        .run(&[
            "rev-parse",
            "--show-object-format",
            "--path-format=absolute",
            "--git-path",
            "objects",
            "--git-path",
            "index",
        ])
        .ok()?;
    let out = String::from_utf8(out).ok()?;
    let mut lines = out.lines();
    if lines.next() != Some("sha1") {
        return None;
    }
    let objects = fs::canonicalize(lines.next()?).ok()?;
    let index = PathBuf::from(lines.next()?);
    let ok = objects.is_absolute()
        && index.is_absolute()
        && !objects.as_os_str().as_encoded_bytes().contains(&b'\n')
        && fs::symlink_metadata(&objects)
            .map(|m| m.is_dir())
            .unwrap_or(false);
    ok.then_some(SourceRepo { objects, index })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_git_without_attr_tree_gets_diff_unset_for_every_file() {
        assert_eq!(attributes_for(Some((2, 43))), ATTRIBUTES);
        assert_eq!(attributes_for(Some((3, 0))), ATTRIBUTES);
        assert!(attributes_for(Some((2, 42))).ends_with("* !diff\n"));
        assert!(attributes_for(None).ends_with("* !diff\n"));
    }
}
