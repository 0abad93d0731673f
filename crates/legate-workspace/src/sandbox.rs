//! Sandboxes: empty directories Legate makes, one per context.
//!
//! A sandbox is never named after its conversation. The context id is text a caller chose
//! (`..`, `/etc`, anything): joined onto a directory it could name the repository itself and
//! come back marked `owned` (seed `000`, "The boundary"). Sandboxes are therefore created with
//! `mkdtemp` semantics, which fail unless the directory is new, so two contexts cannot land in
//! one and no existing directory or symlink wearing the right name is ever adopted. The context
//! id survives only as a short alphanumeric label at the front of the name.

use legate_core::{Boundary, Error, ErrorCode};
use std::fs;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// How many alphanumerics of the context id label a sandbox's name.
const LABEL_LEN: usize = 8;

/// The label a sandbox for `context_id` carries: its first eight ASCII alphanumerics, or
/// `ctx` when it has none. Never more than that of the caller's text.
pub fn label(context_id: &str) -> String {
    let label: String = context_id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(LABEL_LEN)
        .collect();
    if label.is_empty() {
        "ctx".to_string()
    } else {
        label
    }
}

/// The sandbox for `context_id` under `sandboxes_dir`.
///
/// When `existing` (the directory the caller recorded for this context earlier) is still a
/// real directory, not a symlink, directly inside `sandboxes_dir`, it is returned again.
/// Otherwise a new directory `<label>-XXXXXX` is created, mode 0700, with creation failing
/// rather than adopting anything already there; the caller records it. `sandboxes_dir` is
/// created with mode 0700 when missing.
///
/// The boundary's root is canonical, `owned` is true and `allow_execute` false (a sandbox
/// runs commands because it is owned, not because of that flag).
pub fn sandbox(
    sandboxes_dir: &Path,
    context_id: &str,
    existing: Option<&Path>,
) -> Result<Boundary, Error> {
    let dir = sandboxes_root(sandboxes_dir)?;
    let root = match existing.and_then(|p| reusable(&dir, p)) {
        Some(root) => root,
        None => {
            if let Some(stale) = existing {
                tracing::warn!(
                    path = %stale.display(),
                    "the recorded sandbox is gone or no longer a plain directory; making a new one"
                );
            }
            create(&dir, context_id)?
        }
    };
    Ok(Boundary {
        root,
        owned: true,
        allow_execute: false,
    })
}

/// Makes `sandboxes_dir` (mode 0700) if missing and returns its canonical form.
fn sandboxes_root(sandboxes_dir: &Path) -> Result<PathBuf, Error> {
    if fs::symlink_metadata(sandboxes_dir).is_err() {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(sandboxes_dir)
            .map_err(|e| {
                Error::caused_by(
                    ErrorCode::InvalidWorkspace,
                    format!(
                        "the sandboxes directory {} could not be created",
                        sandboxes_dir.display()
                    ),
                    e,
                )
            })?;
    }
    let canonical = fs::canonicalize(sandboxes_dir).map_err(|e| {
        Error::caused_by(
            ErrorCode::InvalidWorkspace,
            format!(
                "the sandboxes directory {} cannot be resolved",
                sandboxes_dir.display()
            ),
            e,
        )
    })?;
    if !canonical.is_dir() {
        return Err(invalid(format!(
            "the sandboxes directory {} is not a directory",
            sandboxes_dir.display()
        )));
    }
    Ok(canonical)
}

/// `existing` as a canonical path, if it is a plain directory directly inside `dir` (which is
/// canonical). A symlink, a file, or anything elsewhere is not reused.
fn reusable(dir: &Path, existing: &Path) -> Option<PathBuf> {
    let name = existing.file_name()?;
    let parent = fs::canonicalize(existing.parent()?).ok()?;
    if parent != dir {
        return None;
    }
    let candidate = dir.join(name);
    let meta = fs::symlink_metadata(&candidate).ok()?;
    (meta.file_type().is_dir() && !meta.file_type().is_symlink()).then_some(candidate)
}

/// What the name of a warm session's sandbox starts with: `warm-<runner>-XXXXXX`. A context's
/// sandbox is `<label>-XXXXXX` with one hyphen, so no caller's context id can make a name the
/// sweep of warm sandboxes would take for one.
pub const WARM_PREFIX: &str = "warm-";

/// A new, empty sandbox for a warm session (an agent session opened before any task is known),
/// `warm-<runner>-XXXXXX` under `sandboxes_dir`, mode 0700: never reused, never adopted. A task
/// handed the session records it as its context's sandbox; one never handed over is removed by
/// the runner that made it, or after its death by the next start ([`warm_runner`] names it).
pub fn warm_sandbox(sandboxes_dir: &Path, runner: &str) -> Result<Boundary, Error> {
    if runner.is_empty() || !runner.chars().all(|c| c.is_ascii_alphanumeric()) {
        return Err(invalid(format!(
            "a runner id must be alphanumeric (got {runner:?})"
        )));
    }
    let dir = sandboxes_root(sandboxes_dir)?;
    let root = create_prefixed(&dir, &format!("{WARM_PREFIX}{runner}-"))?;
    Ok(Boundary {
        root,
        owned: true,
        allow_execute: false,
    })
}

