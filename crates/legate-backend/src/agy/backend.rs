//! [`AgyBackend`] and [`AgySession`]: discovery at open, one `agy` process per turn.
//!
//! `open` checks the workspace (and that no unverified cleanup blocks it), builds the
//! environment, finds the executable and probes it. The session then holds the conversation
//! id (from the first run's `init`, or the context's stored one to resume) and the
//! conversation's last cumulative usage. Each `prompt` chooses the model, builds the
//! arguments, runs one process, turns its cumulative usage into the turn's, and classifies
//! how it ended.

use super::args::{self, RunOptions};
use super::cleanup;
use super::confine::Fence;
use super::discovery::{Discovery, discover, resolve_executable};
use super::models;
use super::run::{self, RunSpec};
use super::usage::{self, Counters};
use crate::env::{self, Allowlist};
use crate::{
    AgentInfo, AgentSession, Backend, Canceller, Capabilities, Continuation, EventSink,
    SessionFacts, SessionRequest, StopReason, Turn, TurnGate, TurnOutcome,
};
use async_trait::async_trait;
use legate_confine::{Confinement, Requirement};
use legate_core::{AgentSpec, Boundary, Error, ErrorCode, EventKind, Result, TaskMode};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tracing::{info, warn};

/// The default timeout of `--version`, `--help` and `models`.
pub const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// The default time between `SIGINT` and `SIGKILL`.
pub const DEFAULT_KILL_GRACE: Duration = Duration::from_secs(3);

/// The agy backend.
#[derive(Debug, Clone)]
pub struct AgyBackend {
    /// How long `--version`, `--help` and `models` may take.
    pub probe_timeout: Duration,
    /// Time between `SIGINT` and `SIGKILL` when a run is stopped.
    pub kill_grace: Duration,
    /// Whether an `agy` the kernel cannot confine may run (best effort) or not (required).
    pub confinement: Requirement,
}

impl Default for AgyBackend {
    fn default() -> Self {
        Self {
            probe_timeout: DEFAULT_PROBE_TIMEOUT,
            kill_grace: DEFAULT_KILL_GRACE,
            confinement: Requirement::BestEffort,
        }
    }
}

/// A conversation with `agy`: no process lives between turns.
#[derive(Debug)]
pub struct AgySession {
    pub(super) spec: AgentSpec,
    pub(super) boundary: Boundary,
    pub(super) root: PathBuf,
    pub(super) state_dir: Option<PathBuf>,
    /// `$LEGATE_HOME`, where the saved model preference is.
    pub(super) legate_home: Option<PathBuf>,
    pub(super) blocked_dir: Option<PathBuf>,
    pub(super) env: Vec<(OsString, OsString)>,
    pub(super) fence: Fence,
    pub(super) discovery: Discovery,
    pub(super) probe_timeout: Duration,
    pub(super) kill_grace: Duration,
    /// Named by the resumed conversation, else by the first run's.
    pub(super) facts: SessionFacts,
    pub(super) conversation: Mutex<Option<String>>,
    pub(super) total: Mutex<Option<Counters>>,
    pub(super) stop: watch::Sender<bool>,
    /// One turn at a time, none after shutdown.
    pub(super) turns: TurnGate,
    pub(super) blocked: AtomicBool,
    /// The rules each run's connections run under (`None`: no network namespace here, so
    /// no proxy is served and no proxy variable set).
    pub(super) network: Option<Arc<legate_supervisor::network::NetworkRules>>,
    /// The supervision inputs and channel an `ask` about a connection goes to.
    pub(super) supervision: legate_supervisor::Supervision,
    /// The catalogued MCP servers selected for the context, staged with the tool controls.
    pub(super) mcp_servers: Vec<legate_core::McpServerSpec>,
    pub(super) channel: Option<Arc<dyn crate::ApprovalChannel>>,
}

/// Stops the running turn of an [`AgySession`].
#[derive(Debug)]
pub struct AgyCanceller {
    stop: watch::Sender<bool>,
}

