//! Task retention while an engine lives: at its start ([`pass`], from `Core::open`) and every
//! `retention_interval` after (a minute; [`Core::spawn_retention`]), the finished tasks beyond
//! the newest `retention` are pruned from the store with the rows only they kept
//! (`Store::prune_tasks`: their conversations and messages, comparisons, answered calls), then
//! the sandboxes of the conversations pruned are removed, and the sandboxes no conversation
//! records any more (left by a crash between the two) with them, and the artifact directories
//! (`$LEGATE_HOME/artifacts/<task>/`) of tasks the store no longer has. The rows go first and
//! the directories after: a `kill -9` in between leaves an unrecorded sandbox or an artifact
//! directory without its task, which the next pass removes.
//!
//! It spares what is still held, besides what the store spares (an unfinished task, a copy
//! task whose conversation has one): a task whose copy's lock another operation holds (a
//! verification, a test, an integration, a discard, a later turn in it) or that a git process
//! may still hold (`GIT_CLEANUP_UNVERIFIED`), and a task with an integration journal not yet
//! recovered (`run/integrations/<task>/`). The copy locks it takes are held until the rows are
//! gone, so no operation opens a copy whose task is being pruned.
//!
//! It never removes anything but a plain directory directly inside `$LEGATE_HOME/sandboxes/`
//! (`legate_workspace::remove_owned_dir`, which follows no link out of it), never one a
//! conversation records, never a warm session's (`warm::sweep`'s), and never an unrecorded
//! sandbox younger than [`ORPHAN_AGE`] (a turn makes its sandbox a moment before its
//! conversation records it).

use crate::config::Paths;
use crate::core::Core;
use crate::review::ReviewRecord;
use legate_core::{ErrorCode, Result, Task, TaskId, WorkspaceKind};
use legate_store::{Pruned, Store};
use legate_workspace::Baseline;
use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How many candidates one transaction deletes (and how many copy locks a pass holds at once).
const BATCH: usize = 256;

/// How old an unrecorded sandbox must be before it counts as left over.
pub(crate) const ORPHAN_AGE: Duration = Duration::from_secs(600);

/// The shortest interval between two passes, whatever the configuration says.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// What one pass did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Retained {
    /// Tasks pruned.
    pub(crate) tasks: usize,
    /// Conversations pruned with their last task.
    pub(crate) contexts: usize,
    /// Messages of those conversations.
    pub(crate) messages: usize,
    /// Comparisons no task was left of.
    pub(crate) comparisons: usize,
    /// Candidates kept because something still holds them.
    pub(crate) spared: usize,
    /// Sandboxes of pruned conversations removed.
    pub(crate) sandboxes: usize,
    /// Unrecorded sandboxes removed.
    pub(crate) orphans: usize,
    /// Artifact directories of tasks no longer stored, removed.
    pub(crate) artifacts: usize,
}

impl Retained {
    fn add(&mut self, p: &Pruned) {
        self.tasks += p.tasks;
        self.contexts += p.contexts;
        self.messages += p.messages;
        self.comparisons += p.comparisons;
    }
}

/// One retention pass over `store`: prunes what retention allows (keeping the newest `keep`
/// finished tasks), then removes the pruned conversations' sandboxes and the unrecorded ones.
/// A store error ends it (the next pass tries again); a directory that cannot be removed is
/// logged and left for the next pass.
pub(crate) fn pass(
    store: &Store,
    paths: &Paths,
    keep: usize,
    copy_retention: Duration,
) -> Result<Retained> {
    let mut done = Retained::default();
    let candidates = store.prunable(keep)?;
    // One transaction even with no candidate: rows left by an earlier prune go too.
    let batches: Vec<&[TaskId]> = if candidates.is_empty() {
        vec![&[]]
    } else {
        candidates.chunks(BATCH).collect()
    };
    for batch in batches {
        let (free, locks) = unheld(store, paths, batch, copy_retention);
        done.spared += batch.len() - free.len();
        let pruned = store.prune_tasks(&free, keep)?;
        drop(locks);
        done.add(&pruned);
        done.sandboxes += remove_sandboxes(store, paths, &pruned.sandboxes);
    }
    done.orphans = sweep_orphans(store, paths);
    done.artifacts = sweep_artifacts(store, paths);
    if done.tasks + done.contexts + done.messages + done.comparisons + done.orphans + done.artifacts
        > 0
    {
        tracing::info!(
            tasks = done.tasks,
            contexts = done.contexts,
            messages = done.messages,
            comparisons = done.comparisons,
            sandboxes = done.sandboxes,
            orphans = done.orphans,
            artifacts = done.artifacts,
            spared = done.spared,
            "task retention pruned the store"
        );
    }
    Ok(done)
}

