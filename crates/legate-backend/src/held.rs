//! A zombie that a tracer holds: whether a process that has exited is kept from being
//! reaped by a process tracing it (`ptrace`), and by which.
//!
//! A traced process's exit is told to its tracer first; its parent can reap it only once
//! the tracer lets it go, which a hostile one never does. An agent can keep its own leader
//! unreaped that way from a process that cleanup does not otherwise find (out of the group,
//! its marker dropped with its environment). Cleanup ([`crate::cleanup`]) counts a member of
//! the run's group held so as alive, so that the tracer keeps the workspace blocked while it
//! lives, and names the tracer to the person who must stop it.
//!
//! It must never name this process as a holder. A leader that asked to be traced by its
//! parent (`PTRACE_TRACEME`) is traced by the thread of Legate's that spawned it: the
//! status's `TracerPid` is a thread id, so a tracer is this process when it is one of this
//! process's threads. Such a zombie counts as gone, as any zombie.
//!
//! It also lets go of what this process itself holds: a thread of a leader Legate spawned
//! that asked to be traced (`PTRACE_TRACEME` from a thread; the leader's parent, Legate,
//! becomes its tracer) is, once it exits, Legate's to reap and nobody else's, and until it is
//! reaped the leader's own exit is never reported. [`reaped`] reaps such threads while a
//! leader's exit is awaited (`legate_confine::tracees`, which the test runner shares), so
//! that a killed leader is reaped and a leader that exits on its own ends its run. A leader
//! that asked so itself needs nothing: its parent reaps it, traced or not (tokio waits on a
//! pidfd, which stops do not wake).

use legate_confine::tracees::{is_own_thread, reap_exited_threads, status_field};
use std::future::Future;
use std::time::Duration;

/// The process tracing `pid`, when `pid` is a zombie that a thread of another process
/// traces: that process's id (its thread group's). `None` otherwise, or when its status
/// cannot be read.
pub(crate) fn holder(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let tracer = status_field(&status, "State:")?
        .starts_with('Z')
        .then(|| status_field(&status, "TracerPid:")?.parse::<i32>().ok())
        .flatten()
        .filter(|t| *t > 0)?;
    if is_own_thread(tracer) {
        return None;
    }
    // A thread's `/proc/<tid>` is there though not listed; its `Tgid` is its process.
    let of_tracer = std::fs::read_to_string(format!("/proc/{tracer}/status")).ok();
    Some(
        of_tracer
            .as_deref()
            .and_then(|s| status_field(s, "Tgid:")?.parse().ok())
            .unwrap_or(tracer),
    )
}

/// How often [`reaped`] looks. A look reaps traced threads only once the leader itself has
/// exited; before that, it costs one read of the leader's `stat`. Looks are paced, not woken
/// by `SIGCHLD`: every agent's wait would then read at every child's exit Legate sees, for
/// the sake of a case only a hostile agent makes, whose leader is reaped within this much of
/// its end instead.
const LOOK_AGAIN: Duration = Duration::from_millis(500);

