//! Shared directories: a directory the user named. Legate did not make it, so it is never
//! `owned`, whatever it contains.

use legate_core::{Boundary, Error, ErrorCode};
use std::fs;
use std::path::Path;

/// A boundary for the existing directory `dir`: its canonical path, `owned: false`.
///
/// `dir` must exist and be a directory (a symlink to one is resolved); a path that merely
/// exists is refused with `INVALID_WORKSPACE`.
pub fn shared(dir: &Path, allow_execute: bool) -> Result<Boundary, Error> {
    let invalid = |why: String| {
        Error::new(
            ErrorCode::InvalidWorkspace,
            format!("the workspace {} {why}", dir.display()),
        )
    };
    let root = fs::canonicalize(dir).map_err(|e| {
        Error::caused_by(
            ErrorCode::InvalidWorkspace,
            format!("the workspace {} cannot be resolved", dir.display()),
            e,
        )
    })?;
    let meta = fs::metadata(&root).map_err(|e| {
        Error::caused_by(
            ErrorCode::InvalidWorkspace,
            format!("the workspace {} cannot be read", dir.display()),
            e,
        )
    })?;
    if !meta.is_dir() {
        return Err(invalid("is not a directory".to_string()));
    }
    Ok(Boundary {
        root,
        owned: false,
        allow_execute,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn a_directory_is_resolved_and_not_owned() {
        let tmp = tempfile::tempdir().unwrap();
        let real = fs::canonicalize(tmp.path()).unwrap();
        fs::create_dir(real.join("proj")).unwrap();
        symlink(real.join("proj"), real.join("link")).unwrap();
        for (given, exec) in [(real.join("proj"), false), (real.join("link"), true)] {
            let b = shared(&given, exec).unwrap();
            assert_eq!(b.root, real.join("proj"));
            assert!(!b.owned);
            assert_eq!(b.allow_execute, exec);
        }
        let b = shared(&real.join("proj/../proj/."), false).unwrap();
        assert_eq!(b.root, real.join("proj"));
    }

    #[test]
    fn a_file_or_a_missing_path_is_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("file");
        fs::write(&file, "x").unwrap();
        let missing = tmp.path().join("missing");
        let dangling = tmp.path().join("dangling");
        symlink(&missing, &dangling).unwrap();
        for bad in [&file, &missing, &dangling] {
            let err = shared(bad, true).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidWorkspace);
            assert!(
                err.message.contains(&bad.display().to_string()),
                "{}",
                err.message
            );
        }
        assert!(
            shared(&file, false)
                .unwrap_err()
                .message
                .ends_with("is not a directory")
        );
    }
}
