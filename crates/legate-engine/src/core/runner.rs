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

/// For every dead runner (its lock under `paths.run()` free): kills what it left running,
/// marks its unfinished tasks `failed` with `SERVER_RESTARTED` (their pending approvals
/// expired in the same write), and removes the copies of the copy tasks it ended (see
/// `leftovers`; the order is `recover_runner`'s); then finishes the integrations a crash
/// interrupted (`integration_recovery`). A task bound to a remote task whose agent
/// `reattaches` is left unfinished, still claimed by the dead runner, for an engine to take
/// over (`adoption`): it is not failed, its copy is kept, and it has no local approvals to
/// expire. What the runner left running is killed all the same (an engine that takes the
/// task over runs its processes under its own runner id). Returns how many tasks were
/// marked. Safe to run from any process at any time.
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
        marked += recover_runner(store, paths, &runner, reattaches)?;
    }
    Ok(marked)
}

/// Recovers one dead runner: kills what it left running, then ends its tasks (their pending
/// approvals expire in the same write), then settles their copies. Returns how many tasks
/// it ended.
///
/// A `kill -9` may stop this after any step, and the next recovery starts again from the
/// first, so each step may run twice. What makes the order right: a runner whose tasks are
/// ended has none unfinished and is never visited again, so the kill must come before; the
/// copies come last, after the kill (nothing the dead run started writes into a copy being
/// removed), and if they are never reached the retention sweep removes them.
fn recover_runner(
    store: &Store,
    paths: &Paths,
    runner: &str,
    reattaches: Reattaches<'_>,
) -> Result<usize> {
    let killed = kill_leftovers(runner);
    if killed > 0 {
        tracing::warn!(runner = %runner, processes = killed, "killed processes left by a dead runner");
    }
    stops_after(Step::Killed)?;
    let error = Error::new(
        ErrorCode::ServerRestarted,
        "the legate process running this task stopped before the task ended; it was not re-run",
    );
    // Their agents are gone: nobody will read an answer to what they asked.
    let ended = store.fail_unfinished_sparing(
        Some(runner),
        &error,
        "the Legate process running the task stopped while the approval waited",
        reattaches,
    )?;
    if ended.approvals_expired > 0 {
        tracing::warn!(runner = %runner, approvals = ended.approvals_expired, "expired approvals of a dead runner's tasks");
    }
    if !ended.tasks.is_empty() {
        tracing::warn!(runner = %runner, tasks = ended.tasks.len(), "marked tasks of a dead runner as failed");
    }
    stops_after(Step::Ended)?;
    let removed = crate::core::leftovers::settle_interrupted(store, paths, &ended.tasks);
    if removed > 0 {
        tracing::info!(runner = %runner, copies = removed, "removed copies of interrupted tasks");
    }
    Ok(ended.tasks.len())
}

/// The steps of [`recover_runner`] after which a test may stop it, as a `kill -9` would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Killed,
    Ended,
}

#[cfg(test)]
thread_local! {
    /// The step after which recovery on this thread stops, for the crash tests.
    static STOPS_AFTER: std::cell::Cell<Option<Step>> = const { std::cell::Cell::new(None) };
}

/// Nothing, except in this crate's tests, where recovery can be made to stop after `step`.
#[cfg(test)]
fn stops_after(step: Step) -> Result<()> {
    if STOPS_AFTER.get() == Some(step) {
        return Err(Error::new(
            ErrorCode::Internal,
            "recovery stopped here by the test",
        ));
    }
    Ok(())
}

#[cfg(not(test))]
fn stops_after(_step: Step) -> Result<()> {
    Ok(())
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

    /// A process carrying `runner`'s tag, as an agent's command outlives its Legate.
    fn leftover(runner: &str) -> std::process::Child {
        std::process::Command::new("sleep")
            .arg("100")
            .env(RUNNER_ENV, runner)
            .spawn()
            .unwrap()
    }

    /// Waits (up to 10 s) until `child`'s environment shows `runner`'s tag: until then it
    /// may be in `exec`, and a recovery could miss it (`leftover_processes`).
    fn until_tagged(child: &std::process::Child, runner: &str) {
        let marker = format!("{RUNNER_ENV}={runner}");
        let environ = format!("/proc/{}/environ", child.id());
        let began = std::time::Instant::now();
        while began.elapsed() < std::time::Duration::from_secs(10) {
            if std::fs::read(&environ)
                .is_ok_and(|env| env.split(|b| *b == 0).any(|kv| kv == marker.as_bytes()))
            {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        panic!("the leftover never showed its tag");
    }

    /// Whether `child` ended (reaping it) within 10 s.
    fn ended(child: &mut std::process::Child) -> bool {
        let began = std::time::Instant::now();
        while began.elapsed() < std::time::Duration::from_secs(10) {
            if child.try_wait().unwrap().is_some() {
                return true;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        false
    }

    #[test]
    fn a_recovery_stopped_after_any_step_is_finished_by_the_next() {
        use legate_core::{EventKind, Task, TaskState};
        use legate_store::{ApprovalState, ToolCallSummary};
        for stops in [Some(Step::Killed), Some(Step::Ended), None] {
            let home = tempfile::tempdir().unwrap();
            let paths = Paths::new(home.path());
            let store = Store::open_in_memory().unwrap();
            let runner = uuid::Uuid::new_v4().simple().to_string()[..12].to_string();
            let task = Task::new("t-left", "c", "revisor", "p");
            let working = EventKind::Status {
                state: TaskState::Working,
                message: None,
                error: None,
            };
            store
                .insert_task_run_by(&task, &working, Some(&runner))
                .unwrap();
            let asked = legate_store::Approval {
                id: "a-left".into(),
                task_id: task.id.clone(),
                agent: "revisor".into(),
                role: "worker".into(),
                tool: ToolCallSummary {
                    kind: legate_core::ToolKind::Execute,
                    title: "touch x".into(),
                    paths: Vec::new(),
                    command: Some(vec!["touch".into(), "x".into()]),
                    script: None,
                    destination: None,
                },
                options: Vec::new(),
                rule_id: None,
                reason: "ask".into(),
                answerers: vec!["human".into()],
                created_at: legate_core::Timestamp(1),
                deadline: legate_core::Timestamp(i64::MAX),
                state: ApprovalState::Pending,
                answer: None,
                closed_reason: None,
                decided: None,
            };
            store.insert_approval(&asked, "s").unwrap();
            let mut child = leftover(&runner);
            until_tagged(&child, &runner);

            STOPS_AFTER.set(stops);
            let first = recover_others(&store, &paths, None, &|_| false);
            STOPS_AFTER.set(None);
            assert_eq!(first.is_err(), stops.is_some(), "{stops:?}");
            // The process that ran the first recovery died there; the next one runs whole.
            assert_eq!(
                recover_others(&store, &paths, None, &|_| false).unwrap(),
                usize::from(stops == Some(Step::Killed)),
                "{stops:?}"
            );

            let gone = ended(&mut child);
            if !gone {
                let _ = child.kill();
                let _ = child.wait();
            }
            assert!(
                gone,
                "the dead runner's process outlived recovery ({stops:?})"
            );
            let task = store.task(&task.id).unwrap().unwrap();
            assert_eq!(task.state, TaskState::Failed, "{stops:?}");
            assert_eq!(task.error.map(|e| e.code), Some(ErrorCode::ServerRestarted));
            assert_eq!(
                store.approval("a-left").unwrap().unwrap().state,
                ApprovalState::Expired,
                "{stops:?}"
            );
        }
    }
}
