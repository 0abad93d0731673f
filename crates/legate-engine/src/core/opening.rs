//! The session request of a turn or of a warm session: what an agent is opened with (its
//! processes tagged with this runner, its supervision, the approval queue, the ledger, its MCP
//! servers and network rules).
//!
//! This module only builds requests; it never opens a session or reads a task's workspace.

use crate::core::{Core, runner};
use legate_backend::SessionRequest;
use legate_core::{AgentSpec, Boundary, RoleBase, Task, WorkspaceKind};
use legate_supervisor::Supervision;
use std::sync::Arc;

impl Core {
    /// `agent` tagged with this runner (`LEGATE_RUNNER=<id>` in its environment): what its
    /// processes carry, and the label of its pod.
    pub(crate) fn tagged(&self, agent: &AgentSpec) -> AgentSpec {
        let mut tagged = agent.clone();
        if let Some(local) = tagged.local_mut() {
            local.env.insert(
                runner::RUNNER_ENV.to_string(),
                self.inner.runner.id().to_string(),
            );
        }
        tagged
    }

    /// The session request for `task`'s turn on `agent` in `boundary`: its processes tagged
    /// with this runner, supervised under the task's mode and role, asks going to the
    /// approval queue, and the store-backed ledger a remote backend records its remote task
    /// in (`ledger`). `resume` is an earlier session id of the context to continue.
    pub(crate) fn session_request(
        &self,
        task: &Task,
        agent: &AgentSpec,
        boundary: Boundary,
        preset: legate_supervisor::Preset,
        resume: Option<String>,
    ) -> SessionRequest {
        let opening = Opening {
            mode: task.mode,
            workspace: task.workspace,
            role: task.role.as_ref().map_or_else(
                || RoleBase::Implementer.as_str().to_string(),
                |r| r.name.clone(),
            ),
            tools: legate_supervisor::ToolControls {
                allowed: task.controls.allowed_tools.clone(),
                mcp: task.controls.mcp_servers.clone(),
            },
            mcp_servers: crate::controls::catalogued(&self.inner.config.controls, &task.controls),
            task: Some(task.id.clone()),
        };
        self.request_for(agent, boundary, preset, resume, opening)
    }

    /// The session request of `opening` on `agent` in `boundary` (a task's, or a warm
    /// session's opened before any task: `core::warm`).
    pub(crate) fn request_for(
        &self,
        agent: &AgentSpec,
        boundary: Boundary,
        preset: legate_supervisor::Preset,
        resume: Option<String>,
        opening: Opening,
    ) -> SessionRequest {
        let inner = &self.inner;
        SessionRequest {
            agent: self.tagged(agent),
            boundary: boundary.clone(),
            supervisor: inner.supervisor.clone(),
            supervision: Supervision {
                boundary,
                mode: opening.mode,
                preset,
                workspace: opening.workspace,
                agent: agent.name.clone(),
                role: opening.role,
                tools: opening.tools,
            },
            channel: Some(inner.queue.clone()),
            resume_session_id: resume,
            state_dir: Some(inner.config.state_dir(&agent.name)),
            blocked_dir: Some(inner.config.paths.blocked()),
            hidden: inner.config.hidden_paths(),
            ledger: Some(Arc::new(crate::core::ledger::StoreLedger::new(
                inner.store.clone(),
            ))),
            mcp_servers: opening.mcp_servers,
            network: inner.config.network_for(&agent.name),
            task: opening.task,
        }
    }
}

/// What a session is opened for besides its agent and workspace: a task's mode, role, tool
/// controls and MCP servers, or a warm session's defaults (`core::warm`).
pub(crate) struct Opening {
    pub(crate) mode: legate_core::TaskMode,
    pub(crate) workspace: WorkspaceKind,
    pub(crate) role: String,
    pub(crate) tools: legate_supervisor::ToolControls,
    pub(crate) mcp_servers: Vec<legate_core::McpServerSpec>,
    pub(crate) task: Option<legate_core::TaskId>,
}
