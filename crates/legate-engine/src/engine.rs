//! The engine: submit, admit, run, end; cancel and timeouts; recovery at start.

use crate::accumulator::Accumulator;
use crate::config::EngineConfig;
use crate::fanout::{Fanout, Subscription};
use crate::pool::Pool;
use crate::runner::{self, Runner};
use legate_backend::{
    AgentInfo, AgentSession, Backend, EventSink, EventStream, SessionRequest, Turn,
};
use legate_core::{
    AgentKind, AgentSpec, Boundary, Error, ErrorCode, Event, EventKind, Result, Task, TaskId,
    TaskMode, TaskState, Timestamp, WorkspaceKind,
};
use legate_store::{ContextRecord, Store, TaskFilter, UsageFilter, UsageReport};
use legate_supervisor::{Preset, Supervision, Supervisor};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Semaphore, watch};
use tokio_util::task::TaskTracker;

/// Where the agent should work. A conversation keeps the workspace it started with: a later
/// task of a context may name the same workspace again or leave it to the context
/// ([`WorkspaceRequest::Context`]); naming another is `INVALID_WORKSPACE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkspaceRequest {
    /// Wherever the context's earlier tasks worked; a new context gets its sandbox. What a
    /// caller means when it names no workspace.
    Context,
    /// The context's sandbox (made on first use, reused after).
    Sandbox,
    /// A directory the caller names. It must exist and be a directory.
    Shared(PathBuf),
    /// A copy of the git project at `source` (its root), narrowed by `include_paths`, made
    /// under `$LEGATE_HOME/copies/<task>/` with a private baseline; `criteria` are the
    /// acceptance criteria `verify` checks. See `review`.
    Copy {
        /// The project's root directory (absolute).
        source: PathBuf,
        /// Relative files or directories to narrow the selection to; empty for all.
        include_paths: Vec<String>,
        /// Acceptance criteria, fixed for the task's life.
        criteria: Vec<legate_workspace::Criterion>,
    },
}

/// A request to delegate one task.
#[derive(Debug, Clone)]
pub struct SubmitRequest {
    /// The agent's name; `None` for the configured default.
    pub agent: Option<String>,
    /// What to ask.
    pub prompt: String,
    /// Where it works.
    pub workspace: WorkspaceRequest,
    /// The conversation to continue; `None` starts a new one.
    pub context_id: Option<String>,
    /// Write or read-only.
    pub mode: TaskMode,
    /// Overrides the default timeout.
    pub timeout: Option<Duration>,
    /// The model to use: an id, `legate_core::AUTO_MODEL` for the agent's own choice, or
    /// `None` for the saved preference or the configured default.
    pub model: Option<String>,
    /// The caller's id for the message this task answers (an A2A `messageId`), passed to the
    /// agent with the prompt. Kept in memory only: it is not stored with the task.
    pub message_id: Option<String>,
    /// A JSON Schema (an object) the answer must follow: structured output, which only agents
    /// of kind `agy` offer (`--json-schema`); `INVALID_INPUT` for another kind. Kept in memory
    /// only, like `message_id`.
    pub json_schema: Option<serde_json::Value>,
}

impl SubmitRequest {
    /// A write task on the default agent, in a new context's sandbox.
    pub fn new(prompt: impl Into<String>) -> Self {
        Self {
            agent: None,
            prompt: prompt.into(),
            workspace: WorkspaceRequest::Context,
            context_id: None,
            mode: TaskMode::Write,
            timeout: None,
            model: None,
            message_id: None,
            json_schema: None,
        }
    }
}

/// How a running task should end when someone intervenes. The first intent wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    None,
    Cancel,
}

/// The status message of a task whose prompt was empty.
pub const EMPTY_PROMPT_MESSAGE: &str =
    "the message was empty; reply into this task with what you want done";

/// The status message of a task whose agent asked for more input without saying anything.
pub const INPUT_REQUIRED_MESSAGE: &str = "the agent needs more input; reply into this task";

/// The status message of a task the agent refused (ACP stop reason `refusal`).
pub const REJECTED_MESSAGE: &str = "the agent refused the task";

/// The longest status message taken from an agent's answer, in bytes.
const MAX_STATUS_FROM_ANSWER: usize = 4096;

/// The largest prompt accepted, in bytes.
pub(crate) const MAX_PROMPT_BYTES: usize = 1 << 20;
/// The longest context id accepted, in bytes.
const MAX_CONTEXT_ID_BYTES: usize = 256;

/// Legate's engine. Cheap to clone; every clone is the same engine.
#[derive(Debug, Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    config: EngineConfig,
    store: Store,
    runner: Runner,
    backends: HashMap<AgentKind, Arc<dyn Backend>>,
    supervisor: Arc<dyn Supervisor>,
    fanout: Fanout,
    pool: Pool,
    /// Room promised to starting tasks, and the signal that some was freed.
    budget: Arc<crate::budget::Budget>,
    running: Semaphore,
    queued: AtomicUsize,
    stops: Mutex<HashMap<TaskId, watch::Sender<Stop>>>,
    /// The JSON Schemas of submitted tasks that asked for structured output, until their turn.
    schemas: Mutex<HashMap<TaskId, serde_json::Value>>,
    contexts: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    waiting: Mutex<()>,
    tracker: TaskTracker,
    shutdown: watch::Sender<bool>,
}

impl Engine {
    /// Opens the store, claims a runner identity, marks tasks of dead runners
    /// `SERVER_RESTARTED`, prunes old tasks, and starts the background loop.
    pub fn start(
        config: EngineConfig,
        backends: HashMap<AgentKind, Arc<dyn Backend>>,
        supervisor: Arc<dyn Supervisor>,
    ) -> Result<Engine> {
        let paths = config.paths.clone();
        create_private_dir(paths.home())?;
        let store = Store::open(&paths.db())?;
        let runner = Runner::claim(&paths.run())?;
        let recovered = runner::recover(&store, &paths)?;
        if recovered > 0 {
            tracing::info!(
                tasks = recovered,
                "marked tasks of stopped processes as failed"
            );
        }
        store.prune_finished(config.retention)?;
        let (shutdown, _) = watch::channel(false);
        let engine = Engine {
            inner: Arc::new(Inner {
                running: Semaphore::new(config.max_running.max(1)),
                config,
                store,
                fanout: Fanout::new(4096, paths.clone(), Some(runner.id().to_string())),
                runner,
                backends,
                supervisor,
                pool: Pool::default(),
                budget: Arc::default(),
                queued: AtomicUsize::new(0),
                stops: Mutex::new(HashMap::new()),
                schemas: Mutex::new(HashMap::new()),
                contexts: Mutex::new(HashMap::new()),
                waiting: Mutex::new(()),
                tracker: TaskTracker::new(),
                shutdown,
            }),
        };
        engine.spawn_housekeeping();
        engine.spawn_copy_sweeper();
        Ok(engine)
    }