impl Canceller for AgyCanceller {
    fn cancel(&self) {
        self.stop.send_replace(true);
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl AgyBackend {
    /// The same backend with another confinement requirement.
    pub fn with_confinement(mut self, requirement: Requirement) -> Self {
        self.confinement = requirement;
        self
    }

    /// [`Backend::open`], returning the concrete session.
    pub async fn open_session(
        &self,
        request: SessionRequest,
        sink: EventSink,
    ) -> Result<AgySession> {
        let spec = request.agent.clone();
        let root = std::fs::canonicalize(&request.boundary.root)
            .ok()
            .filter(|r| r.is_dir())
            .ok_or_else(|| {
                Error::new(
                    ErrorCode::InvalidWorkspace,
                    format!(
                        "the workspace root {} is not a usable directory",
                        request.boundary.root.display()
                    ),
                )
            })?;
        if let Some(dir) = &request.blocked_dir {
            cleanup::check(dir, &root)?;
        }
        let mut env = env::agent_env(std::env::vars_os(), &spec, None, Allowlist::Agy)?;
        // Found first: the fence creates agy's profile under HOME, which must not happen for
        // an agy that is not there.
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let exe = resolve_executable(&spec.local()?.command, path)?;
        let fence = Fence::new(
            &spec,
            &root,
            request.state_dir.as_deref(),
            &mut env,
            self.confinement,
            &request.hidden,
        )?;
        // Fails with CONFINEMENT_UNAVAILABLE before anything runs unconfined; tells whether
        // each run gets a network namespace, whose one way out is the proxy.
        if self.confinement == Requirement::Required {
            drop(fence.prepare_run()?);
        }
        let namespaced = Confinement::probe_network_namespace();
        let network = namespaced.then(|| {
            let rules = Arc::new(crate::egress::session_rules(
                &request.network,
                "agy",
                &env,
                &request.mcp_servers,
            ));
            crate::egress::point_at_proxy(&mut env, &rules);
            rules
        });
        sink.send(fence.event());
        let discovery = discover(&exe, &env, &root, self.probe_timeout, fence.fenced()).await?;
        info!(agent = %spec.name, version = %discovery.version, capabilities = ?discovery.capabilities.names(), "agy discovered");

        let mut resume = None;
        if let Some(old) = request
            .resume_session_id
            .as_deref()
            .filter(|s| !s.is_empty())
        {
            let why_not = if !args::valid_conversation_id(old) {
                Some("its id is not a valid agy conversation id")
            } else if !discovery.capabilities.conversation {
                Some("this agy has no `--conversation`")
            } else {
                None
            };
            match why_not {
                None => resume = Some(old.to_string()),
                Some(why) => {
                    warn!(agent = %spec.name, session_id = %old, reason = why, "earlier conversation not continued");
                    sink.send(EventKind::Notice {
                        message: format!("the earlier conversation {old} could not be continued: {why}; a new one is started"),
                        detail: serde_json::json!({ "sessionId": old }),
                    });
                }
            }
        }
        let total = match (&resume, &request.state_dir) {
            (Some(id), Some(dir)) => usage::load_total(dir, id),
            (Some(_), None) => None,
            (None, _) => Some(Counters::default()),
        };
        let mut facts = SessionFacts::new(
            AgentInfo {
                name: Some("agy".into()),
                version: Some(discovery.version.clone()),
                load_session: discovery.capabilities.conversation,
                capabilities: discovery.capabilities.names(),
            },
            resume.is_some(),
        );
        if let Some(id) = &resume {
            facts = facts.named(id.clone());
            sink.send(EventKind::Session {
                session_id: id.clone(),
                resumed: true,
            });
        }
        let (stop, _) = watch::channel(false);
        let legate_home = request.legate_home();
        Ok(AgySession {
            spec,
            boundary: request.boundary,
            root,
            state_dir: request.state_dir,
            legate_home,
            blocked_dir: request.blocked_dir,
            env,
            fence,
            discovery,
            probe_timeout: self.probe_timeout,
            kill_grace: self.kill_grace,
            facts,
            conversation: Mutex::new(resume),
            total: Mutex::new(total),
            stop,
            turns: TurnGate::default(),
            blocked: AtomicBool::new(false),
            network,
            supervision: request.supervision,
            mcp_servers: request.mcp_servers,
            channel: request.channel,
        })
    }

    /// The models `spec`'s `agy` offers (`agy models`), run in `cwd`, confined to it and its
    /// profile, with `hidden` out of its sight.
    pub async fn models(
        &self,
        spec: &AgentSpec,
        cwd: &Path,
        hidden: &[PathBuf],
    ) -> Result<Vec<models::Model>> {
        let mut env = env::agent_env(std::env::vars_os(), spec, None, Allowlist::Agy)?;
        let path = env
            .iter()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| v.as_os_str());
        let exe = resolve_executable(&spec.local()?.command, path)?;
        let fence = Fence::new(spec, cwd, None, &mut env, self.confinement, hidden)?;
        models::list_models(&exe, &env, cwd, self.probe_timeout, fence.fenced()).await
    }
}

#[async_trait]
impl Backend for AgyBackend {
    /// `--json-schema`, `agy models`, one process per turn resuming its conversation.
    fn capabilities(&self) -> Capabilities {
        Capabilities {
            structured_output: true,
            effort: true,
            model_listing: true,
            local_process: true,
            continuation: Continuation::ProcessPerTurn,
            default_preset: legate_supervisor::Preset::generic(),
            reattach: false,
            tool_controls: false,
            copy_tool_controls: true,
        }
    }

