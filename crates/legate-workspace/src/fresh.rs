//! A fresh tree of a copy's staged state: the tracked files of the tree a preview staged
//! (baseline plus patch, the bytes its sha256 names) checked out into a new directory beside
//! the baseline, and nothing else of the copy: no ignored file, no build output, no cache an
//! agent left. `legate test --fresh` runs its command there, so its evidence covers the patch
//! alone.
//!
//! This module owns making that directory. It never writes into the copy, and never checks
//! out anything but a tree of the baseline's own repository.

use crate::Baseline;
use legate_core::{Error, ErrorCode};

/// Checks `tree` (a tree id of `baseline`'s repository, as [`crate::Preview::tree`] names it)
/// out into a new directory inside the baseline's, returned as a [`tempfile::TempDir`]
/// (removed when dropped): the tracked files with their modes, through a scratch index, no
/// filter or hook run (the baseline's git runs with none).
pub fn fresh_tree(baseline: &Baseline, tree: &str) -> Result<tempfile::TempDir, Error> {
    if tree.is_empty() || !tree.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::internal("a fresh tree needs a tree id"));
    }
    let dir = tempfile::Builder::new()
        .prefix("fresh-")
        .tempdir_in(baseline.dir())
        .map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                "a fresh tree's directory could not be made",
                e,
            )
        })?;
    let Some(path) = dir.path().to_str() else {
        return Err(Error::internal(
            "a fresh tree's directory has a name git cannot be given",
        ));
    };
    let prefix = format!("--prefix={path}/");
    let index = crate::changes::scratch_index(baseline)?;
    let git = baseline.git().with_index(index.path());
    git.run(&["read-tree", tree])?;
    git.run(&["checkout-index", "--all", "--force", &prefix])?;
    Ok(dir)
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_tree_holds_the_staged_files_and_nothing_the_copy_ignores() {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("copy");
        std::fs::create_dir_all(copy.join("src")).unwrap();
        std::fs::write(copy.join("src/a.txt"), "alpha\n").unwrap();
        std::fs::write(copy.join(".gitignore"), "gen/\n").unwrap();
        let baseline = Baseline::create(&tmp.path().join("baseline"), &copy).unwrap();
        // What an agent did: a tracked change, a new file, and an ignored artifact.
        std::fs::write(copy.join("src/a.txt"), "beta\n").unwrap();
        std::fs::write(copy.join("b.txt"), "new\n").unwrap();
        std::fs::create_dir_all(copy.join("gen")).unwrap();
        std::fs::write(copy.join("gen/stale"), "planted\n").unwrap();
        let tree = crate::stage_tree(&baseline).unwrap();

        let fresh = fresh_tree(&baseline, &tree).unwrap();
        let root = fresh.path();
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
        // The copy is as the agent left it.
        assert!(copy.join("gen/stale").is_file());
        let kept = root.to_path_buf();
        drop(fresh);
        assert!(!kept.exists());
        assert!(fresh_tree(&baseline, "not-a-tree").is_err());
    }
}
