//! Where an agent's process runs: on this machine (the default) or in a pod of a Kubernetes
//! cluster ([`PodSettings`], from `[kubernetes]` and the agent's own `runtime` keys).
//!
//! This module owns the settings as data, checked when the configuration is read. It never
//! talks to a cluster (`legate-kube` does) and never decides how a pod is confined: the pod's
//! security fields are `legate-kube`'s, and no setting here can loosen them.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Where an agent runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum AgentRuntime {
    /// A local process, confined by Landlock and namespaces.
    #[default]
    Local,
    /// A pod per session in a Kubernetes cluster.
    Kubernetes(Box<PodSettings>),
}

impl AgentRuntime {
    /// Whether it is [`AgentRuntime::Local`] (skipped when serialized).
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Local)
    }

    /// The runtime's name as `legate agents` and the docs show it.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Local => "local",
            Self::Kubernetes(_) => "kubernetes",
        }
    }

    /// The pod settings, for an agent that runs in a cluster.
    pub fn pod(&self) -> Option<&PodSettings> {
        match self {
            Self::Local => None,
            Self::Kubernetes(p) => Some(p),
        }
    }
}

/// The default `activeDeadlineSeconds` of an agent's pod: six hours, the backstop that ends
/// a pod nobody deleted.
pub const DEFAULT_POD_DEADLINE_SECS: u64 = 6 * 60 * 60;
/// How long a pod may take to be running, by default.
pub const DEFAULT_POD_START_SECS: u64 = 120;
/// How long a session waits for room under the namespace's quota, by default.
pub const DEFAULT_QUOTA_WAIT_SECS: u64 = 600;

/// The container's own process by default: a watchdog that ends the pod (its container
/// exits, the pod is `Succeeded`) once nothing but itself has run in the container for four
/// checks in a row (20 s). Legate runs the agent (and the workspace's `tar`) as `exec`s
/// within a second of the pod running, and an exec dies with Legate's connection, so a
/// `kill -9` of Legate at any point leaves a pod that stops within about 20 s instead of at
/// its deadline. A zombie counts as nothing; so does a process it cannot read.
pub const WATCHDOG: &str = "idle=0; while :; do sleep 5; live=0; for d in /proc/[0-9]*; do [ \"${d#/proc/}\" = 1 ] && continue; st=''; read -r _ _ st _ < \"$d/stat\" 2>/dev/null || continue; [ \"$st\" = Z ] && continue; live=1; break; done; if [ $live = 1 ]; then idle=0; else idle=$((idle+1)); [ $idle -ge 4 ] && exit 0; fi; done";

/// How an agent's pods are made: the cluster (`[kubernetes]`) with the agent's image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodSettings {
    /// The kubeconfig file; `None`: `$KUBECONFIG`, then `~/.kube/config`, then the
    /// in-cluster service account.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context; `None`: its current context.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
    /// The namespace the pods are made in.
    pub namespace: String,
    /// The agent's image.
    pub image: String,
    /// `Always`, `IfNotPresent` or `Never`; `None`: the cluster's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<String>,
    /// The agent's command in the pod (program and arguments, resolved by the image's
    /// `PATH`).
    pub command: Vec<String>,
    /// The container's own process, beside which the agent runs as an `exec`: default the
    /// [`WATCHDOG`], which ends the pod once no agent has run in it for 20 s.
    pub idle_command: Vec<String>,
    /// CPU and memory, as requests and limits (`"500m"`, `"1Gi"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// See [`PodSettings::cpu`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// The size limit of the workspace, home and temp volumes, each (`"2Gi"`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_size: Option<String>,
    /// Pod `nodeSelector`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Pod `tolerations`, as Kubernetes writes them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<serde_json::Value>,
    /// Pod `runtimeClassName` (gVisor, Kata).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class: Option<String>,
    /// A JSON merge patch over the pod Legate makes; the confinement fields are set again
    /// after it, so it cannot loosen them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_overrides: Option<serde_json::Value>,
    /// The pod's `activeDeadlineSeconds`.
    pub deadline_secs: u64,
    /// How long the pod may take to be running.
    pub start_secs: u64,
    /// How long a session waits while the namespace's quota is full.
    pub quota_wait_secs: u64,
    /// Whether each pod gets a NetworkPolicy that denies all its egress (enforced only where
    /// the cluster's network plugin enforces policies).
    pub deny_egress: bool,
}

impl PodSettings {
    /// Settings for `image` in `namespace` running `command`, every other key at its default.
    pub fn new(
        namespace: impl Into<String>,
        image: impl Into<String>,
        command: Vec<String>,
    ) -> Self {
        Self {
            kubeconfig: None,
            context: None,
            namespace: namespace.into(),
            image: image.into(),
            image_pull_policy: None,
            command,
            idle_command: vec!["sh".into(), "-c".into(), WATCHDOG.into()],
            cpu: None,
            memory: None,
            volume_size: None,
            node_selector: BTreeMap::new(),
            tolerations: Vec::new(),
            runtime_class: None,
            pod_overrides: None,
            deadline_secs: DEFAULT_POD_DEADLINE_SECS,
            start_secs: DEFAULT_POD_START_SECS,
            quota_wait_secs: DEFAULT_QUOTA_WAIT_SECS,
            deny_egress: true,
        }
    }
}
