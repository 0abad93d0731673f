//! Running `git`, always as a tool Legate controls and never as the user's configured git.
//!
//! Two ways to run it:
//! - [`Git::source`] reads a project the user named (which files exist, which are ignored).
//!   It keeps the user's `HOME` so that every git ignore source (`.gitignore`,
//!   `.git/info/exclude`, `core.excludesFile`) is honoured, but it drops the system config,
//!   every `GIT_*` variable of Legate's own environment, hooks, fsmonitor (a repository's
//!   config can name a command there) and optional locks, so reading never writes or runs
//!   anything.
//! - [`Git::private`] runs on a private baseline under `$LEGATE_HOME`: no system or global
//!   config, `HOME` pointing at a private empty directory, no hooks, no fsmonitor, no
//!   autocrlf, a fixed identity and date, attributes read from the baseline's commit rather
//!   than the copy (git 2.43 and later). Files are bytes: line endings are never converted.
//!   Its `diff-tree` sees no index, so the blobs it compares are always read from the object
//!   store, never from the copy (git would trust the copy's files by stat data to the second).
//!
//! This module must never run git through a shell, inherit `GIT_DIR`/`GIT_WORK_TREE`/
//! `GIT_CONFIG_*` from Legate's environment, or let a repository's config choose a program.

use legate_core::{Error, ErrorCode};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// `-c` settings every invocation carries; command-line config beats every config file.
const SAFE_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.untrackedCache=false",
    "core.quotePath=false",
    "core.autocrlf=false",
    "core.safecrlf=false",
    "core.symlinks=true",
    "gc.auto=0",
    "maintenance.auto=false",
    "advice.detachedHead=false",
];

/// Extra `-c` settings for private baselines.
const PRIVATE_CONFIG: &[&str] = &[
    "user.name=Legate",
    "user.email=legate@localhost",
    "commit.gpgSign=false",
    "core.compression=0",
    "core.looseCompression=0",
    "core.fsync=none",
    "diff.renames=false",
    "diff.noprefix=false",
    "diff.mnemonicPrefix=false",
    "init.defaultBranch=baseline",
    // One whole index: staging counts its entries from the header (`changes`), which a split
    // or sparse index would not hold whole.
    "core.splitIndex=false",
    "index.sparse=false",
    // Attributes from the baseline's commit (git 2.43 and later), not from the copy's work
    // tree, where the agent writes: a `.gitattributes` of its own (`* -diff`, ignored by a
    // `.gitignore` that ignores itself too) would show its edits as binary in every preview.
    // A tree that does not resolve yet (a baseline being made) reads the work tree's; older
    // gits ignore the setting, and their baselines unset `diff` instead (`baseline`).
    "attr.tree=HEAD",
];

/// The index a baseline's `diff-tree` is given, in its git directory: a name no git and no
/// Legate step ever writes, so that git finds no index (`Git::tree_diff_index`).
const NO_INDEX: &str = "legate-no-index";

/// A fixed date for baseline commits, so a baseline's ids depend on its bytes alone.
const FIXED_DATE: &str = "2000-01-01T00:00:00Z";

/// How git is run. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Git {
    /// Where git runs (`-C`).
    cwd: PathBuf,
    /// `GIT_DIR`, for private baselines.
    git_dir: Option<PathBuf>,
    /// `GIT_WORK_TREE`, for private baselines.
    work_tree: Option<PathBuf>,
    /// `HOME` for private baselines; `None` keeps the user's.
    home: Option<PathBuf>,
    /// `GIT_INDEX_FILE`, when a scratch index is used.
    index: Option<PathBuf>,
    /// `GIT_FLUSH=0`: output is not flushed line by line (for batch commands read whole).
    buffered: bool,
    /// `GIT_ALLOC_LIMIT`: the largest allocation git may make (applying a hostile patch).
    alloc_limit: Option<u64>,
    /// `GIT_OBJECT_DIRECTORY` and, as its one alternate, the repository's own objects: new
    /// objects are written apart (a staging that may be refused), the old ones still read.
    objects: Option<(PathBuf, PathBuf)>,
}

impl Git {
    /// Git reading the user's project at `root`.
    pub(crate) fn source(root: &Path) -> Self {
        Self {
            cwd: root.to_path_buf(),
            git_dir: None,
            work_tree: None,
            home: None,
            index: None,
            buffered: false,
            alloc_limit: None,
            objects: None,
        }
    }

