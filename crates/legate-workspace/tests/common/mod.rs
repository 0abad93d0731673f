//! What the copy tests share: git run as a test user, a fresh project, and ways to look at
//! what a copy holds.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use legate_workspace::*;
use sha1::{Digest, Sha1};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Runs git in `dir` with `envs`, as a test user with no global or system config; its
/// stdout. Fails the test when git fails.
pub fn git_in(dir: &Path, envs: &[(&str, &Path)], args: &[&str]) -> Vec<u8> {
    let mut cmd = Command::new("git");
    cmd.arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

/// [`git_in`] without extra environment.
pub fn git(dir: &Path, args: &[&str]) -> Vec<u8> {
    git_in(dir, &[], args)
}

/// The object id git gives `bytes` as a blob.
pub fn blob_id(bytes: &[u8]) -> String {
    let mut h = Sha1::new();
    h.update(format!("blob {}\0", bytes.len()).as_bytes());
    h.update(bytes);
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// Writes `bytes` at the relative `path` under `root`, making its directories.
pub fn write(root: &Path, path: &str, bytes: &[u8]) {
    let full = root.join(path);
    fs::create_dir_all(full.parent().unwrap()).unwrap();
    fs::write(full, bytes).unwrap();
}

/// Every file under `root` (relative paths, sorted), `.git` left out.
pub fn files_under(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.file_name().unwrap() == ".git" {
                continue;
            }
            if p.is_dir() {
                dirs.push(p);
            } else {
                out.push(p.strip_prefix(root).unwrap().to_str().unwrap().to_string());
            }
        }
    }
    out.sort();
    out
}

/// A git project in a temporary directory, and a Legate home beside it.
pub struct Fixture {
    _tmp: tempfile::TempDir,
    pub project: PathBuf,
    pub home: PathBuf,
}

impl Fixture {
    /// A new repository holding `files` (not committed).
    pub fn new(files: &[(&str, &[u8])]) -> Self {
        Self::new_in(&std::env::temp_dir(), files)
    }

    /// [`Fixture::new`] in a new directory under `dir` (a given file system).
    pub fn new_in(dir: &Path, files: &[(&str, &[u8])]) -> Self {
        let tmp = tempfile::tempdir_in(dir).unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let project = base.join("project");
        fs::create_dir_all(&project).unwrap();
        git(&project, &["init", "-q"]);
        for (p, bytes) in files {
            write(&project, p, bytes);
        }
        Self {
            _tmp: tmp,
            project,
            home: base.join("home"),
        }
    }

    pub fn commit_all(&self) {
        git(&self.project, &["add", "-A"]);
        git(&self.project, &["commit", "-q", "-m", "init"]);
    }

    /// The project's selection under the default patterns and limits.
    pub fn select(&self, include: &[&str]) -> Result<Selection, legate_core::Error> {
        let include: Vec<String> = include.iter().map(|s| s.to_string()).collect();
        select(
            &self.project,
            &include,
            &SecretPatterns::default(),
            &CopyLimits::default(),
        )
    }

    /// Copies the project as the engine does (the baseline made with the copy), as task
    /// `name`.
    pub fn copy_as(&self, name: &str, include: &[&str]) -> (CopyReport, Baseline) {
        let limits = CopyLimits::default();
        let sel = self.select(include).unwrap();
        make_copy_with_baseline(
            &sel,
            &self.home.join("copies").join(name),
            &self.home.join("baselines").join(name),
            &limits,
        )
        .unwrap()
    }

    /// [`Fixture::copy_as`] task `t1`.
    pub fn copy(&self, include: &[&str]) -> (CopyReport, Baseline) {
        self.copy_as("t1", include)
    }
}

/// A sparse file of `len` bytes at `path`: what a hostile agent makes for no disk.
pub fn sparse(path: &Path, len: u64) {
    fs::File::create(path).unwrap().set_len(len).unwrap();
}

/// The bytes of the files under `dir`, by their sizes.
pub fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        total += if meta.is_dir() {
            bytes_under(&entry.path())
        } else {
            meta.len()
        };
    }
    total
}