/// The tasks of `ids` nothing holds, with the copy locks taken to keep it so until they are
/// pruned (each copy's once).
fn unheld(
    store: &Store,
    paths: &Paths,
    ids: &[TaskId],
    copy_retention: Duration,
) -> (Vec<TaskId>, Vec<std::fs::File>) {
    let journals = paths.run().join("integrations");
    let mut locks: HashMap<PathBuf, std::fs::File> = HashMap::new();
    let mut free = Vec::with_capacity(ids.len());
    for id in ids {
        // An integration a crash stopped: recovery records its outcome on the task.
        if std::fs::symlink_metadata(journals.join(id.as_str())).is_ok() {
            tracing::debug!(task = %id, "kept past retention: its integration is not recovered yet");
            continue;
        }
        if copy_free(store, id, copy_retention, &mut locks) {
            free.push(id.clone());
        } else {
            tracing::debug!(task = %id, "kept past retention: its copy is in use");
        }
    }
    (free, locks.into_values().collect())
}

/// Whether nothing holds task `id`'s copy (a task without one is free), taking its lock into
/// `locks` when it has one. A copy whose lock `locks` has already is free: this pass holds it.
/// A copy not discarded and touched within `copy_retention` (`[copies] retention_hours`) is
/// held: its review may still come, and the copy sweep would remove it with its task.
fn copy_free(
    store: &Store,
    id: &TaskId,
    copy_retention: Duration,
    locks: &mut HashMap<PathBuf, std::fs::File>,
) -> bool {
    let record = match store.review(id) {
        Ok(Some(value)) => value,
        Ok(None) => return true,
        // Cannot tell: kept for the next pass.
        Err(_) => return false,
    };
    // A record no operation can read cannot be opened by one either.
    let Ok(record) = serde_json::from_value::<ReviewRecord>(record) else {
        return true;
    };
    if record.discarded_at.is_some() || locks.contains_key(&record.baseline_directory) {
        return true;
    }
    // The copy sweep's clock: the later of the record's last change and the task's.
    let updated = store
        .task(id)
        .ok()
        .flatten()
        .map_or(record.touched_at.0, |t| t.updated_at.0);
    let last = record.touched_at.0.max(updated);
    let age_ms = legate_core::Timestamp::now().0.saturating_sub(last);
    if u128::try_from(age_ms).unwrap_or(0) < copy_retention.as_millis() {
        return false;
    }
    match Baseline::open(&record.baseline_directory, &record.copy_directory) {
        // A git process that may still run in it.
        Err(e) if e.code == ErrorCode::GitCleanupUnverified => false,
        // Gone or half made: nothing to hold.
        Err(_) => true,
        Ok(baseline) => match baseline.try_lock() {
            Ok(Some(lock)) => {
                locks.insert(record.baseline_directory, lock);
                true
            }
            Ok(None) | Err(_) => false,
        },
    }
}

/// Removes the sandboxes of pruned conversations that no conversation records now. Returns
/// how many it removed.
fn remove_sandboxes(store: &Store, paths: &Paths, roots: &[PathBuf]) -> usize {
    let mut removed = 0;
    for root in roots {
        // Recorded again meanwhile (never expected: a sandbox is made for one conversation).
        if !matches!(store.sandbox_in_use(root), Ok(false)) {
            continue;
        }
        match legate_workspace::remove_owned_dir(paths.home(), &paths.sandboxes(), root) {
            Ok(true) => removed += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(dir = %root.display(), error = %e, "could not remove a pruned conversation's sandbox");
            }
        }
    }
    removed
}

