//! The agent registry: the configured agents' specs, the backend of each kind this build can
//! run, the supervisor's preset for an agent ([`preset_for`]), how much confinement an agent's
//! process gets, and the calls that start an agent without a task (probes, model lists) or
//! read and save its model preference; the [`Agents`] service (with what a caller may know
//! before choosing, `policy`, and the live sessions the core's pool holds).
//!
//! This module owns the backends map: it is the only place the engine looks a backend up.
//! It never runs a task's turn and never stores anything in the task store; a probe's
//! throwaway directory is removed before the call returns.

pub(crate) mod overview;

use crate::core::Core;
use crate::core::request::validate_model;
use legate_backend::{AgentInfo, Backend, Capabilities, EventSink, Registry, SessionRequest};
use legate_core::{AgentSpec, Error, ErrorCode, Result, TaskMode};
use legate_supervisor::{Preset, Supervision};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The configured agents and the backends that run them.
#[derive(Debug)]
pub(crate) struct AgentRegistry {
    specs: BTreeMap<String, AgentSpec>,
    backends: Registry,
}

impl AgentRegistry {
    pub(crate) fn new(specs: BTreeMap<String, AgentSpec>, backends: Registry) -> Self {
        Self { specs, backends }
    }

    /// A configured agent; `AGENT_NOT_FOUND` naming the configured ones.
    pub(crate) fn spec(&self, name: &str) -> Result<&AgentSpec> {
        self.specs.get(name).ok_or_else(|| {
            let known: Vec<&str> = self.specs.keys().map(String::as_str).collect();
            Error::new(
                ErrorCode::AgentNotFound,
                format!(
                    "no agent is named {name:?}; configured: {}",
                    known.join(", ")
                ),
            )
        })
    }

    /// A configured agent this build has a backend for, with what that backend can do;
    /// `AGENT_NOT_FOUND` without one, `INVALID_INPUT` when the agent's transport is not one
    /// its backend serves (see `Registry::backend_for`).
    pub(crate) fn runnable(&self, name: &str) -> Result<(AgentSpec, Capabilities)> {
        let agent = self.spec(name)?;
        let (_, capabilities) = self.backends.backend_for(agent)?;
        Ok((agent.clone(), capabilities))
    }

    /// The backend that runs `agent` and what it can do; `AGENT_NOT_FOUND` when this build
    /// has none for its kind.
    pub(crate) fn backend(&self, agent: &AgentSpec) -> Result<(Arc<dyn Backend>, Capabilities)> {
        let (backend, capabilities) = self.backends.backend_for(agent)?;
        Ok((backend.clone(), capabilities))
    }

    /// Whether the configured agent `name`'s backend can follow a remote task after a restart
    /// ([`Capabilities::reattach`]); false for an agent no longer configured.
    pub(crate) fn reattaches(&self, name: &str) -> bool {
        self.spec(name)
            .and_then(|spec| self.backends.backend_for(spec))
            .is_ok_and(|(_, capabilities)| capabilities.reattach)
    }

    /// The confinement `agent`'s backend reports (none without a backend).
    fn enforcement(&self, agent: &AgentSpec) -> legate_confine::Enforcement {
        self.backends
            .get(&agent.kind)
            .map_or(legate_confine::Enforcement::None, |b| b.confinement())
    }
}

/// The configured agents: their specs, confinement, probes, models and model preferences,
/// the agent policy, and the live agent sessions.
/// Handed out by [`Engine::agents`](crate::Engine::agents).
#[derive(Debug, Clone)]
pub struct Agents {
    pub(crate) core: Core,
}

/// How many agent sessions this engine holds, and how many of them are idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SessionCounts {
    /// Sessions in the pool (idle, running a turn, or kept for a task waiting for input).
    pub live: usize,
    /// Sessions no turn uses, which the cap and the idle timeout apply to.
    pub idle: usize,
}

impl Core {
    /// A configured agent.
    pub(crate) fn agent(&self, name: &str) -> Result<&AgentSpec> {
        self.agents().spec(name)
    }

    /// `AGENT_RESERVED` when `name` is the supervising agent (`[supervision] agent`): no
    /// caller runs a task on it or chooses its model, so nothing a caller sends reaches the
    /// agent that judges the callers' requests, nor anything it keeps.
    pub(crate) fn refuse_reserved(&self, name: &str) -> Result<()> {
        if self.config().approvals.agent.as_deref() != Some(name) {
            return Ok(());
        }
        Err(Error::new(
            ErrorCode::AgentReserved,
            format!(
                "agent `{name}` is the supervising agent ([supervision] agent): no caller may run a task on it or choose its model"
            ),
        ))
    }

