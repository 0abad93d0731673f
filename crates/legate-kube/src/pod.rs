//! [`Pod`]: one session's pod once it runs: its commands ([`Pod::exec`]), whether it is still
//! there ([`Pod::lost`]), and its deletion.
//!
//! A background watch on the pod (one per pod, re-opened when the API server ends it) turns
//! its deletion, eviction, deadline or failure into [`ExitReason::Lost`], which ends every
//! wait on the pod. An API server that goes away is not a lost pod: the watch waits for it.
//! Dropping the last handle of a pod that was not deleted deletes it in the background.
//! This module never decides what runs in the pod; its callers do.

use crate::client::{Cluster, api_error, cut, timed};
use crate::spec::CONTAINER;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod as PodObject;
use kube::api::{AttachParams, WatchEvent, WatchParams};
use legate_core::{Error, ErrorCode, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tracing::{debug, info, warn};

/// Why a pod's command or the pod itself ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExitReason {
    /// The command exited with this status.
    Exited(i32),
    /// The exec stream ended without a status (the connection to the API server broke).
    StreamEnded,
    /// The pod is gone or failed: deleted, evicted, past its deadline, its node lost.
    Lost(String),
}

impl std::fmt::Display for ExitReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Exited(code) => write!(f, "exit status {code}"),
            Self::StreamEnded => write!(f, "the exec stream ended without an exit status"),
            Self::Lost(why) => write!(f, "the pod was lost: {why}"),
        }
    }
}

struct Inner {
    cluster: Cluster,
    name: String,
    lost: watch::Sender<Option<String>>,
    deleting: AtomicBool,
    /// Set when Legate deletes the pod: every command in it ends then.
    deleted: watch::Sender<bool>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.deleting.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            let (cluster, name) = (self.cluster.clone(), self.name.clone());
            handle.spawn(async move { cluster.delete_named(&name).await });
            debug!(pod = %self.name, "agent pod deleted on drop");
        }
    }
}

/// A session's pod.
#[derive(Clone)]
pub struct Pod {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Pod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pod")
            .field("name", &self.inner.name)
            .finish_non_exhaustive()
    }
}

/// A command running in the pod: its streams, and how it ended.
pub struct Exec {
    /// Its standard input.
    pub stdin: Box<dyn AsyncWrite + Unpin + Send + Sync>,
    /// Its standard output.
    pub stdout: Box<dyn AsyncRead + Unpin + Send + Sync>,
    /// Its standard error.
    pub stderr: Box<dyn AsyncRead + Unpin + Send + Sync>,
    /// Resolves when it ends (or the pod is lost).
    pub ended: watch::Receiver<Option<ExitReason>>,
    process: kube::api::AttachedProcess,
}

impl std::fmt::Debug for Exec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exec").finish_non_exhaustive()
    }
}

impl Exec {
    /// Ends the command's stream (the API server then ends the command).
    pub fn abort(&self) {
        self.process.abort();
    }

    /// Waits until it ended.
    pub async fn wait(&self) -> ExitReason {
        wait_for(self.ended.clone()).await
    }
}

impl Pod {
    pub(crate) fn new(cluster: Cluster, name: String) -> Self {
        let (lost, _) = watch::channel(None);
        Self {
            inner: Arc::new(Inner {
                cluster,
                name,
                lost,
                deleting: AtomicBool::new(false),
                deleted: watch::channel(false).0,
            }),
        }
    }

    /// The pod's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The namespace it is in.
    pub fn namespace(&self) -> &str {
        &self.inner.cluster.namespace
    }

    /// Why the pod was lost, once it was.
    pub fn lost(&self) -> Option<String> {
        self.inner.lost.borrow().clone()
    }

