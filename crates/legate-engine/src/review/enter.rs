//! A turn entering a copy that an earlier turn of its context made: waiting for the copy's
//! lock (held for the whole turn, so no verification, test, integration or discard runs in
//! the copy meanwhile), checking under it that the copy is still open, numbering the turn,
//! taking over what earlier turns recorded (the copy report, the verification and test
//! evidence, which stay bound to the sha256 they were made for, so the new turn's changes
//! make them stale), and, for a read-only turn, the state of the copy before it, which the
//! turn is judged against ([`changed_since`]).
//!
//! It never makes or removes a copy, and never names an agent-made path by its full name:
//! paths are read beneath the held copy root (`legate-beneath`), without following links.

use super::chain::Chain;
use super::records::{PathState, ReviewRecord};
use super::{blocking, notice_event};
use crate::core::Core;
use legate_core::{Boundary, Error, ErrorCode, EventKind, Result, Task, TaskMode, Timestamp};
use legate_workspace::Baseline;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::time::{Duration, Instant};

impl Core {
    /// Enters the open copy `record` points at for `task`'s turn; returns the boundary, the
    /// `copy.continued` event and the copy's lock, which the turn holds until it ends.
    /// `COPY_CLOSED` when the copy was integrated or discarded meanwhile (nothing changes),
    /// `COPY_BUSY` when a review operation held it for longer than the task's timeout.
    pub(crate) async fn enter_copy(
        &self,
        task: &Task,
        mut record: ReviewRecord,
    ) -> Result<(Boundary, EventKind, File)> {
        let copy_id = record.continues.clone().unwrap_or_else(|| task.id.clone());
        let closed = |why: String| {
            Error::new(
                ErrorCode::CopyClosed,
                format!("the copy of task {copy_id} {why}; it takes no new turns"),
            )
        };
        // The cause's words sit inside the sentence, before its end; it is kept as the source.
        let baseline =
            Baseline::open(&record.baseline_directory, &record.copy_directory).map_err(|e| {
                Error::quoting_between(
                    ErrorCode::CopyClosed,
                    format!("the copy of task {copy_id} is gone ("),
                    e,
                    "); it takes no new turns",
                )
            })?;
        let patience = Duration::from_secs(task.timeout_secs.max(1));
        // The turn before lets the context go when its turn is over, before its patch and its
        // end are stored: wait for its end, so that it is judged on its own changes alone.
        for _ in 0..3 {
            let Some(settling) = self.chain_of(task)?.settling_except(&task.id).cloned() else {
                break;
            };
            if tokio::time::timeout(patience, self.wait(&settling.id))
                .await
                .is_err()
            {
                return Err(Error::new(
                    ErrorCode::CopyBusy,
                    format!(
                        "task {} still has not ended in this copy; try the turn again",
                        settling.id
                    ),
                ));
            }
        }
        let b = baseline.clone();
        let lock = blocking(move || {
            let deadline = Instant::now() + patience;
            loop {
                match b.lock() {
                    Err(e) if e.code == ErrorCode::CopyBusy && Instant::now() < deadline => {}
                    other => return other,
                }
            }
        })
        .await?;
        let chain: Chain = self.chain_of(task)?;
        chain.check_takes_turns(&copy_id)?;
        let Some((previous, earlier)) = chain.latest_entered_except(Some(&task.id)) else {
            return Err(closed("was never made".into()));
        };
        record.copy = earlier.copy.clone();
        record.verification = earlier.verification.clone();
        record.tests = earlier.tests.clone();
        record.turn = chain.turns().saturating_add(1);
        record.before_turn = None;
        if task.mode == TaskMode::ReadOnly {
            let (b, limits) = (baseline.clone(), self.review_config().limits);
            record.before_turn = Some(blocking(move || snapshot(&b, &limits)).await?);
        }
        record.touched_at = Timestamp::now();
        self.put_record(&task.id, &record)?;
        let sha = earlier.patch.as_ref().map(|p| p.sha256.clone());
        let event = notice_event(
            "copy.continued",
            format!(
                "turn {} in the copy of task {copy_id} (after task {}); the patch accumulates against the project as first copied",
                record.turn, previous.id
            ),
            serde_json::json!({
                "copyId": copy_id,
                "copyDirectory": record.copy_directory,
                "turn": record.turn,
                "previousTask": previous.id,
                "previousSha256": sha,
            }),
        );
        tracing::info!(task = %task.id, copy = %copy_id, turn = record.turn, "continuing in a copy");
        let boundary = Boundary {
            root: record.copy_directory.clone(),
            owned: true,
            allow_execute: false,
        };
        Ok((boundary, event, lock))
    }
}

impl Core {
    /// Whether `task`'s turn may reuse its context's live session: it continues the copy the
    /// session works in, in the mode of the turn before (a session's supervision is set up
    /// for one mode).
    pub(crate) fn keeps_copy_session(&self, task: &Task) -> bool {
        match self.record(&task.id) {
            Ok(record) if record.continues.is_some() => self
                .chain_of(task)
                .ok()
                .and_then(|c| {
                    c.latest_entered_except(Some(&task.id))
                        .map(|(t, _)| t.mode == task.mode)
                })
                .unwrap_or(false),
            _ => false,
        }
    }
}

/// The state of every path that differs from the baseline now (what a read-only turn
/// starting now finds already changed).
pub(super) fn snapshot(
    baseline: &Baseline,
    limits: &legate_workspace::CopyLimits,
) -> Result<Vec<PathState>> {
    let root = legate_beneath::Root::open(baseline.copy())
        .map_err(|e| Error::caused_by(ErrorCode::Internal, "the copy could not be opened", e))?;
    Ok(legate_review::read_only_changes(baseline, limits)?
        .into_iter()
        .map(|path| PathState {
            digest: digest(&root, &path),
            path,
        })
        .collect())
}

