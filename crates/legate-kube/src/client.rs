//! [`Cluster`]: one namespace of one cluster, reached through a kubeconfig.
//!
//! Owns the connection and the mapping of the API's failures to Legate's codes: an API
//! server that cannot be reached or refuses the credentials is `KUBE_UNAVAILABLE`; a pod the
//! API refuses (an invalid spec, an admission webhook) is `POD_START_FAILED`; a full quota is
//! waited out (`KUBE_QUOTA_EXCEEDED` past `quota_wait_secs`). It never builds a pod
//! (`spec`) and never reads a pod's files (`files`).

use crate::labels::Owner;
use crate::pod::Pod;
use crate::spec;
use k8s_openapi::api::core::v1::{Pod as PodObject, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use legate_core::{Error, ErrorCode, PodSettings, Result};
use std::time::{Duration, Instant};
use tracing::{info, warn};

/// How long one API request may take before the server counts as unreachable.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(15);
/// How often a session waiting on the quota tries again.
const QUOTA_RETRY: Duration = Duration::from_secs(2);

/// A connection to the namespace an agent's pods are made in.
#[derive(Clone)]
pub struct Cluster {
    pub(crate) client: Client,
    pub(crate) namespace: String,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// Connects with `settings`' kubeconfig and context (else `$KUBECONFIG`, `~/.kube/config`
    /// or the in-cluster account). `KUBE_UNAVAILABLE` when no configuration can be read.
    pub async fn connect(settings: &PodSettings) -> Result<Self> {
        let unusable = |e: &dyn std::fmt::Display| {
            Error::new(
                ErrorCode::KubeUnavailable,
                format!("the Kubernetes configuration could not be used: {e}"),
            )
        };
        let options = KubeConfigOptions {
            context: settings.context.clone(),
            ..KubeConfigOptions::default()
        };
        let mut config = match &settings.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path).map_err(|e| unusable(&e))?;
                Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| unusable(&e))?
            }
            None if settings.context.is_some() => Config::from_kubeconfig(&options)
                .await
                .map_err(|e| unusable(&e))?,
            None => Config::infer().await.map_err(|e| unusable(&e))?,
        };
        config.connect_timeout = Some(REQUEST_TIMEOUT);
        config.read_timeout = None;
        config.write_timeout = Some(REQUEST_TIMEOUT);
        let client = Client::try_from(config).map_err(|e| unusable(&e))?;
        Ok(Self {
            client,
            namespace: settings.namespace.clone(),
        })
    }

    pub(crate) fn pods(&self) -> Api<PodObject> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(crate) fn secrets(&self) -> Api<Secret> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    pub(crate) fn policies(&self) -> Api<NetworkPolicy> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Whether the API server answers and Legate may list pods in the namespace
    /// (`legate agents` asks this); `KUBE_UNAVAILABLE` saying why not.
    pub async fn check(&self) -> Result<()> {
        let params = kube::api::ListParams::default().limit(1);
        timed("list pods", self.pods().list(&params)).await?;
        Ok(())
    }

    /// Makes a session's pod (its Secret with `env`, its NetworkPolicy when `deny_egress`)
    /// and waits until it runs. While the namespace's quota is full it waits and tries
    /// again, telling `waiting` once; past `quota_wait_secs`, `KUBE_QUOTA_EXCEEDED`. On any
    /// failure what it made is deleted.
    pub async fn start(
        &self,
        settings: &PodSettings,
        owner: &Owner,
        env: Vec<(String, String)>,
        waiting: impl Fn(&str),
    ) -> Result<Pod> {
        let name = spec::object_name(owner);
        let object = spec::pod(&name, settings, owner)?;
        let secret = spec::secret(&name, settings, owner, &env);
        let pod = Pod::new(self.clone(), name.clone());
        let made = async {
            timed(
                "create a secret",
                self.secrets().create(&PostParams::default(), &secret),
            )
            .await?;
            if settings.deny_egress {
                let policy = spec::deny_egress(&name, settings, owner)?;
                timed(
                    "create a network policy",
                    self.policies().create(&PostParams::default(), &policy),
                )
                .await?;
            }
            let created = self.create_waiting(&object, settings, &waiting).await?;
            info!(pod = %name, namespace = %self.namespace, "agent pod created");
            // The Secret and the policy go with the pod, whoever deletes it.
            self.owned_by(&name, &created, settings.deny_egress).await?;
            pod.wait_running(Duration::from_secs(settings.start_secs))
                .await
        }
        .await;
        match made {
            Ok(()) => {
                pod.watch_loss();
                Ok(pod)
            }
            Err(e) => {
                pod.delete().await;
                Err(e)
            }
        }
    }

    async fn create_waiting(
        &self,
        object: &PodObject,
        settings: &PodSettings,
        waiting: &impl Fn(&str),
    ) -> Result<PodObject> {
        let since = Instant::now();
        let mut told = false;
        loop {
            match tokio::time::timeout(
                REQUEST_TIMEOUT,
                self.pods().create(&PostParams::default(), object),
            )
            .await
            {
                Ok(Ok(created)) => return Ok(created),
                Ok(Err(kube::Error::Api(status)))
                    if status.code == 403 && status.message.contains("exceeded quota") =>
                {
                    if since.elapsed() >= Duration::from_secs(settings.quota_wait_secs) {
                        return Err(Error::new(
                            ErrorCode::KubeQuotaExceeded,
                            format!(
                                "namespace {}'s resource quota stayed full for {} s: {}",
                                self.namespace,
                                settings.quota_wait_secs,
                                cut(&status.message)
                            ),
                        ));
                    }
                    if !told {
                        warn!(namespace = %self.namespace, "the namespace's quota is full; waiting");
                        waiting(&format!(
                            "waiting for room under namespace {}'s resource quota",
                            self.namespace
                        ));
                        told = true;
                    }
                    tokio::time::sleep(QUOTA_RETRY).await;
                }
                Ok(Err(e)) => return Err(api_error("create the agent's pod", e)),
                Err(_) => return Err(unreachable("create the agent's pod")),
            }
        }
    }

    /// Makes pod `name` the owner of its Secret and NetworkPolicy, so that the cluster's
    /// garbage collector deletes them with it (after a `kill -9` of Legate too).
    async fn owned_by(&self, name: &str, pod: &PodObject, policy: bool) -> Result<()> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let patch = serde_json::json!({
            "metadata": { "ownerReferences": [{
                "apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid,
            }]}
        });
        let params = kube::api::PatchParams::default();
        let merge = kube::api::Patch::Merge(&patch);
        timed(
            "make the pod own its secret",
            self.secrets().patch(name, &params, &merge),
        )
        .await?;
        if policy {
            timed(
                "make the pod own its network policy",
                self.policies().patch(name, &params, &merge),
            )
            .await?;
        }
        Ok(())
    }

    /// Deletes an object of the namespace by name, ignoring one already gone.
    pub(crate) async fn delete_named(&self, name: &str) {
        let params = DeleteParams::background().grace_period(0);
        for (what, result) in [
            ("pod", delete_one(&self.pods(), name, &params).await),
            ("secret", delete_one(&self.secrets(), name, &params).await),
            (
                "network policy",
                delete_one(&self.policies(), name, &params).await,
            ),
        ] {
            if let Err(e) = result {
                warn!(object = name, what, code = %e.code, error = %e.message, "could not delete");
            }
        }
    }
}

