//! Legate's Kubernetes runtime: an agent session in a pod of its own.
//!
//! A [`Cluster`] is a connection to one namespace of one cluster (from a kubeconfig, through
//! the `kube` crate). [`Cluster::start`] makes a session's pod (with [`spec`]'s confinement:
//! no service-account token, non-root, read-only root file system but its volumes, every
//! capability dropped, the runtime's default seccomp profile, resource limits, a deadline, and
//! a NetworkPolicy that denies egress), waits for it to run (queuing while the namespace's
//! quota is full), and hands back a [`Pod`]: its files are shipped in and back as tar streams
//! over `exec` ([`files`]), and the agent's stdio is one more `exec` stream ([`Pod::exec`]).
//! Every pod is labelled with Legate's home and runner so that [`Cluster::sweep`] can find
//! and delete what a dead engine left.
//!
//! This crate knows nothing of ACP, tasks or permissions: it makes, watches and deletes pods,
//! and moves bytes. It never decides what the agent may do in the pod (its spec fixes the
//! confinement) and never trusts a byte that comes back from one (`files` bounds and checks
//! every entry).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use legate_core::PodSettings;
//! use legate_kube::{Cluster, Owner};
//! let settings = PodSettings::new("legate", "legate-revisor:dev", vec!["legate".into(), "agent".into(), "revisor".into()]);
//! let cluster = Cluster::connect(&settings).await?;
//! let home = legate_kube::labels::home_id(std::path::Path::new("/home/me/.legate"))?;
//! let owner = Owner::new(&home, "r1", "t-1", "revisor");
//! let pod = cluster.start(&settings, &owner, Vec::new(), |_| {}).await?;
//! pod.delete().await;
//! # Ok(()) }
//! ```

mod client;
pub mod files;
pub mod labels;
mod pod;
pub mod spec;
mod sweep;

pub use client::Cluster;
pub use labels::Owner;
pub use pod::{Exec, ExitReason, Pod};
pub use sweep::Swept;

/// Where the workspace is mounted in the pod.
pub const WORKSPACE: &str = "/workspace";
/// The agent's home (its state) in the pod.
pub const HOME: &str = "/home/agent";
/// The user and group every container runs as.
pub const UID: i64 = 65532;