    fn confinement(&self) -> legate_confine::Enforcement {
        Confinement::probe()
    }

    async fn open(
        &self,
        request: SessionRequest,
        sink: EventSink,
    ) -> Result<Arc<dyn AgentSession>> {
        Ok(Arc::new(self.open_session(request, sink).await?))
    }

    /// `agy models`, run in the request's root.
    /// `agy models` (as the seed's health does): a list is logged in, a login phrase or an
    /// empty list (`AGY_AUTH_REQUIRED`) is not; any other failure is the error.
    async fn logged_in(&self, request: SessionRequest) -> Result<Option<bool>> {
        match self
            .models(&request.agent, &request.boundary.root, &request.hidden)
            .await
        {
            Ok(_) => Ok(Some(true)),
            Err(e) if e.code == ErrorCode::AgyAuthRequired => Ok(Some(false)),
            Err(e) => Err(e),
        }
    }

    async fn models(&self, request: SessionRequest) -> Result<crate::selection::ModelList> {
        Ok(crate::selection::ModelList {
            models: self
                .models(&request.agent, &request.boundary.root, &request.hidden)
                .await?,
            current: None,
        })
    }
}

#[async_trait]
impl AgentSession for AgySession {
    fn facts(&self) -> &SessionFacts {
        &self.facts
    }

