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
    /// 0700 when missing): init, stage every file of the copy, one commit.
    pub fn create(dir: &Path, copy: &Path) -> Result<Baseline, Error> {
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
            let git = b.git();
            git.run(&["init", "--quiet"])?;
            let info = b.git_dir().join("info");
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&info)
                .map_err(|e| fail("get info/", e))?;
            fs::write(info.join("attributes"), ATTRIBUTES)
                .map_err(|e| fail("write its attributes", e))?;
            git.run(&["add", "--all"])?;
            git.run(&[
                "commit",
                "--quiet",
                "--allow-empty",
                "--no-verify",
                "--no-gpg-sign",
                "-m",
                "baseline",
            ])?;
            Ok(b)
        })();
        if made.is_err() {
            let _ = fs::remove_dir_all(dir);
        }
        made
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
