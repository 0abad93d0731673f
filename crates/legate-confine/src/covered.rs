//! What a confined process of a workspace cannot see beneath that workspace's root, for the
//! services Legate runs on the process's behalf outside its confinement.
//!
//! Legate serves an agent's `fs/*` requests and collects its artifacts from its own process,
//! where nothing is hidden. A shared workspace may hold `$LEGATE_HOME` (a task in `~` with the
//! default home `~/.legate`): the agent's mount namespace covers it, and these services must
//! cover it the same way, or the agent (or a caller naming artifacts) would read the tokens
//! and the database, or write the configuration, through Legate. [`Covered`] mirrors the
//! namespace's rule: a path beneath a hidden path is covered unless it is beneath one of the
//! process's writable paths that lies beneath that hidden path (its copy, its state
//! directory: what the namespace puts back).
//!
//! It owns that rule only and compares paths by text: the caller must hand it paths relative
//! to the root with no `.`, `..` or symbolic link on the way (what `legate_beneath` resolves).
//! It never opens a file.

use std::path::{Component, Path, PathBuf};

/// The subtrees of one workspace root a confined process of it cannot see.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Covered {
    /// Hidden paths beneath the root, relative to it (never empty).
    hidden: Vec<PathBuf>,
    /// Writable paths beneath the root, relative to it (put back beneath a hidden one).
    kept: Vec<PathBuf>,
}

impl Covered {
    /// What `hidden` (`$LEGATE_HOME`, token files, the configuration file) covers beneath
    /// `root`, with `writable` (the process's writable paths) put back beneath them. Paths
    /// are made canonical where they exist; a hidden path that holds the root, or lies
    /// elsewhere, covers nothing beneath it (the root itself is always visible).
    pub fn new(root: &Path, hidden: &[PathBuf], writable: &[PathBuf]) -> Self {
        let root = canonical(root);
        let beneath = |p: &PathBuf| -> Option<PathBuf> {
            let p = canonical(p);
            let rel = p.strip_prefix(&root).ok()?;
            (rel.components().next().is_some()).then(|| rel.to_path_buf())
        };
        Self {
            hidden: hidden.iter().filter_map(beneath).collect(),
            kept: writable.iter().filter_map(beneath).collect(),
        }
    }

    /// Whether `rel` (relative to the root, normal: see the module's docs) is covered.
    pub fn covers(&self, rel: &Path) -> bool {
        let normal = rel.components().all(|c| matches!(c, Component::Normal(_)));
        if !normal {
            // Not a path this rule can judge by text: covered, to be safe.
            return true;
        }
        self.hidden.iter().any(|h| {
            rel.starts_with(h)
                && !self
                    .kept
                    .iter()
                    .any(|k| k.starts_with(h) && rel.starts_with(k))
        })
    }

    /// Whether nothing beneath the root is covered.
    pub fn is_empty(&self) -> bool {
        self.hidden.is_empty()
    }
}

/// `p` made canonical, or as given when it cannot be (a hidden file not made yet).
fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_home_inside_the_root_is_covered_but_for_the_writable_paths_beneath_it() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let home = root.join("home");
        std::fs::create_dir_all(home.join("agents/revisor")).unwrap();
        let token = root.join("elsewhere/a2a-token");
        let covered = Covered::new(
            &root,
            &[home.clone(), token, PathBuf::from("/etc/legate-token")],
            &[root.clone(), home.join("agents/revisor")],
        );
        for rel in [
            "home",
            "home/mcp-token",
            "home/legate.db",
            "elsewhere/a2a-token",
            "home/agents/other/x",
        ] {
            assert!(covered.covers(Path::new(rel)), "{rel}");
        }
        for rel in [
            "",
            "src/main.rs",
            "homework",
            "home2/x",
            "elsewhere/other",
            "home/agents/revisor/notes",
        ] {
            assert!(!covered.covers(Path::new(rel)), "{rel}");
        }
        assert!(covered.covers(Path::new("src/../home/mcp-token")));
    }

    #[test]
    fn a_root_beneath_the_home_is_not_covered() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().canonicalize().unwrap();
        let root = home.join("copies/t1");
        std::fs::create_dir_all(&root).unwrap();
        let covered = Covered::new(
            &root,
            std::slice::from_ref(&home),
            std::slice::from_ref(&root),
        );
        assert!(covered.is_empty());
        assert!(!covered.covers(Path::new("src/lib.rs")));
        // Reached through a link, the home is still recognised.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&home, &link).unwrap();
        let outer = Covered::new(dir.path(), &[link.join("copies")], &[]);
        assert!(outer.covers(Path::new("copies/t1")));
    }
}