    async fn prompt(&self, turn: Turn, sink: EventSink) -> Result<TurnOutcome> {
        let _one_at_a_time = self.turns.enter("the agy session").await?;
        if let Some(dir) = &self.blocked_dir {
            cleanup::check(dir, &self.root)?;
        }
        self.check_supervision(turn.mode)?;
        let choice = self.model_for(&turn).await?;
        let conversation = lock(&self.conversation).clone();
        let schema = self.schema_arg(&turn)?;
        let options = RunOptions {
            print_timeout_secs: turn.timeout.map_or(1800, |t| t.as_secs().max(1)),
            read_only: turn.mode == TaskMode::ReadOnly,
            add_dir: Some(self.root.clone()),
            model: choice.id().map(str::to_owned),
            effort: turn.effort,
            conversation: conversation.clone(),
            json_schema: schema.as_ref().map(|s| s.arg.clone()),
        };
        let argv = args::build(&self.discovery.capabilities, &options)?;
        self.stop.send_replace(false);
        // A shutdown while this turn prepared (listing the models can take seconds) closed the
        // gate and raised the stop before the line above lowered it: no agy starts then, as
        // nothing would stop it (`shutdown` closes the gate first, so this sees it), and nothing
        // is staged in the copy for it.
        if self.turns.is_closed() {
            return Err(Error::new(
                ErrorCode::AgentExited,
                "the agy session was shut down while its turn was being prepared",
            ));
        }
        let staged = super::staging::stage(
            &self.root,
            self.state_dir.as_deref(),
            turn.task_id.as_str(),
            &self.supervision,
            &self.mcp_servers,
            conversation.is_none(),
        )?;
        sink.send(EventKind::Notice {
            message: format!(
                "agy {}: {} conversation, model {}",
                self.discovery.version,
                if conversation.is_some() {
                    "resumed"
                } else {
                    "new"
                },
                choice.id().unwrap_or("auto")
            ),
            detail: serde_json::json!({
                "conversationId": conversation,
                "model": choice.id(),
                "args": argv.iter().map(|a| a.to_string_lossy()).collect::<Vec<_>>(),
            }),
        });
        info!(task_id = %turn.task_id, conversation = ?conversation, model = ?choice.id(), prompt_bytes = turn.prompt.len(), mode = turn.mode.as_str(), "agy turn started");
        let spec = RunSpec {
            exe: self.discovery.executable.clone(),
            args: argv,
            env: self.env.clone(),
            cwd: self.root.clone(),
            prompt: turn.prompt,
            resumed: conversation.is_some(),
            kill_grace: self.kill_grace,
            marker: cleanup::new_marker(),
            confinement: None,
            egress: None,
        };
        let mut prepared = self.fence.prepare_run()?;
        let handoff = prepared.take_egress();
        // Held until the run is over: dropping it removes the run's groups.
        let limits = prepared.take_limits();
        let mut spec = spec;
        spec.confinement = Some(prepared);
        if let (Some(handoff), Some(rules)) = (handoff, &self.network) {
            let turn = super::turns::RunTurn::new(
                turn.task_id.clone(),
                sink.clone(),
                self.supervision.clone(),
                self.channel.clone(),
            );
            let gate = crate::egress::SessionGate::new(Arc::new(turn), rules.clone());
            spec.egress = Some((handoff, Arc::new(gate) as Arc<dyn legate_egress::Gate>));
        }
        // The turn's work: a turn given up on is waited for until its agy process is stopped
        // and reaped, so nothing of it still writes when the engine reads the workspace.
        let handle = turn
            .work
            .spawn(run::run(spec, sink.clone(), self.stop.subscribe()));
        let mut end = handle
            .await
            .map_err(|e| Error::quoting(ErrorCode::Internal, "the agy run task failed", e))??;
        drop(limits);

        if let Some(id) = end
            .translator
            .conversation_id
            .clone()
            .filter(|i| args::valid_conversation_id(i))
        {
            let _ = self.facts.name(id.clone());
            *lock(&self.conversation) = Some(id);
        }
        let model = end
            .translator
            .init_model
            .clone()
            .or_else(|| choice.id().map(str::to_owned));
        cleanup::record(
            "agy",
            &end.cleanup,
            &end.processes,
            |e| sink.send(e),
            self.blocked_dir.as_deref(),
            &self.root,
        );
        if !end.cleanup.verified {
            self.blocked.store(true, Ordering::SeqCst);
        }
        self.account(&end, model, &sink);
        if let Some(staged) = &staged {
            staged.check(&self.root)?;
        }
        if end.stopped {
            info!(task_id = %turn.task_id, "agy turn stopped");
            return Ok(TurnOutcome {
                stop_reason: StopReason::Cancelled,
                usage: None,
            });
        }
        match self.failure(&mut end) {
            None => {
                info!(task_id = %turn.task_id, "agy turn ended");
                Ok(TurnOutcome {
                    stop_reason: StopReason::EndTurn,
                    usage: None,
                })
            }
            Some(e) => {
                warn!(task_id = %turn.task_id, code = %e.code, error = %e.message, "agy turn failed");
                Err(e)
            }
        }
    }

    fn canceller(&self) -> Arc<dyn Canceller> {
        Arc::new(AgyCanceller {
            stop: self.stop.clone(),
        })
    }

    fn is_alive(&self) -> bool {
        !self.turns.is_closed() && !self.blocked.load(Ordering::SeqCst)
    }

    async fn shutdown(&self) {
        self.turns.close();
        self.stop.send_replace(true);
    }
}
