//! The engine: a task's life. A request is checked (`request`), its task stored and queued
//! (`launcher`), driven through admission and its turn (`slots`, `admission`, `turn`) and
//! ended (`ending`); a waiting task is replied to or canceled here; recovery runs at start and
//! housekeeping (cross-process cancels, checkpoints, idle sessions) in the background.
//!
//! This module owns the engine's shared state (`Inner`) and the stop signals of running
//! tasks. It never speaks an agent protocol and never looks a backend up itself (`agents`
//! does); every turn it starts goes through `Engine::launch`.

use crate::accumulator::Accumulator;
use crate::agents::Agents;
use crate::config::EngineConfig;
use crate::ending::{EMPTY_PROMPT_MESSAGE, Ending, not_cancelable};
use crate::fanout::{Fanout, Subscription};
use crate::launcher::{Entry, Launch, TurnInputs};
use crate::pool::Pool;
use crate::request::{SubmitRequest, check_reply};
use crate::runner::{self, Runner};
use crate::slots::{SlotCounts, Slots};
use legate_core::{Error, ErrorCode, Event, EventKind, Result, Task, TaskId, TaskState, Timestamp};
use legate_store::{Store, TaskFilter, UsageFilter, UsageReport};
use legate_supervisor::Supervisor;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::task::TaskTracker;

/// How a running task should end when someone intervenes. The first intent wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    None,
    Cancel,
    /// Stop following a task this engine took over from a dead process (`adoption`), without
    /// ending it or canceling its remote task: this process is going away, and the next one
    /// takes the task over again. Only ever sent to adopted tasks, by `shutdown`.
    Release,
}

/// Legate's engine. Cheap to clone; every clone is the same engine.
#[derive(Debug, Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: EngineConfig,
    pub(crate) store: Store,
    pub(crate) runner: Runner,
    /// The agents' specs and backends: the one place a backend is looked up.
    pub(crate) agents: Agents,
    pub(crate) supervisor: Arc<dyn Supervisor>,
    /// The approval queue: where `ask` rulings wait for a supervisor.
    pub(crate) queue: Arc<crate::supervision::queue::Queue>,
    pub(crate) fanout: Fanout,
    pub(crate) pool: Pool,
    /// Room promised to starting tasks, and the signal that some was freed.
    pub(crate) budget: Arc<crate::budget::Budget>,
    /// The running and queued places.
    pub(crate) slots: Slots,
    pub(crate) stops: Mutex<HashMap<TaskId, watch::Sender<Stop>>>,
    /// The tasks this engine took over from dead processes and follows (`adoption`):
    /// released, not canceled, at shutdown.
    pub(crate) adopted: Mutex<std::collections::HashSet<TaskId>>,
    pub(crate) contexts: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    waiting: Mutex<()>,
    tracker: TaskTracker,
    /// Raised by `shutdown`; a task launched after it is canceled at once (`launcher`).
    pub(crate) shutdown: watch::Sender<bool>,
    /// The role catalog, checked at start.
    pub(crate) roles: crate::roles::Roles,
    /// The groups this engine drives (`group`).
    pub(crate) groups: crate::group::Drivers,
}

