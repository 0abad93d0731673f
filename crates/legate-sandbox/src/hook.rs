//! The only `unsafe` code of this crate: registering the pre-exec hook that applies a
//! prepared confinement in the child.
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
        // two system calls (`prctl(PR_SET_NO_NEW_PRIVS)`, `landlock_restrict_self`) on a
        // ruleset built in the parent; it allocates nothing, takes no locks, and its errors
        // are raw OS codes. The child has a single thread, so restricting the calling thread
        // restricts the whole child.
        unsafe {
            cmd.pre_exec(move || prepared.apply_in_child());
        }
    }
    #[cfg(not(unix))]
    {
        let _ = (cmd, &mut prepared);
    }
}