/// Removes the context sandboxes (`legate_workspace::is_context_sandbox` names) that no
/// conversation records and that are older than [`ORPHAN_AGE`]. Returns how many.
fn sweep_orphans(store: &Store, paths: &Paths) -> usize {
    let parent = paths.sandboxes();
    let entries: Vec<_> = legate_workspace::entries(&parent)
        .into_iter()
        .filter(|(name, _, _)| legate_workspace::is_context_sandbox(name))
        .collect();
    if entries.is_empty() {
        return 0;
    }
    let recorded: HashSet<OsString> = match store.recorded_sandboxes() {
        Ok(roots) => roots
            .iter()
            .filter_map(|r| r.file_name().map(ToOwned::to_owned))
            .collect(),
        Err(e) => {
            tracing::warn!(error = %e, "could not read which sandboxes are recorded; none removed");
            return 0;
        }
    };
    let mut removed = 0;
    for (name, path, modified) in entries {
        // By name: a conversation that recorded it under another spelling of the home keeps it.
        if recorded.contains(std::ffi::OsStr::new(&name)) {
            continue;
        }
        let old = modified
            .and_then(|m| m.elapsed().ok())
            .is_some_and(|age| age >= ORPHAN_AGE);
        if !old || !is_plain_dir(&path) {
            continue;
        }
        match legate_workspace::remove_owned_dir(paths.home(), &parent, &path) {
            Ok(true) => {
                tracing::info!(dir = %path.display(), "removed a sandbox no conversation records");
                removed += 1;
            }
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "could not remove a sandbox no conversation records");
            }
        }
    }
    removed
}

/// Removes the artifact directories (`$LEGATE_HOME/artifacts/<task>/`, collected at a turn's
/// end for a task already stored) whose task the store no longer has: a pruned task's, or one
/// a crash left after its rows went. Returns how many. A store error stops the sweep (the next
/// pass tries again); nothing but a plain directory directly inside `artifacts/` is removed.
fn sweep_artifacts(store: &Store, paths: &Paths) -> usize {
    let parent = paths.home().join("artifacts");
    let mut removed = 0;
    for (name, path, _) in legate_workspace::entries(&parent) {
        if !is_plain_dir(&path) {
            continue;
        }
        match store.has_task(&name) {
            Ok(false) => {}
            Ok(true) => continue,
            Err(e) => {
                tracing::warn!(error = %e, "could not tell which artifact directories are a stored task's; the rest kept");
                return removed;
            }
        }
        match legate_workspace::remove_owned_dir(paths.home(), &parent, &path) {
            Ok(true) => removed += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "could not remove a pruned task's artifacts");
            }
        }
    }
    removed
}

/// Whether `path` is a directory, not a link to one.
fn is_plain_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_dir())
}