    /// The store. Fronts read through [`Engine`]'s own methods and [`crate::Records`].
    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// This engine's runner id.
    pub fn runner_id(&self) -> &str {
        self.inner.runner.id()
    }

    /// The live sessions.
    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The process's budget of descriptors and processes.
    pub(crate) fn budget(&self) -> &Arc<crate::budget::Budget> {
        &self.inner.budget
    }

    /// Runs `f` in the background; shutdown waits for it.
    pub(crate) fn track(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.inner.tracker.spawn(f);
    }

    /// Validates and stores a task, then queues it. Returns it as stored (`submitted`).
    /// Bad input is refused before anything is stored; an empty prompt is bad input.
    pub fn submit(&self, request: SubmitRequest) -> Result<Task> {
        self.submit_inner(request, false)
    }

    /// Like [`Engine::submit`], except that an empty prompt is not refused: the task is stored
    /// and put straight in `input-required` with [`EMPTY_PROMPT_MESSAGE`] as its status
    /// message, without starting an agent. [`Engine::reply`] into it resumes it. A copy
    /// workspace still needs a prompt.
    pub fn submit_or_ask(&self, request: SubmitRequest) -> Result<Task> {
        self.submit_inner(request, true)
    }

    pub(crate) fn submit_inner(&self, request: SubmitRequest, allow_empty: bool) -> Result<Task> {
        let inner = &self.inner;
        let agent_name = request
            .agent
            .clone()
            .unwrap_or_else(|| inner.config.default_agent.clone());
        let agent = self.agent(&agent_name)?.clone();
        if !inner.backends.contains_key(&agent.kind) {
            return Err(Error::new(
                ErrorCode::AgentNotFound,
                format!(
                    "agent {agent_name:?} is of kind {} which this build cannot run",
                    agent.kind.as_str()
                ),
            ));
        }
        let empty = request.prompt.trim().is_empty();
        if empty && (!allow_empty || matches!(request.workspace, WorkspaceRequest::Copy { .. })) {
            return Err(Error::invalid_input("the prompt is empty"));
        }
        if request.prompt.len() > MAX_PROMPT_BYTES {
            return Err(Error::invalid_input(format!(
                "the prompt is {} bytes; the limit is {MAX_PROMPT_BYTES}",
                request.prompt.len()
            )));
        }
        let (context_id, requested) = match request.context_id {
            Some(c) => {
                let c = validate_context_id(&c)?;
                if let Some(existing) = inner.store.context(&c)?
                    && existing.agent != agent.name
                {
                    return Err(Error::invalid_input(format!(
                        "context {c} belongs to agent {:?}, not {:?}",
                        existing.agent, agent.name
                    )));
                }
                let requested = self.kept_workspace(&c, &agent.name, request.workspace)?;
                (c, requested)
            }
            None => (uuid::Uuid::new_v4().to_string(), request.workspace),
        };
        let mut copy_request = None;
        let (workspace, root) = match &requested {
            WorkspaceRequest::Context | WorkspaceRequest::Sandbox => (WorkspaceKind::Sandbox, None),
            WorkspaceRequest::Copy {
                source,
                include_paths,
                criteria,
            } => {
                let (root, include) = self.check_copy_request(source, include_paths, criteria)?;
                copy_request = Some((root, include, criteria.clone()));
                (WorkspaceKind::Copy, None)
            }
            WorkspaceRequest::Shared(dir) => {
                let b = legate_workspace::shared(dir, agent.allow_execute)?;
                (WorkspaceKind::Shared, Some(b.root))
            }
        };
        if let Some(model) = &request.model {
            validate_model(model)?;
        }
        if let Some(schema) = &request.json_schema {
            validate_json_schema(schema, &agent)?;
        }
        let timeout = request.timeout.unwrap_or(inner.config.default_timeout);
        if timeout.is_zero() {
            return Err(Error::invalid_input(
                "the timeout must be at least one second",
            ));
        }
        if empty {
            return self.store_waiting(Task {
                id: TaskId(uuid::Uuid::new_v4().to_string()),
                context_id,
                agent: agent.name.clone(),
                workspace,
                root,
                prompt: String::new(),
                mode: request.mode,
                model: request.model,
                state: TaskState::InputRequired,
                error: None,
                status_message: Some(EMPTY_PROMPT_MESSAGE.to_string()),
                usage: None,
                result: None,
                session_id: None,
                timeout_secs: timeout.as_secs().max(1),
                created_at: Timestamp::now(),
                updated_at: Timestamp::now(),
            });
        }
        // Admission: count this task as queued before it is stored, so two submits cannot
        // both take the last place.
        let queued = inner.queued.fetch_add(1, Ordering::SeqCst);
        if queued >= inner.config.max_queued {
            inner.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::new(
                ErrorCode::QueueFull,
                format!(
                    "{} tasks are already waiting; try again when one has started",
                    inner.config.max_queued
                ),
            ));
        }
        let now = Timestamp::now();
        let task = Task {
            id: TaskId(uuid::Uuid::new_v4().to_string()),
            context_id,
            agent: agent.name.clone(),
            workspace,
            root,
            prompt: request.prompt,
            mode: request.mode,
            model: request.model,
            state: TaskState::Submitted,
            error: None,
            status_message: None,
            usage: None,
            result: None,
            session_id: None,
            timeout_secs: timeout.as_secs().max(1),
            created_at: now,
            updated_at: now,
        };
        let stored = inner
            .store
            .insert_task(
                &task,
                &EventKind::Status {
                    state: TaskState::Submitted,
                    message: None,
                    error: None,
                },
            )
            .and_then(|first| {
                inner.store.set_runner(&task.id, Some(inner.runner.id()))?;
                Ok(first)
            });
        let first = match stored {
            Ok(first) => first,
            Err(e) => {
                inner.queued.fetch_sub(1, Ordering::SeqCst);
                return Err(e);
            }
        };
        inner.fanout.publish(&[first]);
        if let Some((source, include, criteria)) = copy_request
            && let Err(e) = self.start_review(&task, source, include, criteria)
        {
            tracing::error!(task = %task.id, error = %e, "could not store the copy's review record");
        }
        let (stop_tx, stop_rx) = watch::channel(Stop::None);
        lock(&inner.stops).insert(task.id.clone(), stop_tx);
        let engine = self.clone();
        let t = task.clone();
        let message_id = request.message_id;
        if let Some(schema) = request.json_schema {
            lock(&inner.schemas).insert(task.id.clone(), schema);
        }
        inner
            .tracker
            .spawn(async move { engine.drive(t, agent, stop_rx, message_id).await });
        tracing::info!(task = %task.id, agent = %task.agent, context = %task.context_id, "task submitted");
        Ok(task)
    }

    /// Stores a task that waits for the caller's input: no runner claims it (nothing runs, so
    /// a restart leaves it waiting), and the context's live session is kept while it waits.
    fn store_waiting(&self, task: Task) -> Result<Task> {
        let inner = &self.inner;
        let first = inner.store.insert_task(
            &task,
            &EventKind::Status {
                state: TaskState::InputRequired,
                message: task.status_message.clone(),
                error: None,
            },
        )?;
        inner.fanout.publish(&[first]);
        self.release_session(&task.context_id, true);
        tracing::info!(task = %task.id, agent = %task.agent, context = %task.context_id, "task waits for input");
        Ok(task)
    }

    /// Replies into a task that waits for input (`input-required`): the reply becomes the
    /// task's prompt and the same task is queued and run like a submitted one.
    /// `TASK_NOT_AWAITING_INPUT` when the task is in any other state.
    pub fn reply(&self, id: &str, prompt: impl Into<String>) -> Result<Task> {
        self.reply_message(id, prompt, None)
    }

    /// [`Engine::reply`] with the caller's id for the reply (an A2A `messageId`), which the
    /// agent receives with the prompt.
    pub fn reply_message(
        &self,
        id: &str,
        prompt: impl Into<String>,
        message_id: Option<String>,
    ) -> Result<Task> {
        let inner = &self.inner;
        let prompt = prompt.into();
        if prompt.trim().is_empty() {
            return Err(Error::invalid_input("the reply is empty"));
        }
        if prompt.len() > MAX_PROMPT_BYTES {
            return Err(Error::invalid_input(format!(
                "the reply is {} bytes; the limit is {MAX_PROMPT_BYTES}",
                prompt.len()
            )));
        }
        // One reply (or cancel) of a waiting task at a time in this process.
        let _waiting = lock(&inner.waiting);
        let mut task = inner.store.find_task(id)?;
        if task.state != TaskState::InputRequired {
            return Err(Error::new(
                ErrorCode::TaskNotAwaitingInput,
                format!(
                    "task {} is {}, not input-required; send a new message to continue its context {}",
                    task.id, task.state, task.context_id
                ),
            ));
        }
        let agent = self.agent(&task.agent)?.clone();
        if !inner.backends.contains_key(&agent.kind) {
            return Err(Error::new(
                ErrorCode::AgentNotFound,
                format!(
                    "agent {:?} is of kind {} which this build cannot run",
                    agent.name,
                    agent.kind.as_str()
                ),
            ));
        }
        let queued = inner.queued.fetch_add(1, Ordering::SeqCst);
        if queued >= inner.config.max_queued {
            inner.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(Error::new(
                ErrorCode::QueueFull,
                format!(
                    "{} tasks are already waiting; try again when one has started",
                    inner.config.max_queued
                ),
            ));
        }
        task.prompt = prompt;
        task.state = TaskState::Submitted;
        task.status_message = None;
        task.updated_at = Timestamp::now();
        let stored = inner
            .store
            .update_task(
                &task,
                &[EventKind::Status {
                    state: TaskState::Submitted,
                    message: None,
                    error: None,
                }],
            )
            .and_then(|events| {
                inner.store.set_runner(&task.id, Some(inner.runner.id()))?;
                Ok(events)
            });
        let events = match stored {
            Ok(events) => events,
            Err(e) => {
                inner.queued.fetch_sub(1, Ordering::SeqCst);
                return Err(e);
            }
        };
        inner.fanout.publish(&events);
        let (stop_tx, stop_rx) = watch::channel(Stop::None);
        lock(&inner.stops).insert(task.id.clone(), stop_tx);
        let engine = self.clone();
        let t = task.clone();
        inner
            .tracker
            .spawn(async move { engine.drive(t, agent, stop_rx, message_id).await });
        tracing::info!(task = %task.id, context = %task.context_id, "task resumed by a reply");
        Ok(task)
    }

    /// Whether a task of `context_id` waits for input (its session must then stay up).
    fn waits_for_input(&self, context_id: &str) -> bool {
        self.inner
            .store
            .list_tasks(&TaskFilter {
                state: Some(TaskState::InputRequired),
                context_id: Some(context_id.to_string()),
                limit: 1,
                ..TaskFilter::default()
            })
            .is_ok_and(|t| !t.is_empty())
    }

    /// Asks a task to stop. A queued task ends `canceled` without touching running ones; a
    /// running one gets `session/cancel`, then is killed after the grace period. A task run
    /// by another `legate` process is flagged in the store for that process to act on.
    pub fn cancel(&self, id: &str) -> Result<Task> {
        // A task may move between waiting for input and running while this runs (a reply, a
        // turn that asks); each attempt either holds in the store or sees the new state.
        for _ in 0..3 {
            let task = self.inner.store.find_task(id)?;
            if task.is_terminal() {
                return Err(not_cancelable(&task));
            }
            if task.state == TaskState::InputRequired {
                // Nothing runs: end it here, if it still waits when the end is stored.
                let _waiting = lock(&self.inner.waiting);
                let ending = Ending::canceled(None, Accumulator::default());
                if self.end(&task, ending, |s| s == TaskState::InputRequired)? {
                    if !self.waits_for_input(&task.context_id) {
                        self.release_session(&task.context_id, false);
                    }
                    tracing::info!(task = %task.id, "waiting task canceled");
                    return Ok(task);
                }
                continue;
            }
            // Recorded first: the task's end reads it in the same transaction that stores the
            // end, so a cancel accepted here always ends the task `canceled`.
            if self.inner.store.request_cancel(&task.id)? {
                if let Some(tx) = lock(&self.inner.stops).get(&task.id) {
                    tx.send_if_modified(|s| first_intent(s, Stop::Cancel));
                }
                tracing::info!(task = %task.id, "cancel requested");
                return Ok(task);
            }
        }
        let task = self.inner.store.find_task(id)?;
        if task.is_terminal() {
            return Err(not_cancelable(&task));
        }
        Err(Error::new(
            ErrorCode::TaskNotCancelable,
            format!(
                "task {} kept changing state while being canceled (now {}); try again",
                task.id, task.state
            ),
        ))
    }

    /// Follows a task's events from `after` (exclusive) until its terminal status.
    pub fn subscribe(&self, task_id: &TaskId, after: u64) -> Subscription {
        self.inner
            .fanout
            .subscribe(self.inner.store.clone(), task_id.clone(), after)
    }

    /// Waits until the task has ended or waits for input (`input-required`) after its latest
    /// submission (a submit or a reply), and returns it.
    pub async fn wait(&self, task_id: &TaskId) -> Result<Task> {
        // A wait for input counts only when it is the latest status: a later `submitted` (a
        // reply) means the task runs again.
        let known = self.inner.store.last_seq(task_id)?;
        let mut sub = self.subscribe(task_id, 0);
        let mut waiting = false;
        while let Some(e) = sub.next().await? {
            if let EventKind::Status { state, .. } = &e.kind {
                waiting = *state == TaskState::InputRequired;
            }
            if waiting && e.seq >= known {
                break;
            }
        }
        self.inner.store.task(task_id)?.ok_or_else(|| {
            Error::new(
                ErrorCode::TaskNotFound,
                format!("no task has the id {task_id}"),
            )
        })
    }

    /// A task by id or unique prefix.
    pub fn task(&self, id: &str) -> Result<Task> {
        self.inner.store.find_task(id)
    }

    /// Tasks, newest first.
    pub fn tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        self.inner.store.list_tasks(filter)
    }

    /// A page of a task's events.
    pub fn events(&self, task_id: &TaskId, after: u64, limit: usize) -> Result<Vec<Event>> {
        self.inner.store.events(task_id, after, limit)
    }

    /// Token usage of the stored tasks matching `filter`, by task, session and model. This is
    /// what `legate usage` prints and what an MCP `usage` tool returns.
    pub fn usage(&self, filter: &UsageFilter) -> Result<UsageReport> {
        self.inner.store.usage(filter)
    }

    /// A configured agent.
    pub fn agent(&self, name: &str) -> Result<&AgentSpec> {
        self.inner.config.agents.get(name).ok_or_else(|| {
            let known: Vec<&str> = self
                .inner
                .config
                .agents
                .keys()
                .map(String::as_str)
                .collect();
            Error::new(
                ErrorCode::AgentNotFound,
                format!(
                    "no agent is named {name:?}; configured: {}",
                    known.join(", ")
                ),
            )
        })
    }

    /// How much confinement the kernel enforces on `name`'s agent process (the backend's
    /// report for its kind). `CONFINEMENT_UNAVAILABLE` when the configuration requires
    /// confinement and it would not be enforced at all.
    pub fn confinement(&self, name: &str) -> Result<legate_confine::Enforcement> {
        let agent = self.agent(name)?;
        let enforcement = self
            .inner
            .backends
            .get(&agent.kind)
            .map_or(legate_confine::Enforcement::None, |b| b.confinement());
        if enforcement == legate_confine::Enforcement::None
            && self.inner.config.confinement == legate_confine::Requirement::Required
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
        let inner = &self.inner;
        let agent = self.agent(name)?.clone();
        let backend = inner.backends.get(&agent.kind).cloned().ok_or_else(|| {
            Error::new(ErrorCode::AgentNotFound, "no backend for this agent kind")
        })?;
        let probes = inner.config.paths.home().join("probes");
        let boundary = legate_workspace::sandbox(&probes, &agent.name, None)?;
        let request = SessionRequest {
            agent: agent.clone(),
            boundary: boundary.clone(),
            supervisor: inner.supervisor.clone(),
            supervision: Supervision {
                boundary,
                mode: TaskMode::ReadOnly,
                preset: preset_for(&agent),
            },
            resume_session_id: None,
            state_dir: Some(inner.config.state_dir(&agent.name)),
            blocked_dir: Some(inner.config.paths.blocked()),
            hidden: inner.config.hidden_paths(),
        };
        Ok((backend, request))
    }

    /// Starts an agent for real (spawn, handshake, a session in a throwaway directory under
    /// `$LEGATE_HOME/probes/`), then stops it. Nothing is prompted and nothing is stored.
    /// An agent whose process would run unconfined under `confinement = "required"` is not
    /// started: `CONFINEMENT_UNAVAILABLE`.
    pub async fn probe(&self, name: &str, limit: Duration) -> Result<AgentInfo> {
        let (backend, request) = self.probe_request(name)?;
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

    /// The models agent `name` offers (`agy models`, or the model config option of an ACP
    /// session opened in a throwaway directory and stopped), within `limit`. Nothing is
    /// prompted and nothing is stored.
    pub async fn models(
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

    /// Agent `name`'s saved model preference: `None` when there is none, `Some(Auto)` for a
    /// saved Auto. Used when a task names no model, before the configured default.
    pub fn model_preference(
        &self,
        name: &str,
    ) -> Result<Option<legate_backend::selection::Choice>> {
        self.agent(name)?;
        legate_backend::selection::load_preference(self.inner.config.paths.home(), name)
    }

    /// Saves agent `name`'s model preference (`None` removes it). The id is checked against
    /// what the agent offers at its next run (`MODEL_NOT_AVAILABLE`), not here.
    pub fn set_model_preference(
        &self,
        name: &str,
        choice: Option<&legate_backend::selection::Choice>,
    ) -> Result<()> {
        self.agent(name)?;
        if let Some(legate_backend::selection::Choice::Model(id)) = choice {
            validate_model(id)?;
        }
        legate_backend::selection::save_preference(self.inner.config.paths.home(), name, choice)
    }

    /// Stops accepting work, cancels running tasks, waits for them to end, and stops every
    /// agent process.
    pub async fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
        for tx in lock(&self.inner.stops).values() {
            tx.send_if_modified(|s| first_intent(s, Stop::Cancel));
        }
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
        for session in self.inner.pool.drain() {
            session.shutdown().await;
        }
    }

    fn spawn_housekeeping(&self) {
        let weak = Arc::downgrade(&self.inner);
        let mut shutdown = self.inner.shutdown.subscribe();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let mut checkpoint_ticks: u64 = 0;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.changed() => return,
                }
                let Some(inner) = weak.upgrade() else { return };
                // Cancels asked for by other processes.
                match inner.store.cancel_requests(inner.runner.id()) {
                    Ok(ids) => {
                        let stops = lock(&inner.stops);
                        for id in ids {
                            if let Some(tx) = stops.get(&id) {
                                tx.send_if_modified(|s| first_intent(s, Stop::Cancel));
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "could not read cancel requests"),
                }
                // Keep SQLite's checkpoints off the event-writing connection (see
                // `Store::checkpoint`), about once a second.
                checkpoint_ticks += 1;
                if checkpoint_ticks.is_multiple_of(4) {
                    let store = inner.store.clone();
                    let done = tokio::task::spawn_blocking(move || store.checkpoint()).await;
                    if let Ok(Err(e)) = done {
                        tracing::debug!(error = %e, "checkpoint failed; SQLite will checkpoint itself");
                    }
                }
                // Idle sessions (a scan of a small map).
                for session in inner.pool.take_idle(inner.config.idle_timeout) {
                    tracing::info!(
                        session = session.session_id(),
                        "stopping idle agent session"
                    );
                    session.shutdown().await;
                    inner.budget.freed();
                }
            }
        });
    }

    /// A copy task's turn ended: compute its patch; a completed task whose patch may not
    /// stand (read-only violation, change limit, blocked file) fails with that code.
    async fn settle(&self, task: &Task, outcome: Ending) -> Ending {
        if task.workspace != WorkspaceKind::Copy {
            return outcome;
        }
        match self.settle_copy(task).await {
            Some(e) if outcome.state == TaskState::Completed => Ending {
                state: TaskState::Failed,
                error: Some(e),
                ..outcome
            },
            _ => outcome,
        }
    }

    /// Fans stored events out to live subscribers.
    pub(crate) fn publish(&self, events: &[Event]) {
        self.inner.fanout.publish(events);
    }

    /// A handle that does not keep the engine alive, for background loops.
    pub(crate) fn downgrade(&self) -> WeakEngine {
        WeakEngine(Arc::downgrade(&self.inner))
    }

    /// Changes to `true` when the engine shuts down.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.inner.shutdown.subscribe()
    }

    fn context_lock(&self, context_id: &str) -> Arc<tokio::sync::Mutex<()>> {
        lock(&self.inner.contexts)
            .entry(context_id.to_string())
            .or_default()
            .clone()
    }

    /// Runs one task from queue to terminal state. Every exit path ends the task.
    async fn drive(
        self,
        task: Task,
        agent: AgentSpec,
        mut stop: watch::Receiver<Stop>,
        message_id: Option<String>,
    ) {
        let inner = &self.inner;
        let id = task.id.clone();
        // One turn at a time per context (in this process, then across processes), then room
        // for the agent (fds, processes), then one of the running places. Room comes before
        // the place: a task waiting for room must not hold a place that a task needing no new
        // agent (a reply to a waiting task) could run in, and whose end would free the room.
        let context_lock = self.context_lock(&task.context_id);
        let claimed = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s != Stop::None) => None,
            guards = async {
                let ctx = context_lock.lock().await;
                let turn = self.claim_turn(&task.context_id).await;
                (ctx, turn)
            } => Some(guards),
        };
        let dequeued = || inner.queued.fetch_sub(1, Ordering::SeqCst);
        let outcome = match claimed {
            None => {
                dequeued();
                Ending::canceled(None, Accumulator::default())
            }
            Some((_ctx, Err(e))) => {
                dequeued();
                Ending::failed(e, Accumulator::default())
            }
            // Room for the agent, or the task keeps waiting (still `submitted`).
            Some((_ctx, Ok(_turn))) => match self.admit(&task, &agent, &mut stop).await {
                None => {
                    dequeued();
                    Ending::canceled(None, Accumulator::default())
                }
                Some(room) => {
                    let permit = tokio::select! {
                        biased;
                        _ = stop.wait_for(|s| *s != Stop::None) => None,
                        permit = inner.running.acquire() => Some(permit),
                    };
                    dequeued();
                    match permit {
                        None => Ending::canceled(None, Accumulator::default()),
                        Some(Ok(_permit)) => {
                            self.run(task.clone(), agent, &mut stop, message_id, room)
                                .await
                        }
                        Some(Err(_)) => Ending::failed(
                            Error::internal("the engine is shutting down"),
                            Accumulator::default(),
                        ),
                    }
                }
            },
        };
        let outcome = self.settle(&task, outcome).await;
        if let Err(e) = self.finish(&task, outcome) {
            tracing::error!(task = %id, error = %e, "could not store the end of a task");
        }
        lock(&inner.stops).remove(&id);
        lock(&inner.schemas).remove(&id);
        inner.budget.freed();
    }

    /// The admitted part of a task: workspace, session, turn.
    async fn run(
        &self,
        mut task: Task,
        agent: AgentSpec,
        stop: &mut watch::Receiver<Stop>,
        message_id: Option<String>,
        mut room: crate::budget::Reservation,
    ) -> Ending {
        let inner = &self.inner;
        let confinement = match self.confinement(&agent.name) {
            Ok(c) => c,
            Err(e) => return Ending::failed(e, Accumulator::default()),
        };
        let mut copy_ready = None;
        let mut attempt = 0;
        let prepared = loop {
            let prepared = if task.workspace == WorkspaceKind::Copy {
                // A copy is new for each task: a live session of the context works elsewhere.
                if let Some(old) = inner.pool.remove(&task.context_id) {
                    old.shutdown().await;
                }
                self.prepare_copy(&task).await.map(|(b, ready)| {
                    copy_ready = Some(ready);
                    b
                })
            } else {
                self.prepare_workspace(&task, &agent)
            };
            // Out of descriptors or processes: wait for room (still `submitted`), try again.
            match prepared {
                Err(e)
                    if crate::budget::is_exhaustion(&e)
                        && attempt < crate::budget::START_RETRIES =>
                {
                    attempt += 1;
                    tracing::warn!(task = %task.id, attempt, error = %e, "the workspace could not be prepared for want of descriptors; waiting to try again");
                    let need = self.start_need(&task, &agent);
                    drop(room);
                    match self.wait_for_room(need, stop, true, |_| {}).await {
                        Some(r) => room = r,
                        None => return Ending::canceled(None, Accumulator::default()),
                    }
                }
                other => break other,
            }
        };
        let boundary = match prepared {
            Ok(b) => b,
            Err(e) => return Ending::failed(e, Accumulator::default()),
        };
        task.root = Some(boundary.root.clone());
        task.state = TaskState::Working;
        task.updated_at = Timestamp::now();
        let working = EventKind::Status {
            state: TaskState::Working,
            message: None,
            error: None,
        };
        let ws_event = EventKind::Notice {
            message: format!(
                "{} workspace at {}",
                task.workspace.as_str(),
                boundary.root.display()
            ),
            detail: serde_json::json!({
                "kind": task.workspace.as_str(),
                "root": boundary.root,
                "owned": boundary.owned,
                "allowExecute": boundary.allow_execute,
                "confinement": confinement.as_str(),
            }),
        };
        let mut events = vec![working, ws_event];
        events.extend(copy_ready);
        match inner.store.update_task(&task, &events) {
            Ok(events) => inner.fanout.publish(&events),
            Err(e) => return Ending::failed(e, Accumulator::default()),
        }

        let root = boundary.root.clone();
        let watch = crate::silent::Watch::before(&root, boundary.owned).await;
        let (sink, stream) = EventSink::channel();
        let pump = self.spawn_pump(task.id.clone(), stream);
        let result = self
            .run_turn(
                &task,
                &agent,
                boundary,
                sink,
                stop,
                TurnStart { message_id, room },
            )
            .await;
        let mut acc = match pump.await {
            Ok(acc) => acc,
            Err(e) => {
                tracing::error!(task = %task.id, error = %e, "event pump failed");
                Accumulator::default()
            }
        };
        if matches!(result, TurnResult::Completed { .. }) {
            self.notice_silent_turn(&task, &watch, &root, &mut acc)
                .await;
        }
        // Backends that learn their session id during the turn (agy's conversation id) report
        // it with a session event; keep the latest so the next task of the context resumes it.
        if let Some(session_id) = acc.session_id()
            && let Err(e) = self.record_session(&task, session_id)
        {
            tracing::warn!(task = %task.id, error = %e, "could not record the session id");
        }
        // A copy is made afresh for each turn, so a copy task cannot wait for a reply.
        result.into_ending(acc, task.workspace != WorkspaceKind::Copy)
    }

    /// Gives a completed turn whose answer claims tool work Legate never saw its notice
    /// (`crate::silent`): on the result, and as an event before the final status.
    async fn notice_silent_turn(
        &self,
        task: &Task,
        watch: &crate::silent::Watch,
        root: &std::path::Path,
        acc: &mut Accumulator,
    ) {
        let Some(notice) = watch.notice(root, acc.text(), acc.seen()).await else {
            return;
        };
        tracing::warn!(task = %task.id, notice = %notice.code, "the answer claims tool work Legate did not see");
        let event = EventKind::Notice {
            message: notice.message.clone(),
            detail: serde_json::json!({ "event": "turn.silent", "code": notice.code }),
        };
        match self.inner.store.append_events(&task.id, &[event]) {
            Ok(stored) => self.inner.fanout.publish(&stored),
            Err(e) => tracing::error!(task = %task.id, error = %e, "could not store the notice"),
        }
        acc.notice(notice);
    }

    fn prepare_workspace(&self, task: &Task, agent: &AgentSpec) -> Result<Boundary> {
        let inner = &self.inner;
        match task.workspace {
            WorkspaceKind::Shared => {
                let root = task.root.clone().ok_or_else(|| {
                    Error::internal("a shared task was stored without its directory")
                })?;
                legate_workspace::shared(&root, agent.allow_execute)
            }
            WorkspaceKind::Copy => Err(Error::internal(
                "a copy workspace is prepared by prepare_copy",
            )),
            WorkspaceKind::Sandbox => {
                let record = inner.store.context(&task.context_id)?;
                let existing = record.as_ref().and_then(|r| r.sandbox_root.clone());
                let mut boundary = legate_workspace::sandbox(
                    &inner.config.paths.sandboxes(),
                    &task.context_id,
                    existing.as_deref(),
                )?;
                boundary.allow_execute = agent.allow_execute;
                let mut record = record.unwrap_or_else(|| ContextRecord {
                    context_id: task.context_id.clone(),
                    agent: task.agent.clone(),
                    session_id: None,
                    sandbox_root: None,
                    updated_at: Timestamp::now(),
                });
                record.sandbox_root = Some(boundary.root.clone());
                record.updated_at = Timestamp::now();
                inner.store.put_context(&record)?;
                Ok(boundary)
            }
        }
    }

    /// Stores a turn's events in batches, then fans them out; folds them into the result.
    fn spawn_pump(
        &self,
        task_id: TaskId,
        mut stream: EventStream,
    ) -> tokio::task::JoinHandle<Accumulator> {
        let inner = self.inner.clone();
        tokio::spawn(async move {
            let mut acc = Accumulator::default();
            let mut batch = Vec::with_capacity(256);
            while stream.recv_many(&mut batch, 256).await > 0 {
                for e in &batch {
                    acc.add(e);
                }
                match inner.store.append_events(&task_id, &batch) {
                    Ok(stored) => inner.fanout.publish(&stored),
                    Err(e) => {
                        tracing::error!(task = %task_id, error = %e, "could not store events")
                    }
                }
                batch.clear();
            }
            acc
        })
    }

    async fn run_turn(
        &self,
        task: &Task,
        agent: &AgentSpec,
        boundary: Boundary,
        sink: EventSink,
        stop: &mut watch::Receiver<Stop>,
        start: TurnStart,
    ) -> TurnResult {
        let inner = &self.inner;
        let TurnStart { message_id, room } = start;
        let session = match self
            .session_for(task, agent, boundary, &sink, stop, room)
            .await
        {
            Ok(Some(s)) => s,
            Ok(None) => {
                return TurnResult::Canceled {
                    stop_reason: None,
                    usage: None,
                };
            }
            Err(e) => return TurnResult::Failed(e),
        };
        let turn = Turn {
            task_id: task.id.clone(),
            prompt: task.prompt.clone(),
            mode: task.mode,
            model: task.model.clone(),
            timeout: Some(Duration::from_secs(task.timeout_secs)),
            message_id,
            json_schema: lock(&inner.schemas).get(&task.id).cloned(),
        };
        let timeout = Duration::from_secs(task.timeout_secs);
        let canceller = session.canceller();
        let prompt = session.prompt(turn, sink);
        tokio::pin!(prompt);
        let mut cancel_wait = stop.clone();
        let result = tokio::select! {
            r = &mut prompt => match r {
                Ok(o) if is_canceled(stop) || o.stop_reason == "cancelled" => {
                    TurnResult::Canceled { stop_reason: Some(o.stop_reason), usage: o.usage }
                }
                Ok(o) => TurnResult::Completed { stop_reason: o.stop_reason, usage: o.usage },
                Err(e) if is_canceled(stop) => {
                    tracing::debug!(error = %e, "turn failed after cancel");
                    TurnResult::Canceled { stop_reason: None, usage: None }
                }
                Err(e) => TurnResult::Failed(e),
            },
            _ = tokio::time::sleep(timeout) => {
                session.shutdown().await;
                let _ = (&mut prompt).await;
                TurnResult::Failed(Error::new(
                    ErrorCode::TaskTimeout,
                    format!("the task ran longer than its timeout of {} s; the agent was stopped", task.timeout_secs),
                ))
            }
            _ = async { drop(cancel_wait.wait_for(|s| *s == Stop::Cancel).await) } => {
                canceller.cancel();
                match tokio::time::timeout(inner.config.cancel_grace, &mut prompt).await {
                    Ok(Ok(o)) => TurnResult::Canceled { stop_reason: Some(o.stop_reason), usage: o.usage },
                    Ok(Err(_)) => TurnResult::Canceled { stop_reason: None, usage: None },
                    Err(_) => {
                        session.shutdown().await;
                        let _ = (&mut prompt).await;
                        TurnResult::Canceled { stop_reason: None, usage: None }
                    }
                }
            }
        };
        if session.is_alive() {
            let asks = task.workspace != WorkspaceKind::Copy
                && matches!(&result, TurnResult::Completed { stop_reason, .. }
                    if stop_reason == legate_backend::STOP_INPUT_REQUIRED);
            let waiting = asks || self.waits_for_input(&task.context_id);
            self.release_session(&task.context_id, waiting);
        } else {
            inner.pool.remove(&task.context_id);
        }
        result
    }

    /// The context's live session, or a new one (continuing the stored session id when the
    /// agent can). `Ok(None)` when the task was canceled while the agent started.
    async fn session_for(
        &self,
        task: &Task,
        agent: &AgentSpec,
        boundary: Boundary,
        sink: &EventSink,
        stop: &mut watch::Receiver<Stop>,
        room: crate::budget::Reservation,
    ) -> Result<Option<Arc<dyn AgentSession>>> {
        let inner = &self.inner;
        if let Some(session) = inner.pool.checkout(&task.context_id, &agent.name) {
            drop(room);
            sink.send(EventKind::Session {
                session_id: session.session_id().to_string(),
                resumed: true,
            });
            self.record_session(task, session.session_id())?;
            return Ok(Some(session));
        }
        let backend = inner
            .backends
            .get(&agent.kind)
            .ok_or_else(|| Error::new(ErrorCode::AgentNotFound, "no backend for this agent kind"))?
            .clone();
        let preset = preset_for(agent);
        let resume = inner
            .store
            .context(&task.context_id)?
            .and_then(|r| r.session_id);
        let mut tagged = agent.clone();
        tagged.env.insert(
            runner::RUNNER_ENV.to_string(),
            inner.runner.id().to_string(),
        );
        let request = SessionRequest {
            agent: tagged,
            boundary: boundary.clone(),
            supervisor: inner.supervisor.clone(),
            supervision: Supervision {
                boundary,
                mode: task.mode,
                preset,
            },
            resume_session_id: resume,
            state_dir: Some(inner.config.state_dir(&agent.name)),
            blocked_dir: Some(inner.config.paths.blocked()),
            hidden: inner.config.hidden_paths(),
        };
        let Some(opened) = self
            .open_with_retries(&backend, request, sink, stop, room)
            .await?
        else {
            return Ok(None);
        };
        // The backend reported the new session (and whether it was continued) on `sink`.
        if let Some(old) = inner
            .pool
            .insert(&task.context_id, &agent.name, opened.clone())
        {
            old.shutdown().await;
        }
        self.record_session(task, opened.session_id())?;
        Ok(Some(opened))
    }

    fn record_session(&self, task: &Task, session_id: &str) -> Result<()> {
        if session_id.is_empty() {
            // Not known yet (agy learns it from the first run's `init`).
            return Ok(());
        }
        let store = &self.inner.store;
        let mut record = store
            .context(&task.context_id)?
            .unwrap_or_else(|| ContextRecord {
                context_id: task.context_id.clone(),
                agent: task.agent.clone(),
                session_id: None,
                sandbox_root: None,
                updated_at: Timestamp::now(),
            });
        record.session_id = Some(session_id.to_string());
        record.updated_at = Timestamp::now();
        store.put_context(&record)?;
        if let Some(mut t) = store.task(&task.id)? {
            t.session_id = Some(session_id.to_string());
            store.update_task(&t, &[])?;
        }
        Ok(())
    }

    /// Stores the terminal state (or `input-required`, when the agent asked for input) and its
    /// status event in one transaction, then tells.
    fn finish(&self, task: &Task, ending: Ending) -> Result<()> {
        if !self.end(task, ending, |s| !s.is_terminal())? {
            tracing::warn!(task = %task.id, "the task had ended already; its turn's end was not stored");
        }
        Ok(())
    }

    /// Stores `ending` for `task` if its stored state passes `ends_from`, and tells; returns
    /// whether it did. The end and any cancel request are ordered by the store: a cancel that
    /// was accepted before this commits wins, whatever the turn did meanwhile.
    fn end(
        &self,
        task: &Task,
        ending: Ending,
        ends_from: impl FnOnce(TaskState) -> bool,
    ) -> Result<bool> {
        let store = &self.inner.store;
        let stored = store.end_task(&task.id, |base, cancel_requested| {
            if !ends_from(base.state) {
                return None;
            }
            let ending = if cancel_requested && ending.state != TaskState::Canceled {
                Ending {
                    state: TaskState::Canceled,
                    error: None,
                    ..ending
                }
            } else {
                ending
            };
            Some(ended(base, ending))
        })?;
        let Some((t, events)) = stored else {
            return Ok(false);
        };
        store.set_runner(&t.id, None)?;
        self.inner.fanout.publish(&events);
        if t.state == TaskState::InputRequired {
            tracing::info!(task = %t.id, "the agent asked for input; the task waits for a reply");
        } else {
            tracing::info!(task = %t.id, state = %t.state, "task ended");
        }
        Ok(true)
    }
}

