//! The local Kubernetes cluster for the Kubernetes runtime's tests (`scripts/k8s-local.sh`).
//!
//! [`LocalCluster::from_env`] finds the cluster by `KUBECONFIG` (what `k8s-local.sh up`
//! prints); without one the tests skip, unless `LEGATE_REQUIRE_K8S` (or `CI`) is on, when a
//! missing cluster fails them. [`LocalCluster::image`] packages a binary of this build into
//! an image the cluster can run (stripped, named by its content, imported once under a lock
//! that parallel test binaries share), and [`LocalCluster::namespace`] makes a namespace of
//! the test's own, deleted when it drops. This module talks only to the cluster on 127.0.0.1.
//!
//! Its helpers fail the test that calls them (they panic, with what went wrong), as a test's
//! own setup would.
#![allow(clippy::expect_used, clippy::unwrap_used)]

use crate::python::{fnv_hex, run, switched_on, under_target};
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Turns a missing cluster into a failure rather than a skip.
pub const REQUIRE_K8S_ENV: &str = "LEGATE_REQUIRE_K8S";

/// The cluster the tests run against.
#[derive(Debug, Clone)]
pub struct LocalCluster {
    /// Its admin kubeconfig.
    pub kubeconfig: PathBuf,
}

/// `scripts/k8s-local.sh` of this checkout.
pub fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/k8s-local.sh")
}

impl LocalCluster {
    /// The cluster `KUBECONFIG` names, or `None` (the test skips) when there is none and
    /// none is required.
    ///
    /// # Panics
    /// When a cluster is required and `KUBECONFIG` names no readable file.
    #[must_use]
    pub fn from_env() -> Option<Self> {
        let required = switched_on(std::env::var_os(REQUIRE_K8S_ENV));
        match std::env::var_os("KUBECONFIG").map(PathBuf::from) {
            Some(path) if path.is_file() => Some(Self { kubeconfig: path }),
            _ if required => panic!(
                "{REQUIRE_K8S_ENV} is on but KUBECONFIG names no file: run `scripts/k8s-local.sh up` and export the KUBECONFIG line it prints"
            ),
            _ => {
                eprintln!(
                    "skipped: no Kubernetes cluster (run `scripts/k8s-local.sh up` and export KUBECONFIG)"
                );
                None
            }
        }
    }

    fn client(&self) -> kube::Client {
        let rt = runtime();
        rt.block_on(async {
            let file = kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("kubeconfig");
            let config = kube::Config::from_custom_kubeconfig(
                file,
                &kube::config::KubeConfigOptions::default(),
            )
            .await
            .expect("kubeconfig usable");
            kube::Client::try_from(config).expect("client")
        })
    }

    /// An image holding `binary` (stripped) at `<target>/legate-k8s-image/<hash>/<name>`,
    /// its libraries and busybox; returns its tag and where the binary is in it.
    ///
    /// # Panics
    /// When the binary cannot be stripped or the image cannot be imported.
    #[must_use]
    pub fn image(&self, binary: &Path) -> (String, PathBuf) {
        let name = binary
            .file_name()
            .expect("a file")
            .to_string_lossy()
            .into_owned();
        let bytes = std::fs::read(binary).expect("the binary");
        let hash = fnv_hex(&bytes);
        let dir = under_target("legate-k8s-image").join(&hash);
        std::fs::create_dir_all(&dir).expect("image dir");
        let lock = std::fs::File::create(dir.join("lock")).expect("lock");
        lock.lock().expect("lock");
        let inside = dir.join(&name);
        let tag = format!("legate-test-{}:{hash}", name.replace('_', "-"));
        if !self.has_image(&tag) {
            run(Command::new("strip").arg("-o").arg(&inside).arg(binary)).expect("strip");
            run(Command::new("bash")
                .arg(script())
                .arg("image")
                .arg(&tag)
                .arg(&inside))
            .expect("image import");
        }
        (tag, inside)
    }