    /// Git on a private repository `git_dir` whose work tree is `work_tree`, with `home` as
    /// its (empty, private) `HOME`.
    pub(crate) fn private(git_dir: &Path, work_tree: &Path, home: &Path) -> Self {
        Self {
            cwd: work_tree.to_path_buf(),
            git_dir: Some(git_dir.to_path_buf()),
            work_tree: Some(work_tree.to_path_buf()),
            home: Some(home.to_path_buf()),
            index: None,
            buffered: false,
            alloc_limit: None,
            objects: None,
        }
    }

    /// The same git with its output buffered (`GIT_FLUSH=0`), for a batch command whose
    /// output is read only once it ends: no write per line.
    pub(crate) fn buffered(&self) -> Self {
        let mut g = self.clone();
        g.buffered = true;
        g
    }

    /// The same git on the work tree `dir` (run there too) instead of its own.
    pub(crate) fn with_work_tree(&self, dir: &Path) -> Self {
        let mut g = self.clone();
        g.cwd = dir.to_path_buf();
        g.work_tree = Some(dir.to_path_buf());
        g
    }

    /// The same git with `GIT_INDEX_FILE` pointing at `index`.
    pub(crate) fn with_index(&self, index: &Path) -> Self {
        let mut g = self.clone();
        g.index = Some(index.to_path_buf());
        g
    }

    /// Writing new objects into `new`, reading the old ones from `existing` (its alternate).
    pub(crate) fn with_objects_apart(&self, new: &Path, existing: &Path) -> Self {
        let mut g = self.clone();
        g.objects = Some((new.to_path_buf(), existing.to_path_buf()));
        g
    }

    /// With no allocation over `bytes` in git (`GIT_ALLOC_LIMIT`): a blob a patch would make
    /// larger than that fails git instead of filling memory.
    pub(crate) fn with_alloc_limit(&self, bytes: u64) -> Self {
        let mut g = self.clone();
        g.alloc_limit = Some(bytes);
        g
    }