/// A weak handle on the engine.
pub(crate) struct WeakEngine(std::sync::Weak<Inner>);

impl WeakEngine {
    /// The engine, while it lives.
    pub(crate) fn upgrade(&self) -> Option<Engine> {
        self.0.upgrade().map(|inner| Engine { inner })
    }
}

/// What a turn starts with besides its task: the caller's message id, and the room promised
/// at admission (given back once the agent's session is open).
struct TurnStart {
    message_id: Option<String>,
    room: crate::budget::Reservation,
}

/// How the turn itself went, before the result is folded in.
enum TurnResult {
    Completed {
        stop_reason: String,
        usage: Option<legate_core::Usage>,
    },
    Canceled {
        stop_reason: Option<String>,
        usage: Option<legate_core::Usage>,
    },
    Failed(Error),
}

impl TurnResult {
    /// The task's state after the turn: `completed`, `rejected` for ACP's `refusal`,
    /// `input-required` when the agent asked for input (and the task `can_wait`), `canceled`,
    /// or `failed`/`auth-required` with the error.
    fn into_ending(self, mut acc: Accumulator, can_wait: bool) -> Ending {
        match self {
            TurnResult::Completed { stop_reason, usage } => {
                if let Some(u) = &usage {
                    acc.add_usage(u);
                }
                let state = match stop_reason.as_str() {
                    "refusal" => TaskState::Rejected,
                    legate_backend::STOP_INPUT_REQUIRED if can_wait => TaskState::InputRequired,
                    _ => TaskState::Completed,
                };
                let (result, usage) = acc.finish(Some(stop_reason));
                Ending {
                    state,
                    error: None,
                    result,
                    usage,
                }
            }
            TurnResult::Canceled { stop_reason, usage } => {
                if let Some(u) = &usage {
                    acc.add_usage(u);
                }
                Ending::canceled(stop_reason, acc)
            }
            TurnResult::Failed(e) => Ending::failed(e, acc),
        }
    }
}

