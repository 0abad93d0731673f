//! The private baseline: a git repository outside the copy that remembers the copy's bytes
//! as they were handed to the agent.
//!
//! This module owns making and opening it under `$LEGATE_HOME/baselines/<task>/`: `git/` is
//! the repository (its work tree is the copy), `home/` an empty private `HOME` for git, and
//! `lock` the file whose lock serializes operations on one copy. Git runs isolated (see
//! `git`); `info/attributes` unsets `text`, `eol`, `filter`, `ident` and
//! `working-tree-encoding` for every path, so a project's `.gitattributes` can never convert
//! bytes.
//!
//! To make it fast, a baseline may borrow the source repository's objects
//! ([`Baseline::create_from`]): `objects/info/alternates` names the source's object directory,
//! so staging the copy hashes each file but writes an object only for what the source lacks
//! (untracked and modified files); tracked, unchanged files cost no write. The borrowing is
//! read-only (new objects go to the baseline's own store), and is only done when the source
//! is a SHA-1 repository. It makes the baseline depend on the source keeping those objects:
//! `git gc` keeps unreachable objects two weeks by default (`gc.pruneExpire`), longer than a
//! copy's default retention of a week; a `git gc --prune=now` after the source's history was
//! rewritten or a staged change dropped, or deleting the repository, leaves the baseline
//! unable to answer (an internal error names the missing object; nothing is integrated).
//!
//! It must never live inside the copy (the agent could reach it), run a hook, or read the
//! user's git configuration.

use crate::git::Git;
use crate::private_dir;
use legate_core::{Error, ErrorCode};
use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// How long taking a copy's lock waits before `COPY_BUSY`.
const LOCK_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// Attributes that make git treat every file as bytes.
const ATTRIBUTES: &str = "* -text -eol -filter -ident -working-tree-encoding\n";

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
        Self::make(dir, copy, source_objects(source))
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
        let fail = |what: &str, e: std::io::Error| {
            Error::new(
                ErrorCode::InvalidWorkspace,
                format!("the baseline {} could not {what}: {e}", dir.display()),
            )
        };
        fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .map_err(|e| fail("be created", e))?;
        let made = (|| {
            let dir = fs::canonicalize(dir).map_err(|e| fail("be resolved", e))?;
            let b = Baseline {
                dir,
                copy: copy.to_path_buf(),
            };
            fs::DirBuilder::new()
                .mode(0o700)
                .create(b.home())
                .map_err(|e| fail("get its home", e))?;
            b.git().run(&["init", "--quiet"])?;
            let info = b.git_dir().join("info");
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&info)
                .map_err(|e| fail("get info/", e))?;
            fs::write(info.join("attributes"), ATTRIBUTES)
                .map_err(|e| fail("write its attributes", e))?;
            if let Some(objects) = &borrow {
                let mut line = objects.as_os_str().as_encoded_bytes().to_vec();
                line.push(b'\n');
                fs::write(b.git_dir().join("objects/info/alternates"), line)
                    .map_err(|e| fail("borrow the source's objects", e))?;
            }
            Ok(b)
        })();
        if made.is_err() {
            let _ = fs::remove_dir_all(dir);
        }
        made
    }

    /// Commits what is staged: the baseline commit.
    pub(crate) fn commit(&self) -> Result<(), Error> {
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

    /// Starts staging files one by one while they are written (`git update-index --add -z
    /// --stdin`): git hashes each file as soon as its path arrives.
    pub(crate) fn stager(&self) -> Result<Stager, Error> {
        let mut cmd = self
            .git()
            .command(&["update-index", "--add", "-z", "--stdin"]);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::internal(format!("git update-index could not start: {e}")))?;
        let stdin = child.stdin.take();
        let stderr = child.stderr.take().map(|mut pipe| {
            std::thread::spawn(move || {
                let mut text = String::new();
                let _ = pipe.read_to_string(&mut text);
                text
            })
        });
        Ok(Stager {
            child,
            stdin,
            stderr,
        })
    }

    /// Opens an existing baseline; `COPY_UNAVAILABLE` when `dir` or `copy` is gone or is not
    /// a plain directory.
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
                Error::internal(format!("the scratch directory could not be emptied: {e}"))
            })?;
        }
        fs::DirBuilder::new().mode(0o700).create(&s).map_err(|e| {
            Error::internal(format!("the scratch directory could not be made: {e}"))
        })?;
        Ok(s)
    }

    pub(crate) fn git(&self) -> Git {
        Git::private(&self.git_dir(), &self.copy, &self.home())
    }

    /// Takes this copy's lock, waiting at most two seconds; `COPY_BUSY` when another operation
    /// holds it longer.
    /// The lock is released when the returned file is dropped (or the process dies).
    pub fn lock(&self) -> Result<File, Error> {
        let f = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(self.dir.join("lock"))
            .map_err(|e| Error::internal(format!("the copy's lock could not be opened: {e}")))?;
        // A short grace: an operation that just ended may still be letting go.
        let deadline = std::time::Instant::now() + LOCK_GRACE;
        loop {
            match f.try_lock() {
                Ok(()) => return Ok(f),
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

    /// The contents of blobs by id, in order (`git cat-file --batch`).
    pub(crate) fn blobs(&self, ids: &[&str]) -> Result<Vec<Vec<u8>>, Error> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd: Command = self.git().cat_file_command();
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd
            .spawn()
            .map_err(|e| Error::internal(format!("git cat-file could not start: {e}")))?;
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
                .map_err(|e| Error::internal(format!("git cat-file failed: {e}")))?;
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
                .map_err(|e| Error::internal(format!("git cat-file failed: {e}")))?;
            body.truncate(size);
            out.push(body);
        }
        let _ = writer.join();
        let _ = child.wait();
        Ok(out)
    }
}