    /// For a baseline's `diff-tree` run without a scratch index, an index that does not
    /// exist: a comparison of two trees needs none, and with one git reads a blob the index
    /// shows up to date from the work tree instead of the object store (`reuse_worktree_file`),
    /// trusting stat data it compares to the second. A file rewritten in its entry's second,
    /// its mtime set back, would then stand in for the baseline's blob, and the patch would
    /// hide its change. Nothing ever creates this file (`diff-tree` writes no index).
    fn tree_diff_index(&self, args: &[&str]) -> Option<PathBuf> {
        // Global options (`--literal-pathspecs`) come before the subcommand.
        let subcommand = args.iter().copied().find(|a| !a.starts_with('-'));
        if subcommand != Some("diff-tree") {
            return None;
        }
        self.git_dir.as_ref().map(|d| d.join(NO_INDEX))
    }

    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let program = crate::git_run::git_bounds().program;
        let mut cmd = Command::new(crate::git_run::spawnable(
            &program,
            std::env::var_os("PATH").as_deref(),
        ));
        let private = self.git_dir.is_some();
        if private {
            cmd.env_clear();
            for keep in ["PATH", "LANG", "TZ"] {
                if let Some(v) = std::env::var_os(keep) {
                    cmd.env(keep, v);
                }
            }
            cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_AUTHOR_DATE", FIXED_DATE)
                .env("GIT_COMMITTER_DATE", FIXED_DATE)
                .env("GIT_AUTHOR_NAME", "Legate")
                .env("GIT_AUTHOR_EMAIL", "legate@localhost")
                .env("GIT_COMMITTER_NAME", "Legate")
                .env("GIT_COMMITTER_EMAIL", "legate@localhost");
        } else {
            let inherited: Vec<OsString> = std::env::vars_os()
                .map(|(k, _)| k)
                .filter(|k| k.to_string_lossy().starts_with("GIT_"))
                .collect();
            for k in inherited {
                cmd.env_remove(k);
            }
        }
        cmd.env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_TERMINAL_PROMPT", "0")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("LC_ALL", "C");
        if let Some(h) = &self.home {
            cmd.env("HOME", h).env("XDG_CONFIG_HOME", h.join(".config"));
        }
        if let Some(d) = &self.git_dir {
            cmd.env("GIT_DIR", d);
        }
        if let Some(w) = &self.work_tree {
            cmd.env("GIT_WORK_TREE", w);
        }
        if let Some(i) = self.index.clone().or_else(|| self.tree_diff_index(args)) {
            cmd.env("GIT_INDEX_FILE", i);
        }
        if self.buffered {
            cmd.env("GIT_FLUSH", "0");
        }
        if let Some(limit) = self.alloc_limit {
            cmd.env("GIT_ALLOC_LIMIT", limit.to_string());
        }
        if let Some((new, existing)) = &self.objects {
            cmd.env("GIT_OBJECT_DIRECTORY", new).env(
                "GIT_ALTERNATE_OBJECT_DIRECTORIES",
                quoted_alternate(existing),
            );
        }
        cmd.arg("-C").arg(&self.cwd);
        for c in SAFE_CONFIG {
            cmd.arg("-c").arg(c);
        }
        if private {
            for c in PRIVATE_CONFIG {
                cmd.arg("-c").arg(c);
            }
        }
        cmd.args(args);
        cmd
    }

    /// Starts git with stdin and stdout piped (for a long-running batch command the caller
    /// feeds and reads), and stderr piped when `keep_stderr`.
    pub(crate) fn spawn_piped(&self, args: &[&str], keep_stderr: bool) -> Result<Child, Error> {
        let mut cmd = self.command(args);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(if keep_stderr {
                Stdio::piped()
            } else {
                Stdio::null()
            });
        cmd.spawn().map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                format!(
                    "git {} could not start",
                    args.first().copied().unwrap_or("")
                ),
                e,
            )
        })
    }

    /// Runs git and returns its stdout; a non-zero exit is an error naming the command.
    pub fn run(&self, args: &[&str]) -> Result<Vec<u8>, Error> {
        self.run_input(args, None)
    }

    /// Runs git with `input` on stdin, within the bounds of `git_run` (its own process group,
    /// a time limit, its end proven; `GIT_CLEANUP_UNVERIFIED` and a blocked copy otherwise).
    pub(crate) fn run_input(&self, args: &[&str], input: Option<&[u8]>) -> Result<Vec<u8>, Error> {
        self.run_watched(args, input, None)
    }

    /// [`Git::run_input`], stopped early when `watch` answers an error (that error).
    pub(crate) fn run_watched(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        watch: Option<crate::git_run::Watch<'_>>,
    ) -> Result<Vec<u8>, Error> {
        self.run_ending(args, input, watch, &[0])
    }

    /// [`Git::run_input`], for a command whose exit codes `ok` all mean it answered
    /// (`check-ignore` ends 1 when no path is ignored).
    pub(crate) fn run_input_allowing(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        ok: &[i32],
    ) -> Result<Vec<u8>, Error> {
        self.run_ending(args, input, None, ok)
    }

    fn run_ending(
        &self,
        args: &[&str],
        input: Option<&[u8]>,
        watch: Option<crate::git_run::Watch<'_>>,
        ok: &[i32],
    ) -> Result<Vec<u8>, Error> {
        let what = args.first().copied().unwrap_or("");
        let baseline = self.git_dir.as_deref().and_then(Path::parent);
        let out = crate::git_run::run_watched(self.command(args), input, what, baseline, watch)?;
        if !out.status.code().is_some_and(|c| ok.contains(&c)) {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let last = stderr.lines().rev().find(|l| !l.trim().is_empty());
            return Err(Error::internal(format!(
                "git {} failed ({}): {}",
                args.first().copied().unwrap_or(""),
                out.status,
                last.unwrap_or("no message")
            )));
        }
        Ok(out.stdout)
    }
}

/// `path` as one entry of `GIT_ALTERNATE_OBJECT_DIRECTORIES`, a `:`-separated list: in
/// double quotes, C-style (which git unquotes), so that a `:` in it does not split it.
fn quoted_alternate(path: &Path) -> OsString {
    let mut quoted = vec![b'"'];
    for &b in path.as_os_str().as_encoded_bytes() {
        match b {
            b'"' | b'\\' => quoted.extend_from_slice(&[b'\\', b]),
            b'\n' => quoted.extend_from_slice(b"\\n"),
            _ => quoted.push(b),
        }
    }
    quoted.push(b'"');
    // Built from an OsStr's bytes, with ASCII added around and between them.
    std::os::unix::ffi::OsStringExt::from_vec(quoted)
}

