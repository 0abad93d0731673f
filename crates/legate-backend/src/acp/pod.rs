//! An ACP agent in a pod of a Kubernetes cluster (`runtime = "kubernetes"`): the session's
//! pod made and confined by `legate-kube`, the workspace shipped in, the agent's stdio over
//! an `exec` stream, and after each turn the pod's workspace shipped back and applied to the
//! local copy through the same checked path as a remote Legate's patch
//! (`legate_workspace::returned_from_files`, then `apply_returned`).
//!
//! Everything else is the local agent's: the same transport checks, the same handshake, the
//! same permission handling by the local supervisor. What differs is said here: no client
//! file service (the files are in the pod), the agent's view of its root is `/workspace`
//! (so that is the root its permission requests are checked against), no MCP servers of the
//! catalogue (they are local programs), no egress proxy (the pod's NetworkPolicy denies
//! egress where the cluster enforces policies). A shared directory never leaves the machine:
//! `POD_WORKSPACE_UNSUPPORTED`.
//!
//! This module never builds a pod spec (`legate_kube::spec`) and never writes the copy
//! except through `apply_returned`.

use super::handshake::Handshake;
use super::process::ProcessGroup;
use super::session::{AcpSession, Connection, record_cleanup};
use super::state::HandlerState;
use super::stderr;
use crate::{EventSink, SessionRequest};
use legate_core::remote::{DEFAULT_MAX_TRANSFER_BYTES, MAX_TRANSFER_FILES};
use legate_core::{Error, ErrorCode, EventKind, PodSettings, Result, WorkspaceKind};
use legate_kube::files::{self, Entry};
use legate_kube::{Cluster, Owner};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use tracing::info;

