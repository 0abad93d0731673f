//! Workspaces blocked after an agent process group that could not be shown to be gone.
//!
//! Both drivers use this one mechanism: after every `agy` run, and after every ACP session
//! shutdown, the driver checks that the process group has no member left and reports it as
//! a `workspace` event whose detail is [`report`]'s `processCleanup`. When it cannot show
//! that, the workspace root is marked in the agent's state directory
//! (`blocked/<hash>.json`, holding the root and the group id), and every later run or session in
//! that root fails with `PROCESS_CLEANUP_UNVERIFIED` until a new observation finds the group gone,
//! which lifts the mark. Nothing here kills anything: it only observes and records.

use crate::acp::sys;
use legate_core::{Error, ErrorCode, Result};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Serialize, Deserialize)]
struct Mark {
    root: PathBuf,
    pgid: i32,
}

/// FNV-1a, 64 bits: a stable file name for a root (the mark holds the root itself).
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}

fn mark_path(state_dir: &Path, root: &Path) -> PathBuf {
    use std::os::unix::ffi::OsStrExt;
    state_dir
        .join("blocked")
        .join(format!("{:016x}.json", hash(root.as_os_str().as_bytes())))
}

/// Whether the process group `pgid` has a member that is not a zombie.
///
/// A zombie holds no pipe, no file and runs nothing; it only waits for its parent (or, once
/// orphaned, init) to reap it, which some inits do only every second or two. So a group whose
/// members are all zombies counts as gone. On Linux the members are read from `/proc`; where
/// `/proc` cannot be read, any member (zombies included) counts.
pub fn group_alive(pgid: i32) -> bool {
    if pgid <= 0 || !sys::group_exists(pgid) {
        return false;
    }
    live_member_in_proc(pgid).unwrap_or(true)
}

/// `Some(true)` when `/proc` shows a member of `pgid` that is not a zombie, `Some(false)`
/// when it shows none, `None` when `/proc` cannot be read.
fn live_member_in_proc(pgid: i32) -> Option<bool> {
    let entries = std::fs::read_dir("/proc").ok()?;
    let mut seen_any = false;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        seen_any = true;
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid pgrp …`: comm may hold anything, so split after its `)`.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next();
        let pgrp = fields.nth(1).and_then(|f| f.parse::<i32>().ok());
        if pgrp == Some(pgid) && !matches!(state, Some("Z" | "X" | "x")) {
            return Some(true);
        }
    }
    seen_any.then_some(false)
}

/// Whether the process group `pgid` is gone (no member but zombies), observed for up to
/// `within`.
pub async fn verify_gone(pgid: i32, within: Duration) -> bool {
    if pgid <= 0 {
        return false;
    }
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if !group_alive(pgid) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The `workspace` event that records one cleanup: its detail is
/// `{"processCleanup": {"verified", "pgid", "stopped", "signals"}}`; `what` names the process
/// for the message (`agy`, `agent`).
pub fn report(
    what: &str,
    verified: bool,
    pgid: i32,
    stopped: bool,
    signals: &[&str],
) -> legate_core::EventKind {
    legate_core::EventKind::Workspace {
        message: if verified {
            format!("{what} process cleanup verified: its process group is gone")
        } else {
            format!("{what} process cleanup NOT verified: process group {pgid} still has members")
        },
        detail: serde_json::json!({
            "processCleanup": { "verified": verified, "pgid": pgid, "stopped": stopped, "signals": signals }
        }),
    }
}

/// Marks `root` as blocked by the unverified group `pgid`.
pub fn block(state_dir: &Path, root: &Path, pgid: i32) -> std::io::Result<()> {
    let body = serde_json::to_vec(&Mark {
        root: root.to_path_buf(),
        pgid,
    })?;
    crate::agy::usage::write_private(&mark_path(state_dir, root), &body)
}

/// `PROCESS_CLEANUP_UNVERIFIED` when `root` is marked and its group still has members; a mark
/// whose group is gone now is removed.
pub fn check(state_dir: &Path, root: &Path) -> Result<()> {
    let path = mark_path(state_dir, root);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(());
    };
    let mark: Option<Mark> = serde_json::from_str(&text).ok();
    match mark {
        Some(m) if m.root == root && group_alive(m.pgid) => Err(Error::new(
            ErrorCode::ProcessCleanupUnverified,
            format!(
                "the workspace {} is blocked: process group {} of an earlier agent process could not be shown to be gone; stop it (kill -KILL -{}) and try again",
                root.display(),
                m.pgid,
                m.pgid
            ),
        )),
        Some(m) if m.root != root => Ok(()),
        _ => {
            let _ = std::fs::remove_file(&path);
            tracing::info!(root = %root.display(), "an earlier unverified cleanup is now verified; workspace unblocked");
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[tokio::test]
    async fn a_live_group_blocks_until_it_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new("/some/root");
        check(dir.path(), root).unwrap();
        let mut child = tokio::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let pgid = i32::try_from(child.id().unwrap()).unwrap();
        assert!(!verify_gone(pgid, Duration::from_millis(100)).await);
        block(dir.path(), root, pgid).unwrap();
        let e = check(dir.path(), root).unwrap_err();
        assert_eq!(e.code, ErrorCode::ProcessCleanupUnverified);
        check(dir.path(), Path::new("/other")).unwrap();
        child.kill().await.unwrap();
        child.wait().await.unwrap();
        assert!(verify_gone(pgid, Duration::from_secs(2)).await);
        check(dir.path(), root).unwrap();
        assert!(!mark_path(dir.path(), root).exists());
    }
}
