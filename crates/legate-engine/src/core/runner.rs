//! Which process runs which task, and what happens to tasks whose process died.
//!
//! Every engine is a *runner* with a random id and holds an exclusive lock on
//! `$LEGATE_HOME/run/<id>.lock` for as long as it lives. Tasks record their runner. At start,
//! a runner whose lock can be taken is dead (the kernel released its lock when it died, even
//! after `kill -9`), and its unfinished tasks become `failed` with `SERVER_RESTARTED`. They are
//! never re-run silently. Lock files cannot be fooled by pid reuse, unlike pids.
//!
//! Every agent process a runner starts carries `LEGATE_RUNNER=<id>` in its environment, and so
//! does everything it starts in turn. Agents die with their runner (a parent-death signal), but
//! a command an agent was running may not; recovery kills whatever still carries a dead
//! runner's id.
//!
//! Recovery also settles the copies of the copy tasks it ends (`leftovers`): removed, unless
//! the task was submitted with `keep_interrupted_copies`; always removed when half made.
//!
//! One kind of task survives its runner: one whose turn runs on a remote server (its
//! `remote` is set) and whose backend can follow it after a restart. Recovery leaves it
//! unfinished and claimed by the dead runner; a live engine takes it over (`adoption`).

use crate::config::Paths;
use legate_core::{Error, ErrorCode, Result};
use legate_store::Store;
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};

/// This process's identity as a runner, alive while the value lives.
#[derive(Debug)]
pub struct Runner {
    id: String,
    path: PathBuf,
    _lock: File,
}

impl Runner {
    /// Claims a new runner identity under `run_dir`.
    pub fn claim(run_dir: &Path) -> Result<Runner> {
        {
            use std::os::unix::fs::DirBuilderExt;
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(run_dir)
                .map_err(|e| io_error(run_dir, &e))?;
        }
        let id = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
        let path = run_dir.join(format!("{id}.lock"));
        let file = OpenOptions::new()
            .create_new(true)
            .write(true)
            .open(&path)
            .map_err(|e| io_error(&path, &e))?;
        file.try_lock().map_err(|e| {
            Error::caused_by(
                ErrorCode::Internal,
                format!("could not lock {}", path.display()),
                e,
            )
        })?;
        Ok(Runner {
            id,
            path,
            _lock: file,
        })
    }

    /// The runner id recorded on tasks.
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for Runner {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Whether the runner `id` is still alive (its lock is held by a process).
pub fn is_alive(run_dir: &Path, id: &str) -> bool {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric()) {
        return false;
    }
    let path = run_dir.join(format!("{id}.lock"));
    // Only a missing lock file or a lock we can take means dead. Any other error (no file
    // descriptors left, a permission problem) says nothing, and calling a live runner dead
    // would fail its running tasks.
    let file = match OpenOptions::new().write(true).open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return false,
        Err(_) => return true,
    };
    match file.try_lock() {
        Ok(()) => {
            // We got the lock: its owner is gone. Remove the stale file.
            let _ = std::fs::remove_file(&path);
            false
        }
        Err(TryLockError::WouldBlock | TryLockError::Error(_)) => true,
    }
}

/// Which agents' interrupted tasks recovery leaves for an engine to re-attach, when they are
/// bound to a remote task: `Some(agent)` is true when the agent's backend can follow a remote
/// task after a restart. A process that knows no backends (`legate show`, a follower) passes
/// [`SPARE_EVERY_REMOTE`]: the next engine decides (`adoption`).
pub type Reattaches<'a> = &'a dyn Fn(&str) -> bool;

/// [`Reattaches`] for a process without backends: every task bound to a remote task is left
/// for an engine, which re-attaches it or fails it with `SERVER_RESTARTED` itself.
pub const SPARE_EVERY_REMOTE: Reattaches<'static> = &|_| true;

/// Marks the unfinished tasks of every dead runner (their locks under `paths.run()`) `failed`
/// with `SERVER_RESTARTED`, kills what those runners left running, and removes the copies of
/// the copy tasks it ended (see `leftovers`); then finishes the integrations a crash
/// interrupted (`integration_recovery`). A task bound to a remote task whose agent
/// `reattaches` is left unfinished, still claimed by the dead runner, for an engine to take
/// over (`adoption`): it is not killed, its copy is kept, and it has no local approvals to
/// expire. Returns how many tasks were marked. Safe to run from any process at any time.
pub fn recover(store: &Store, paths: &Paths, reattaches: Reattaches<'_>) -> Result<usize> {
    let marked = recover_others(store, paths, None, reattaches)?;
    crate::core::integration_recovery::recover_integrations(store, &paths.run());
    Ok(marked)
}

/// [`recover`], never touching runner `own` (the caller's own, alive by definition).
pub fn recover_others(
    store: &Store,
    paths: &Paths,
    own: Option<&str>,
    reattaches: Reattaches<'_>,
) -> Result<usize> {
    let run_dir = paths.run();
    let mut marked = 0;
    for runner in store.unfinished_runners()? {
        if Some(runner.as_str()) == own || is_alive(&run_dir, &runner) {
            continue;
        }
        let error = Error::new(
            ErrorCode::ServerRestarted,
            "the legate process running this task stopped before the task ended; it was not re-run",
        );
        let ids = store.fail_unfinished_sparing(Some(&runner), &error, reattaches)?;
        // Their agents are gone: nobody will read an answer to what they asked.
        let expired = store.expire_approvals_of(
            &ids,
            "the Legate process running the task stopped while the approval waited",
        )?;
        if expired > 0 {
            tracing::warn!(runner = %runner, approvals = expired, "expired approvals of a dead runner's tasks");
        }
        let killed = kill_leftovers(&runner);
        if killed > 0 {
            tracing::warn!(runner = %runner, processes = killed, "killed processes left by a dead runner");
        }
        if !ids.is_empty() {
            tracing::warn!(runner = %runner, tasks = ids.len(), "marked tasks of a dead runner as failed");
        }
        // After the kill: nothing the dead run started writes into a copy being removed.
        let removed = crate::core::leftovers::settle_interrupted(store, paths, &ids);
        if removed > 0 {
            tracing::info!(runner = %runner, copies = removed, "removed copies of interrupted tasks");
        }
        marked += ids.len();
    }
    Ok(marked)
}

/// The environment variable that tags processes with the runner that started them.
pub const RUNNER_ENV: &str = "LEGATE_RUNNER";

pub use crate::core::leftover_processes::kill_leftovers;

fn io_error(path: &Path, e: &std::io::Error) -> Error {
    Error::new(
        ErrorCode::Internal,
        format!("could not use {}: {e}", path.display()),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_held_lock_is_alive_and_a_dropped_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let r = Runner::claim(dir.path()).unwrap();
        let id = r.id().to_string();
        assert!(is_alive(dir.path(), &id));
        drop(r);
        assert!(!is_alive(dir.path(), &id));
        assert!(!is_alive(dir.path(), "../../etc/passwd"));
        assert!(!is_alive(dir.path(), "nosuchrunner"));
    }

    #[test]
    fn a_lock_that_cannot_be_opened_is_not_called_dead() {
        // Any error other than a missing file (here: the lock path is a directory; in life,
        // no file descriptors left) says nothing about the runner, which must not be failed.
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("abc123.lock")).unwrap();
        assert!(is_alive(dir.path(), "abc123"));
    }
}