/// The agent's answer as a status message (trimmed, bounded), or `fallback` when it said
/// nothing.
fn answer_or(answer: &str, fallback: &str) -> String {
    let answer = answer.trim();
    if answer.is_empty() {
        return fallback.to_string();
    }
    if answer.len() <= MAX_STATUS_FROM_ANSWER {
        return answer.to_string();
    }
    let mut end = MAX_STATUS_FROM_ANSWER;
    while !answer.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &answer[..end])
}

/// How a task's run ended (terminal, or `input-required`), ready to store.
struct Ending {
    state: TaskState,
    error: Option<Error>,
    result: legate_core::TaskResult,
    usage: Option<legate_core::Usage>,
}

impl Ending {
    fn canceled(stop_reason: Option<String>, acc: Accumulator) -> Self {
        let (result, usage) = acc.finish(stop_reason);
        Self {
            state: TaskState::Canceled,
            error: None,
            result,
            usage,
        }
    }

    fn failed(error: Error, acc: Accumulator) -> Self {
        let (result, usage) = acc.finish(None);
        let state = if matches!(
            error.code,
            ErrorCode::AgentAuthRequired | ErrorCode::AgyAuthRequired
        ) {
            TaskState::AuthRequired
        } else {
            TaskState::Failed
        };
        Self {
            state,
            error: Some(error),
            result,
            usage,
        }
    }
}