/// The runner id in a warm sandbox's directory name, `None` for any other name.
pub fn warm_runner(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(WARM_PREFIX)?;
    let (runner, random) = rest.split_once('-')?;
    let plain = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric());
    (plain(runner) && plain(random)).then_some(runner)
}

/// How many random characters end a sandbox's name (`XXXXXX`).
const RANDOM_LEN: usize = 6;

/// Whether `name` is a context's sandbox as [`sandbox`] names them: `<label>-XXXXXX`, one to
/// eight ASCII letters and digits, one hyphen, six more. A warm session's sandbox
/// (`warm-<runner>-XXXXXX`) and every other name are not: a sweep of sandboxes no context
/// records leaves them.
pub fn is_context_sandbox(name: &str) -> bool {
    let Some((label, random)) = name.split_once('-') else {
        return false;
    };
    let plain = |s: &str| s.chars().all(|c| c.is_ascii_alphanumeric());
    (1..=LABEL_LEN).contains(&label.len())
        && random.len() == RANDOM_LEN
        && plain(label)
        && plain(random)
}

/// Creates a new, empty `<label>-XXXXXX` directory in `dir`, mode 0700.
fn create(dir: &Path, context_id: &str) -> Result<PathBuf, Error> {
    create_prefixed(dir, &format!("{}-", label(context_id)))
}

/// Creates a new, empty `<prefix>XXXXXX` directory in `dir`, mode 0700.
fn create_prefixed(dir: &Path, prefix: &str) -> Result<PathBuf, Error> {
    let created = tempfile::Builder::new()
        .prefix(prefix)
        .rand_bytes(RANDOM_LEN)
        .permissions(fs::Permissions::from_mode(0o700))
        .tempdir_in(dir)
        .map_err(|e| {
            Error::caused_by(
                ErrorCode::InvalidWorkspace,
                format!("a sandbox could not be created in {}", dir.display()),
                e,
            )
        })?
        .keep();
    fs::canonicalize(&created).map_err(|e| {
        Error::caused_by(
            ErrorCode::InvalidWorkspace,
            format!("the new sandbox {} cannot be resolved", created.display()),
            e,
        )
    })
}