/// Files being staged into a baseline as they are written.
#[derive(Debug)]
pub(crate) struct Stager {
    child: std::process::Child,
    stdin: Option<std::process::ChildStdin>,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Stager {
    /// Stages the file at the relative `path` of the copy (already written in full).
    pub(crate) fn add(&mut self, path: &str) -> Result<(), Error> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or_else(|| Error::internal("git update-index is closed"))?;
        stdin
            .write_all(path.as_bytes())
            .and_then(|()| stdin.write_all(b"\0"))
            .map_err(|e| Error::internal(format!("git update-index stopped reading: {e}")))
    }

    /// Waits for git to have staged everything.
    pub(crate) fn finish(mut self) -> Result<(), Error> {
        drop(self.stdin.take());
        let status = self
            .child
            .wait()
            .map_err(|e| Error::internal(format!("git update-index failed: {e}")))?;
        let stderr = self
            .stderr
            .take()
            .and_then(|h| h.join().ok())
            .unwrap_or_default();
        if !status.success() {
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            return Err(Error::internal(format!(
                "git update-index failed ({status}): {}",
                last.unwrap_or("no message")
            )));
        }
        Ok(())
    }
}

impl Drop for Stager {
    fn drop(&mut self) {
        if self.stdin.take().is_some() {
            // Not finished: an error on the way; stop git.
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// The canonical object directory of the SHA-1 git project at `source`, when it has one that
/// can be named in an alternates file (an absolute path without a newline).
pub(crate) fn source_objects(source: &Path) -> Option<PathBuf> {
    let git = Git::source(source);
    let format = git
        .run(&["rev-parse", "--show-object-format"])
        .ok()
        .map(|o| String::from_utf8_lossy(&o).trim().to_string());
    if format.as_deref() != Some("sha1") {
        return None;
    }
    let out = git
        .run(&[
            "rev-parse",
            "--path-format=absolute",
            "--git-path",
            "objects",
        ])
        .ok()?;
    let path = String::from_utf8(out).ok()?;
    let path = fs::canonicalize(path.trim_end_matches('\n')).ok()?;
    let ok = path.is_absolute()
        && !path.as_os_str().as_encoded_bytes().contains(&b'\n')
        && fs::symlink_metadata(&path)
            .map(|m| m.is_dir())
            .unwrap_or(false);
    ok.then_some(path)
}