    /// The agent a caller's task runs on: configured, not reserved ([`Core::refuse_reserved`])
    /// and runnable by this build, with what its backend can do. Every path that starts a
    /// caller's task on a named agent asks here.
    pub(crate) fn task_agent(&self, name: &str) -> Result<(AgentSpec, Capabilities)> {
        self.agent(name)?;
        self.refuse_reserved(name)?;
        self.agents().runnable(name)
    }

    /// How much confinement the kernel enforces on `name`'s agent process (the backend's
    /// report for its kind). `CONFINEMENT_UNAVAILABLE` when the configuration requires
    /// confinement and it would not be enforced at all.
    pub(crate) fn confinement(&self, name: &str) -> Result<legate_confine::Enforcement> {
        let agent = self.agent(name)?;
        let enforcement = self.agents().enforcement(agent);
        if enforcement == legate_confine::Enforcement::None
            && self.config().confinement == legate_confine::Requirement::Required
        {
            return Err(Error::new(
                ErrorCode::ConfinementUnavailable,
                format!(
                    "confinement = \"required\", but agent `{name}`'s process would not be confined (no Landlock in this kernel, or a backend that does not confine)"
                ),
            ));
        }
        Ok(enforcement)
    }

    /// A session request for agent `name` in a throwaway directory under
    /// `$LEGATE_HOME/probes/` (read-only, nothing stored), with its backend. The caller
    /// removes the directory.
    fn probe_request(&self, name: &str) -> Result<(Arc<dyn Backend>, SessionRequest)> {
        // Nothing starts unconfined under `confinement = "required"`.
        self.confinement(name)?;
        let agent = self.agent(name)?.clone();
        let (backend, capabilities) = self.agents().backend(&agent)?;
        let probes = self.config().paths.home().join("probes");
        let boundary = legate_workspace::sandbox(&probes, &agent.name, None)?;
        let request = SessionRequest {
            agent: self.tagged(&agent),
            boundary: boundary.clone(),
            supervisor: self.supervisor(),
            supervision: Supervision {
                boundary,
                mode: TaskMode::ReadOnly,
                preset: preset_for(&agent, &capabilities),
                workspace: legate_core::WorkspaceKind::Sandbox,
                agent: agent.name.clone(),
                role: legate_core::RoleBase::Implementer.as_str().to_string(),
                tools: legate_supervisor::ToolControls::default(),
            },
            channel: None,
            resume_session_id: None,
            state_dir: Some(self.config().state_dir(&agent.name)),
            blocked_dir: Some(self.config().paths.blocked()),
            hidden: self.config().hidden_paths(),
            ledger: None,
            mcp_servers: Vec::new(),
            network: self.config().network_for(name),
            task: None,
        };
        Ok((backend, request))
    }

    /// The models agent `name` offers (`agy models`, or the model config option of an ACP
    /// session opened in a throwaway directory and stopped), within `limit`. Nothing is
    /// prompted and nothing is stored.
    pub(crate) async fn models(
        &self,
        name: &str,
        limit: Duration,
    ) -> Result<legate_backend::selection::ModelList> {
        let (backend, request) = self.probe_request(name)?;
        let root = request.boundary.root.clone();
        let listed = tokio::time::timeout(limit, backend.models(request)).await;
        let _ = std::fs::remove_dir_all(&root);
        listed.unwrap_or_else(|_| Err(start_timeout(limit)))
    }

    pub(crate) async fn logged_in(&self, name: &str, limit: Duration) -> Result<Option<bool>> {
        let (backend, request) = self.probe_request(name)?;
        let root = request.boundary.root.clone();
        let checked = tokio::time::timeout(limit, backend.logged_in(request)).await;
        let _ = std::fs::remove_dir_all(&root);
        checked.unwrap_or_else(|_| Err(start_timeout(limit)))
    }

    /// Agent `name`'s saved model preference: `None` when there is none, `Some(Auto)` for a
    /// saved Auto. Used when a task names no model, before the configured default.
    pub(crate) fn model_preference(
        &self,
        name: &str,
    ) -> Result<Option<legate_backend::selection::Choice>> {
        self.agent(name)?;
        legate_backend::selection::load_preference(self.config().paths.home(), name)
    }
}

impl Agents {
    /// A configured agent.
    pub fn agent(&self, name: &str) -> Result<&AgentSpec> {
        self.core.agent(name)
    }

    /// How much confinement the kernel enforces on `name`'s agent process (the backend's
    /// report for its kind). `CONFINEMENT_UNAVAILABLE` when the configuration requires
    /// confinement and it would not be enforced at all.
    pub fn confinement(&self, name: &str) -> Result<legate_confine::Enforcement> {
        self.core.confinement(name)
    }