fn invalid(message: String) -> Error {
    Error::new(ErrorCode::InvalidWorkspace, message)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use proptest::prelude::*;
    use std::collections::HashSet;
    use std::os::unix::fs::symlink;

    struct Home {
        _tmp: tempfile::TempDir,
        base: PathBuf,
        sandboxes: PathBuf,
    }

    fn home() -> Home {
        let tmp = tempfile::tempdir().unwrap();
        let base = fs::canonicalize(tmp.path()).unwrap();
        Home {
            sandboxes: base.join("state/sandboxes"),
            base,
            _tmp: tmp,
        }
    }

    fn mode_of(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn warm_sandboxes_are_named_for_their_runner_and_no_context_can_forge_one() {
        let h = home();
        let b = warm_sandbox(&h.sandboxes, "abc123def456").unwrap();
        assert!(b.owned);
        assert_eq!(b.root.parent().unwrap(), h.sandboxes);
        assert_eq!(mode_of(&b.root), 0o700);
        let name = b.root.file_name().unwrap().to_str().unwrap();
        assert_eq!(warm_runner(name), Some("abc123def456"));
        assert!(warm_sandbox(&h.sandboxes, "../x").is_err());
        // A context named like a warm sandbox gets a one-hyphen name the sweep never reads.
        for ctx in ["warm-abc123def456", "warm", "warm-x-y"] {
            let c = sandbox(&h.sandboxes, ctx, None).unwrap();
            let name = c.root.file_name().unwrap().to_str().unwrap();
            assert_eq!(warm_runner(name), None, "{name}");
        }
        assert_eq!(warm_runner("warm-abc"), None);
        assert_eq!(warm_runner("warm--abcdef"), None);
    }

    #[test]
    fn context_sandboxes_are_told_by_name_from_warm_ones_and_anything_else() {
        let h = home();
        for ctx in ["conversation-42", "..", "warm-abc123def456", "x"] {
            let b = sandbox(&h.sandboxes, ctx, None).unwrap();
            let name = b.root.file_name().unwrap().to_str().unwrap();
            assert!(is_context_sandbox(name), "{name}");
        }
        let warm = warm_sandbox(&h.sandboxes, "abc123def456").unwrap();
        let name = warm.root.file_name().unwrap().to_str().unwrap();
        assert!(!is_context_sandbox(name), "{name}");
        for other in [
            "",
            "abc",
            "-abcdef",
            "abcdefghi-abcdef",
            "abc-abcde",
            "abc-abcdefg",
            "abc-ab.def",
            "a.c-abcdef",
            "abc-abc-de",
            "warm-x-abcdef",
        ] {
            assert!(!is_context_sandbox(other), "{other}");
        }
    }

    #[test]
    fn labels_take_eight_ascii_alphanumerics() {
        assert_eq!(label("../x"), "x");
        assert_eq!(label(".."), "ctx");
        assert_eq!(label(""), "ctx");
        assert_eq!(label("/etc/passwd"), "etcpassw");
        assert_eq!(label("ctx-2024-06-01T12:00"), "ctx20240");
        assert_eq!(label("héllo wörld"), "hllowrld");
        assert_eq!(label("\0\0"), "ctx");
    }

    #[test]
    fn creates_the_state_dir_and_a_private_labelled_sandbox() {
        let h = home();
        let b = sandbox(&h.sandboxes, "conversation-42", None).unwrap();
        assert!(b.owned);
        assert!(!b.allow_execute);
        assert_eq!(b.root.parent().unwrap(), h.sandboxes);
        let name = b.root.file_name().unwrap().to_str().unwrap();
        assert!(name.starts_with("conversa-"), "{name}");
        assert_eq!(name.len(), "conversa-".len() + 6);
        assert!(fs::read_dir(&b.root).unwrap().next().is_none(), "not empty");
        assert_eq!(mode_of(&h.sandboxes), 0o700);
        assert_eq!(mode_of(&b.root), 0o700);
    }

    #[test]
    fn the_same_context_gets_its_recorded_sandbox_back() {
        let h = home();
        let first = sandbox(&h.sandboxes, "ctx-a", None).unwrap();
        fs::write(first.root.join("work.txt"), "x").unwrap();
        let again = sandbox(&h.sandboxes, "ctx-a", Some(&first.root)).unwrap();
        assert_eq!(again, first);
        // Also through a non-canonical spelling of the same directory.
        symlink(&h.sandboxes, h.base.join("alias")).unwrap();
        let alias = h.base.join("alias").join(first.root.file_name().unwrap());
        assert_eq!(sandbox(&h.sandboxes, "ctx-a", Some(&alias)).unwrap(), first);
    }

    #[test]
    fn never_reuses_what_is_not_a_plain_sandbox() {
        let h = home();
        let real = sandbox(&h.sandboxes, "a", None).unwrap();
        let outside = h.base.join("project");
        fs::create_dir_all(&outside).unwrap();
        let link = h.sandboxes.join("a-link00");
        symlink(&outside, &link).unwrap();
        let file = h.sandboxes.join("a-file00");
        fs::write(&file, "x").unwrap();
        let nested = real.root.join("nested");
        fs::create_dir(&nested).unwrap();
        for stale in [
            outside.clone(),
            link.clone(),
            file.clone(),
            nested.clone(),
            h.sandboxes.join("gone-000000"),
            h.sandboxes.clone(),
            real.root.join(".."),
            PathBuf::from("/"),
            PathBuf::from(".."),
        ] {
            let b = sandbox(&h.sandboxes, "a", Some(&stale)).unwrap();
            assert_ne!(b.root, real.root, "{stale:?}");
            assert_eq!(b.root.parent().unwrap(), h.sandboxes, "{stale:?}");
            assert!(
                !fs::symlink_metadata(&b.root)
                    .unwrap()
                    .file_type()
                    .is_symlink()
            );
        }
    }

    #[test]
    fn a_sandboxes_dir_that_is_a_file_is_an_invalid_workspace() {
        let h = home();
        fs::create_dir_all(h.sandboxes.parent().unwrap()).unwrap();
        fs::write(&h.sandboxes, "x").unwrap();
        let err = sandbox(&h.sandboxes, "a", None).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidWorkspace);
        assert!(err.message.contains(&h.sandboxes.display().to_string()));
    }

    fn context_id() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("..".to_string()),
            Just("../x".to_string()),
            Just("../../..".to_string()),
            Just("/etc".to_string()),
            Just(".".to_string()),
            Just(String::new()),
            Just("a\0b".to_string()),
            Just("ctx".to_string()),
            "\\PC{0,200}",
            any::<String>(),
            "[a-z./\\\\]{0,20}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn sandboxes_stay_in_their_directory_and_never_collide(
            ids in prop::collection::vec(context_id(), 1..6),
        ) {
            let h = home();
            let mut seen = HashSet::new();
            for id in &ids {
                let b = sandbox(&h.sandboxes, id, None).unwrap();
                prop_assert!(b.owned);
                let canonical = fs::canonicalize(&b.root).unwrap();
                prop_assert_eq!(&canonical, &b.root);
                prop_assert_eq!(canonical.parent().unwrap(), h.sandboxes.as_path());
                let name = canonical.file_name().unwrap().to_str().unwrap().to_string();
                let prefix = label(id) + "-";
                prop_assert!(name.starts_with(&prefix), "{name} lacks {prefix}");
                prop_assert!(seen.insert(canonical), "two contexts got one directory");
            }
        }
    }
}
