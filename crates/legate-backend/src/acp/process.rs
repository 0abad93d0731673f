//! Spawning the agent and stopping its process group.
//!
//! The agent runs in its own process group (`process_group(0)`) and carries a marker of its
//! own (`LEGATE_RUN`, see `crate::cleanup`), so that stopping it stops everything it started,
//! even what left the group: `SIGINT`, then `SIGKILL` after a grace period (3 s), then
//! the processes are observed until they are gone ([`Cleanup`]). A reaper task owns the
//! [`Child`] and publishes its exit status.

use super::launch::Launch;
use crate::cleanup::{self, Processes};
use crate::env;
use crate::spawn::AgentCommand;
use legate_core::{AgentSpec, Error, ErrorCode, Result};
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::process::Child;
use tokio::sync::{Mutex, watch};
use tracing::{debug, warn};

/// How long the group has between `SIGINT` and `SIGKILL`.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(3);
/// How long the group is observed, once the leader is gone, before its cleanup is declared
/// unverified.
pub(crate) const VERIFY: Duration = Duration::from_secs(1);
/// How long the leader may take to be reaped once stopping the group is done.
const REAP: Duration = Duration::from_secs(5);

/// Starts `spec`'s program in `root` with `env` (its [`environment`]) and
/// `LEGATE_RUN=<marker>`, confined by `confinement` (applied between `fork` and `exec`).
pub(crate) fn spawn(
    spec: &AgentSpec,
    root: &Path,
    env: Vec<(OsString, OsString)>,
    confinement: legate_confine::Prepared,
    marker: &str,
) -> Result<Child> {
    let local = spec.local()?;
    AgentCommand::new(&local.command, &local.args, root, env)
        .marker(marker)
        .spawn(Some(confinement))
        .map_err(|e| {
            let sentence = format!(
                "could not start agent `{}` (`{}` in {})",
                spec.name,
                local.command,
                root.display()
            );
            Error::quoting(ErrorCode::AgentStartFailed, sentence, e)
        })
}

/// The agent's whole environment, from Legate's (`parent`): the seed's groups
/// ([`env::Allowlist::Acp`]) with the state directory as `HOME`, the preset's launch, the
/// private temp directory also as `TMP` and `TEMP` (the seed's temp group; the spec's own
/// values win), and `LEGATE_RUN=<marker>`.
pub(crate) fn environment(
    spec: &AgentSpec,
    state_dir: Option<&Path>,
    launch: &Launch,
    parent: &[(OsString, OsString)],
    marker: &str,
) -> Result<Vec<(OsString, OsString)>> {
    let local = spec.local()?;
    let mut env = env::agent_env(parent.iter().cloned(), spec, state_dir, env::Allowlist::Acp)?;
    launch.apply(&mut env, parent, &local.env);
    if let Some(tmp) = &launch.tmp_dir {
        for name in ["TMP", "TEMP"] {
            if !local.env.contains_key(name) {
                env.retain(|(k, _)| k != name);
                env.push((name.into(), tmp.as_os_str().to_owned()));
            }
        }
    }
    env.retain(|(k, _)| k != cleanup::RUN_ENV);
    env.push((cleanup::RUN_ENV.into(), marker.into()));
    Ok(env)
}

/// Describes an exit status for a person: `exit status 3`, `killed by signal 9`.
pub(crate) fn describe_exit(status: &ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("killed by signal {sig}"),
        (None, None) => "an unknown exit status".to_string(),
    }
}

/// The running agent process group, or the agent's command in its pod.
#[derive(Debug)]
pub(crate) struct ProcessGroup {
    pgid: i32,
    processes: Processes,
    exit: watch::Receiver<Option<ExitStatus>>,
    stopping: AtomicBool,
    stopped: Mutex<Option<Cleanup>>,
    kill_grace: Duration,
    /// For an agent in a pod: the pod, its command, and how that ended.
    pod: Option<PodRun>,
    /// The control groups holding the tree's process and memory limits, removed (with what
    /// is left in them) when the group is dropped.
    limits: Option<legate_confine::LimitGroup>,
}

/// An agent's command in its pod.
#[derive(Debug)]
pub(crate) struct PodRun {
    pub(crate) pod: legate_kube::Pod,
    exec: legate_kube::Exec,
}

