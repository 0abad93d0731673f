//! A group node's copy as its turn's end read it: the tree and patch sha256, read once while
//! the patch is settled, between two stamps of the copy (`legate_workspace::copy_stamp`)
//! that agree, so that the node's checkpoint takes them without reading the copy again, only
//! while a stamp taken then is still the same.
//!
//! It never trusts them otherwise: a copy whose stamp moved or that has none (an entry
//! changed within the clock's last tick, too many entries, another file system), whose
//! agent's processes could not be shown gone, that is busy, discarded or no longer the
//! task's current copy, or whose review settings changed (an engine restarted with other
//! limits or secret patterns) is read again whole by the caller. Checking a checkpoint again
//! (`recheck`) never uses them: it reads the copy whole, so a write the stamp cannot see (a
//! live process writing through a shared mapping already dirty) is still found there.

use super::blocking;
use super::records::{ReviewConfig, Settled};
use crate::core::Core;
use legate_core::Task;
use legate_workspace::{Baseline, Unstamped, copy_stamp};

/// The most entries a stamp measures: the files a copy may have, directories for them, and
/// the baseline's repository.
fn max_entries(cfg: &ReviewConfig) -> usize {
    cfg.limits.max_files.saturating_mul(2).saturating_add(1024)
}

/// The sha256 of the settings the hashes depend on: the copy limits and secret patterns.
fn settings_sha256(cfg: &ReviewConfig) -> String {
    let v = serde_json::json!({
        "limits": cfg.limits,
        "exclusions": cfg.secrets.exclusions(),
        "exceptions": cfg.secrets.exceptions(),
    });
    legate_workspace::sha256_hex(v.to_string().as_bytes())
}

/// How many times, and how long apart, a turn's end waits for the clock to tick past an
/// entry changed in its last tick before it gives up stamping the copy (a checkpoint then
/// reads it again).
const RACY_TRIES: u32 = 4;
const RACY_PAUSE: std::time::Duration = std::time::Duration::from_millis(5);

/// The copy's stamp now, if it has one; with `wait_out_racy`, an entry changed within the
/// clock's last tick is waited out a few ticks (the agent's last write, just before its turn
/// ended), on this blocking thread.
pub(crate) fn stamp(
    baseline: &Baseline,
    cfg: &ReviewConfig,
    wait_out_racy: bool,
) -> Option<String> {
    let tries = if wait_out_racy { RACY_TRIES } else { 1 };
    for attempt in 1..=tries {
        match copy_stamp(baseline, max_entries(cfg)) {
            Ok(Ok(s)) => return Some(s),
            Ok(Err(Unstamped::Racy)) if attempt < tries => std::thread::sleep(RACY_PAUSE),
            Ok(Err(why)) => {
                tracing::debug!(copy = %baseline.copy().display(), ?why, "the copy has no stamp; its hashes will be read again");
                return None;
            }
            Err(e) => {
                tracing::debug!(copy = %baseline.copy().display(), error = %e, "the copy could not be stamped");
                return None;
            }
        }
    }
    None
}

/// The copy's `treeSha256` now, as a handoff's context gives it (`None` when it cannot be
/// read: the checkpoint then reads it again and meets the error itself).
pub(crate) fn tree(baseline: &Baseline, cfg: &ReviewConfig) -> Option<String> {
    let sel = legate_workspace::copy_selection(baseline, &cfg.secrets, &cfg.limits).ok()?;
    legate_workspace::tree_sha256(&sel, &cfg.limits).ok()
}

/// On the blocking thread of a group turn's end, after the stamp `before`, and the `tree`
/// and the patch (`patch_sha256`) read since: both hashes when a second stamp agrees with
/// the first (nothing changed while they were read).
pub(crate) fn confirm(
    baseline: &Baseline,
    cfg: &ReviewConfig,
    before: String,
    tree: String,
    patch_sha256: &str,
) -> Option<Settled> {
    (stamp(baseline, cfg, false)? == before).then(|| Settled {
        stamp: before,
        settings_sha256: settings_sha256(cfg),
        tree_sha256: tree,
        patch_sha256: patch_sha256.to_string(),
    })
}

impl Core {
    /// The tree and patch sha256 of the ended `task`'s copy as its turn's end read them,
    /// when proven current (see the module docs); `None`: read the copy again.
    pub(crate) async fn settled_hashes(&self, task: &Task) -> Option<(String, String)> {
        let (handle, current, record) = self.finished_copy(task.id.as_str()).ok()?;
        if current.id != task.id
            || handle.status != super::CopyStatus::Open
            || record.discarded_at.is_some()
        {
            return None;
        }
        let settled = record.settled.clone()?;
        let cfg = self.review_config().clone();
        if settled.settings_sha256 != settings_sha256(&cfg) {
            return None;
        }
        let blocked = self.config().paths.blocked();
        legate_backend::cleanup::check_path(&blocked, &record.copy_directory).ok()?;
        let baseline = Baseline::open(&record.baseline_directory, &record.copy_directory).ok()?;
        let now = blocking(move || {
            let _lock = baseline.lock()?;
            Ok(stamp(&baseline, &cfg, false))
        })
        .await
        .ok()??;
        if now != settled.stamp {
            tracing::debug!(task = %task.id, "the copy changed since its turn ended; its hashes are read again");
            return None;
        }
        Some((settled.tree_sha256, settled.patch_sha256))
    }
}
