//! Pods a dead engine left: at start, each cluster an agent runs in is swept of the pods of
//! this Legate home whose runner is no longer alive (`runner::is_alive`: its lock was
//! released, even by `kill -9`).
//!
//! Their tasks were already failed with `SERVER_RESTARTED` by recovery; this module never
//! re-runs anything and never touches a live runner's pod or another home's. A cluster that
//! does not answer is logged and left to the pods' own deadline (`activeDeadlineSeconds`).

use crate::config::Paths;
use legate_core::{AgentSpec, PodSettings};
use std::collections::BTreeMap;

/// Starts one background sweep per cluster and namespace the `agents` run in (nothing when
/// none runs in a cluster, or outside a Tokio runtime).
pub(crate) fn sweep_on_start<'a>(agents: impl Iterator<Item = &'a AgentSpec>, paths: &Paths) {
    let mut clusters: BTreeMap<(Option<std::path::PathBuf>, Option<String>, String), PodSettings> =
        BTreeMap::new();
    for agent in agents {
        if let Some(s) = agent.runtime.pod() {
            clusters
                .entry((s.kubeconfig.clone(), s.context.clone(), s.namespace.clone()))
                .or_insert_with(|| s.clone());
        }
    }
    if clusters.is_empty() {
        return;
    }
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let home = match legate_kube::labels::home_id(paths.home()) {
        Ok(id) => id,
        Err(e) => {
            tracing::warn!(error = %e, "the home's id could not be read; its pods are not swept");
            return;
        }
    };
    for settings in clusters.into_values() {
        let (home, run_dir) = (home.clone(), paths.run());
        handle.spawn(async move {
            let swept = async {
                let cluster = legate_kube::Cluster::connect(&settings).await?;
                cluster
                    .sweep(&home, |runner| super::runner::is_alive(&run_dir, runner))
                    .await
            };
            match swept.await {
                Ok(s) if !s.deleted.is_empty() => tracing::warn!(namespace = %settings.namespace, pods = s.deleted.len(), "deleted pods of stopped Legate processes"),
                Ok(_) => {}
                Err(e) => tracing::warn!(namespace = %settings.namespace, code = %e.code, error = %e.message, "could not sweep the cluster's pods"),
            }
        });
    }
}
