//! [`RemoteRef`]: where a task's work runs when its agent is served by another server (an A2A
//! agent, another Legate among them).
//!
//! This module owns only the shape of the reference. It must never reach the network: the
//! remote backend records a reference as soon as the remote server names its task, and the
//! engine uses it after a restart to re-attach the local task to the remote one.

use serde::{Deserialize, Serialize};

/// The remote task a local task is bound to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteRef {
    /// The A2A endpoint the task was sent to (the interface URL chosen from the card).
    pub url: String,
    /// The protocol binding of that endpoint, as the card names it (`JSONRPC`, `HTTP+JSON`).
    pub binding: String,
    /// The remote server's task id.
    pub task_id: String,
    /// The remote server's context id, when it gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_id: Option<String>,
}

/// Legate's A2A extension that says "this server supervises its agents' permission requests
/// itself": a remote agent whose card declares it is supervised by that server; any other
/// remote agent is unsupervised.
pub const SUPERVISION_EXTENSION: &str = "urn:legate:a2a:ext:supervision:v1";

/// Legate's A2A extension for copy tasks run remotely: the copy's files travel with the
/// message, and the remote's patch comes back to be reviewed and integrated locally.
pub const COPY_WORKSPACE_EXTENSION: &str = "urn:legate:a2a:ext:copy-workspace:v1";
