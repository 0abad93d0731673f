//! Lexical handling of the path a caller names: which components, relative to the root, it
//! means.
//!
//! This module owns the text rules: `.` and empty components are dropped, `..` removes the
//! component before it and is refused when there is none (it would leave the root), an
//! absolute path is refused where a relative one is expected and otherwise must start with
//! the root. It never touches the file system: whether a component is a symlink is the
//! kernel's answer, at the moment of the open.

use crate::BeneathError;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// The names, from the root down, that the relative path `rel` means.
///
/// An empty list means the root itself.
///
/// # Errors
/// [`BeneathError::Absolute`] for an absolute path, [`BeneathError::Escapes`] when a `..`
/// has nothing left to remove.
pub fn components(rel: &Path) -> Result<Vec<OsString>, BeneathError> {
    let mut out: Vec<OsString> = Vec::new();
    for component in rel.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => {
                return Err(BeneathError::Absolute {
                    path: rel.to_path_buf(),
                });
            }
            Component::CurDir => {}
            Component::ParentDir => {
                if out.pop().is_none() {
                    return Err(BeneathError::Escapes {
                        path: rel.to_path_buf(),
                    });
                }
            }
            Component::Normal(name) => out.push(name.to_os_string()),
        }
    }
    Ok(out)
}

/// `path` relative to `root`, by text alone: an absolute path has `.` and `..` removed
/// lexically and must then start with `root`; a relative path is taken as relative to the
/// root and must not climb out of it. The result has no `.`, `..` or empty component; it is
/// empty for the root itself.
///
/// `root` must be absolute and should be canonical (no symlink, `.` or `..`): the
/// comparison is textual.
///
/// # Errors
/// [`BeneathError::NotUnderRoot`] when an absolute path is elsewhere,
/// [`BeneathError::Escapes`] when a relative path climbs out.
pub fn strip_root(root: &Path, path: &Path) -> Result<PathBuf, BeneathError> {
    if !path.is_absolute() {
        return Ok(components(path)?.into_iter().collect());
    }
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => normal.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                // `..` at the top of an absolute path stays at the top.
                normal.pop();
            }
            Component::Normal(name) => normal.push(name),
        }
    }
    let outside = || BeneathError::NotUnderRoot {
        path: path.to_path_buf(),
        root: root.to_path_buf(),
    };
    let rel = normal.strip_prefix(root).map_err(|_| outside())?;
    Ok(components(rel)?.into_iter().collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn dots_and_empty_components_are_lexical() {
        let c = components(Path::new("a/./b//c/../d")).unwrap();
        assert_eq!(c, ["a", "b", "d"]);
        assert!(components(Path::new("")).unwrap().is_empty());
        assert!(components(Path::new("a/..")).unwrap().is_empty());
        assert!(matches!(
            components(Path::new("a/../..")),
            Err(BeneathError::Escapes { .. })
        ));
        assert!(matches!(
            components(Path::new("/etc/passwd")),
            Err(BeneathError::Absolute { .. })
        ));
    }

    #[test]
    fn stripping_the_root() {
        let root = Path::new("/w/root");
        assert_eq!(
            strip_root(root, Path::new("/w/root/a/b")).unwrap(),
            Path::new("a/b")
        );
        assert_eq!(
            strip_root(root, Path::new("/w/root")).unwrap(),
            Path::new("")
        );
        assert_eq!(
            strip_root(root, Path::new("/w/x/../root/./a")).unwrap(),
            Path::new("a")
        );
        assert_eq!(
            strip_root(root, Path::new("a/./b")).unwrap(),
            Path::new("a/b")
        );
        for outside in ["/w/rootx/a", "/w/root/../x", "/etc/passwd", "/w"] {
            assert!(
                matches!(
                    strip_root(root, Path::new(outside)),
                    Err(BeneathError::NotUnderRoot { .. })
                ),
                "{outside}"
            );
        }
        assert!(matches!(
            strip_root(root, Path::new("../x")),
            Err(BeneathError::Escapes { .. })
        ));
    }

    proptest::proptest! {
        /// Whatever the agent spells, a stripped path is relative, has only plain names, and
        /// is the root or beneath it once joined.
        #[test]
        fn stripped_paths_are_plain_names_beneath_the_root(
            parts in proptest::collection::vec(
                proptest::sample::select(vec!["..", ".", "", "w", "root", "rootx", "a", "b"]),
                0..10,
            ),
            absolute in proptest::bool::ANY,
        ) {
            let root = Path::new("/w/root");
            let text = parts.join("/");
            let path = if absolute { format!("/{text}") } else { text };
            if let Ok(rel) = strip_root(root, Path::new(&path)) {
                proptest::prop_assert!(rel.is_relative());
                proptest::prop_assert!(rel.components().all(|c| matches!(c, Component::Normal(_))));
                proptest::prop_assert!(root.join(&rel).starts_with(root));
            }
            if let Ok(names) = components(Path::new(&path)) {
                proptest::prop_assert!(!absolute);
                proptest::prop_assert!(names.iter().all(|n| n != ".." && n != "." && !n.is_empty()));
            }
        }
    }
}
