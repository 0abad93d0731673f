//! `legate agents`: each configured agent, whether it starts, and how the kernel confines it.
//!
//! Probing is the engine's (`Engine::probe`): it starts the agent for real, in a throwaway
//! directory, then stops it. Nothing is prompted and no task is stored. Confinement is the
//! engine's report too (`Engine::confinement`): fully, partly or not enforced, or
//! `CONFINEMENT_UNAVAILABLE` when the configuration requires it and it cannot be had. It is
//! checked before probing: such an agent is shown `not started` and is never spawned. An
//! agent with `runtime = "kubernetes"` is probed in a pod of its own (made, handshaken,
//! deleted), and its line says where it runs instead of the kernel's confinement.

use crate::config::Config;
use anyhow::Result;
use legate_core::{AgentKind, AgentSpec};
use legate_engine::Engine;
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

pub async fn list(config: &Config, engine: Option<&Engine>, json_out: bool) -> Result<ExitCode> {
    let agents = &config.engine.agents;
    if !json_out {
        match &config.file {
            Some(f) => crate::out!("configuration: {}", f.display())?,
            None => crate::out!("configuration: defaults (no legate.toml in $LEGATE_HOME)")?,
        }
    }
    for spec in agents.values() {
        let Row {
            starts,
            detail,
            confinement,
            ..
        } = row(spec, engine).await;
        let (confinement_wire, confinement_text) = match (spec.runtime.pod(), &confinement) {
            (Some(pod), _) => (
                "pod".to_string(),
                format!(
                    "runs in a Kubernetes pod (namespace {}, image {})",
                    pod.namespace, pod.image
                ),
            ),
            (None, Ok(e)) => (e.as_str().to_string(), format!("confinement {e}")),
            (None, Err(e)) => ("unavailable".to_string(), e.to_string()),
        };
        let default = spec.name == config.engine.default_agent;
        // The supervising agent takes no caller's task (`AGENT_RESERVED`): said where it is listed.
        let supervising = config.engine.approvals.agent.as_deref() == Some(spec.name.as_str());
        // Warm sessions are kept by the long-lived fronts only (`[agents.NAME] warm`).
        let warm = config.engine.warm.get(&spec.name).copied().unwrap_or(0);
        if json_out {
            crate::out!(
                "{}",
                crate::json_out::line(&json!({
                    "name": spec.name, "kind": spec.kind.as_str(), "preset": spec.preset,
                    "command": spec.local_command().map(|c| c.command.as_str()),
                    "args": spec.local_command().map(|c| c.args.as_slice()),
                    "url": spec.remote().map(|r| r.url.as_str()),
                    "default": default, "supervising": supervising,
                    "starts": starts, "detail": detail, "description": spec.description,
                    "confinement": confinement_wire,
                    "runtime": spec.runtime.name(),
                    "namespace": spec.runtime.pod().map(|p| p.namespace.as_str()),
                    "image": spec.runtime.pod().map(|p| p.image.as_str()),
                    "warm": warm,
                }))?
            )?;
        } else {
            let mark = if default { "*" } else { " " };
            // The detail carries what the agent said of itself (`initialize`'s name and
            // version): shown, never obeyed.
            crate::out!(
                "{mark} {:<10} {:<8} {}; {confinement_text}",
                spec.name,
                spec.kind.as_str(),
                legate_core::text::visible(&detail, &[])
            )?;
            if let Some(d) = &spec.description {
                crate::out!("             {d}")?;
            }
            if warm > 0 {
                crate::out!(
                    "             keeps {warm} warm session{} ready under `legate serve` and `legate mcp`",
                    if warm == 1 { "" } else { "s" }
                )?;
            }
            if supervising {
                crate::out!(
                    "             the supervising agent: it answers approvals only; a task on it or its model is refused (AGENT_RESERVED)"
                )?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// What `legate agents` says about one agent (and `legate doctor`).
pub(crate) struct Row {
    /// Whether it starts; `None` when not probed.
    pub(crate) starts: Option<bool>,
    pub(crate) detail: String,
    /// Its version outside its preset's verified range, when it started.
    pub(crate) warning: Option<String>,
    /// How the kernel confines its process: the backend's report through the engine, or
    /// (unprobed) what this kernel can enforce at all.
    confinement: legate_core::Result<legate_confine::Enforcement>,
}

/// Probes one agent. Confinement is checked first: an agent whose process the kernel could not
/// confine is never started when the configuration requires confinement.
pub(crate) async fn row(spec: &AgentSpec, engine: Option<&Engine>) -> Row {
    let confinement = match engine {
        Some(engine) => engine.agents().confinement(&spec.name),
        None => Ok(legate_confine::Confinement::probe()),
    };
    let mut warning = None;
    let (starts, detail) = match (engine, &confinement) {
        (None, _) => (None, "not probed".to_string()),
        (Some(_), Err(_)) => (
            Some(false),
            "not started (confinement is required)".to_string(),
        ),
        (Some(_), Ok(_))
            if spec.kind == AgentKind::ACP
                && spec.runtime.is_local()
                && spec
                    .local_command()
                    .is_some_and(|c| find_program(&c.command).is_none()) =>
        {
            (
                Some(false),
                format!(
                    "does not start: AGENT_START_FAILED: {} is not on PATH{}",
                    spec.local_command().map_or("", |c| c.command.as_str()),
                    spec.preset
                        .as_deref()
                        .and_then(legate_config::install_hint)
                        .map(|h| format!(" (install it: {h})"))
                        .unwrap_or_default()
                ),
            )
        }
        (Some(engine), Ok(_)) => match engine
            .agents()
            .probe(&spec.name, engine.config().fronts.probe_timeout)
            .await
        {
            Ok(info) => {
                warning = engine.agents().version_warning(&spec.name, &info);
                (
                    Some(true),
                    format!(
                        "starts ({} {}){}{}",
                        info.name.as_deref().unwrap_or("unnamed"),
                        info.version.as_deref().unwrap_or("?"),
                        if info.capabilities.is_empty() {
                            String::new()
                        } else {
                            format!("; capabilities: {}", info.capabilities.join(", "))
                        },
                        warning
                            .as_deref()
                            .map(|w| format!("; {w}"))
                            .unwrap_or_default()
                    ),
                )
            }
            Err(e) => (Some(false), format!("does not start: {e}")),
        },
    };
    Row {
        starts,
        detail,
        warning,
        confinement,
    }
}

/// Where `command` would be found, as `execvp` looks.
fn find_program(command: &str) -> Option<PathBuf> {
    let p = Path::new(command);
    if p.is_absolute() || command.contains('/') {
        return p.is_file().then(|| p.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(command))
        .find(|c| c.is_file())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use legate_backend::acp::AcpBackend;
    use legate_backend::{AgentSession, Backend, EventSink, SessionRequest};
    use legate_confine::Requirement;
    use legate_core::ErrorCode;
    use legate_engine::{EngineConfig, Paths};
    use std::collections::{BTreeMap, HashMap};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A real ACP backend that reports its processes unconfined (as on a kernel without
    /// Landlock, through the trait's default `confinement`), counting the agents it starts.
    #[derive(Debug)]
    struct Unconfined {
        inner: AcpBackend,
        opened: Arc<AtomicUsize>,
    }

    #[async_trait::async_trait]
    impl Backend for Unconfined {
        fn capabilities(&self) -> legate_backend::Capabilities {
            self.inner.capabilities()
        }

        async fn open(
            &self,
            request: SessionRequest,
            sink: EventSink,
        ) -> legate_core::Result<Arc<dyn AgentSession>> {
            self.opened.fetch_add(1, Ordering::SeqCst);
            self.inner.open(request, sink).await
        }
    }

    /// An engine whose one agent, once spawned, leaves `started` in its state directory (its
    /// `HOME`), and the count of agents its backend was asked to start.
    fn engine(home: &Path, confinement: Requirement) -> (Engine, Arc<AtomicUsize>, AgentSpec) {
        let spec: AgentSpec = serde_json::from_value(json!({
            "name": "agent", "kind": "acp", "command": "sh",
            "args": ["-c", "touch \"$HOME/started\""],
        }))
        .unwrap();
        let mut config = EngineConfig::new(Paths::new(home));
        config.agents = BTreeMap::from([("agent".to_string(), spec.clone())]);
        config.default_agent = "agent".into();
        config.confinement = confinement;
        let opened = Arc::new(AtomicUsize::new(0));
        let backend: Arc<dyn Backend> = Arc::new(Unconfined {
            inner: AcpBackend::new(),
            opened: opened.clone(),
        });
        let engine = Engine::start(
            config,
            HashMap::from([(AgentKind::ACP, backend)]),
            Arc::new(legate_supervisor::Rules),
        )
        .unwrap();
        (engine, opened, spec)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn required_confinement_that_cannot_be_had_starts_no_agent() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let (engine, opened, spec) = engine(&home, Requirement::Required);
        let row = row(&spec, Some(&engine)).await;
        assert_eq!(row.starts, Some(false));
        assert_eq!(row.detail, "not started (confinement is required)");
        let err = row.confinement.unwrap_err();
        assert_eq!(err.code, ErrorCode::ConfinementUnavailable, "{err}");
        // Nothing was spawned: the backend was never asked, and the agent left no trace.
        assert_eq!(opened.load(Ordering::SeqCst), 0);
        assert!(!home.join("agents/agent/started").exists());
        // The engine's probe refuses it on its own, too.
        let err = engine
            .agents()
            .probe("agent", engine.config().fronts.probe_timeout)
            .await
            .expect_err("not probed");
        assert_eq!(err.code, ErrorCode::ConfinementUnavailable, "{err}");
        assert_eq!(opened.load(Ordering::SeqCst), 0);
        engine.shutdown().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn best_effort_probes_the_same_agent_for_real() {
        // The control: the same agent, without the requirement, is spawned (and fails its
        // handshake, since `sh` speaks no ACP), so the test above would see a spawn.
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("home");
        let (engine, opened, spec) = engine(&home, Requirement::BestEffort);
        let row = row(&spec, Some(&engine)).await;
        assert_eq!(row.starts, Some(false), "{}", row.detail);
        assert!(row.detail.starts_with("does not start: "), "{}", row.detail);
        assert_eq!(row.confinement.unwrap(), legate_confine::Enforcement::None);
        assert_eq!(opened.load(Ordering::SeqCst), 1);
        assert!(home.join("agents/agent/started").exists());
        engine.shutdown().await;
    }
}
