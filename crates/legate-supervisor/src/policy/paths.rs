//! A rule's `paths`: globs relative to the workspace root, matched against the locations a
//! request names after they are resolved and contained.
//!
//! Each location is resolved with [`crate::containment::resolve_within`] (symlinks followed
//! as far as the path exists, both the lexical and the physical reading inside the root).
//! A location outside the root has no path relative to it and matches no glob. A location
//! inside is matched in two forms: as named (`..` and `.` removed by text) and as resolved
//! (symlinks followed). An `allow` needs every location inside the root and both forms of each
//! matched; a `deny` or `ask` is taken when either form of any location matches (and, in
//! the rule, for a file call that names no location at all).
//!
//! Globs use `globset` with `*` and `?` never crossing a `/` (`**` does). A glob that is
//! absolute, empty, or has a `..` component is refused when the policy loads.

use crate::containment::{normalize, resolve_within};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use std::path::{Component, Path, PathBuf};

/// A compiled list of globs.
#[derive(Debug, Clone)]
pub struct Globs {
    set: GlobSet,
    /// The globs as written, for listings.
    pub written: Vec<String>,
}

/// Why a glob was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadGlob {
    /// The glob as written.
    pub glob: String,
    /// Why.
    pub why: String,
}

impl Globs {
    /// Compiles `globs`, each relative to the root.
    pub fn new(globs: &[String]) -> Result<Globs, BadGlob> {
        let mut builder = GlobSetBuilder::new();
        for glob in globs {
            let bad = |why: &str| BadGlob {
                glob: glob.clone(),
                why: why.to_string(),
            };
            if glob.is_empty() {
                return Err(bad("is empty"));
            }
            let path = Path::new(glob);
            if glob.starts_with('/') || path.is_absolute() {
                return Err(bad("is absolute; globs are relative to the root"));
            }
            if path.components().any(|c| c == Component::ParentDir) {
                return Err(bad("has a `..` component; globs stay inside the root"));
            }
            let compiled = GlobBuilder::new(glob)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| bad(&e.kind().to_string()))?;
            builder.add(compiled);
        }
        // Kept as text: `BadGlob` becomes one sentence of a `PolicyError` (see `load`).
        let set = builder.build().map_err(|e| BadGlob {
            glob: globs.join(", "),
            why: e.to_string(),
        })?;
        Ok(Globs {
            set,
            written: globs.to_vec(),
        })
    }

    /// Whether a path relative to the root matches one of the globs.
    pub fn matches_relative(&self, relative: &Path) -> bool {
        self.set.is_match(relative)
    }
}

/// A location, resolved against the root once per request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Inside the root: as named (by text) and as resolved (symlinks followed), both relative.
    Inside { named: PathBuf, resolved: PathBuf },
    /// Outside the root, or not resolvable (a symlink loop).
    Outside,
}

/// Resolves every location of a request against `root`.
pub fn places(root: &Path, locations: &[PathBuf]) -> Vec<Place> {
    let canonical = std::fs::canonicalize(root).unwrap_or_else(|_| normalize(root));
    locations
        .iter()
        .map(|location| place(root, &canonical, location))
        .collect()
}

fn place(root: &Path, canonical: &Path, location: &Path) -> Place {
    let Ok(resolved) = resolve_within(root, location) else {
        return Place::Outside;
    };
    let named = normalize(&canonical.join(location));
    let (Ok(named), Ok(resolved)) = (
        named.strip_prefix(canonical),
        resolved.strip_prefix(canonical),
    ) else {
        // Named by another spelling of the root (a symlink to it): only the resolved form
        // is known to be inside, so it stands for both.
        return match resolved.strip_prefix(canonical) {
            Ok(r) => Place::Inside {
                named: r.to_path_buf(),
                resolved: r.to_path_buf(),
            },
            Err(_) => Place::Outside,
        };
    };
    Place::Inside {
        named: named.to_path_buf(),
        resolved: resolved.to_path_buf(),
    }
}

/// Whether every place is inside and matched in both forms (an `allow`'s test); false for
/// no places.
pub fn all_match(globs: &Globs, places: &[Place]) -> bool {
    !places.is_empty()
        && places.iter().all(|p| match p {
            Place::Inside { named, resolved } => {
                globs.matches_relative(named) && globs.matches_relative(resolved)
            }
            Place::Outside => false,
        })
}

/// Whether any place inside is matched in either form (a `deny`'s or `ask`'s test).
pub fn any_match(globs: &Globs, places: &[Place]) -> bool {
    places.iter().any(|p| match p {
        Place::Inside { named, resolved } => {
            globs.matches_relative(named) || globs.matches_relative(resolved)
        }
        Place::Outside => false,
    })
}