    /// Whether the node already holds image `tag` (a cluster started again has none: its
    /// images go with its state).
    fn has_image(&self, tag: &str) -> bool {
        let client = self.client();
        let api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client);
        let Ok(nodes) = runtime().block_on(api.list(&ListParams::default())) else {
            return false;
        };
        let want = format!("docker.io/library/{tag}");
        nodes.items.iter().any(|n| {
            n.status
                .as_ref()
                .and_then(|s| s.images.as_ref())
                .is_some_and(|images| {
                    images
                        .iter()
                        .any(|i| i.names.as_ref().is_some_and(|names| names.contains(&want)))
                })
        })
    }

    /// An image holding the machine's `node` and `dir` (an ACP adapter's install) at
    /// `/opt/agent` (`k8s-local.sh image-node`), imported once per content of `dir`'s
    /// `package-lock.json` and of the script; returns its tag.
    ///
    /// # Panics
    /// When the image cannot be made.
    #[must_use]
    pub fn node_image(&self, dir: &Path) -> String {
        // Named by what makes it: the adapters' lock file and the script that builds it.
        let mut made = std::fs::read(dir.join("package-lock.json")).unwrap_or_default();
        made.extend(std::fs::read(script()).unwrap_or_default());
        let hash = fnv_hex(&made);
        let marks = under_target("legate-k8s-image").join(format!("node-{hash}"));
        std::fs::create_dir_all(&marks).expect("image dir");
        let held = std::fs::File::create(marks.join("lock")).expect("lock");
        held.lock().expect("lock");
        let tag = format!("legate-test-node:{hash}");
        if !self.has_image(&tag) {
            run(Command::new("bash")
                .arg(script())
                .arg("image-node")
                .arg(&tag)
                .arg(dir))
            .expect("node image import");
        }
        tag
    }

    /// A namespace of the test's own (its default service account made), deleted on drop.
    ///
    /// # Panics
    /// When the cluster does not make it.
    #[must_use]
    pub fn namespace(&self, prefix: &str) -> TestNamespace {
        let client = self.client();
        let name = format!("{prefix}-{}", &uuid_like()[..10]);
        let rt = runtime();
        rt.block_on(async {
            let api: Api<Namespace> = Api::all(client.clone());
            let ns: Namespace = serde_json::from_value(serde_json::json!({
                "metadata": { "name": name, "labels": { "legate.dev/test": "true" } }
            }))
            .expect("namespace");
            api.create(&PostParams::default(), &ns)
                .await
                .expect("namespace created");
            let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), &name);
            let since = Instant::now();
            while accounts.get_opt("default").await.ok().flatten().is_none() {
                assert!(
                    since.elapsed() < Duration::from_secs(60),
                    "no default service account in {name}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        TestNamespace { client, name }
    }
}

/// A namespace a test made; deleted (with everything in it) when dropped.
#[derive(Clone)]
pub struct TestNamespace {
    client: kube::Client,
    /// Its name.
    pub name: String,
}

impl std::fmt::Debug for TestNamespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestNamespace")
            .field("name", &self.name)
            .finish()
    }
}