/// Variables of Legate's own machine that mean nothing, or the wrong thing, in a pod.
const LOCAL_ONLY: &[&str] = &[
    "PATH",
    "SHELL",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "TMPDIR",
    "TMP",
    "TEMP",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// The variable the engine tags an agent's spec with (its runner id).
const RUNNER_ENV: &str = "LEGATE_RUNNER";

/// The local copy a pod's workspace comes back to after each turn.
#[derive(Debug, Clone)]
pub(crate) struct PodCopy {
    root: PathBuf,
}

/// Opens `request`'s session in a pod under `settings`.
pub(crate) async fn open(
    handshake_timeout: Duration,
    request: SessionRequest,
    sink: EventSink,
    settings: &PodSettings,
) -> Result<AcpSession> {
    let workspace = request.supervision.workspace;
    if workspace == WorkspaceKind::Shared {
        return Err(Error::new(
            ErrorCode::PodWorkspaceUnsupported,
            format!(
                "agent `{}` runs in a Kubernetes pod, and a shared directory never leaves this machine; use a copy or a sandbox",
                request.agent.name
            ),
        ));
    }
    if request.agent.credentials == legate_core::AgentCredentials::Proxy {
        return Err(Error::new(
            ErrorCode::AgentStartFailed,
            format!(
                "agent `{}` has credentials = \"proxy\", but an agent in a pod has no egress proxy to hold them",
                request.agent.name
            ),
        ));
    }
    let root = super::backend::workspace_root(&request)?;
    let env = pod_env(&request.agent, request.supervision.preset.name.as_str())?;
    // The home's own id (kept in it), or, for a session without a home (a probe of a test),
    // one of its own that no sweep will ever claim.
    let home = match request.legate_home() {
        Some(home) => legate_kube::labels::home_id(&home).map_err(|e| {
            Error::caused_by(
                ErrorCode::AgentStartFailed,
                "the Legate home's id could not be read or made",
                e,
            )
        })?,
        None => uuid::Uuid::new_v4().simple().to_string()[..20].to_string(),
    };
    // The engine tags the agent with its runner id; the pod carries it as a label.
    let runner = request
        .agent
        .local_command()
        .and_then(|l| l.env.get(RUNNER_ENV).cloned())
        .unwrap_or_default();
    let owner = Owner::new(
        &home,
        &runner,
        request.task.as_ref().map_or("", |t| t.as_str()),
        &request.agent.name,
    );
    let outbound = match workspace {
        WorkspaceKind::Copy => Some(outbound(&root).await?),
        _ => None,
    };
    let cluster = Cluster::connect(settings).await?;
    let waiting = sink.clone();
    let pod = cluster
        .start(settings, &owner, env, |message| {
            waiting.send(EventKind::Notice {
                message: message.to_string(),
                detail: serde_json::json!({ "event": "pod_quota_wait" }),
            });
        })
        .await?;
    sink.send(notice(settings, pod.name()));
    info!(agent = %request.agent.name, pod = pod.name(), namespace = pod.namespace(), "agent pod running");
    if let Some(archive) = &outbound
        && let Err(e) = files::ship_in(&pod, archive).await
    {
        pod.delete().await;
        return Err(e);
    }
    let mut exec = match pod.exec(&settings.command).await {
        Ok(exec) => exec,
        Err(e) => {
            pod.delete().await;
            return Err(e);
        }
    };
    let stdin = std::mem::replace(&mut exec.stdin, Box::new(tokio::io::sink()));
    let stdout = std::mem::replace(&mut exec.stdout, Box::new(tokio::io::empty()));
    let stderr_pipe = std::mem::replace(&mut exec.stderr, Box::new(tokio::io::empty()));
    let process = ProcessGroup::watch_pod(pod, exec);
    let mut supervision = request.supervision.clone();
    supervision.boundary.root = PathBuf::from(legate_kube::WORKSPACE);
    let shared = Arc::new(
        HandlerState::new(
            request.supervisor.clone(),
            supervision,
            PathBuf::from(legate_kube::WORKSPACE),
        )
        .with_channel(request.channel.clone())
        .without_files(),
    );
    shared.route_to(sink.clone(), None);
    stderr::spawn(stderr_pipe, shared.clone());
    let connection = match Connection::start(stdin, stdout, shared.clone()).await {
        Ok(c) => c,
        Err(e) => {
            abandon(&shared, &process, &sink, &root).await;
            return Err(e);
        }
    };
    let mut request = request;
    request.mcp_servers.clear();
    let result = Handshake {
        timeout: handshake_timeout,
        process: &process,
        connection: &connection,
        shared: &shared,
        sink: &sink,
        advertise_fs: false,
    }
    .run(&request)
    .await;
    match result {
        Ok(handshaken) => Ok(super::backend::opened(
            &request,
            &sink,
            super::backend::Running {
                shared,
                connection,
                process,
                egress: None,
                pod_copy: (workspace == WorkspaceKind::Copy)
                    .then(|| PodCopy { root: root.clone() }),
                blocked_dir: None,
            },
            handshaken,
        )),
        Err(e) => {
            connection.stop();
            abandon(&shared, &process, &sink, &root).await;
            Err(e)
        }
    }
}

/// A session that could not be opened: its events no longer routed, its pod deleted.
async fn abandon(shared: &HandlerState, process: &ProcessGroup, sink: &EventSink, root: &Path) {
    shared.clear();
    let cleanup = process.stop().await;
    record_cleanup(&cleanup, process, |e| sink.send(e), None, root);
}

/// The agent's environment in its pod: the same allowlist and preset variables as a local
/// agent's, with its home at [`legate_kube::HOME`] and `/tmp` as its temp directory, without what only means
/// something on this machine ([`LOCAL_ONLY`]).
fn pod_env(agent: &legate_core::AgentSpec, preset: &str) -> Result<Vec<(String, String)>> {
    let parent: Vec<_> = std::env::vars_os().collect();
    let mut env = crate::env::agent_env(
        parent.iter().cloned(),
        agent,
        Some(Path::new(legate_kube::HOME)),
        crate::env::Allowlist::Acp,
    )?;
    // The preset's own variables (telemetry and updates off, its credentials passed), as for
    // a local agent; the pod runs as 65532, never as root.
    super::launch::preset_vars(preset, false).apply(&mut env, &parent, &agent.local()?.env);
    let mut out: Vec<(String, String)> = env
        .into_iter()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .filter(|(k, _)| {
            !LOCAL_ONLY.contains(&k.as_str()) && k != crate::cleanup::RUN_ENV && k != RUNNER_ENV
        })
        .filter(|(k, _)| {
            k.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        })
        .collect();
    out.retain(|(k, _)| k != "HOME");
    out.push(("HOME".into(), legate_kube::HOME.into()));
    out.push(("TMPDIR".into(), "/tmp".into()));
    Ok(out)
}

/// The copy's files as an archive, read beneath its root (no link followed), within the
/// same bound as a copy sent to a remote Legate.
async fn outbound(root: &Path) -> Result<Vec<u8>> {
    let root = root.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let read =
            legate_workspace::read_copy(&root, DEFAULT_MAX_TRANSFER_BYTES, MAX_TRANSFER_FILES)?;
        let entries: Vec<Entry> = read
            .into_iter()
            .map(|f| Entry {
                path: f.path,
                bytes: f.bytes,
                executable: f.executable,
            })
            .collect();
        files::pack(&entries)
    })
    .await
    .map_err(|e| Error::internal(format!("reading the copy stopped: {e}")))?
}

