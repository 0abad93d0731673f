//! The entries of a copy that git never shows: every path named `.git`, at any depth.
//!
//! Git skips such a path silently (a file or a directory), so neither `add --all` nor
//! `ls-files --others` ever lists it, and a read-only check made of git's listings alone
//! cannot see an agent write one (a gitfile that points a later turn's git at a directory of
//! the agent's choosing, or a directory of data). This module finds them by walking the
//! copy beneath its held root (`legate-beneath`): each directory is opened without following
//! a link anywhere on its path, its entries read relative to that descriptor, and no `.git`
//! entry is entered. It only reads names; it never reads a file's bytes or changes anything.

use legate_beneath::Root;
use legate_core::{Error, ErrorCode};
use rustix::fs::{self, AtFlags, FileType, Mode, OFlags};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The paths (relative, sorted) named `.git` beneath `copy`.
///
/// Errors: `INTERNAL` when the copy or one of its directories cannot be read.
pub fn dot_git_entries(copy: &Path) -> Result<Vec<String>, Error> {
    let held = Root::open(copy)
        .map_err(|e| Error::caused_by(ErrorCode::Internal, "the copy could not be opened", e))?;
    fn unreadable(rel: &Path, e: impl std::error::Error + Send + Sync + 'static) -> Error {
        let message = format!("the copy's directory {:?} could not be read", rel.display());
        Error::caused_by(ErrorCode::Internal, message, e)
    }
    let mut found = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let dir = held.open_dir(&rel).map_err(|e| unreadable(&rel, e))?;
        let readable = fs::openat(
            &dir,
            c".",
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| unreadable(&rel, e))?;
        for entry in fs::Dir::new(readable).map_err(|e| unreadable(&rel, e))? {
            let entry = entry.map_err(|e| unreadable(&rel, e))?;
            let name = entry.file_name();
            if name == c"." || name == c".." {
                continue;
            }
            let child = rel.join(OsStr::from_bytes(name.to_bytes()));
            if name.to_bytes() == b".git" {
                found.push(child.to_string_lossy().into_owned());
                continue;
            }
            let is_dir = match entry.file_type() {
                FileType::Directory => true,
                FileType::Unknown => fs::statat(&dir, name, AtFlags::SYMLINK_NOFOLLOW)
                    .is_ok_and(|m| FileType::from_raw_mode(m.st_mode) == FileType::Directory),
                _ => false,
            };
            if is_dir {
                stack.push(child);
            }
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn dot_git_entries_are_found_at_any_depth_and_links_are_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/b/.git/objects")).unwrap();
        std::fs::write(root.join(".git"), "gitdir: /elsewhere\n").unwrap();
        std::fs::write(root.join("a/.gitignore"), "x\n").unwrap();
        std::fs::write(root.join("a/b/.git/objects/blob"), "data").unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(outside.path().join(".git")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        assert_eq!(dot_git_entries(root).unwrap(), [".git", "a/b/.git"]);
    }
}