/// `TASK_NOT_CANCELABLE` for a task that already ended.
fn not_cancelable(task: &Task) -> Error {
    Error::new(
        ErrorCode::TaskNotCancelable,
        format!("task {} already ended ({})", task.id, task.state),
    )
}

/// Task `t` as `ending` leaves it, and the status event that says so.
fn ended(mut t: Task, ending: Ending) -> (Task, Vec<EventKind>) {
    let Ending {
        state,
        error,
        result,
        usage,
    } = ending;
    let notes: Vec<String> = [result.refusal_note(), failed_tools_note(&result)]
        .into_iter()
        .flatten()
        .chain(result.notices.iter().map(|n| n.message.clone()))
        .collect();
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    // What the supervisor refused travels with every ending but a question to the caller.
    let noted = |head: String| match &note {
        Some(n) => format!("{head}; {n}"),
        None => head,
    };
    let message = match (&error, state) {
        (Some(e), _) => Some(noted(e.message.clone())),
        (None, TaskState::Canceled) => Some(noted("canceled".to_string())),
        (None, TaskState::InputRequired) => Some(answer_or(&result.text, INPUT_REQUIRED_MESSAGE)),
        (None, TaskState::Rejected) => Some(noted(answer_or(&result.text, REJECTED_MESSAGE))),
        (None, _) => note,
    };
    t.state = state;
    t.error = error.clone();
    t.status_message = message.clone();
    t.usage = usage;
    t.result = Some(result);
    t.updated_at = Timestamp::now();
    let status = EventKind::Status {
        state,
        message,
        error,
    };
    (t, vec![status])
}