/// Awaits `exited` (a leader's reaping: its `Child::wait`), reaping meanwhile, every
/// [`LOOK_AGAIN`], the leader's threads that this process traces once they and the leader
/// have exited (`legate_confine::tracees::reap_exited_threads`). Without it, a leader with
/// such a thread is never reaped once it dies: its parent waits for ever, and the leader and
/// the thread stay zombies for as long as Legate runs.
pub(crate) async fn reaped<T>(leader: i32, exited: impl Future<Output = T>) -> T {
    tokio::pin!(exited);
    loop {
        reap_exited_threads(leader);
        tokio::select! {
            done = &mut exited => return done,
            () = tokio::time::sleep(LOOK_AGAIN) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::process::ExitStatusExt;
    use std::path::Path;
    use std::time::Duration;

    #[test]
    fn this_process_is_never_a_holder_and_a_live_one_has_none() {
        let me = i32::try_from(std::process::id()).unwrap();
        assert_eq!(holder(me), None);
        assert_eq!(holder(i32::MAX), None);
    }

    /// A child that asked to be traced by its parent (this test's process, through the
    /// thread that forked it) and exited is a zombie traced by one of this process's
    /// threads, not by this process's id: it has no holder.
    #[test]
    fn a_zombie_traced_by_a_thread_of_this_process_has_no_holder() {
        use std::sync::mpsc;
        // Forked on a thread of its own, kept until the end (a tracer thread's exit lets its
        // tracees go), so that the tracer's id is not this process's.
        let (tx, rx) = mpsc::channel();
        let (done, end) = mpsc::channel::<()>();
        let forker = std::thread::spawn(move || {
            let child = std::process::Command::new("python3")
                .args([
                    "-c",
                    "import ctypes, os\n\
                     if ctypes.CDLL(None).ptrace(0, 0, None, None) != 0:\n\
                     \x20   os._exit(77)\n",
                ])
                .spawn();
            tx.send(child).unwrap();
            let _ = end.recv();
        });
        let Ok(mut child) = rx.recv().unwrap() else {
            assert!(
                !crate::marked::tests::python_required(),
                "python3 is required here"
            );
            return;
        };
        let pid = i32::try_from(child.id()).unwrap();
        let began = std::time::Instant::now();
        let status = loop {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            if status_field(&status, "State:").unwrap().starts_with('Z') {
                break status;
            }
            assert!(began.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        let tracer: i32 = status_field(&status, "TracerPid:")
            .unwrap()
            .parse()
            .unwrap();
        if tracer == 0 {
            eprintln!("skipped: PTRACE_TRACEME refused here (the child exited 77 untraced)");
        } else {
            assert_ne!(tracer, i32::try_from(std::process::id()).unwrap());
            assert_eq!(holder(pid), None);
        }
        let _ = child.wait();
        done.send(()).unwrap();
        forker.join().unwrap();
    }

    /// `python3 -c TRACED_THREAD <file> [args]`, its stdin empty, with its pid and whether
    /// its thread is traced (`None` without python3: the test skips).
    async fn traced_thread(
        state: &Path,
        args: &[&str],
    ) -> Option<(tokio::process::Child, i32, bool)> {
        use crate::marked::tests::{TRACED_THREAD, python3, tracer};
        let child = tokio::process::Command::new(python3()?)
            .arg("-c")
            .arg(TRACED_THREAD)
            .arg(state)
            .args(args)
            .stdin(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let pid = i32::try_from(child.id().unwrap()).unwrap();
        let traced = tracer(state).await.is_some();
        Some((child, pid, traced))
    }

    /// `child` (whose pid is `pid`) reaped through [`reaped`] within 30 s, and gone from
    /// `/proc`.
    async fn reaped_in_time(
        pid: i32,
        child: &mut tokio::process::Child,
    ) -> std::process::ExitStatus {
        let status = tokio::time::timeout(Duration::from_secs(30), reaped(pid, child.wait()))
            .await
            .expect("the leader was reaped")
            .unwrap();
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        status
    }

    /// A leader whose thread asked to be traced by this process and that then exits on its
    /// own is reaped, and its status read, because the traced thread is reaped as it dies;
    /// before `reaped`, the thread stayed a zombie that nothing reaped and the leader's exit
    /// never came (its run waited for its timeout, then both leaked).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leader_whose_traced_thread_exited_is_reaped_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let Some((mut child, pid, _)) = traced_thread(&dir.path().join("traced"), &["3"]).await
        else {
            return;
        };
        let status = reaped_in_time(pid, &mut child).await;
        assert_eq!(status.code(), Some(3));
    }

    /// A traced thread that exited while its leader still ran is not reaped then, and the
    /// leader's exit a moment later sends nothing (the thread holds it back): the next look
    /// finds the leader exited, reaps the thread, and the leader's exit comes. Before the
    /// looks, only an unrelated `SIGCHLD` ended the wait (when `reaped` was woken by those).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leader_whose_traced_thread_exited_first_is_reaped_when_it_exits() {
        let dir = tempfile::tempdir().unwrap();
        let Some((mut child, pid, _)) =
            traced_thread(&dir.path().join("traced"), &["3", "first"]).await
        else {
            return;
        };
        let status = reaped_in_time(pid, &mut child).await;
        assert_eq!(status.code(), Some(3));
    }

    /// The same leader killed while its traced thread sleeps: both are reaped.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_killed_leader_whose_thread_is_traced_here_is_reaped() {
        let dir = tempfile::tempdir().unwrap();
        let Some((mut child, pid, traced)) = traced_thread(&dir.path().join("traced"), &[]).await
        else {
            return;
        };
        if traced {
            let tids = std::fs::read_dir(format!("/proc/{pid}/task"))
                .unwrap()
                .count();
            assert!(tids >= 2, "the traced thread is there");
            // Alive, nothing is reaped.
            assert_eq!(reap_exited_threads(pid), 0);
        }
        drop(crate::marked::tests::KillAtEnd(pid));
        let status = reaped_in_time(pid, &mut child).await;
        assert_eq!(status.signal(), Some(libc::SIGKILL));
    }
}
