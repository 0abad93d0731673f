//! What the `a2a` backend's suites share: a session request for a remote agent, a 0600 token
//! file, and a session that must not open.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use legate_backend::{Backend, EventSink, RemoteLedger, SessionRequest};
use legate_core::{AgentSpec, Boundary, TaskMode};
use legate_remote::A2aBackend;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A 0600 file holding `token`.
pub fn token_file(dir: &Path, token: &str) -> PathBuf {
    let path = dir.join("far.token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    path
}

/// A write task's session request for `spec` in `dir`, its remote task recorded in `ledger`.
pub fn request(
    dir: &Path,
    spec: AgentSpec,
    ledger: Option<Arc<dyn RemoteLedger>>,
) -> SessionRequest {
    let boundary = Boundary {
        root: dir.to_path_buf(),
        owned: true,
        allow_execute: false,
    };
    SessionRequest {
        agent: spec,
        boundary: boundary.clone(),
        supervisor: Arc::new(legate_supervisor::Rules),
        supervision: legate_supervisor::Supervision::new(
            boundary,
            TaskMode::Write,
            legate_supervisor::Preset::generic(),
        ),
        channel: None,
        resume_session_id: None,
        state_dir: None,
        blocked_dir: None,
        hidden: Vec::new(),
        ledger,
        mcp_servers: Vec::new(),
        network: Default::default(),
        task: None,
    }
}

/// The error opening a session for `spec` ends with.
pub async fn open_err(spec: AgentSpec) -> legate_core::Error {
    let dir = tempfile::tempdir().unwrap();
    let (sink, _stream) = EventSink::channel();
    A2aBackend::default()
        .open(request(dir.path(), spec, None), sink)
        .await
        .expect_err("the session must not open")
}