impl Core {
    /// Runs a retention [`pass`] every `retention_interval` until shutdown (the first ran when
    /// the engine opened).
    pub(crate) fn spawn_retention(&self) {
        let engine = self.downgrade();
        let mut shutdown = self.shutdown_signal();
        let every = self.config().retention_interval.max(MIN_INTERVAL);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.changed() => return,
                }
                let Some(core) = engine.upgrade() else {
                    return;
                };
                let store = core.store().clone();
                let (paths, keep) = (core.config().paths.clone(), core.config().retention);
                let copies = core.review_config().retention;
                drop(core);
                match tokio::task::spawn_blocking(move || pass(&store, &paths, keep, copies)).await
                {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(error = %e, "the task retention pass failed; the next one tries again")
                    }
                    Err(e) if e.is_cancelled() => return,
                    Err(e) => tracing::warn!(error = %e, "the task retention pass panicked"),
                }
            }
        });
    }

    /// Stops the session this engine keeps for `task`'s sandbox conversation when retention
    /// pruned that conversation (its row is gone, and its sandbox with it): the task starts a
    /// new conversation under the old id, which must not continue the old session in a
    /// directory that no longer exists. A sandbox conversation always records its row before
    /// its session is kept, so a kept session without a row is a pruned conversation's.
    pub(crate) async fn drop_pruned_session(&self, task: &Task) {
        if task.workspace != WorkspaceKind::Sandbox || !self.pool().holds(&task.context_id) {
            return;
        }
        if !matches!(self.store().context(&task.context_id), Ok(None)) {
            return;
        }
        if let Some(old) = self.pool().remove(&task.context_id) {
            tracing::info!(task = %task.id, context = %task.context_id, "the conversation was pruned; its old agent session is stopped, not continued");
            old.shutdown().await;
            self.budget().freed();
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use legate_core::{EventKind, TaskState, Timestamp};
    use legate_store::ContextRecord;
    use std::time::SystemTime;

    struct Home {
        _dir: tempfile::TempDir,
        base: PathBuf,
        paths: Paths,
        store: Store,
    }

    fn home() -> Home {
        let dir = tempfile::tempdir().unwrap();
        let base = std::fs::canonicalize(dir.path()).unwrap();
        let paths = Paths::new(base.join("home"));
        std::fs::create_dir_all(paths.sandboxes()).unwrap();
        let store = Store::open(&paths.db()).unwrap();
        Home {
            _dir: dir,
            base,
            paths,
            store,
        }
    }

    fn finished(h: &Home, id: &str, context: &str, created: i64) {
        let task = Task::new(id, context, "claude", "p")
            .with_state(TaskState::Completed)
            .at(Timestamp(created));
        let submitted = EventKind::Status {
            state: TaskState::Submitted,
            message: None,
            error: None,
        };
        h.store.insert_task(&task, &submitted).unwrap();
    }

    fn left(h: &Home) -> Vec<String> {
        h.store
            .list_tasks(&legate_store::TaskFilter::default())
            .unwrap()
            .into_iter()
            .map(|t| t.id.0)
            .collect()
    }

    /// A sandbox `name` under the home's sandboxes, recorded by `context` when given, with a
    /// link to `outside` in it; aged past [`ORPHAN_AGE`].
    fn sandbox(h: &Home, name: &str, context: Option<&str>, outside: &Path) -> PathBuf {
        let root = h.paths.sandboxes().join(name);
        std::fs::create_dir_all(root.join("deep")).unwrap();
        std::os::unix::fs::symlink(outside, root.join("deep/escape")).unwrap();
        std::fs::File::open(&root)
            .unwrap()
            .set_modified(SystemTime::now() - 2 * ORPHAN_AGE)
            .unwrap();
        if let Some(context) = context {
            let mut r = ContextRecord::new(context, "claude");
            r.sandbox_root = Some(root.clone());
            h.store.put_context(&r).unwrap();
        }
        root
    }

    fn outside(h: &Home) -> PathBuf {
        let dir = h.base.join("precious");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("keep.txt"), "mine").unwrap();
        dir
    }

    #[test]
    fn a_pruned_conversations_sandbox_goes_after_its_rows_and_nothing_outside_it() {
        let h = home();
        let outside = outside(&h);
        finished(&h, "old", "gone", 1);
        finished(&h, "new", "kept", 2);
        let gone = sandbox(&h, "gone0000-abcdef", Some("gone"), &outside);
        let kept = sandbox(&h, "kept0000-abcdef", Some("kept"), &outside);
        // A row naming a directory outside the sandboxes: never removed.
        let elsewhere = h.base.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        finished(&h, "older", "odd", 0);
        let mut odd = ContextRecord::new("odd", "claude");
        odd.sandbox_root = Some(elsewhere.clone());
        h.store.put_context(&odd).unwrap();

        let done = pass(&h.store, &h.paths, 1, Duration::ZERO).unwrap();
        assert_eq!(left(&h), ["new"]);
        assert_eq!((done.tasks, done.contexts, done.sandboxes), (2, 2, 1));
        assert!(!gone.exists());
        assert!(kept.join("deep").is_dir());
        assert!(elsewhere.is_dir(), "outside Legate's sandboxes");
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "mine"
        );
        assert_eq!(h.store.context("gone").unwrap(), None);
    }

    #[test]
    fn only_old_unrecorded_sandboxes_named_as_legate_names_them_are_swept() {
        let h = home();
        let outside = outside(&h);
        let orphan = sandbox(&h, "orphan00-abcdef", None, &outside);
        let recorded = sandbox(&h, "record00-abcdef", Some("c"), &outside);
        let warm = sandbox(&h, "warm-abc123-abcdef", None, &outside);
        let foreign = sandbox(&h, "not-a-sandbox", None, &outside);
        let young = h.paths.sandboxes().join("young000-abcdef");
        std::fs::create_dir(&young).unwrap();
        // A link named like a sandbox, to a directory outside, as old: left, and not followed.
        let link = h.paths.sandboxes().join("linked00-abcdef");
        std::os::unix::fs::symlink(&outside, &link).unwrap();
        let then = rustix::fs::Timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 0,
        };
        rustix::fs::utimensat(
            rustix::fs::CWD,
            &link,
            &rustix::fs::Timestamps {
                last_access: then,
                last_modification: then,
            },
            rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
        )
        .unwrap();
        finished(&h, "t", "c", 1);

        let done = pass(&h.store, &h.paths, 10, Duration::ZERO).unwrap();
        assert_eq!(done.orphans, 1);
        assert!(!orphan.exists());
        for kept in [&recorded, &warm, &foreign, &young] {
            assert!(kept.is_dir(), "{}", kept.display());
        }
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        assert!(outside.join("keep.txt").is_file());
        assert_eq!(left(&h), ["t"]);
    }

    #[test]
    fn a_pruned_tasks_artifacts_go_and_a_stored_tasks_stay() {
        let h = home();
        let outside = outside(&h);
        finished(&h, "old", "a", 1);
        finished(&h, "new", "b", 2);
        let artifacts = h.paths.home().join("artifacts");
        for id in ["old", "new", "never-stored"] {
            std::fs::create_dir_all(artifacts.join(id)).unwrap();
            std::fs::write(artifacts.join(id).join("0123"), "bytes").unwrap();
        }
        std::os::unix::fs::symlink(&outside, artifacts.join("old/escape")).unwrap();
        // A link named as a task, to a directory outside: left, and not followed.
        std::os::unix::fs::symlink(&outside, artifacts.join("gone-link")).unwrap();

        let done = pass(&h.store, &h.paths, 1, Duration::ZERO).unwrap();
        assert_eq!((done.tasks, done.artifacts), (1, 2));
        assert_eq!(left(&h), ["new"]);
        assert!(!artifacts.join("old").exists());
        assert!(!artifacts.join("never-stored").exists());
        assert!(artifacts.join("new/0123").is_file());
        assert!(
            std::fs::symlink_metadata(artifacts.join("gone-link"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(
            std::fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "mine"
        );
    }

    #[test]
    fn a_task_whose_integration_is_not_recovered_is_kept_past_retention() {
        let h = home();
        finished(&h, "journaled", "a", 1);
        finished(&h, "plain", "b", 2);
        finished(&h, "newest", "c", 3);
        std::fs::create_dir_all(h.paths.run().join("integrations/journaled")).unwrap();
        let done = pass(&h.store, &h.paths, 1, Duration::ZERO).unwrap();
        assert_eq!((done.tasks, done.spared), (1, 1));
        assert_eq!(left(&h), ["newest", "journaled"]);
        std::fs::remove_dir(h.paths.run().join("integrations/journaled")).unwrap();
        assert_eq!(
            pass(&h.store, &h.paths, 1, Duration::ZERO).unwrap().tasks,
            1
        );
        assert_eq!(left(&h), ["newest"]);
    }
}