    /// Starts an agent for real (spawn, handshake, a session in a throwaway directory under
    /// `$LEGATE_HOME/probes/`), then stops it. Nothing is prompted and nothing is stored.
    /// An agent whose process would run unconfined under `confinement = "required"` is not
    /// started: `CONFINEMENT_UNAVAILABLE`.
    pub async fn probe(&self, name: &str, limit: Duration) -> Result<AgentInfo> {
        let (backend, request) = self.core.probe_request(name)?;
        let root = request.boundary.root.clone();
        let (sink, _events) = EventSink::channel();
        let opened = tokio::time::timeout(limit, backend.open(request, sink)).await;
        let info = match opened {
            Ok(Ok(session)) => {
                let info = session.agent_info().clone();
                session.shutdown().await;
                Ok(info)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(start_timeout(limit)),
        };
        let _ = std::fs::remove_dir_all(&root);
        info
    }

    /// When the version agent `name` announced (`info`, from [`Agents::probe`]) lies outside
    /// its preset's verified range: a sentence saying so, for `legate agents` and MCP
    /// `health`. `None` inside the range, for an agent whose preset tracks no versions, and
    /// for an unknown agent.
    pub fn version_warning(&self, name: &str, info: &AgentInfo) -> Option<String> {
        let (agent, capabilities) = self.core.agents().runnable(name).ok()?;
        let preset = preset_for(&agent, &capabilities);
        match preset.check_version(info.name.as_deref(), info.version.as_deref()) {
            legate_supervisor::VersionCheck::Outside {
                announced,
                verified,
            } => Some(format!(
                "version not verified: {announced} (the {} preset was verified against {verified})",
                preset.name
            )),
            _ => None,
        }
    }

    /// The models agent `name` offers (`agy models`, or the model config option of an ACP
    /// session opened in a throwaway directory and stopped), within `limit`. Nothing is
    /// prompted and nothing is stored.
    pub async fn models(
        &self,
        name: &str,
        limit: Duration,
    ) -> Result<legate_backend::selection::ModelList> {
        self.core.models(name, limit).await
    }

    /// Whether agent `name` is logged in, as its CLI shows without a task (agy: `agy
    /// models`): `None` when its backend cannot tell. For `health`.
    pub async fn logged_in(&self, name: &str, limit: Duration) -> Result<Option<bool>> {
        self.core.logged_in(name, limit).await
    }

    /// Agent `name`'s saved model preference: `None` when there is none, `Some(Auto)` for a
    /// saved Auto. Used when a task names no model, before the configured default.
    pub fn model_preference(
        &self,
        name: &str,
    ) -> Result<Option<legate_backend::selection::Choice>> {
        self.core.model_preference(name)
    }

    /// Saves agent `name`'s model preference (`None` removes it). The id is checked against
    /// what the agent offers at its next run (`MODEL_NOT_AVAILABLE`), not here.
    /// `AGENT_RESERVED` for the supervising agent, whose model only `[supervision]` sets.
    pub fn set_model_preference(
        &self,
        name: &str,
        choice: Option<&legate_backend::selection::Choice>,
    ) -> Result<()> {
        self.agent(name)?;
        self.core.refuse_reserved(name)?;
        if let Some(legate_backend::selection::Choice::Model(id)) = choice {
            validate_model(id)?;
        }
        legate_backend::selection::save_preference(self.core.config().paths.home(), name, choice)
    }

    /// Whether `name` is the supervising agent (`[supervision] agent`), which no caller may
    /// run a task on or choose the model of (`AGENT_RESERVED`).
    pub fn reserved(&self, name: &str) -> bool {
        self.core.refuse_reserved(name).is_err()
    }

    /// How many agent sessions this engine holds now.
    pub fn sessions(&self) -> SessionCounts {
        let (live, idle) = self.core.pool().counts();
        SessionCounts { live, idle }
    }
}

/// `AGENT_START_FAILED` for an agent that did not finish starting within `limit`.
fn start_timeout(limit: Duration) -> Error {
    Error::new(
        ErrorCode::AgentStartFailed,
        format!(
            "the agent did not finish starting within {} s",
            limit.as_secs()
        ),
    )
}

/// What the supervisor knows about an agent: its configured preset, or its backend's
/// default (revisor's own for the built-in agent, the generic one otherwise).
pub fn preset_for(agent: &AgentSpec, capabilities: &Capabilities) -> Preset {
    agent
        .preset
        .as_deref()
        .and_then(Preset::by_name)
        .unwrap_or_else(|| capabilities.default_preset.clone())
}
