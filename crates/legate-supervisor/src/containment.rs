//! Path containment: does a path an agent names stay inside its root?
//!
//! A path is resolved the way it will be used: a relative path is joined onto the root,
//! `.` and `..` are handled, and symlinks are followed as far as the path exists, so that
//! `/var/…` and `/private/var/…` (macOS) compare equal and a symlink planted inside the root
//! that points outside is seen for what it is.
//!
//! Two readings are checked and both must stay inside the root:
//!
//! * the **lexical** reading, which removes `..` by text first (as Node's `path.resolve` and
//!   most agents do) and then resolves symlinks;
//! * the **physical** reading, which walks the path one component at a time as the kernel
//!   does, so that `link/..` means the parent of the link's target.
//!
//! The returned path is the lexical reading.
//!
//! Paths are resolved **once**, at the moment of the check. A symlink planted inside the root
//! after the check is not seen (seed `000`, "What this does not protect against"): this is
//! enough for `/var` against `/private/var`, not against an adversary racing the check. The
//! kernel confinement of the agent process is what holds against that.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::fmt;
use std::fs;
use std::path::{Component, Path, PathBuf};

/// How many symlinks one resolution may follow before it gives up (Linux's `MAXSYMLINKS`).
const MAX_SYMLINK_HOPS: usize = 40;

/// A path that resolved outside its root, or could not be resolved at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outside {
    /// The path as the agent gave it.
    pub path: PathBuf,
    /// The root it had to stay in.
    pub root: PathBuf,
    /// Why it is not inside.
    pub why: OutsideWhy,
}

/// Why a path is not inside its root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutsideWhy {
    /// It resolves to a place outside the root.
    Escapes,
    /// Resolving it followed too many symlinks (a loop).
    SymlinkLoop,
}

impl fmt::Display for Outside {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.why {
            OutsideWhy::Escapes => write!(
                f,
                "{} is outside the root {}",
                self.path.display(),
                self.root.display()
            ),
            OutsideWhy::SymlinkLoop => write!(
                f,
                "{} cannot be resolved inside the root {} because its symlinks loop",
                self.path.display(),
                self.root.display()
            ),
        }
    }
}

impl std::error::Error for Outside {}

/// Resolves `path` against `root` and returns it if it stays inside `root`.
///
/// `root` should already be canonical (a [`legate_core::Boundary`]'s root is); it is
/// canonicalised again when it exists, which only ever makes the check more accurate.
/// The root itself counts as inside.
pub fn resolve_within(root: &Path, path: &Path) -> Result<PathBuf, Outside> {
    let root = fs::canonicalize(root).unwrap_or_else(|_| normalize(root));
    let outside = |why| Outside {
        path: path.to_path_buf(),
        root: root.clone(),
        why,
    };
    let joined = root.join(path);
    let lexical =
        resolve_physical(&normalize(&joined)).ok_or_else(|| outside(OutsideWhy::SymlinkLoop))?;
    let physical = resolve_physical(&joined).ok_or_else(|| outside(OutsideWhy::SymlinkLoop))?;
    if lexical.starts_with(&root) && physical.starts_with(&root) {
        Ok(lexical)
    } else {
        Err(outside(OutsideWhy::Escapes))
    }
}

/// Whether `path` resolves inside `root`; see [`resolve_within`].
pub fn is_within(root: &Path, path: &Path) -> bool {
    resolve_within(root, path).is_ok()
}

/// Removes `.` and `..` by text alone, never touching the file system. `..` at the top of
/// an absolute path stays at the top.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(_) | Component::RootDir => out.push(component.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() && !out.has_root() {
                    out.push("..");
                }
            }
            Component::Normal(name) => out.push(name),
        }
    }
    out
}

/// One step of a physical walk.
enum Step {
    Root(OsString),
    Parent,
    Name(OsString),
}

fn steps_of(path: &Path) -> Vec<Step> {
    path.components()
        .filter_map(|c| match c {
            Component::Prefix(_) | Component::RootDir => Some(Step::Root(c.as_os_str().into())),
            Component::CurDir => None,
            Component::ParentDir => Some(Step::Parent),
            Component::Normal(name) => Some(Step::Name(name.into())),
        })
        .collect()
}

