//! What git can tell before a task is admitted: where a directory stands in a git work tree
//! ([`git_place`]: its root, inside one, or outside every one), and whether the git on `PATH`
//! is new enough for copies ([`require_git_version`]: 2.32 or later, `GIT_UNSUPPORTED`).
//!
//! It only reads: it never writes to a project, never runs git through a shell, and never lets
//! a repository's configuration choose a program (every call goes through [`Git::source`]).

use crate::git::Git;
use legate_core::{Error, ErrorCode};
use std::path::{Path, PathBuf};

/// The oldest git copies accept: the seed's requirement (2.32 isolates the global
/// configuration the way Legate runs it).
pub const MIN_GIT_VERSION: (u32, u32) = (2, 32);

/// Where a directory stands in git.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GitPlace {
    /// It is the root of a git work tree.
    Root,
    /// It lies inside the work tree whose root is this (canonical) directory.
    Inside(PathBuf),
    /// It is in no git work tree (or git cannot say).
    Outside,
}

/// Where the canonical directory `dir` stands. A directory holding `.git` is a root without
/// asking git (so a missing or broken git cannot make a project look like a plain directory);
/// otherwise `git rev-parse --show-toplevel` decides, and a git that fails is [`GitPlace::Outside`].
pub fn git_place(dir: &Path) -> GitPlace {
    if std::fs::symlink_metadata(dir.join(".git")).is_ok() {
        return GitPlace::Root;
    }
    let Ok(top) = Git::source(dir).run(&["rev-parse", "--show-toplevel"]) else {
        return GitPlace::Outside;
    };
    let top = String::from_utf8_lossy(&top).trim_end().to_string();
    let top = std::fs::canonicalize(&top).unwrap_or_else(|_| PathBuf::from(&top));
    if top == dir {
        GitPlace::Root
    } else {
        GitPlace::Inside(top)
    }
}

/// `GIT_UNSUPPORTED` unless the git on `PATH` runs and is at least [`MIN_GIT_VERSION`].
pub fn require_git_version() -> Result<(), Error> {
    let out = Git::source(Path::new("/"))
        .run(&["--version"])
        .map_err(|e| {
            Error::caused_by(
                ErrorCode::GitUnsupported,
                "copies need git 2.32 or later on PATH, and `git --version` failed",
                e,
            )
        })?;
    let text = String::from_utf8_lossy(&out);
    match parse_version(&text) {
        Some(v) if v >= MIN_GIT_VERSION => Ok(()),
        Some((major, minor)) => Err(Error::new(
            ErrorCode::GitUnsupported,
            format!(
                "copies need git {}.{} or later; the git on PATH is {major}.{minor}",
                MIN_GIT_VERSION.0, MIN_GIT_VERSION.1
            ),
        )),
        None => Err(Error::new(
            ErrorCode::GitUnsupported,
            format!(
                "copies need git {}.{} or later; `git --version` said {:?}",
                MIN_GIT_VERSION.0,
                MIN_GIT_VERSION.1,
                legate_core::text::excerpt(text.trim(), 80)
            ),
        )),
    }
}

/// The first git whose `attr.tree` setting reads attributes from a tree instead of the work
/// tree (`git::PRIVATE_CONFIG` sets it for baselines).
pub(crate) const ATTR_TREE_VERSION: (u32, u32) = (2, 43);

/// The major and minor of the git on `PATH`, asked once per process (`None` when it
/// cannot say).
pub(crate) fn git_version() -> Option<(u32, u32)> {
    static VERSION: std::sync::OnceLock<Option<(u32, u32)>> = std::sync::OnceLock::new();
    *VERSION.get_or_init(|| {
        Git::source(Path::new("/"))
            .run(&["--version"])
            .ok()
            .and_then(|out| parse_version(&String::from_utf8_lossy(&out)))
    })
}

/// The major and minor of `git version 2.43.0` (also `2.39.3 (Apple Git-146)`,
/// `2.45.1.windows.1`).
fn parse_version(text: &str) -> Option<(u32, u32)> {
    let number = text.trim().strip_prefix("git version ")?;
    let mut parts = number.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_every_known_form() {
        assert_eq!(parse_version("git version 2.43.0\n"), Some((2, 43)));
        assert_eq!(
            parse_version("git version 2.39.3 (Apple Git-146)"),
            Some((2, 39))
        );
        assert_eq!(parse_version("git version 2.45.1.windows.1"), Some((2, 45)));
        assert_eq!(parse_version("git version 3.0"), Some((3, 0)));
        for bad in [
            "",
            "git version",
            "hg 6.1",
            "git version x.y",
            "git version 2",
        ] {
            assert_eq!(parse_version(bad), None, "{bad:?}");
        }
        assert!((2, 31) < MIN_GIT_VERSION && (2, 32) >= MIN_GIT_VERSION);
        assert!((3, 0) >= MIN_GIT_VERSION && (1, 99) < MIN_GIT_VERSION);
    }

    #[test]
    fn a_directory_is_a_root_inside_or_outside() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        assert_eq!(git_place(&root), GitPlace::Outside);
        Git::source(&root).run(&["init", "-q"]).unwrap();
        assert_eq!(git_place(&root), GitPlace::Root);
        let sub = root.join("sub");
        std::fs::create_dir(&sub).unwrap();
        assert_eq!(git_place(&sub), GitPlace::Inside(root));
    }
}