impl Engine {
    /// Opens the store, claims a runner identity, marks tasks of dead runners
    /// `SERVER_RESTARTED` (except the remote tasks it takes over and follows to their end:
    /// `adoption`), prunes old tasks, and starts the background loop. A configured
    /// policy ([`EngineConfig::policy`]) sits above `supervisor`: its first matching rule
    /// decides, else `supervisor` does.
    pub fn start(
        config: EngineConfig,
        backends: impl Into<legate_backend::Registry>,
        supervisor: Arc<dyn Supervisor>,
    ) -> Result<Engine> {
        let supervisor: Arc<dyn Supervisor> = if config.policy.is_empty() {
            supervisor
        } else {
            tracing::info!(
                rules = config.policy.rules().len(),
                "permission policy loaded"
            );
            Arc::new(legate_supervisor::Policed::new(
                config.policy.clone(),
                supervisor,
            ))
        };
        if !(1..=crate::MAX_NODES).contains(&config.max_group_nodes) {
            return Err(Error::new(
                ErrorCode::ConfigInvalid,
                format!(
                    "max_group_nodes must be between 1 and {} (got {})",
                    crate::MAX_NODES,
                    config.max_group_nodes
                ),
            ));
        }
        let paths = config.paths.clone();
        let roles = crate::roles::Roles::new(
            config.roles.clone(),
            config.agents.keys().map(String::as_str),
        )?;
        create_private_dir(paths.home())?;
        let store = Store::open(&paths.db())?;
        let runner = Runner::claim(&paths.run())?;
        let agents = Agents::new(config.agents.clone(), backends.into());
        // A remote task whose backend can follow it is left for `adopt_orphans` below.
        let recovered = runner::recover(&store, &paths, &|name| agents.reattaches(name))?;
        if recovered > 0 {
            tracing::info!(
                tasks = recovered,
                "marked tasks of stopped processes as failed"
            );
        }
        store.prune_finished(config.retention)?;
        let (shutdown, _) = watch::channel(false);
        let engine = Engine {
            inner: Arc::new_cyclic(|weak| Inner {
                queue: Arc::new(crate::supervision::queue::Queue::new(
                    store.clone(),
                    &config.supervision,
                    weak.clone(),
                )),
                slots: Slots::new(config.max_running, config.max_queued),
                agents,
                roles,
                config,
                store,
                fanout: Fanout::new(4096, paths.clone(), Some(runner.id().to_string())),
                runner,
                supervisor,
                pool: Pool::default(),
                budget: Arc::default(),
                stops: Mutex::new(HashMap::new()),
                adopted: Mutex::default(),
                contexts: Mutex::new(HashMap::new()),
                waiting: Mutex::new(()),
                tracker: TaskTracker::new(),
                shutdown,
                groups: crate::group::Drivers::default(),
            }),
        };
        engine.adopt_orphans();
        engine.continue_groups();
        engine.spawn_housekeeping();
        engine.spawn_copy_sweeper();
        Ok(engine)
    }

