//! Registering the pre-exec hook that applies a prepared confinement in the child. (The
//! child side itself, system calls only, is `init` and `caps`.)
#![allow(unsafe_code)]

use crate::Prepared;

/// Confines the child that `cmd` spawns with `prepared`, between `fork` and `exec`. Hooks run
/// in the order they were added; from this one on, the child and everything it starts are
/// held to the confinement. A Tokio command takes it through `as_std_mut()`.
///
/// A `Prepared` confines one child: if `cmd` is spawned twice, the second spawn fails
/// (`EALREADY`) rather than run unconfined.
pub fn confine_command(cmd: &mut std::process::Command, mut prepared: Prepared) {
    #[cfg(unix)]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: the closure runs in the forked child before `exec`. `apply_in_child` makes
        // system calls only (namespaces, mounts, `fork` of the init and of the process that
        // goes on to `exec`, capabilities, `prctl(PR_SET_NO_NEW_PRIVS)`,
        // `landlock_restrict_self`) on data prepared in the parent; it allocates nothing,
        // takes no locks, and its errors are raw OS codes. The child has a single thread, so
        // unsharing and restricting the calling thread covers the whole child. Register it
        // after any hook meant for the process Tokio knows (it forks; later hooks run in the
        // agent-to-be only).
        unsafe {
            cmd.pre_exec(move || prepared.apply_in_child());
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (cmd, &mut prepared);
    }
}
