//! What integration never adds to the original project, whatever the patch says: a file
//! outside the copy's `--include` paths, and a new file where the original's git ignores it.
//! The engine asks it before an approval is asked for and again as the files are written
//! (`integrate` itself knows no include paths).
//!
//! The copy holds only what was selected, and git's ignore rules there are the project's
//! tracked `.gitignore` files: it never sees `.git/info/exclude`, the user's own excludes,
//! nor a directory whose `.gitignore` ignores itself (a virtual environment, an editor's
//! folder). An agent that writes into such a place in its copy (`.venv/…/x.pth`, which
//! Python runs at its next start; `.vscode/tasks.json`) would have integration put it where
//! the user's tools run it and no review looks. So each such path is refused
//! (`UNSAFE_PATH`) before anything is written, and the caller told which and why.
//!
//! It decides from the paths alone, and the original's own ignore rules (asked of git
//! there); it never reads a file's content nor writes anything.

use legate_core::{Error, ErrorCode};
use legate_workspace::{ChangeStatus, FileChange};
use std::path::Path;

/// Refuses `changes` (a preview's files) that write outside `include` (when the copy was
/// narrowed to it), or add a file the original project at `root` ignores.
pub fn check_additions(
    root: &Path,
    changes: &[FileChange],
    include: &[String],
) -> Result<(), Error> {
    if !include.is_empty()
        && let Some(c) = changes
            .iter()
            .find(|c| !include.iter().any(|i| legate_workspace::covers(i, &c.path)))
    {
        return Err(Error::new(
            ErrorCode::UnsafePath,
            format!(
                "{} is outside the copy's include paths ({}); integration writes nothing there (copy that place too, with --include, for a task that may change it)",
                c.path,
                include.join(", ")
            ),
        ));
    }
    let added: Vec<&str> = changes
        .iter()
        .filter(|c| c.status == ChangeStatus::A)
        .map(|c| c.path.as_str())
        .collect();
    let ignored = legate_workspace::ignored_in_source(root, &added)?;
    if let Some(first) = ignored.first() {
        return Err(Error::new(
            ErrorCode::UnsafePath,
            format!(
                "{first} is new, and the original project ignores it{}: integration adds no file where git does not look (what lands in an ignored place, such as a virtual environment, can run unreviewed); nothing was written",
                if ignored.len() > 1 {
                    format!(" ({} such files in all)", ignored.len())
                } else {
                    String::new()
                }
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn added(path: &str) -> FileChange {
        FileChange {
            path: path.into(),
            status: ChangeStatus::A,
            insertions: Some(1),
            deletions: Some(0),
            binary: false,
            mode: Some(0o644),
            old_blob: None,
            new_blob: Some("0".repeat(40)),
        }
    }

    /// Outside the include paths, or where the original ignores it: refused, each naming
    /// the path; elsewhere, passed.
    #[test]
    fn additions_outside_the_includes_or_where_the_original_ignores_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = std::fs::canonicalize(dir.path()).unwrap();
        let ok = std::process::Command::new("git")
            .args(["init", "-q"])
            .current_dir(&root)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        std::fs::create_dir(root.join(".venv")).unwrap();
        std::fs::write(root.join(".venv/.gitignore"), "*\n").unwrap();
        let include = vec!["src".to_string()];
        let err = check_additions(&root, &[added("src/a.rs"), added("conftest.py")], &include)
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::UnsafePath);
        assert!(
            err.message.starts_with("conftest.py is outside"),
            "{}",
            err.message
        );
        let err = check_additions(&root, &[added("src/a.rs"), added(".venv/lib/zz.pth")], &[])
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::UnsafePath);
        assert!(
            err.message.starts_with(".venv/lib/zz.pth is new"),
            "{}",
            err.message
        );
        check_additions(&root, &[added("src/a.rs"), added("conftest.py")], &[]).unwrap();
        check_additions(&root, &[added("src/a.rs")], &include).unwrap();
    }
}