impl PodCopy {
    /// Brings the pod's workspace back to the local copy: shipped back, unpacked as hostile
    /// input, made into a patch against the copy's baseline and applied through
    /// `apply_returned`. Reports what it applied on `sink`.
    /// The unpacking and the apply run as the turn's `work`, which the engine waits for before
    /// it reads the copy, even when it gave up on the turn.
    pub(crate) async fn bring_back(
        &self,
        pod: &legate_kube::Pod,
        sink: &EventSink,
        work: &crate::WorkspaceWork,
    ) -> Result<()> {
        let archive = files::ship_back(pod, DEFAULT_MAX_TRANSFER_BYTES).await?;
        let root = self.root.clone();
        let applied = work
            .spawn_blocking(move || -> Result<(u64, usize, Vec<String>)> {
                let unpacked =
                    files::unpack(&archive, MAX_TRANSFER_FILES, DEFAULT_MAX_TRANSFER_BYTES)?;
                drop(archive);
                let skipped = unpacked.skipped;
                let files: Vec<legate_workspace::FileBytes> = unpacked
                    .files
                    .into_iter()
                    .map(|e| legate_workspace::FileBytes {
                        path: e.path,
                        bytes: e.bytes,
                        executable: e.executable,
                    })
                    .collect();
                let baseline = legate_workspace::baseline_of_copy(&root)?;
                let limits = legate_workspace::CopyLimits {
                    max_files: MAX_TRANSFER_FILES,
                    max_bytes: DEFAULT_MAX_TRANSFER_BYTES,
                    ..legate_workspace::CopyLimits::default()
                };
                let (patch, manifest) =
                    legate_workspace::returned_from_files(&baseline, &files, &limits)?;
                legate_workspace::apply_returned(
                    &baseline,
                    &patch,
                    &manifest,
                    DEFAULT_MAX_TRANSFER_BYTES,
                )?;
                Ok((manifest.patch_length, manifest.post_state.len(), skipped))
            })
            .await
            .map_err(|e| Error::internal(format!("applying the pod's workspace stopped: {e}")))??;
        let (patch_length, changed, skipped) = applied;
        let left_out = if skipped.is_empty() {
            String::new()
        } else {
            format!(
                "; {} link(s), special file(s) or .git entries left out, first: {}",
                skipped.len(),
                legate_core::text::excerpt(&skipped[0], 200)
            )
        };
        sink.send(EventKind::Notice {
            message: format!(
                "the pod's workspace came back: {changed} file(s) differ from the baseline ({patch_length} bytes of patch), applied to the local copy{left_out}"
            ),
            detail: serde_json::json!({
                "event": "pod_workspace_returned",
                "pod": pod.name(),
                "changedFiles": changed,
                "patchLength": patch_length,
                "leftOut": skipped.iter().take(50).collect::<Vec<_>>(),
                "leftOutCount": skipped.len(),
            }),
        });
        Ok(())
    }
}

/// The `notice` that says what confines the agent in its pod.
fn notice(settings: &PodSettings, pod: &str) -> EventKind {
    let limits = match (&settings.cpu, &settings.memory) {
        (None, None) => "none set".to_string(),
        (cpu, memory) => format!(
            "cpu {}, memory {}",
            cpu.as_deref().unwrap_or("unset"),
            memory.as_deref().unwrap_or("unset")
        ),
    };
    let network = if settings.deny_egress {
        "a NetworkPolicy denies all egress (enforced only where the cluster's network plugin enforces policies)"
    } else {
        "open (kubernetes.deny_egress = false)"
    };
    EventKind::Notice {
        message: format!(
            "agent pod confinement: pod {pod} in namespace {}; no service-account token; user 65532, non-root; read-only root file system, writable: {}, {}, /tmp; all capabilities dropped, no privilege escalation; seccomp RuntimeDefault; limits: {limits}; deadline {} s; network: {network}",
            settings.namespace,
            legate_kube::WORKSPACE,
            legate_kube::HOME,
            settings.deadline_secs,
        ),
        detail: serde_json::json!({
            "confinement": "pod",
            "pod": pod,
            "namespace": settings.namespace,
            "serviceAccountToken": false,
            "runAsUser": legate_kube::UID,
            "readOnlyRootFilesystem": true,
            "writable": [legate_kube::WORKSPACE, legate_kube::HOME, "/tmp"],
            "capabilities": "none",
            "seccomp": "RuntimeDefault",
            "cpu": settings.cpu,
            "memory": settings.memory,
            "deadlineSecs": settings.deadline_secs,
            "network": if settings.deny_egress { "policy-deny" } else { "open" },
        }),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use legate_core::{AgentKind, AgentSpec};

    /// The pod gets the agent's own variables and the preset's, its home and temp inside the
    /// pod, and nothing that only means something here: not `PATH`, not the runner's tag, not
    /// the run marker, not a variable of Legate's own environment outside the allowlist.
    #[test]
    fn the_pods_environment_is_the_agents_without_this_machines() {
        let spec = AgentSpec::command("claude", AgentKind::ACP, "node")
            .preset("claude")
            .env("ANTHROPIC_BASE_URL", "http://10.0.0.1:1")
            .env(RUNNER_ENV, "abc123")
            .env("HOME", "/local/home");
        let env: std::collections::BTreeMap<_, _> =
            pod_env(&spec, "claude").unwrap().into_iter().collect();
        assert_eq!(env["HOME"], legate_kube::HOME);
        assert_eq!(env["TMPDIR"], "/tmp");
        assert_eq!(env["ANTHROPIC_BASE_URL"], "http://10.0.0.1:1");
        assert_eq!(env["DISABLE_TELEMETRY"], "1", "the preset's own");
        for absent in [
            "PATH",
            RUNNER_ENV,
            crate::cleanup::RUN_ENV,
            "CARGO_TARGET_DIR",
            "IS_SANDBOX",
        ] {
            assert!(!env.contains_key(absent), "{absent}");
        }
        assert_eq!(env.keys().filter(|k| *k == "HOME").count(), 1);
    }
}
