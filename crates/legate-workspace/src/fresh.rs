//! A fresh tree of a copy's staged state: the tracked files of the tree a preview staged
//! (baseline plus patch, the bytes its sha256 names) checked out into a new directory beside
//! the baseline, and nothing else of the copy: no ignored file, no build output, no cache an
//! agent left. `legate test --fresh` runs its command there, so its evidence covers the patch
//! alone, and asks it afterwards whether the command changed what it holds.
//!
//! This module owns making, judging and removing that directory. It never writes into the
//! copy, never checks out anything but a tree of the baseline's own repository, and never
//! follows a link while removing (a command may have left anything there).

use crate::Baseline;
use legate_core::{Error, ErrorCode};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// The name every fresh tree's directory starts with, inside the baseline's directory.
const PREFIX: &str = "fresh-";

/// A fresh tree, removed when dropped ([`FreshTree::remove`] says whether it could be).
#[derive(Debug)]
pub struct FreshTree {
    dir: Option<tempfile::TempDir>,
    /// The scratch index the tree was read into: what "changed" is measured against.
    index: tempfile::NamedTempFile,
}

impl FreshTree {
    /// Where the files are.
    pub fn path(&self) -> &Path {
        match &self.dir {
            Some(d) => d.path(),
            None => Path::new(""),
        }
    }

    /// Whether what the tree holds differs from the tree it was made of: a tracked file
    /// changed or removed, or a file its own ignore rules do not ignore added (what staging
    /// it would take into a patch). Every file is hashed once.
    pub fn changed(&self, baseline: &Baseline) -> Result<bool, Error> {
        let git = baseline
            .git()
            .with_work_tree(self.path())
            .with_index(self.index.path());
        // Exit 1 means some entries need an update: `diff-files` names them next.
        git.run_input_allowing(&["update-index", "-q", "--refresh"], None, &[0, 1])?;
        let modified = git.run(&["diff-files", "--name-only", "-z"])?;
        if !modified.is_empty() {
            return Ok(true);
        }
        let added = git.run(&[
            "ls-files",
            "--others",
            "--exclude-standard",
            "--directory",
            "--no-empty-directory",
            "-z",
        ])?;
        Ok(!added.is_empty())
    }

    /// Removes the tree now, modes a command took away restored first (links never followed).
    pub fn remove(mut self) -> Result<(), Error> {
        match self.dir.take() {
            Some(d) => remove_forcing(&d.keep()),
            None => Ok(()),
        }
    }
}

/// Checks `tree` (a tree id of `baseline`'s repository, as [`crate::Preview::tree`] names it)
/// out into a new directory inside the baseline's: the tracked files with their modes, through
/// a scratch index, no filter or hook run (the baseline's git runs with none). Fresh trees an
/// earlier run left (a `kill -9`, a directory its command made unremovable) are removed first:
/// the caller holds the copy's lock, so no other run is using one.
pub fn fresh_tree(baseline: &Baseline, tree: &str) -> Result<FreshTree, Error> {
    if tree.is_empty() || !tree.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::internal("a fresh tree needs a tree id"));
    }
    for (name, path, _) in crate::entries(baseline.dir()) {
        if name.starts_with(PREFIX)
            && let Err(e) = remove_forcing(&path)
        {
            tracing::warn!(dir = %path.display(), error = %e, "could not remove an earlier fresh tree");
        }
    }
    let dir = tempfile::Builder::new()
        .prefix(PREFIX)
        .tempdir_in(baseline.dir())
        .map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                "a fresh tree's directory could not be made",
                e,
            )
        })?;
    // git runs in the copy: a relative prefix would land there.
    let Some(path) = dir.path().to_str().filter(|_| dir.path().is_absolute()) else {
        return Err(Error::internal(
            "a fresh tree's directory is not an absolute path git can be given",
        ));
    };
    let prefix = format!("--prefix={path}/");
    let index = crate::changes::scratch_index(baseline)?;
    let git = baseline.git().with_index(index.path());
    git.run(&["read-tree", tree])?;
    git.run(&["checkout-index", "--all", "--force", &prefix])?;
    Ok(FreshTree {
        dir: Some(dir),
        index,
    })
}