/// Walks an absolute path as the kernel would, following every symlink that exists and
/// appending the part that does not exist as text. `None` when the symlinks loop.
fn resolve_physical(path: &Path) -> Option<PathBuf> {
    let mut pending: VecDeque<Step> = steps_of(path).into();
    let mut out = PathBuf::new();
    let mut hops = 0;
    while let Some(step) = pending.pop_front() {
        match step {
            Step::Root(root) => {
                out = PathBuf::from(root);
            }
            Step::Parent => {
                out.pop();
            }
            Step::Name(name) => {
                let next = out.join(&name);
                let is_link = fs::symlink_metadata(&next)
                    .map(|m| m.file_type().is_symlink())
                    .unwrap_or(false);
                if !is_link {
                    out = next;
                    continue;
                }
                hops += 1;
                if hops > MAX_SYMLINK_HOPS {
                    return None;
                }
                // An unreadable link is treated as the name itself: it cannot be followed by
                // anyone else either.
                let Ok(target) = fs::read_link(&next) else {
                    out = next;
                    continue;
                };
                for step in steps_of(&target).into_iter().rev() {
                    pending.push_front(step);
                }
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use proptest::prelude::*;
    use std::os::unix::fs::symlink;

    /// A temporary root with traps planted in it, and a directory outside it.
    struct Fixture {
        _tmp: tempfile::TempDir,
        root: PathBuf,
        outside: PathBuf,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        let root = base.join("root");
        let outside = base.join("outside");
        fs::create_dir_all(root.join("sub/deeper")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("secret"), "x").unwrap();
        fs::write(root.join("file"), "x").unwrap();
        symlink(&outside, root.join("out")).unwrap();
        symlink("../outside", root.join("rel")).unwrap();
        symlink("../..", root.join("sub/up")).unwrap();
        symlink("sub/deeper", root.join("inner")).unwrap();
        symlink(outside.join("not-yet"), root.join("dangling")).unwrap();
        symlink("loop", root.join("loop")).unwrap();
        symlink("/etc", root.join("etc")).unwrap();
        symlink(&root, base.join("alias")).unwrap();
        Fixture {
            _tmp: tmp,
            root,
            outside,
        }
    }

    #[test]
    fn plain_relative_and_absolute_paths_inside_are_allowed() {
        let f = fixture();
        assert_eq!(
            resolve_within(&f.root, Path::new("a/b.txt")).unwrap(),
            f.root.join("a/b.txt")
        );
        assert_eq!(
            resolve_within(&f.root, &f.root.join("file")).unwrap(),
            f.root.join("file")
        );
        assert_eq!(
            resolve_within(&f.root, Path::new("sub/../x")).unwrap(),
            f.root.join("x")
        );
        assert_eq!(resolve_within(&f.root, Path::new(".")).unwrap(), f.root);
    }

    #[test]
    fn symlinked_spelling_of_the_root_is_inside() {
        // The macOS case: /var/folders/… against /private/var/folders/….
        let f = fixture();
        let alias = f.root.parent().unwrap().join("alias");
        assert_eq!(
            resolve_within(&f.root, &alias.join("new.txt")).unwrap(),
            f.root.join("new.txt")
        );
        // A non-canonical root is canonicalised.
        assert!(resolve_within(&alias, &f.root.join("new.txt")).is_ok());
    }

    #[test]
    fn escapes_are_refused() {
        let f = fixture();
        for p in [
            "/etc/passwd",
            "../outside/secret",
            "out/secret",
            "out",
            "rel/x",
            "sub/up/outside",
            "dangling",
            "etc/passwd",
            "inner/../../../outside",
            "../../../../../../..",
        ] {
            let err = resolve_within(&f.root, Path::new(p)).unwrap_err();
            assert_eq!(err.why, OutsideWhy::Escapes, "{p}");
        }
        let err = resolve_within(&f.root, &f.outside.join("secret")).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{} is outside the root {}",
                f.outside.join("secret").display(),
                f.root.display()
            )
        );
    }

    #[test]
    fn a_link_followed_by_dotdot_is_read_both_ways() {
        let f = fixture();
        // Lexically `root/x`, physically `outside/../x`: refused.
        assert!(resolve_within(&f.root, Path::new("out/../x")).is_err());
        // Lexically `root/y`, physically `root/sub/deeper/../y` = `root/sub/y`: allowed.
        assert_eq!(
            resolve_within(&f.root, Path::new("inner/../y")).unwrap(),
            f.root.join("y")
        );
    }

    #[test]
    fn symlink_loops_are_refused() {
        let f = fixture();
        let err = resolve_within(&f.root, Path::new("loop/x")).unwrap_err();
        assert_eq!(err.why, OutsideWhy::SymlinkLoop);
        assert!(err.to_string().contains("loop"));
    }

    #[test]
    fn normalize_is_lexical() {
        assert_eq!(normalize(Path::new("/a/./b/../c")), PathBuf::from("/a/c"));
        assert_eq!(normalize(Path::new("/../..")), PathBuf::from("/"));
        assert_eq!(normalize(Path::new("a/../../b")), PathBuf::from("../b"));
    }

    /// Whether the kernel's own resolution of `p` (or, when `p` does not exist, of the
    /// directory a new entry named by `p` would be created in) is inside `root`, wherever
    /// the kernel can resolve it at all.
    fn kernel_agrees(root: &Path, p: &Path) -> bool {
        if let Ok(real) = fs::canonicalize(p) {
            return real.starts_with(root);
        }
        if !matches!(p.components().next_back(), Some(Component::Normal(_))) {
            return true;
        }
        match p.parent().map(fs::canonicalize) {
            Some(Ok(parent)) => parent.starts_with(root),
            _ => true,
        }
    }

    fn component() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("..".to_string()),
            Just(".".to_string()),
            Just("out".to_string()),
            Just("rel".to_string()),
            Just("sub".to_string()),
            Just("up".to_string()),
            Just("inner".to_string()),
            Just("dangling".to_string()),
            Just("loop".to_string()),
            Just("etc".to_string()),
            Just("file".to_string()),
            Just("secret".to_string()),
            Just("outside".to_string()),
            Just("root".to_string()),
            Just("alias".to_string()),
            Just("/".to_string()),
            Just("/etc".to_string()),
            Just("/tmp".to_string()),
            "[a-z]{1,3}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn never_returns_a_path_outside_the_root(
            parts in prop::collection::vec(component(), 0..10),
            absolute_root_prefix in any::<bool>(),
        ) {
            let f = fixture();
            let mut path = if absolute_root_prefix { f.root.clone() } else { PathBuf::new() };
            for part in &parts {
                path.push(part);
            }
            if let Ok(resolved) = resolve_within(&f.root, &path) {
                prop_assert!(resolved.starts_with(&f.root), "{resolved:?} from {path:?}");
                // The kernel agrees wherever it can see, for the path as given and for its
                // lexical reading.
                let joined = f.root.join(&path);
                for candidate in [joined.clone(), normalize(&joined)] {
                    prop_assert!(kernel_agrees(&f.root, &candidate), "kernel: {candidate:?} from {path:?}");
                }
            }
        }
    }
}