/// What a read-only turn changed: the paths whose state differs between `before` (taken by
/// [`snapshot`] when the turn started) and now, where `after` is every path that differs
/// from the baseline now. A path in neither list is as the baseline has it at both times.
pub(super) fn changed_since(
    baseline: &Baseline,
    before: &[PathState],
    after: Vec<String>,
) -> Result<Vec<String>> {
    let root = legate_beneath::Root::open(baseline.copy())
        .map_err(|e| Error::caused_by(ErrorCode::Internal, "the copy could not be opened", e))?;
    let now: Vec<PathState> = after
        .into_iter()
        .map(|path| PathState {
            digest: digest(&root, &path),
            path,
        })
        .collect();
    Ok(compare(before, &now))
}

/// The paths whose state differs between two snapshots, sorted. A path missing from a
/// snapshot was as the baseline has it then.
pub(super) fn compare(before: &[PathState], now: &[PathState]) -> Vec<String> {
    // Per path: its state then and now; `None` when the snapshot does not list it (as in
    // the baseline), `Some(digest)` when it had changed from the baseline.
    type Then<'a> = Option<&'a Option<String>>;
    let mut states: BTreeMap<&str, (Then<'_>, Then<'_>)> = BTreeMap::new();
    for p in before {
        states.entry(&p.path).or_default().0 = Some(&p.digest);
    }
    for p in now {
        states.entry(&p.path).or_default().1 = Some(&p.digest);
    }
    states
        .into_iter()
        .filter(|(_, (b, n))| b != n)
        .map(|(path, _)| path.to_string())
        .collect()
}

/// What `rel` is beneath `root`, never following a link: `None` when absent; `file:` and the
/// sha256 of whether it is executable (one byte) and its bytes, `link:` and the sha256 of its
/// target, `dir`, `other`, or `unreadable:` and why (a refusal, such as a directory on the
/// way swapped for a link).
fn digest(root: &legate_beneath::Root, rel: &str) -> Option<String> {
    let rel = Path::new(rel);
    match root.kind(rel) {
        Ok(None) => None,
        Ok(Some(legate_beneath::Kind::File)) => Some(match root.open_file(rel) {
            Ok((mut file, _)) => {
                // Git records whether a file is executable, so a mode change is a change of
                // the patch (`chmod` is not governed by Landlock: a read-only agent can do it).
                let executable = match file.metadata() {
                    Ok(m) => std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0,
                    Err(e) => return Some(format!("unreadable:{}", e.kind())),
                };
                let mut hash = Sha256::new();
                hash.update([u8::from(executable)]);
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match std::io::Read::read(&mut file, &mut buf) {
                        Ok(0) => break format!("file:{}", hex(&hash.finalize())),
                        Ok(n) => hash.update(&buf[..n]),
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                        Err(e) => break format!("unreadable:{}", e.kind()),
                    }
                }
            }
            Err(e) => format!("unreadable:{e}"),
        }),
        Ok(Some(legate_beneath::Kind::Symlink)) => Some(link_digest(root, rel)),
        Ok(Some(legate_beneath::Kind::Directory)) => Some("dir".into()),
        Ok(Some(legate_beneath::Kind::Other)) => Some("other".into()),
        Err(e) => Some(format!("unreadable:{e}")),
    }
}

/// `link:` and the sha256 of the link's target text, read relative to its parent opened
/// beneath the root.
fn link_digest(root: &legate_beneath::Root, rel: &Path) -> String {
    let parent = rel.parent().unwrap_or(Path::new(""));
    let Some(name) = rel.file_name() else {
        return "unreadable:no name".into();
    };
    let dir = match root.open_dir(parent) {
        Ok(d) => d,
        Err(e) => return format!("unreadable:{e}"),
    };
    match rustix::fs::readlinkat(&dir, name, Vec::new()) {
        Ok(target) => format!("link:{}", hex(&Sha256::digest(target.as_bytes()))),
        Err(e) => format!("unreadable:{e}"),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn state(path: &str, digest: Option<&str>) -> PathState {
        PathState {
            path: path.into(),
            digest: digest.map(String::from),
        }
    }

    #[test]
    fn only_what_changed_during_the_turn_counts() {
        let before = [state("a", Some("file:1")), state("gone", None)];
        // Unchanged since the turn began: nothing, though both differ from the baseline.
        assert!(compare(&before, &before).is_empty());
        // Changed again, reverted to the baseline, newly changed, deleted.
        let now = [
            state("a", Some("file:2")),
            state("b", Some("file:3")),
            state("c", None),
        ];
        assert_eq!(compare(&before, &now), ["a", "b", "c", "gone"]);
    }

    proptest! {
        #[test]
        fn a_snapshot_never_differs_from_itself_and_any_change_is_seen(
            paths in proptest::collection::btree_set("[a-z]{1,4}(/[a-z]{1,4}){0,2}", 0..8),
            flip in 0usize..8,
        ) {
            let snap: Vec<PathState> = paths.iter().map(|p| state(p, Some("file:x"))).collect();
            prop_assert!(compare(&snap, &snap).is_empty());
            if let Some(p) = paths.iter().nth(flip) {
                let mut changed = snap.clone();
                changed.retain(|s| &s.path != p);
                prop_assert_eq!(compare(&snap, &changed), vec![p.clone()]);
            }
        }
    }
}
