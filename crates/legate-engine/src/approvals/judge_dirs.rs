//! The supervising agent's directories: one per question, `$LEGATE_HOME/judges/<runner>-<id>/`,
//! holding the empty directory it works in (`work/`) and a home of its own (`home/`: its
//! `HOME`, `XDG_*` directories and temp directory), both new for the question and removed
//! with it; and the sweep of those a stopped Legate left (at engine start and by
//! `legate cleanup`).
//!
//! The runner id at the front of each name says which engine made it, since several engines
//! may share a home: the sweep removes only the directories of runners that are no longer
//! alive (`runner::is_alive`: their lock was released, even by `kill -9`), never this
//! engine's nor another live one's. It never removes anything outside `$LEGATE_HOME/judges/`
//! and never follows a link there.

use crate::config::Paths;
use legate_core::{Boundary, Error, ErrorCode, Result};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// The directory, inside `$LEGATE_HOME`, of the questions' directories.
pub(crate) const JUDGES_DIR: &str = "judges";

/// One question's directories, removed when dropped (a drop included: a cancel or the
/// deadline while the judge thinks).
#[derive(Debug)]
pub(crate) struct QuestionDir {
    dir: PathBuf,
    work: PathBuf,
    home: PathBuf,
}

impl QuestionDir {
    /// Makes `$LEGATE_HOME/judges/<runner>-<id>/` with an empty `work/` and `home/` (every
    /// directory mode 0700, the question's own never one that exists).
    pub(crate) fn create(paths: &Paths, runner: &str) -> Result<Self> {
        let judges = paths.home().join(JUDGES_DIR);
        private_dir(&judges, true)?;
        let name = format!("{runner}-{}", uuid::Uuid::new_v4().simple());
        let made = judges.join(name);
        private_dir(&made, false)?;
        // Removed from here on, whatever fails next.
        let mut question = Self {
            dir: made.clone(),
            work: PathBuf::new(),
            home: PathBuf::new(),
        };
        let dir = std::fs::canonicalize(&made).map_err(|e| failed(&made, e))?;
        let (work, home) = (dir.join("work"), dir.join("home"));
        private_dir(&work, false)?;
        private_dir(&home, false)?;
        question.work = work;
        question.home = home;
        Ok(question)
    }

    /// Where the judge works: an empty directory Legate owns, with no command allowed.
    pub(crate) fn boundary(&self) -> Boundary {
        Boundary {
            root: self.work.clone(),
            owned: true,
            allow_execute: false,
        }
    }

    /// The judge's home for this question (its state directory).
    pub(crate) fn home(&self) -> &Path {
        &self.home
    }
}

impl Drop for QuestionDir {
    fn drop(&mut self) {
        if let Err(e) = std::fs::remove_dir_all(&self.dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(dir = %self.dir.display(), error = %e, "a supervising agent's directory was left; the next start or `legate cleanup` removes it");
        }
    }
}

/// Removes the question directories of every runner that is not alive (`own` is the
/// caller's runner, alive by definition, and never touched). Returns how many were removed.
/// A name without a runner id in front (left by an older Legate, which put none) counts as
/// a stopped runner's.
pub(crate) fn sweep(paths: &Paths, own: Option<&str>) -> usize {
    let judges = paths.home().join(JUDGES_DIR);
    let Ok(entries) = std::fs::read_dir(&judges) else {
        return 0;
    };
    let run_dir = paths.run();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(runner) = name.to_str().and_then(|n| n.split('-').next()) else {
            continue;
        };
        if Some(runner) == own || crate::core::runner::is_alive(&run_dir, runner) {
            continue;
        }
        let path = entry.path();
        // Never followed: a link (which Legate does not make here) goes, not its target.
        let gone = match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(e) => Err(e),
        };
        match gone {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "could not remove a stopped Legate's supervising-agent directory");
            }
        }
    }
    if removed > 0 {
        tracing::info!(
            dirs = removed,
            "removed supervising-agent directories of stopped Legate processes"
        );
    }
    removed
}

fn private_dir(dir: &Path, recursive: bool) -> Result<()> {
    let made = std::fs::DirBuilder::new()
        .recursive(recursive)
        .mode(0o700)
        .create(dir);
    made.map_err(|e| failed(dir, e))
}

fn failed(dir: &Path, e: std::io::Error) -> Error {
    Error::caused_by(
        ErrorCode::AgentStartFailed,
        format!(
            "could not make the supervising agent's directory {}",
            dir.display()
        ),
        e,
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_question_gets_new_empty_directories_removed_with_it() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = Paths::new(tmp.path());
        let one = QuestionDir::create(&paths, "abc123").unwrap();
        let two = QuestionDir::create(&paths, "abc123").unwrap();
        assert_ne!(one.home(), two.home());
        std::fs::write(one.home().join("memory"), "x").unwrap();
        assert_eq!(std::fs::read_dir(two.home()).unwrap().count(), 0);
        assert_eq!(std::fs::read_dir(one.boundary().root).unwrap().count(), 0);
        let dir = one.dir.clone();
        drop(one);
        assert!(!dir.exists());
        drop(two);
        let left = std::fs::read_dir(tmp.path().join(JUDGES_DIR)).unwrap();
        assert_eq!(left.count(), 0);
    }

    #[test]
    fn the_sweep_spares_live_runners_and_removes_the_rest() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = Paths::new(tmp.path());
        let live = crate::core::runner::Runner::claim(&paths.run()).unwrap();
        let mine = QuestionDir::create(&paths, "own000000000").unwrap();
        let theirs = QuestionDir::create(&paths, live.id()).unwrap();
        let dead = QuestionDir::create(&paths, "dead00000000").unwrap();
        let legacy = tmp.path().join(JUDGES_DIR).join("judge-Ab12Cd");
        std::fs::create_dir(&legacy).unwrap();
        let outside = tempfile::tempdir().unwrap();
        let link = tmp.path().join(JUDGES_DIR).join("link");
        std::os::unix::fs::symlink(outside.path(), &link).unwrap();
        let dead_dir = dead.dir.clone();
        std::mem::forget(dead); // as after `kill -9`

        assert_eq!(sweep(&paths, Some("own000000000")), 3);
        assert!(mine.home().exists(), "this engine's question is kept");
        assert!(theirs.home().exists(), "a live engine's question is kept");
        assert!(!dead_dir.exists() && !legacy.exists() && !link.exists());
        assert!(outside.path().exists(), "a link's target is never touched");
    }
}