    /// The store. Fronts read through [`Engine`]'s own methods and [`crate::Records`].
    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The roles a request may name: the built-ins and the configured ones.
    pub fn roles(&self) -> &crate::roles::Roles {
        &self.inner.roles
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

    /// The agent registry.
    pub(crate) fn agents(&self) -> &Agents {
        &self.inner.agents
    }

    /// The running and queued places.
    pub(crate) fn slots(&self) -> &Slots {
        &self.inner.slots
    }

    /// The supervisor that answers agents' permission requests.
    pub(crate) fn supervisor(&self) -> Arc<dyn Supervisor> {
        self.inner.supervisor.clone()
    }

    /// How many tasks run a turn and how many wait to start, now.
    pub fn slot_counts(&self) -> SlotCounts {
        self.inner.slots.counts()
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

    /// Checks and stores a task, then queues it (or parks it waiting for input when its
    /// prompt is empty and `allow_empty`). Every way of submitting comes here.
    pub(crate) fn submit_inner(
        &self,
        mut request: SubmitRequest,
        allow_empty: bool,
    ) -> Result<Task> {
        let role = self.apply_role(&mut request)?;
        let checked = self.check_submit(&request, allow_empty)?;
        crate::request::check_framed(&request.prompt, role.as_ref())?;
        self.submit_checked(request, checked, role)
    }

    /// Stores and queues (or parks) the task of a `request` that passed `check_submit` as
    /// `checked`, with its resolved `role`. A handoff comes here too, with its copy's source
    /// set in `checked`.
    pub(crate) fn submit_checked(
        &self,
        request: SubmitRequest,
        checked: crate::request::Checked,
        role: Option<legate_core::TaskRole>,
    ) -> Result<Task> {
        let now = Timestamp::now();
        let id = checked
            .id
            .clone()
            .unwrap_or_else(|| TaskId(uuid::Uuid::new_v4().to_string()));
        // Before the task is stored, so that its first turn finds them.
        self.take_memory_snapshots(&id, &request, &checked)?;
        let mut task = Task {
            id: id.clone(),
            context_id: checked.context_id,
            agent: checked.agent.name.clone(),
            workspace: checked.workspace,
            root: checked.root,
            prompt: request.prompt,
            // Set by `apply_role`; write only if that ever changed.
            mode: request.mode.unwrap_or_default(),
            model: request.model,
            role,
            state: TaskState::Submitted,
            error: None,
            status_message: None,
            usage: None,
            result: None,
            session_id: None,
            timeout_secs: checked.timeout.as_secs().max(1),
            remote: None,
            controls: checked.controls,
            created_at: now,
            updated_at: now,
        };
        if checked.empty {
            task.prompt = String::new();
            task.state = TaskState::InputRequired;
            task.status_message = Some(EMPTY_PROMPT_MESSAGE.to_string());
            return self
                .park(task)
                .inspect_err(|_| self.forget_memory_snapshots(&id));
        }
        let task = self
            .launch(Launch {
                task,
                agent: checked.agent,
                inputs: TurnInputs {
                    message_id: request.message_id,
                    json_schema: request.json_schema,
                },
                entry: Entry::New { copy: checked.copy },
            })
            .inspect_err(|_| self.forget_memory_snapshots(&id))?;
        tracing::info!(task = %task.id, agent = %task.agent, context = %task.context_id, "task submitted");
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
        let prompt = prompt.into();
        check_reply(&prompt)?;
        // One reply (or cancel) of a waiting task at a time in this process.
        let _waiting = lock(&self.inner.waiting);
        let mut task = self.inner.store.find_task(id)?;
        if task.state != TaskState::InputRequired {
            return Err(Error::new(
                ErrorCode::TaskNotAwaitingInput,
                format!(
                    "task {} is {}, not input-required; send a new message to continue its context {}",
                    task.id, task.state, task.context_id
                ),
            ));
        }
        let (agent, _) = self.agents().runnable(&task.agent)?;
        crate::request::check_framed(&prompt, task.role.as_ref())?;
        task.prompt = prompt;
        task.state = TaskState::Submitted;
        task.status_message = None;
        task.updated_at = Timestamp::now();
        let task = self.launch(Launch {
            task,
            agent,
            inputs: TurnInputs {
                message_id,
                json_schema: None,
            },
            entry: Entry::Reply,
        })?;
        tracing::info!(task = %task.id, context = %task.context_id, "task resumed by a reply");
        Ok(task)
    }

    /// Whether a task of `context_id` waits for input (its session must then stay up).
    pub(crate) fn waits_for_input(&self, context_id: &str) -> bool {
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

    /// Every event this engine stores from now on, of every task it runs, once stored: for a
    /// live view of all tasks (the dashboard's tasks list). A receiver that falls behind gets
    /// `Lagged` and should read the store again; tasks another process runs are not here.
    pub fn live_events(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.inner.fanout.all()
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

    /// Stops accepting work, cancels running tasks, waits for them to end, and stops every
    /// agent process.
    pub async fn shutdown(&self) {
        let _ = self.inner.shutdown.send(true);
        {
            let adopted = lock(&self.inner.adopted);
            for (id, tx) in lock(&self.inner.stops).iter() {
                // A task taken over from a dead process is someone else's work: it is left
                // for the next process, not canceled (`adoption`).
                let intent = if adopted.contains(id) {
                    Stop::Release
                } else {
                    Stop::Cancel
                };
                tx.send_if_modified(|s| first_intent(s, intent));
            }
        }
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
        // All at once: each may wait (boundedly) for its agent to answer `session/close`.
        futures::future::join_all(self.inner.pool.drain().into_iter().map(|s| async move {
            s.shutdown().await;
        }))
        .await;
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
                // `Store::checkpoint`), about once a second; and, as often, take over the
                // remote tasks of processes that died since (`adoption`).
                checkpoint_ticks += 1;
                if checkpoint_ticks.is_multiple_of(4) {
                    let engine = Engine {
                        inner: inner.clone(),
                    };
                    engine.adopt_orphans();
                    engine.continue_groups();
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
}

/// A weak handle on the engine.
pub(crate) struct WeakEngine(std::sync::Weak<Inner>);

impl WeakEngine {
    /// The engine, while it lives.
    pub(crate) fn upgrade(&self) -> Option<Engine> {
        self.0.upgrade().map(|inner| Engine { inner })
    }
}

pub(crate) fn first_intent(current: &mut Stop, wanted: Stop) -> bool {
    if *current == Stop::None {
        *current = wanted;
        true
    } else {
        false
    }
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

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // The maps behind these locks stay consistent at every await-free step; a panic elsewhere
    // must not take cancel and admission down with it.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