/// "2 of 5 tool calls failed", when any did. Some agents (Codex) end a turn whose tools
/// failed with `end_turn`, so a completed task says it here rather than look clean.
fn failed_tools_note(result: &legate_core::TaskResult) -> Option<String> {
    (result.failed_tool_calls > 0).then(|| {
        // An agent may report a failed call it never announced (Gemini's refused shell).
        let total = result.tool_calls.max(result.failed_tool_calls);
        format!("{} of {total} tool calls failed", result.failed_tool_calls)
    })
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

/// What the supervisor knows about an agent: its configured preset, revisor's own, or the
/// generic one.
pub fn preset_for(agent: &AgentSpec) -> Preset {
    agent
        .preset
        .as_deref()
        .and_then(Preset::by_name)
        .unwrap_or_else(|| {
            if agent.kind == AgentKind::Revisor {
                Preset::revisor()
            } else {
                Preset::generic()
            }
        })
}

fn is_canceled(stop: &watch::Receiver<Stop>) -> bool {
    *stop.borrow() == Stop::Cancel
}

fn first_intent(current: &mut Stop, wanted: Stop) -> bool {
    if *current == Stop::None {
        *current = wanted;
        true
    } else {
        false
    }
}

fn validate_context_id(c: &str) -> Result<String> {
    if c.is_empty() || c.len() > MAX_CONTEXT_ID_BYTES || c.chars().any(char::is_control) {
        return Err(Error::invalid_input(format!(
            "a context id must be 1 to {MAX_CONTEXT_ID_BYTES} bytes with no control characters"
        )));
    }
    Ok(c.to_string())
}

/// The largest JSON Schema accepted for structured output, serialized, in bytes.
const MAX_JSON_SCHEMA_BYTES: usize = 64 * 1024;

/// A schema for structured output must be a JSON object of at most
/// [`MAX_JSON_SCHEMA_BYTES`], for an agent of kind `agy` (the only one that offers it).
fn validate_json_schema(schema: &serde_json::Value, agent: &AgentSpec) -> Result<()> {
    if !schema.is_object() {
        return Err(Error::invalid_input(
            "a JSON Schema for structured output must be a JSON object",
        ));
    }
    let size = schema.to_string().len();
    if size > MAX_JSON_SCHEMA_BYTES {
        return Err(Error::invalid_input(format!(
            "the JSON Schema is {size} bytes; the limit is {MAX_JSON_SCHEMA_BYTES}"
        )));
    }
    if agent.kind != AgentKind::Agy {
        return Err(Error::invalid_input(format!(
            "agent `{}` (kind {}) cannot answer with structured output; a JSON Schema needs an agent of kind agy",
            agent.name,
            agent.kind.as_str()
        )));
    }
    Ok(())
}

/// The longest model id accepted, in bytes.
const MAX_MODEL_BYTES: usize = 128;

fn validate_model(model: &str) -> Result<()> {
    let ok = !model.is_empty()
        && model.len() <= MAX_MODEL_BYTES
        && model
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':'));
    if !ok {
        return Err(Error::invalid_input(format!(
            "a model must be 1 to {MAX_MODEL_BYTES} letters, digits, '.', '_', '-', '/' or ':'"
        )));
    }
    Ok(())
}