    /// Waits until it runs: `POD_START_FAILED` when it fails, its image cannot be had, its
    /// container cannot run, or it is not running within `limit`. A container the kubelet
    /// cannot make yet (`CreateContainerConfigError` while its secret cache syncs with the
    /// session's new Secret, `CreateContainerError`) is waited for, within `limit`.
    pub(crate) async fn wait_running(&self, limit: Duration) -> Result<()> {
        let since = Instant::now();
        let mut last = String::from("it was not scheduled");
        loop {
            let pod = timed(
                "read the agent's pod",
                self.inner.cluster.pods().get(&self.inner.name),
            )
            .await?;
            let status = pod.status.unwrap_or_default();
            let phase = status.phase.unwrap_or_default();
            let container = status
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.name == CONTAINER);
            if let Some(state) = container.as_ref().and_then(|c| c.state.clone()) {
                if state.running.is_some() && phase == "Running" {
                    return Ok(());
                }
                if let Some(waiting) = state.waiting {
                    let reason = waiting.reason.unwrap_or_default();
                    let message = waiting.message.unwrap_or_default();
                    if matches!(
                        reason.as_str(),
                        "ErrImageNeverPull"
                            | "ErrImagePull"
                            | "ImagePullBackOff"
                            | "InvalidImageName"
                            | "RunContainerError"
                            | "CrashLoopBackOff"
                    ) {
                        return Err(start_failed(format!("{reason}: {}", cut(&message))));
                    }
                    last = format!("its container waits: {reason} {}", cut(&message));
                }
                if let Some(t) = state.terminated {
                    return Err(start_failed(format!(
                        "its container ended at once (exit status {}, {})",
                        t.exit_code,
                        t.reason.unwrap_or_default()
                    )));
                }
            }
            if matches!(phase.as_str(), "Failed" | "Succeeded") {
                return Err(start_failed(format!(
                    "it ended as {phase}: {}",
                    cut(&status.message.unwrap_or_default())
                )));
            }
            if let Some(c) = status
                .conditions
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            {
                last = format!(
                    "it is not scheduled: {}",
                    cut(&c.message.unwrap_or_default())
                );
            }
            if since.elapsed() >= limit {
                return Err(start_failed(format!(
                    "it was not running within {} s; {last}",
                    limit.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    /// Watches the pod in the background until it is deleted by Legate or lost.
    pub(crate) fn watch_loss(&self) {
        let weak = Arc::downgrade(&self.inner);
        let (cluster, name) = (self.inner.cluster.clone(), self.inner.name.clone());
        tokio::spawn(async move {
            let params = WatchParams::default()
                .fields(&format!("metadata.name={name}"))
                .timeout(290);
            loop {
                let still = |w: &std::sync::Weak<Inner>| {
                    w.upgrade().filter(|i| !i.deleting.load(Ordering::SeqCst))
                };
                if still(&weak).is_none() {
                    return;
                }
                let now = match cluster.pods().get_opt(&name).await {
                    Ok(Some(p)) => p,
                    Ok(None) => {
                        report(&weak, "it was deleted".into());
                        return;
                    }
                    Err(e) => {
                        debug!(pod = %name, error = %e, "the pod's watch waits for the API server");
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        continue;
                    }
                };
                if let Some(why) = gone(&now) {
                    report(&weak, why);
                    return;
                }
                let version = now
                    .metadata
                    .resource_version
                    .clone()
                    .unwrap_or_else(|| "0".into());
                let Ok(stream) = cluster.pods().watch(&params, &version).await else {
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                };
                let mut stream = std::pin::pin!(stream);
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(WatchEvent::Deleted(_)) => {
                            report(&weak, "it was deleted".into());
                            return;
                        }
                        Ok(WatchEvent::Modified(p) | WatchEvent::Added(p)) => {
                            if let Some(why) = gone(&p) {
                                report(&weak, why);
                                return;
                            }
                        }
                        Ok(_) => {}
                        Err(_) => break,
                    }
                    if still(&weak).is_none() {
                        return;
                    }
                }
            }
        });
    }

    /// Runs `command` in the agent's container with its stdin, stdout and stderr attached.
    pub async fn exec(&self, command: &[String]) -> Result<Exec> {
        if let Some(why) = self.lost() {
            return Err(Error::new(
                ErrorCode::PodLost,
                format!("the agent's pod {} was lost: {why}", self.name()),
            ));
        }
        let params = AttachParams {
            container: Some(CONTAINER.to_string()),
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
            max_stdin_buf_size: Some(64 * 1024),
            max_stdout_buf_size: Some(64 * 1024),
            max_stderr_buf_size: Some(16 * 1024),
        };
        let pods = self.inner.cluster.pods();
        let process = pods.exec(&self.inner.name, command.to_vec(), &params);
        let mut process = tokio::time::timeout(crate::client::REQUEST_TIMEOUT, process)
            .await
            .map_err(|_| {
                Error::new(
                    ErrorCode::KubeUnavailable,
                    "the Kubernetes API server did not open the exec stream in time",
                )
            })?
            .map_err(|e| api_error("run a command in the agent's pod", e))?;
        let (Some(stdin), Some(stdout), Some(stderr), Some(status)) = (
            process.stdin(),
            process.stdout(),
            process.stderr(),
            process.take_status(),
        ) else {
            return Err(Error::internal("the exec stream has no stdio"));
        };
        let (tx, rx) = watch::channel(None);
        let mut lost = self.inner.lost.subscribe();
        let mut deleted = self.inner.deleted.subscribe();
        tokio::spawn(async move {
            let reason = tokio::select! {
                status = status => match status {
                    Some(s) if s.status.as_deref() == Some("Success") => ExitReason::Exited(0),
                    Some(s) => ExitReason::Exited(exit_code(&s)),
                    None => ExitReason::StreamEnded,
                },
                Ok(why) = lost.wait_for(Option::is_some) => ExitReason::Lost(why.clone().unwrap_or_default()),
                // Legate deletes the pod (the session stops): nothing waits for the command.
                Ok(_) = deleted.wait_for(|d| *d) => ExitReason::Lost("Legate deleted it".into()),
            };
            let _ = tx.send(Some(reason));
        });
        Ok(Exec {
            stdin: Box::new(stdin),
            stdout: Box::new(stdout),
            stderr: Box::new(stderr),
            ended: rx,
            process,
        })
    }

    /// Deletes the pod, its Secret and its NetworkPolicy, then waits (up to 30 s) until the
    /// pod is gone. Returns whether it was seen gone. Idempotent.
    pub async fn delete(&self) -> bool {
        self.inner.deleting.store(true, Ordering::SeqCst);
        self.inner.deleted.send_replace(true);
        self.inner.cluster.delete_named(&self.inner.name).await;
        let since = Instant::now();
        while since.elapsed() < Duration::from_secs(30) {
            let pods = self.inner.cluster.pods();
            match timed("read the agent's pod", pods.get_opt(&self.inner.name)).await {
                Ok(None) => {
                    info!(pod = %self.inner.name, "agent pod deleted");
                    return true;
                }
                Ok(Some(_)) | Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
            }
        }
        warn!(pod = %self.inner.name, "agent pod still there 30 s after its deletion");
        false
    }
}

/// Waits until the command behind `ended` ended.
pub(crate) async fn wait_for(mut ended: watch::Receiver<Option<ExitReason>>) -> ExitReason {
    match ended.wait_for(Option::is_some).await {
        Ok(r) => r.clone().unwrap_or(ExitReason::StreamEnded),
        Err(_) => ExitReason::StreamEnded,
    }
}

fn report(weak: &std::sync::Weak<Inner>, why: String) {
    if let Some(inner) = weak.upgrade()
        && !inner.deleting.load(Ordering::SeqCst)
    {
        warn!(pod = %inner.name, reason = %why, "agent pod lost");
        let _ = inner.lost.send(Some(why));
    }
}

/// Why `pod` counts as gone, if it does: being deleted, or failed (evicted, past its
/// deadline, its node lost).
fn gone(pod: &PodObject) -> Option<String> {
    if pod.metadata.deletion_timestamp.is_some() {
        return Some("it is being deleted".into());
    }
    let status = pod.status.as_ref()?;
    match status.phase.as_deref() {
        Some("Failed" | "Succeeded" | "Unknown") => Some(format!(
            "it is {} ({}: {})",
            status.phase.as_deref().unwrap_or_default(),
            status.reason.as_deref().unwrap_or("no reason given"),
            cut(status.message.as_deref().unwrap_or_default())
        )),
        _ => None,
    }
}

fn exit_code(status: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Status) -> i32 {
    status
        .details
        .as_ref()
        .and_then(|d| d.causes.as_ref())
        .and_then(|causes| {
            causes
                .iter()
                .find(|c| c.reason.as_deref() == Some("ExitCode"))
        })
        .and_then(|c| c.message.as_deref()?.parse().ok())
        .unwrap_or(-1)
}

fn start_failed(why: String) -> Error {
    Error::new(
        ErrorCode::PodStartFailed,
        format!("the agent's pod did not start: {why}"),
    )
}
