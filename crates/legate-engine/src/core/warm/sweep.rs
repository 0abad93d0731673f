//! Leftovers of warm sessions after a `kill -9`: the sandboxes of runners no longer alive
//! that no context took, and what those runners' warm agents left running.
//!
//! It never touches the caller's own sandboxes, a live runner's, or one a context records.

use crate::config::Paths;
use legate_store::Store;

/// Removes the warm sandboxes of runners that are no longer alive (`own` is the caller's,
/// never touched) that no context took, after killing what those runners left running.
/// Returns how many sandboxes were removed. A sandbox a context records was handed to a task:
/// it is that context's now and stays.
pub(crate) fn sweep(store: &Store, paths: &Paths, own: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(paths.sandboxes()) else {
        return 0;
    };
    let run_dir = paths.run();
    let mut killed_for = std::collections::BTreeSet::new();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(runner) = name.to_str().and_then(legate_workspace::warm_runner) else {
            continue;
        };
        if runner == own || crate::core::runner::is_alive(&run_dir, runner) {
            continue;
        }
        if killed_for.insert(runner.to_string()) {
            let killed = crate::core::runner::kill_leftovers(runner);
            if killed > 0 {
                tracing::warn!(
                    runner,
                    processes = killed,
                    "killed warm agent processes left by a stopped Legate"
                );
            }
        }
        let path = entry.path();
        match store.sandbox_in_use(&path) {
            Ok(false) => {}
            Ok(true) => continue,
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "could not tell whether a warm sandbox was handed over; left");
                continue;
            }
        }
        match legate_workspace::remove_owned_dir(paths.home(), &paths.sandboxes(), &path) {
            Ok(true) => removed += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "could not remove a stopped Legate's warm sandbox");
            }
        }
    }
    if removed > 0 {
        tracing::info!(
            sandboxes = removed,
            "removed warm sandboxes of stopped Legate processes"
        );
    }
    removed
}