/// Splits NUL-terminated git output into items (dropping the empty tail).
pub fn split_z(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    bytes.split(|b| *b == 0).filter(|s| !s.is_empty())
}

/// Whether `dir` (canonical) is the top of a git work tree. `INVALID_WORKSPACE` otherwise.
pub(crate) fn require_git_root(dir: &Path) -> Result<(), Error> {
    let git = Git::source(dir);
    let top = git.run(&["rev-parse", "--show-toplevel"]).map_err(|_| {
        Error::new(
            ErrorCode::InvalidWorkspace,
            format!(
                "{} is not inside a git repository; a copy workspace needs the root of one",
                dir.display()
            ),
        )
    })?;
    let top = String::from_utf8_lossy(&top).trim_end().to_string();
    let top = std::fs::canonicalize(&top).unwrap_or_else(|_| PathBuf::from(&top));
    if top != dir {
        return Err(Error::new(
            ErrorCode::InvalidWorkspace,
            format!(
                "{} is inside the git repository {} but is not its root; name the root and narrow with include paths",
                dir.display(),
                top.display()
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use crate::git_index::{self, Entry, OID_LEN, Stat};
    use std::fs;
    use std::time::{Duration, SystemTime};

    /// The index of a baseline can show a file up to date that is not: its stat data equal
    /// to the second (a same-size rewrite in its entry's second, the mtime set back). A
    /// comparison of two trees still shows the blobs' own bytes, never the work tree's.
    #[test]
    fn a_baselines_tree_diff_never_reads_the_work_tree_for_a_blob() {
        let tmp = tempfile::tempdir().unwrap();
        let (git_dir, work, home) = (
            tmp.path().join("git"),
            tmp.path().join("work"),
            tmp.path().join("home"),
        );
        fs::create_dir(&work).unwrap();
        fs::create_dir(&home).unwrap();
        let git = Git::private(&git_dir, &work, &home);
        let run = |args: &[&str]| {
            let out = git.run(args).unwrap();
            String::from_utf8(out).unwrap().trim().to_string()
        };
        run(&["init", "--quiet", "--template="]);
        let f = work.join("f");
        let mut trees = Vec::new();
        for bytes in ["let x = a + b;\n", "let x = a - b;\n"] {
            fs::write(&f, bytes).unwrap();
            run(&["add", "f"]);
            trees.push(run(&["write-tree"]));
        }
        // The index names the first blob, with the stat data of the file (holding the second)
        // exactly: git calls it clean.
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_577_836_800);
        fs::File::options()
            .write(true)
            .open(&f)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let first = run(&["rev-parse", &format!("{}:f", trees[0])]);
        let mut oid = [0u8; OID_LEN];
        for (j, byte) in oid.iter_mut().enumerate() {
            *byte = u8::from_str_radix(&first[2 * j..2 * j + 2], 16).unwrap();
        }
        let entry = Entry {
            path: b"f".to_vec(),
            stat: Stat::of(&fs::symlink_metadata(&f).unwrap()),
            mode: 0o100644,
            oid,
            stage: 0,
            assume_valid: false,
            skip_worktree: false,
            intent_to_add: false,
        };
        fs::write(git_dir.join("index"), git_index::write_v2(&[entry])).unwrap();
        assert_eq!(
            run(&["diff-files", "--name-only"]),
            "",
            "git calls it clean"
        );
        let patch = run(&[
            "--literal-pathspecs",
            "diff-tree",
            "-p",
            &trees[0],
            &trees[1],
        ]);
        assert!(patch.contains("-let x = a + b;"), "{patch}");
        assert!(patch.contains("+let x = a - b;"), "{patch}");
        assert!(!git_dir.join(NO_INDEX).exists());
    }

    #[test]
    fn an_alternate_is_one_quoted_entry_whatever_it_holds() {
        let quoted = quoted_alternate(Path::new("/home/a:b/\"q\"\\/x\ny"));
        assert_eq!(
            quoted.to_string_lossy(),
            "\"/home/a:b/\\\"q\\\"\\\\/x\\ny\""
        );
    }
}