/// Removes `dir` whole without following a link, first giving back the owner's rights to
/// every directory in it (a command may have left one it cannot be entered or emptied).
fn remove_forcing(dir: &Path) -> Result<(), Error> {
    if std::fs::remove_dir_all(dir).is_ok() || !dir.exists() {
        return Ok(());
    }
    let mut pending = vec![dir.to_path_buf()];
    while let Some(d) = pending.pop() {
        let Ok(meta) = std::fs::symlink_metadata(&d) else {
            continue;
        };
        if !meta.file_type().is_dir() {
            continue;
        }
        let _ = std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700));
        if let Ok(entries) = std::fs::read_dir(&d) {
            pending.extend(entries.filter_map(|e| e.ok().map(|e| e.path())));
        }
    }
    std::fs::remove_dir_all(dir).map_err(|e| {
        Error::caused_by(
            ErrorCode::Internal,
            format!("the fresh tree {} could not be removed", dir.display()),
            e,
        )
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn copy_and_baseline(tmp: &Path) -> (std::path::PathBuf, Baseline) {
        let copy = tmp.join("copy");
        std::fs::create_dir_all(copy.join("src")).unwrap();
        std::fs::write(copy.join("src/a.txt"), "alpha\n").unwrap();
        std::fs::write(copy.join(".gitignore"), "gen/\n").unwrap();
        let baseline = Baseline::create(&tmp.join("baseline"), &copy).unwrap();
        (copy, baseline)
    }

    #[test]
    fn a_fresh_tree_holds_the_staged_files_and_nothing_the_copy_ignores() {
        let tmp = tempfile::tempdir().unwrap();
        let (copy, baseline) = copy_and_baseline(tmp.path());
        // What an agent did: a tracked change, a new file, and an ignored artifact.
        std::fs::write(copy.join("src/a.txt"), "beta\n").unwrap();
        std::fs::write(copy.join("b.txt"), "new\n").unwrap();
        std::fs::create_dir_all(copy.join("gen")).unwrap();
        std::fs::write(copy.join("gen/stale"), "planted\n").unwrap();
        let tree = crate::stage_tree(&baseline).unwrap();

        let fresh = fresh_tree(&baseline, &tree).unwrap();
        let root = fresh.path().to_path_buf();
        assert!(root.starts_with(baseline.dir()));
        assert_eq!(
            std::fs::read_to_string(root.join("src/a.txt")).unwrap(),
            "beta\n"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("b.txt")).unwrap(),
            "new\n"
        );
        assert!(root.join(".gitignore").is_file());
        assert!(
            !root.join("gen").exists(),
            "an ignored file is not the patch's"
        );
        assert!(!fresh.changed(&baseline).unwrap());
        // The copy is as the agent left it.
        assert!(copy.join("gen/stale").is_file());
        fresh.remove().unwrap();
        assert!(!root.exists());
        assert!(fresh_tree(&baseline, "not-a-tree").is_err());
    }

    #[test]
    fn what_a_command_changes_in_the_tree_is_seen_and_what_it_ignores_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, baseline) = copy_and_baseline(tmp.path());
        let tree = crate::stage_tree(&baseline).unwrap();
        for (what, act) in [
            (
                "rewrite",
                &(|r: &Path| std::fs::write(r.join("src/a.txt"), "other\n").unwrap())
                    as &dyn Fn(&Path),
            ),
            ("remove", &|r: &Path| {
                std::fs::remove_file(r.join("src/a.txt")).unwrap()
            }),
            ("add", &|r: &Path| {
                std::fs::write(r.join("new.txt"), "x").unwrap()
            }),
        ] {
            let fresh = fresh_tree(&baseline, &tree).unwrap();
            act(fresh.path());
            assert!(fresh.changed(&baseline).unwrap(), "{what}");
            fresh.remove().unwrap();
        }
        let fresh = fresh_tree(&baseline, &tree).unwrap();
        std::fs::create_dir_all(fresh.path().join("gen")).unwrap();
        std::fs::write(fresh.path().join("gen/out"), "built").unwrap();
        assert!(
            !fresh.changed(&baseline).unwrap(),
            "an ignored output is no change"
        );
    }

    #[test]
    fn an_unremovable_tree_is_removed_and_a_leftover_one_goes_before_the_next() {
        let tmp = tempfile::tempdir().unwrap();
        let (_, baseline) = copy_and_baseline(tmp.path());
        let tree = crate::stage_tree(&baseline).unwrap();
        let outside = tmp.path().join("precious");
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("keep.txt"), "mine").unwrap();
        // A command's leftovers: a directory it may not empty, a link out.
        let fresh = fresh_tree(&baseline, &tree).unwrap();
        let locked = fresh.path().join("locked");
        std::fs::create_dir_all(&locked).unwrap();
        std::fs::write(locked.join("f"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, fresh.path().join("escape")).unwrap();
        std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500)).unwrap();
        let root = fresh.path().to_path_buf();
        fresh.remove().unwrap();
        assert!(!root.exists());
        assert!(outside.join("keep.txt").is_file());
        // One a kill left behind goes when the next is made.
        let left = baseline.dir().join("fresh-leftover");
        std::fs::create_dir_all(left.join("d")).unwrap();
        std::fs::set_permissions(left.join("d"), std::fs::Permissions::from_mode(0o000)).unwrap();
        let next = fresh_tree(&baseline, &tree).unwrap();
        assert!(!left.exists());
        next.remove().unwrap();
    }
}
