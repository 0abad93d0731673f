//! Spawning the agent and stopping its process group.
//!
//! The agent runs in its own process group (`process_group(0)`), so that stopping it stops
//! everything it started: `SIGINT` to the group, then `SIGKILL` after a grace period (3 s),
//! then the group is observed until it is gone ([`Cleanup`]). A reaper task owns the
//! [`Child`] and publishes its exit status.

use super::launch::Launch;
use super::sys;
use crate::env;
use legate_core::{AgentSpec, Error, ErrorCode, Result};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::process::{Child, Command};
use tokio::sync::{Mutex, watch};
use tracing::{debug, info, warn};

/// How long the group has between `SIGINT` and `SIGKILL`.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(3);
/// How long the group is observed, once the leader is gone, before its cleanup is declared
/// unverified.
pub(crate) const VERIFY: Duration = Duration::from_secs(1);

/// Starts `spec`'s program in `root` with the filtered environment plus its preset's
/// [`Launch`], confined by `confinement` (applied between `fork` and `exec`).
pub(crate) fn spawn(
    spec: &AgentSpec,
    root: &Path,
    state_dir: Option<&Path>,
    launch: &Launch,
    confinement: legate_sandbox::Prepared,
) -> Result<Child> {
    let parent: Vec<_> = std::env::vars_os().collect();
    let mut env = env::agent_env(parent.iter().cloned(), spec, state_dir, env::Allowlist::Acp)?;
    launch.apply(&mut env, &parent, &spec.env);
    let mut cmd = Command::new(&spec.command);
    cmd.args(&spec.args)
        .current_dir(root)
        .env_clear()
        .envs(env)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    sys::die_with_parent(&mut cmd);
    sys::confine(&mut cmd, confinement);
    cmd.spawn().map_err(|e| {
        Error::new(
            ErrorCode::AgentStartFailed,
            format!(
                "could not start agent `{}` (`{}` in {}): {e}",
                spec.name,
                spec.command,
                root.display()
            ),
        )
    })
}

/// Describes an exit status for a person: `exit status 3`, `killed by signal 9`.
pub(crate) fn describe_exit(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "an unknown exit status".to_string(),
    }
}

/// The running agent process group.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: i32,
    exit: watch::Receiver<Option<ExitStatus>>,
    stopping: AtomicBool,
    stopped: Mutex<Option<Cleanup>>,
    kill_grace: Duration,
}

impl ProcessGroup {
    /// Takes ownership of `child` (a group leader) and reaps it in the background; stopping
    /// it gives `kill_grace` between `SIGINT` and `SIGKILL`.
    pub(crate) fn watch(mut child: Child, kill_grace: Duration) -> Self {
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or(0);
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            match child.wait().await {
                Ok(status) => {
                    debug!(pgid, status = %describe_exit(&status), "agent process exited");
                    let _ = tx.send(Some(status));
                }
                Err(e) => {
                    warn!(pgid, error = %e, "could not wait for the agent process");
                    let _ = tx.send(Some(ExitStatus::from_raw(0x7f00)));
                }
            }
        });
        Self {
            pgid,
            exit: rx,
            stopping: AtomicBool::new(false),
            stopped: Mutex::new(None),
            kill_grace,
        }
    }

    /// The process group id (the leader's pid).
    pub(crate) fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The leader's exit status, once it exited.
    pub(crate) fn exit_status(&self) -> Option<ExitStatus> {
        *self.exit.borrow()
    }

    /// Whether [`ProcessGroup::stop`] was called.
    pub(crate) fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::SeqCst)
    }

    /// Waits until the leader exits.
    pub(crate) async fn exited(&self) -> Option<ExitStatus> {
        let mut rx = self.exit.clone();
        match rx.wait_for(Option::is_some).await {
            Ok(status) => *status,
            Err(_) => None,
        }
    }

    /// Waits up to `limit` for the leader to exit.
    pub(crate) async fn exited_within(&self, limit: Duration) -> Option<ExitStatus> {
        tokio::time::timeout(limit, self.exited())
            .await
            .ok()
            .flatten()
    }

    /// Stops the whole group: `SIGINT`, then `SIGKILL` after [`KILL_GRACE`], then waits for
    /// the leader, then observes the group until it is gone (up to [`VERIFY`]). Idempotent;
    /// concurrent callers wait for the first and get the same [`Cleanup`].
    pub(crate) async fn stop(&self) -> Cleanup {
        self.stopping.store(true, Ordering::SeqCst);
        let mut stopped = self.stopped.lock().await;
        if let Some(done) = &*stopped {
            return done.clone();
        }
        let pgid = self.pgid;
        let mut signals = Vec::new();
        if sys::signal_group(pgid, sys::SIGINT) {
            signals.push("SIGINT");
            let deadline = tokio::time::Instant::now() + self.kill_grace;
            while tokio::time::Instant::now() < deadline {
                if self.exit_status().is_some() && !crate::cleanup::group_alive(pgid) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if crate::cleanup::group_alive(pgid) && sys::signal_group(pgid, sys::SIGKILL) {
                signals.push("SIGKILL");
                info!(pgid, "agent process group killed after the grace period");
            }
        }
        if self.exited_within(Duration::from_secs(5)).await.is_none() {
            warn!(pgid, "agent process did not exit after SIGKILL");
        }
        // Members that outlived the leader are reaped by init: observe until they are gone.
        let verified = crate::cleanup::verify_gone(pgid, VERIFY).await;
        if !verified {
            warn!(pgid, "agent process cleanup not verified");
        }
        let done = Cleanup {
            verified,
            pgid,
            signals,
        };
        *stopped = Some(done.clone());
        done
    }
}

/// What stopping a process group found: whether it is gone, and the signals it took.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cleanup {
    /// Whether the group was observed gone.
    pub(crate) verified: bool,
    /// The group.
    pub(crate) pgid: i32,
    /// The signals sent, in order (`SIGINT`, `SIGKILL`); empty when it was already gone.
    pub(crate) signals: Vec<&'static str>,
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let stopped = self
            .stopped
            .try_lock()
            .map(|g| g.is_some())
            .unwrap_or(false);
        if !stopped && sys::signal_group(self.pgid, sys::SIGKILL) {
            debug!(pgid = self.pgid, "agent process group killed on drop");
        }
    }
}