impl TestNamespace {
    fn pods_api(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// The pods in it now.
    #[must_use]
    pub fn pods(&self) -> Vec<Pod> {
        runtime()
            .block_on(self.pods_api().list(&ListParams::default()))
            .expect("pods listed")
            .items
    }

    /// Waits until `check` holds for the pods in it (at most `limit`).
    ///
    /// # Panics
    /// When it does not hold in time.
    pub fn until_pods(
        &self,
        what: &str,
        limit: Duration,
        check: impl Fn(&[Pod]) -> bool,
    ) -> Vec<Pod> {
        let since = Instant::now();
        loop {
            let pods = self.pods();
            if check(&pods) {
                return pods;
            }
            assert!(
                since.elapsed() < limit,
                "{what}: not within {limit:?}; pods: {:?}",
                pods.iter()
                    .map(|p| (
                        &p.metadata.name,
                        p.status.as_ref().and_then(|s| s.phase.clone())
                    ))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The names of the Secrets and NetworkPolicies Legate made in it
    /// (`app.kubernetes.io/managed-by=legate`).
    #[must_use]
    pub fn legate_objects(&self) -> Vec<String> {
        let params = ListParams::default().labels("app.kubernetes.io/managed-by=legate");
        let secrets: Api<k8s_openapi::api::core::v1::Secret> =
            Api::namespaced(self.client.clone(), &self.name);
        let policies: Api<k8s_openapi::api::networking::v1::NetworkPolicy> =
            Api::namespaced(self.client.clone(), &self.name);
        let mut names: Vec<String> = runtime()
            .block_on(secrets.list(&params))
            .expect("secrets listed")
            .items
            .into_iter()
            .filter_map(|s| s.metadata.name.map(|n| format!("secret/{n}")))
            .collect();
        names.extend(
            runtime()
                .block_on(policies.list(&params))
                .expect("policies listed")
                .items
                .into_iter()
                .filter_map(|p| p.metadata.name.map(|n| format!("networkpolicy/{n}"))),
        );
        names
    }

    /// Limits the namespace to `pods` pods at once (a `ResourceQuota`), as a busy team's
    /// namespace would be.
    pub fn quota_pods(&self, pods: u32) {
        let api: Api<k8s_openapi::api::core::v1::ResourceQuota> =
            Api::namespaced(self.client.clone(), &self.name);
        let quota = serde_json::from_value(serde_json::json!({
            "metadata": { "name": "pods" },
            "spec": { "hard": { "pods": pods.to_string() } },
        }))
        .expect("quota");
        runtime()
            .block_on(api.create(&PostParams::default(), &quota))
            .expect("quota created");
    }

    /// Deletes pod `name` now (no grace), as an operator or an eviction would.
    ///
    /// # Panics
    /// When the API refuses.
    pub fn delete_pod(&self, name: &str) {
        runtime()
            .block_on(
                self.pods_api()
                    .delete(name, &DeleteParams::default().grace_period(0)),
            )
            .expect("pod deleted");
    }

    /// Runs `command` in pod `name`'s agent container; its exit status and stdout (-1 and
    /// the API's words when the exec cannot be made, as before the container runs).
    #[must_use]
    pub fn exec(&self, name: &str, command: &[&str]) -> (i32, String) {
        use tokio::io::AsyncReadExt;
        runtime().block_on(async {
            let params = kube::api::AttachParams::default()
                .container("agent")
                .stderr(false);
            let mut p = match self
                .pods_api()
                .exec(
                    name,
                    command.iter().map(|s| (*s).to_string()).collect::<Vec<_>>(),
                    &params,
                )
                .await
            {
                Ok(p) => p,
                Err(e) => return (-1, e.to_string()),
            };
            let mut out = String::new();
            let mut stdout = p.stdout().expect("stdout");
            let status = p.take_status().expect("status");
            let _ = stdout.read_to_string(&mut out).await;
            let code = match status.await {
                Some(s) if s.status.as_deref() == Some("Success") => 0,
                Some(s) => s
                    .details
                    .and_then(|d| d.causes)
                    .and_then(|c| {
                        c.into_iter()
                            .find(|c| c.reason.as_deref() == Some("ExitCode"))
                    })
                    .and_then(|c| c.message?.parse().ok())
                    .unwrap_or(-1),
                None => -1,
            };
            (code, out)
        })
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let name = self.name.clone();
        let _ =
            runtime().block_on(async move { api.delete(&name, &DeleteParams::background()).await });
    }
}

/// One runtime for every call: a client's connection tasks live on the runtime that made it.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime")
    })
}

fn uuid_like() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    fnv_hex(format!("{nanos}-{}", std::process::id()).as_bytes())
}
