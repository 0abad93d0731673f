//! What a dead engine left in a cluster: [`Cluster::sweep`] deletes the pods (with their
//! Secrets and NetworkPolicies) of a Legate home whose runner is no longer alive.
//!
//! Whether a runner lives is the caller's to say (its lock file, `legate-engine`'s
//! `runner`); a pod whose runner label is missing or malformed counts as dead. The sweep
//! never touches a pod of another home or one not managed by Legate, and never re-runs
//! anything: the engine has already failed the tasks those pods served.

use crate::client::{Cluster, timed};
use crate::labels::{self, RUNNER};
use kube::api::ListParams;
use legate_core::Result;
use tracing::info;

/// What one sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// The pods deleted.
    pub deleted: Vec<String>,
    /// The pods kept (their runner is alive).
    pub kept: usize,
}

/// The runner label of an object ("" when it has none).
fn runner_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(RUNNER))
        .cloned()
        .unwrap_or_default()
}

impl Cluster {
    /// Deletes the pods of the home whose hash is `home` whose runner `alive` says is dead.
    pub async fn sweep(&self, home: &str, alive: impl Fn(&str) -> bool) -> Result<Swept> {
        let params = ListParams::default().labels(&labels::home_selector(home));
        let list = timed("list Legate's pods", self.pods().list(&params)).await?;
        let mut swept = Swept::default();
        for pod in list.items {
            let Some(name) = pod.metadata.name.clone() else {
                continue;
            };
            let runner = runner_of(&pod.metadata);
            if !runner.is_empty() && alive(&runner) {
                swept.kept += 1;
                continue;
            }
            info!(pod = %name, runner = %runner, "deleting a pod its dead runner left");
            self.delete_named(&name).await;
            swept.deleted.push(name);
        }
        // Secrets and policies whose pod never came to be (a kill between their creations).
        let secrets = timed("list Legate's secrets", self.secrets().list(&params)).await?;
        for s in secrets.items {
            let Some(name) = s.metadata.name.clone() else {
                continue;
            };
            let runner = runner_of(&s.metadata);
            if (runner.is_empty() || !alive(&runner)) && !swept.deleted.contains(&name) {
                self.delete_named(&name).await;
            }
        }
        Ok(swept)
    }

    /// The names of the pods of the home whose hash is `home` (for tests and `legate agents`).
    pub async fn pods_of(&self, home: &str) -> Result<Vec<String>> {
        let params = ListParams::default().labels(&labels::home_selector(home));
        let list = timed("list Legate's pods", self.pods().list(&params)).await?;
        Ok(list
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .collect())
    }
}