impl ProcessGroup {
    /// Takes ownership of `child` (a group leader spawned with `marker`, its tree held to
    /// `limits`) and reaps it in the background; stopping it gives `kill_grace` between
    /// `SIGINT` and `SIGKILL`.
    pub(crate) fn watch(
        mut child: Child,
        kill_grace: Duration,
        marker: String,
        limits: Option<legate_confine::LimitGroup>,
    ) -> Self {
        let pgid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .unwrap_or(0);
        let (tx, rx) = watch::channel(None);
        tokio::spawn(async move {
            // A thread of the leader that asked Legate to trace it is reaped as it exits, or
            // the leader's own exit would never come.
            match crate::held::reaped(pgid, child.wait()).await {
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
            processes: Processes::new(pgid, Some(marker)),
            exit: rx,
            stopping: AtomicBool::new(false),
            stopped: Mutex::new(None),
            kill_grace,
            pod: None,
            limits,
        }
    }

    /// What the tree's limits did to it, for a person: the memory kills and refused forks
    /// the kernel counted (`None` when neither happened, or there are no limits).
    pub(crate) fn limits_hit(&self) -> Option<String> {
        let group = self.limits.as_ref()?;
        let limits = group.limits();
        let mut said = Vec::new();
        match group.memory_kills() {
            0 => {}
            n => said.push(format!(
                "the kernel killed {n} of its processes for passing its memory limit ({} MiB, max_memory_mb)",
                limits.max_memory_mib
            )),
        }
        match group.forks_refused() {
            0 => {}
            n => said.push(format!(
                "{n} of its forks were refused at its process limit ({}, max_processes)",
                limits.max_processes
            )),
        }
        (!said.is_empty()).then(|| said.join("; "))
    }

    /// Takes the agent's command in `pod` (its stdio already taken): it "exits" when the
    /// command ends, with its status (a stream that ended without one, or a lost pod, reads
    /// as killed by `SIGKILL`; [`ProcessGroup::pod_lost`] says which).
    pub(crate) fn watch_pod(pod: legate_kube::Pod, exec: legate_kube::Exec) -> Self {
        let (tx, rx) = watch::channel(None);
        let mut ended = exec.ended.clone();
        tokio::spawn(async move {
            let reason = match ended.wait_for(Option::is_some).await {
                Ok(r) => r.clone(),
                Err(_) => None,
            };
            let status = match reason {
                Some(legate_kube::ExitReason::Exited(code)) => {
                    ExitStatus::from_raw((code & 0xff) << 8)
                }
                _ => ExitStatus::from_raw(9),
            };
            let _ = tx.send(Some(status));
        });
        Self {
            pgid: 0,
            processes: Processes::new(0, None),
            exit: rx,
            stopping: AtomicBool::new(false),
            stopped: Mutex::new(None),
            kill_grace: Duration::ZERO,
            pod: Some(PodRun { pod, exec }),
            limits: None,
        }
    }

    /// The agent's pod, for an agent that runs in one.
    pub(crate) fn pod(&self) -> Option<&legate_kube::Pod> {
        self.pod.as_ref().map(|p| &p.pod)
    }

    /// Why the agent's pod was lost, or its command's stream ended without a status.
    pub(crate) fn pod_lost(&self) -> Option<String> {
        let run = self.pod.as_ref()?;
        match run.exec.ended.borrow().clone() {
            Some(legate_kube::ExitReason::Lost(why)) => Some(why),
            Some(legate_kube::ExitReason::StreamEnded) => run
                .pod
                .lost()
                .or_else(|| Some("the connection to the agent in its pod ended".to_string())),
            _ => run.pod.lost(),
        }
    }

    /// The process group id (the leader's pid).
    pub(crate) fn pgid(&self) -> i32 {
        self.pgid
    }

    /// The agent's processes: its group and its marker.
    pub(crate) fn processes(&self) -> &Processes {
        &self.processes
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

    /// Stops the agent's processes (its group and what carries its marker): `SIGINT`, then
    /// `SIGKILL` after [`KILL_GRACE`], then waits for the leader (up to `REAP`: one not
    /// reaped by then makes the cleanup unverified), then observes them until they are gone
    /// (up to [`VERIFY`]). Idempotent; concurrent callers wait for the first
    /// and get the same [`Cleanup`].
    pub(crate) async fn stop(&self) -> Cleanup {
        self.stopping.store(true, Ordering::SeqCst);
        let mut stopped = self.stopped.lock().await;
        if let Some(done) = &*stopped {
            return done.clone();
        }
        if let Some(run) = &self.pod {
            run.exec.abort();
            let verified = run.pod.delete().await;
            let done = Cleanup {
                verified,
                pgid: 0,
                stopped: true,
                signals: Vec::new(),
                outside_group: 0,
            };
            *stopped = Some(done.clone());
            return done;
        }
        let (signals, outside_group) = self.processes.stop(self.kill_grace).await;
        // A leader killed by `SIGKILL` and still not reaped is held by something Legate did
        // not find (a process tracing it is told of its exit first, and may never let it
        // go): the cleanup is not verified, whatever the group looks like.
        let reaped = self.exited_within(REAP).await.is_some();
        if !reaped {
            warn!(pgid = self.pgid, "agent process did not exit after SIGKILL");
        }
        // Members that outlived the leader are reaped by init: observe until they are gone.
        let verified = self.processes.verify(VERIFY).await && reaped;
        if !verified {
            warn!(pgid = self.pgid, "agent process cleanup not verified");
        }
        let done = Cleanup {
            verified,
            pgid: self.pgid,
            stopped: true,
            signals,
            outside_group,
        };
        *stopped = Some(done.clone());
        done
    }
}

pub(crate) use crate::cleanup::Cleanup;

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let stopped = self
            .stopped
            .try_lock()
            .map(|g| g.is_some())
            .unwrap_or(false);
        // A pod is deleted by its own handle when the last one goes.
        if !stopped && self.pod.is_none() && self.processes.kill_now() {
            debug!(pgid = self.pgid, "agent processes killed on drop");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use legate_core::AgentKind;

    #[test]
    fn an_acp_agent_gets_the_seed_groups_its_home_its_temp_dir_and_its_marker() {
        let dir = tempfile::tempdir().unwrap();
        let (root, state) = (dir.path().join("root"), dir.path().join("state"));
        std::fs::create_dir(&root).unwrap();
        let parent: Vec<(OsString, OsString)> = [
            ("PATH", "/bin"),
            ("HOME", "/home/me"),
            ("TMP", "/tmp"),
            ("TEMP", "/tmp"),
            ("TMPDIR", "/tmp"),
            ("LANG", "C.UTF-8"),
            ("LANGUAGE", "en"),
            ("LC_NUMERIC", "C"),
            ("XDG_SESSION_ID", "7"),
            ("HTTPS_PROXY", "http://proxy:3128"),
            ("no_proxy", "localhost"),
            ("SSL_CERT_FILE", "/etc/ssl/corp.pem"),
            ("GEMINI_API_KEY", "g"),
            ("ANTHROPIC_API_KEY", "a"),
            ("AWS_SECRET_ACCESS_KEY", "s"),
            ("LEGATE_RUN", "forged"),
        ]
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
        let spec = AgentSpec::command("claude", AgentKind::ACP, "x").preset("claude");
        let launch =
            super::super::launch::launch("claude", &root, Some(&state), None, false).unwrap();
        let env = environment(&spec, Some(&state), &launch, &parent, "m-1").unwrap();
        let get = |k: &str| {
            env.iter()
                .find(|(n, _)| n == k)
                .map(|(_, v)| v.to_string_lossy().into_owned())
        };
        let tmp = state.join("tmp").display().to_string();
        assert_eq!(get("HOME"), Some(state.display().to_string()));
        for name in ["TMPDIR", "TMP", "TEMP"] {
            assert_eq!(get(name).as_deref(), Some(tmp.as_str()), "{name}");
        }
        assert_eq!(get("HTTPS_PROXY").as_deref(), Some("http://proxy:3128"));
        assert_eq!(get("no_proxy").as_deref(), Some("localhost"));
        assert_eq!(get("SSL_CERT_FILE").as_deref(), Some("/etc/ssl/corp.pem"));
        assert_eq!(get("LANG").as_deref(), Some("C.UTF-8"));
        assert_eq!(
            get("ANTHROPIC_API_KEY").as_deref(),
            Some("a"),
            "its preset's"
        );
        for absent in [
            "GEMINI_API_KEY",
            "AWS_SECRET_ACCESS_KEY",
            "LANGUAGE",
            "LC_NUMERIC",
            "XDG_SESSION_ID",
        ] {
            assert_eq!(get(absent), None, "{absent}");
        }
        assert_eq!(get(cleanup::RUN_ENV).as_deref(), Some("m-1"));
    }

    /// `python -c script state`, its stdin empty, in a group of its own with a run's marker,
    /// watched as an agent's leader (200 ms between `SIGINT` and `SIGKILL`).
    fn watched(python: std::path::PathBuf, script: &str, state: &Path) -> ProcessGroup {
        let marker = cleanup::new_marker();
        let child = tokio::process::Command::new(python)
            .arg("-c")
            .arg(script)
            .arg(state)
            .stdin(std::process::Stdio::null())
            .env(cleanup::RUN_ENV, &marker)
            .process_group(0)
            .spawn()
            .unwrap();
        ProcessGroup::watch(child, Duration::from_millis(200), marker, None)
    }

    /// A leader that a process of its own traces, hidden from cleanup (out of the group, its
    /// marker dropped), is killed but not reaped: stopping the group says so (unverified)
    /// instead of calling the cleanup verified because the group shows only a zombie. The
    /// held leader keeps the run alive to cleanup, so the workspace's block stays, naming the
    /// tracer, until the tracer is gone; then the leader is reaped and the block lifts.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leader_held_by_a_tracer_leaves_its_cleanup_unverified() {
        use crate::marked::tests::{KillAtEnd, TRACED_LEADER, python3, tracer};
        let Some(python) = python3() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("tracer");
        let group = watched(python, TRACED_LEADER, &state);
        let Some(pid) = tracer(&state).await else {
            group.processes.kill_now();
            return;
        };
        let held = KillAtEnd(pid);
        let cleanup = group.stop().await;
        assert!(!cleanup.verified, "{cleanup:?}");
        assert_eq!(cleanup.signals, ["SIGINT", "SIGKILL"], "{cleanup:?}");
        assert_eq!(group.exit_status(), None);

        assert!(group.processes.alive());
        let (blocked, root) = (dir.path().join("blocked"), dir.path().join("root"));
        std::fs::create_dir_all(&root).unwrap();
        cleanup::block(&blocked, &root, &group.processes).unwrap();
        let e = cleanup::check(&blocked, &root).unwrap_err();
        assert_eq!(e.code, ErrorCode::ProcessCleanupUnverified);
        assert!(
            e.message
                .contains(&format!("held by process {pid}, which traces it")),
            "{e}"
        );
        drop(held);
        assert!(group.exited_within(Duration::from_secs(10)).await.is_some());
        assert!(!group.processes.alive());
        cleanup::check(&blocked, &root).unwrap();
    }

    /// A leader with a thread that asked Legate to trace it (`PTRACE_TRACEME`): stopping the
    /// group ends it, the traced thread is reaped once the leader is gone, and so the leader
    /// is too, with
    /// the signal's status and a verified cleanup (before, neither was reaped, and the cleanup
    /// was unverified after `REAP`).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_leader_with_a_thread_traced_here_is_reaped_when_stopped() {
        use crate::marked::tests::{TRACED_THREAD, python3, tracer};
        let Some(python) = python3() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("traced");
        let group = watched(python, TRACED_THREAD, &state);
        let traced = tracer(&state).await;
        let cleanup = group.stop().await;
        let Some(leader) = traced else {
            return;
        };
        assert!(cleanup.verified, "{cleanup:?}");
        // Python dies of the `SIGINT` (or of the `SIGKILL` after it): either way, a status.
        let signal = group.exit_status().and_then(|s| s.signal());
        assert!(
            matches!(signal, Some(libc::SIGINT | libc::SIGKILL)),
            "{signal:?}"
        );
        assert!(!group.processes.alive());
        assert!(!std::path::Path::new(&format!("/proc/{leader}")).exists());
    }
}