/// Deletes `name` through `api` within the request timeout; one already gone is no error.
async fn delete_one<K>(api: &Api<K>, name: &str, params: &DeleteParams) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match tokio::time::timeout(REQUEST_TIMEOUT, api.delete(name, params)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => Ok(()),
        Ok(Err(e)) => Err(api_error("delete an object", e)),
        Err(_) => Err(unreachable("delete an object")),
    }
}

/// Runs an API call with the request timeout; failures mapped by [`api_error`].
pub(crate) async fn timed<T>(
    what: &str,
    call: impl std::future::Future<Output = kube::Result<T>>,
) -> Result<T> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(api_error(what, e)),
        Err(_) => Err(unreachable(what)),
    }
}

fn unreachable(what: &str) -> Error {
    Error::new(
        ErrorCode::KubeUnavailable,
        format!(
            "the Kubernetes API server did not answer within {} s (to {what})",
            REQUEST_TIMEOUT.as_secs()
        ),
    )
}

/// A failed API call: the server's refusal of Legate's credentials or an unreachable server
/// is `KUBE_UNAVAILABLE`; its refusal of the request is `POD_START_FAILED` with its words.
pub(crate) fn api_error(what: &str, e: kube::Error) -> Error {
    match e {
        kube::Error::Api(status) if matches!(status.code, 401 | 403) => Error::new(
            ErrorCode::KubeUnavailable,
            format!(
                "the Kubernetes API server refused Legate's request to {what}: {}",
                cut(&status.message)
            ),
        ),
        kube::Error::Api(status) => Error::new(
            ErrorCode::PodStartFailed,
            format!(
                "the Kubernetes API server refused to {what} ({}): {}",
                status.code,
                cut(&status.message)
            ),
        ),
        other => Error::caused_by(
            ErrorCode::KubeUnavailable,
            format!("the Kubernetes API server could not be reached to {what}"),
            other,
        ),
    }
}

/// A server's words, bounded.
pub(crate) fn cut(text: &str) -> String {
    text.chars().take(300).collect()
}
