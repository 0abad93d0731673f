//! One turn at a time per context, across every `legate` process that shares a home.
//!
//! Inside one process a context's turns already queue on an in-memory lock. Two processes (a
//! `legate run --context C` next to a `legate serve` working on C) would otherwise run turns
//! of C side by side, in one sandbox, on two agent sessions, and race to record the context's
//! sandbox. Each turn therefore also holds an exclusive lock on
//! `$LEGATE_HOME/run/contexts/<sha256 of the context id>.lock` from before its workspace is
//! chosen until it ends. The kernel releases it when the process dies, even after `kill -9`.
//!
//! The lock files are never removed: removing a lock file that another process has open and
//! is about to lock would let two holders coexist. They are empty, one per context.
//!
//! This module never decides what a turn does; it only says when it may start.

use legate_core::{Error, ErrorCode, Result};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How often a turn waiting on another process's turn looks again. Waiting is rare (two
/// processes on one context), so a short poll costs nothing in the common case and keeps the
/// wait cancellable.
const POLL: Duration = Duration::from_millis(50);

/// A context's turn, held until dropped.
#[derive(Debug)]
pub(crate) struct ContextTurn {
    _lock: File,
}

/// The lock file of `context_id` under `run_dir`. The id is hashed: it is never a path.
fn lock_path(run_dir: &Path, context_id: &str) -> PathBuf {
    let digest = Sha256::digest(context_id.as_bytes());
    let hex: String = digest[..16].iter().map(|b| format!("{b:02x}")).collect();
    run_dir.join("contexts").join(format!("{hex}.lock"))
}

/// Waits until no other process runs a turn of `context_id`, then holds its turn.
pub(crate) async fn claim(run_dir: &Path, context_id: &str) -> Result<ContextTurn> {
    let path = lock_path(run_dir, context_id);
    let file = open(&path)?;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(ContextTurn { _lock: file }),
            Err(TryLockError::WouldBlock) => tokio::time::sleep(POLL).await,
            Err(TryLockError::Error(e)) => return Err(io_error(&path, &e)),
        }
    }
}

fn open(path: &Path) -> Result<File> {
    if let Some(dir) = path.parent() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| io_error(dir, &e))?;
    }
    OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(path)
        .map_err(|e| io_error(path, &e))
}

fn io_error(path: &Path, e: &std::io::Error) -> Error {
    Error::new(
        ErrorCode::Internal,
        format!(
            "could not take the context's turn lock {}: {e}",
            path.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_second_claim_waits_for_the_first_to_drop() {
        let dir = tempfile::tempdir().unwrap();
        let first = claim(dir.path(), "ctx").await.unwrap();
        // Another open file description is another holder, as another process would be.
        let waiting = tokio::spawn({
            let run = dir.path().to_path_buf();
            async move { claim(&run, "ctx").await.map(|_| ()) }
        });
        tokio::time::sleep(POLL * 4).await;
        assert!(!waiting.is_finished(), "the second claim must wait");
        let other = claim(dir.path(), "another context").await.unwrap();
        drop(first);
        waiting.await.unwrap().unwrap();
        drop(other);
    }

    #[test]
    fn hostile_context_ids_stay_inside_the_lock_directory() {
        let run = Path::new("/legate/run");
        for id in ["..", "../x", "/etc", "a\0b", &"é".repeat(300)] {
            let path = lock_path(run, id);
            assert_eq!(path.parent().unwrap(), run.join("contexts"), "{id:?}");
            assert_eq!(path.file_name().unwrap().len(), 32 + ".lock".len());
        }
    }
}
