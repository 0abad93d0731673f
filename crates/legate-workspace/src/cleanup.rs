//! Removing copies and baselines.
//!
//! This module owns deleting a task's directories under `$LEGATE_HOME/copies/` and
//! `$LEGATE_HOME/baselines/`, and listing what is there for a retention sweep. Which tasks
//! may be removed (finished, past retention, not in use) is the engine's decision.
//!
//! It must never remove a symlink's target, anything that is not a plain directory directly
//! inside those two directories, or anything outside `$LEGATE_HOME`.

use legate_core::{Error, ErrorCode};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Removes `dir` if it is a plain directory directly inside `parent`, which must itself be
/// inside `home`. `Ok(false)` when it did not exist, or was removed meanwhile by someone else
/// (another process's sweep); `UNSAFE_PATH` for anything else.
pub fn remove_owned_dir(home: &Path, parent: &Path, dir: &Path) -> Result<bool, Error> {
    let refuse = |why: &str| {
        Error::new(
            ErrorCode::UnsafePath,
            format!("{} was not removed: {why}", dir.display()),
        )
    };
    let home = fs::canonicalize(home).map_err(|e| {
        let message = format!(
            "{} was not removed: LEGATE_HOME cannot be resolved",
            dir.display()
        );
        Error::caused_by(ErrorCode::UnsafePath, message, e)
    })?;
    let parent_real = match fs::canonicalize(parent) {
        Ok(p) => p,
        Err(_) => return Ok(false),
    };
    if !parent_real.starts_with(&home) || parent_real == home {
        return Err(refuse("it is not inside LEGATE_HOME"));
    }
    let Some(name) = dir.file_name() else {
        return Err(refuse("it has no name"));
    };
    if dir
        .parent()
        .map(fs::canonicalize)
        .transpose()
        .ok()
        .flatten()
        != Some(parent_real.clone())
    {
        return Err(refuse("it is not directly inside its parent"));
    }
    let target = parent_real.join(name);
    match fs::symlink_metadata(&target) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::caused_by(
            ErrorCode::UnsafePath,
            format!("{} was not removed", dir.display()),
            e,
        )),
        Ok(m) if m.file_type().is_symlink() => Err(refuse("it is a symbolic link")),
        Ok(m) if !m.is_dir() => Err(refuse("it is not a directory")),
        Ok(_) => match fs::remove_dir_all(&target) {
            Ok(()) => Ok(true),
            // Removed meanwhile by someone else (another process's sweep): gone, not by us.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => {
                let message = format!("{} could not be removed", target.display());
                Err(Error::caused_by(ErrorCode::Internal, message, e))
            }
        },
    }
}

/// The entries of `parent` (names and modification times), for a sweep. Missing: empty.
pub fn entries(parent: &Path) -> Vec<(String, PathBuf, Option<SystemTime>)> {
    let Ok(rd) = fs::read_dir(parent) else {
        return Vec::new();
    };
    rd.filter_map(Result::ok)
        .filter_map(|e| {
            let name = e.file_name().to_str()?.to_string();
            let modified = e.metadata().ok().and_then(|m| m.modified().ok());
            Some((name, e.path(), modified))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_directories_inside_home_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let home = tmp.path().join("home");
        let copies = home.join("copies");
        fs::create_dir_all(copies.join("t1/deep")).unwrap();
        fs::write(copies.join("t1/deep/f"), "x").unwrap();
        let outside = tmp.path().join("precious");
        fs::create_dir_all(&outside).unwrap();
        fs::write(outside.join("keep"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, copies.join("t2")).unwrap();

        assert!(remove_owned_dir(&home, &copies, &copies.join("t1")).unwrap());
        assert!(!copies.join("t1").exists());
        assert!(!remove_owned_dir(&home, &copies, &copies.join("t1")).unwrap());
        let err = remove_owned_dir(&home, &copies, &copies.join("t2")).unwrap_err();
        assert_eq!(err.code, ErrorCode::UnsafePath);
        assert!(outside.join("keep").exists());
        let err = remove_owned_dir(&home, tmp.path(), &outside).unwrap_err();
        assert_eq!(err.code, ErrorCode::UnsafePath);
        let err = remove_owned_dir(&home, &copies, &copies.join("../copies/../..")).unwrap_err();
        assert_eq!(err.code, ErrorCode::UnsafePath);
        assert!(outside.join("keep").exists());
    }
}
