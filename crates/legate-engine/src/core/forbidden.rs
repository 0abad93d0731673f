//! Forbidden directories (`forbidden_directories` in the configuration): directories that
//! are never a workspace, a copy's source or a test's root, whoever asks.
//!
//! This module owns the one check, [`Core::check_not_forbidden`]: a path is refused with
//! `FORBIDDEN_DIRECTORY` when it is a forbidden directory, lies inside one, or contains one
//! (a workspace above a forbidden directory would show it to the agent). Both sides are
//! compared resolved (symlinks followed) when they exist, and as written otherwise, so a link
//! or a `..` never walks around the rule. It never reads what the directories hold, and its
//! error names the configured directory, never anything inside it.

use crate::core::Core;
use legate_core::{Error, ErrorCode, Result};
use std::path::{Component, Path, PathBuf};

/// `path` resolved when it exists; otherwise made absolute-and-normal lexically (`.` and
/// `..` folded), so that a path that does not exist yet is still compared by its meaning.
fn resolved(path: &Path) -> PathBuf {
    if let Ok(p) = std::fs::canonicalize(path) {
        return p;
    }
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

/// Whether `a` and `b` are the same directory or one lies inside the other.
pub(crate) fn overlaps(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

impl Core {
    /// `FORBIDDEN_DIRECTORY` when `path` (`what`: "the workspace", "the copy's source", …) is,
    /// lies inside or contains a configured forbidden directory.
    pub(crate) fn check_not_forbidden(&self, what: &str, path: &Path) -> Result<()> {
        let forbidden = &self.config().forbidden_directories;
        // An empty path names no directory (a copy made from received files has no source);
        // compared, it would be a prefix of every path.
        if forbidden.is_empty() || path.as_os_str().is_empty() {
            return Ok(());
        }
        let p = resolved(path);
        for dir in forbidden {
            let d = resolved(dir);
            if overlaps(&p, &d) {
                tracing::warn!(what, forbidden = %dir.display(), "a forbidden directory was refused");
                return Err(Error::new(
                    ErrorCode::ForbiddenDirectory,
                    format!(
                        "{what} {} is, lies inside or contains the forbidden directory {} (forbidden_directories); choose a directory outside it",
                        p.display(),
                        dir.display()
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn a_link_or_dotdot_does_not_walk_around_a_forbidden_directory() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::create_dir_all(secret.join("inner")).unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("alias")).unwrap();
        let r = |p: PathBuf| resolved(&p);
        let d = r(secret.clone());
        assert!(overlaps(&r(dir.path().join("alias/inner")), &d));
        assert!(overlaps(&r(dir.path().join("other/../secret/inner")), &d));
        assert!(
            overlaps(&r(dir.path().to_path_buf()), &d),
            "a parent shows it"
        );
        assert!(
            !overlaps(&r(dir.path().join("secretive")), &d),
            "a sibling with a common prefix is not inside"
        );
    }

    proptest! {
        #[test]
        fn overlap_is_by_whole_components(a in "(/[a-c]{1,2}){1,4}", b in "(/[a-c]{1,2}){1,4}") {
            let (pa, pb) = (resolved(Path::new(&a)), resolved(Path::new(&b)));
            let expected = a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"));
            prop_assert_eq!(overlaps(&pa, &pb), expected);
        }
    }
}
