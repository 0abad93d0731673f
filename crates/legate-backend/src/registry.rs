//! The backends a build serves: [`Registry`], each [`AgentKind`] mapped to its [`Backend`].
//!
//! [`Registry::builtin`] holds this crate's backends ([`BUILTIN`]: `acp`, `revisor`, `agy`),
//! each made with the confinement requirement the configuration asked for. Adding a backend
//! to the product is one module and one line in [`BUILTIN`]; a test or an embedding program
//! adds its own with [`Registry::register`]. Nothing else (not the engine, not core) names a
//! kind.
//!
//! This module never opens a session and never decides which agent a task runs: it answers
//! "which backend serves this kind".

use crate::acp::AcpBackend;
use crate::agy::AgyBackend;
use crate::{Backend, Capabilities};
use legate_confine::Requirement;
use legate_core::{AgentKind, AgentSpec, Error, ErrorCode, Result};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

/// Makes a built-in backend that refuses, under `Requirement::Required`, to start a process
/// the kernel cannot confine.
pub type Make = fn(Requirement) -> Arc<dyn Backend>;

/// This build's backends: one line each.
pub const BUILTIN: &[(&str, Make)] = &[
    ("acp", |r| {
        Arc::new(AcpBackend::default().with_confinement(r))
    }),
    ("revisor", |r| {
        Arc::new(
            AcpBackend {
                default_preset: legate_supervisor::Preset::revisor(),
                ..AcpBackend::default()
            }
            .with_confinement(r),
        )
    }),
    ("agy", |r| {
        Arc::new(AgyBackend::default().with_confinement(r))
    }),
];

/// Each agent kind a build serves, with its backend.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    backends: BTreeMap<AgentKind, Arc<dyn Backend>>,
}

impl Registry {
    /// No backend at all.
    pub fn new() -> Self {
        Self::default()
    }

    /// This build's backends ([`BUILTIN`]), each with the confinement `requirement`.
    pub fn builtin(requirement: Requirement) -> Self {
        let mut registry = Self::new();
        for (kind, make) in BUILTIN {
            // The table's names are constants of this file, checked by a test.
            if let Ok(kind) = AgentKind::new(*kind) {
                registry.backends.insert(kind, make(requirement));
            }
        }
        registry
    }

    /// The same registry with `backend` serving `kind` (replacing any backend before).
    #[must_use]
    pub fn register(mut self, kind: AgentKind, backend: Arc<dyn Backend>) -> Self {
        self.backends.insert(kind, backend);
        self
    }

    /// The backend serving `kind`.
    pub fn get(&self, kind: &AgentKind) -> Option<&Arc<dyn Backend>> {
        self.backends.get(kind)
    }

    /// Whether some backend serves `kind`.
    pub fn serves(&self, kind: &AgentKind) -> bool {
        self.backends.contains_key(kind)
    }

    /// The kinds served, in order.
    pub fn kinds(&self) -> impl Iterator<Item = &AgentKind> {
        self.backends.keys()
    }

    /// The backend for `agent`, checked against what it can serve: `AGENT_NOT_FOUND` when
    /// no backend serves its kind, `INVALID_INPUT` when the agent is reached at a URL but its
    /// backend runs a local process. (A backend that runs none, in-process or remote, checks
    /// the transport it needs itself.)
    pub fn backend_for(&self, agent: &AgentSpec) -> Result<(&Arc<dyn Backend>, Capabilities)> {
        let backend = self.get(&agent.kind).ok_or_else(|| {
            Error::new(
                ErrorCode::AgentNotFound,
                format!(
                    "agent {:?} is of kind {} which this build cannot run",
                    agent.name, agent.kind
                ),
            )
        })?;
        let capabilities = backend.capabilities();
        if capabilities.local_process && agent.local_command().is_none() {
            return Err(Error::invalid_input(format!(
                "agent {:?} is configured with a URL, but its kind {} runs a local command",
                agent.name, agent.kind
            )));
        }
        Ok((backend, capabilities))
    }
}

impl From<HashMap<AgentKind, Arc<dyn Backend>>> for Registry {
    fn from(map: HashMap<AgentKind, Arc<dyn Backend>>) -> Self {
        Self {
            backends: map.into_iter().collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_builtin_table_serves_the_three_kinds() {
        for (name, _) in BUILTIN {
            assert!(AgentKind::new(*name).is_ok(), "{name}");
        }
        let r = Registry::builtin(Requirement::BestEffort);
        let kinds: Vec<_> = r.kinds().map(AgentKind::as_str).collect();
        assert_eq!(kinds, ["acp", "agy", "revisor"]);
        let preset = |k: &AgentKind| r.get(k).unwrap().capabilities().default_preset.name;
        assert_eq!(preset(&AgentKind::REVISOR), "revisor");
        assert_eq!(preset(&AgentKind::ACP), "generic");
        let agy = r.get(&AgentKind::AGY).unwrap().capabilities();
        assert!(agy.structured_output && agy.local_process);
        assert!(
            !r.get(&AgentKind::ACP)
                .unwrap()
                .capabilities()
                .structured_output
        );
    }

    #[test]
    fn a_url_spec_is_refused_by_a_local_backend() {
        let r = Registry::builtin(Requirement::BestEffort);
        let spec = AgentSpec::url("remote", AgentKind::ACP, "http://127.0.0.1:9/a");
        let err = r.backend_for(&spec).unwrap_err();
        assert_eq!(err.code, ErrorCode::InvalidInput);
        assert!(err.message.contains("URL"), "{}", err.message);
        let unknown = AgentSpec::command("x", AgentKind::new("nope").unwrap(), "/bin/true");
        assert_eq!(
            r.backend_for(&unknown).unwrap_err().code,
            ErrorCode::AgentNotFound
        );
        let local = AgentSpec::command("x", AgentKind::AGY, "agy");
        assert!(r.backend_for(&local).is_ok());
    }
}