fn create_private_dir(dir: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| {
                Error::new(
                    ErrorCode::ConfigInvalid,
                    format!("could not create {}: {e}", dir.display()),
                )
            })?;
    }
    let meta = std::fs::metadata(dir).map_err(|e| {
        Error::new(
            ErrorCode::ConfigInvalid,
            format!("could not read {}: {e}", dir.display()),
        )
    })?;
    if !meta.is_dir() {
        return Err(Error::new(
            ErrorCode::ConfigInvalid,
            format!("{} is not a directory", dir.display()),
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        let _ = std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps behind these locks stay consistent at every await-free step; a panic elsewhere
    // must not take cancel and admission down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ended(stop_reason: &str, can_wait: bool) -> Ending {
        let mut acc = Accumulator::default();
        acc.add(&EventKind::Message {
            text: "  Which file?\n".into(),
        });
        TurnResult::Completed {
            stop_reason: stop_reason.into(),
            usage: None,
        }
        .into_ending(acc, can_wait)
    }

    #[test]
    fn the_stop_reason_decides_the_state() {
        assert_eq!(ended("end_turn", true).state, TaskState::Completed);
        assert_eq!(ended("max_tokens", true).state, TaskState::Completed);
        assert_eq!(ended("refusal", true).state, TaskState::Rejected);
        let asks = ended(legate_backend::STOP_INPUT_REQUIRED, true);
        assert_eq!(asks.state, TaskState::InputRequired);
        assert_eq!(asks.error, None);
        assert_eq!(
            asks.result.stop_reason.as_deref(),
            Some(legate_backend::STOP_INPUT_REQUIRED)
        );
        // A copy task cannot wait: its copy is made afresh for each turn.
        assert_eq!(
            ended(legate_backend::STOP_INPUT_REQUIRED, false).state,
            TaskState::Completed
        );
        let canceled = TurnResult::Canceled {
            stop_reason: Some("cancelled".into()),
            usage: None,
        }
        .into_ending(Accumulator::default(), true);
        assert_eq!(canceled.state, TaskState::Canceled);
    }

    #[test]
    fn the_status_of_a_question_is_the_answer_bounded() {
        assert_eq!(answer_or("  Which file?\n", "fallback"), "Which file?");
        assert_eq!(
            answer_or(" \n", INPUT_REQUIRED_MESSAGE),
            INPUT_REQUIRED_MESSAGE
        );
        let long = "é".repeat(MAX_STATUS_FROM_ANSWER);
        let cut = answer_or(&long, "");
        assert!(cut.len() <= MAX_STATUS_FROM_ANSWER + '…'.len_utf8());
        assert!(cut.ends_with('…'));
    }
}
