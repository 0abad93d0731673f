//! The core: the engine's shared state, and the one handle every part of the engine stands on.
//!
//! [`Core`] holds what every service and every piece of a task's life reads: the store, the
//! fan-out, the running and queued places, the session pool, the runner identity, the agent
//! registry, the budget, the approval queue and the stop signals of running tasks. It is cheap
//! to clone; [`crate::Engine`] wraps one, and so does each service it hands out
//! (`engine.reviews()`, `engine.groups()`...).
//!
//! The task-life machinery is `impl Core` in the files of this folder, declared below in the
//! order a task lives it: `request` (the checks at submit), `launcher` (the one path every
//! start takes: submit, reply, resume, message, a group's node, a handoff), `slots`,
//! `admission` and `budget`, `turn`, `ending`, `continuation`, `inbound`; then what every task
//! stands on: `pool`, `fanout`, `runner`, recovery (`adoption`, `leftovers`) and `retention`
//! (pruning what is past `retention`, at start and every minute). A feature that starts a
//! task goes through [`Core::launch`], never back through the engine's facade.
//!
//! This module opens the engine (store, runner, recovery) and runs its housekeeping loop. It
//! never speaks an agent protocol and never looks a backend up itself (`agents` does).

// A task's life, in the order it is lived: the checks at submit, the launcher every start
// takes, its places and room, the turn, its ending, and what comes after (a conversation's next
// turn, an inbound message, a process that died).
pub(crate) mod accumulator;
pub(crate) mod admission;
pub(crate) mod budget;
pub(crate) mod context_lock;
pub(crate) mod continuation;
pub(crate) mod cut_turn;
pub(crate) mod directory;
pub(crate) mod ending;
pub(crate) mod framing;
pub(crate) mod inbound;
pub(crate) mod joint_wait;
pub(crate) mod launcher;
pub(crate) mod opening;
pub(crate) mod request;
pub mod silent;
pub(crate) mod slots;
pub(crate) mod spans;
pub(crate) mod tap;
pub(crate) mod tap_chunks;
pub(crate) mod turn;
// What the agent prints, redacted and held to the task's output limits before the pump
// stores and relays it.
pub(crate) mod output;
pub(crate) mod pump;
pub(crate) mod redaction;
// What every task stands on: the warm sessions, the fan-out of stored events, the runner and
// what it recovers when a process died.
pub(crate) mod adoption;
pub(crate) mod fanout;
pub(crate) mod forbidden;
pub(crate) mod integration_recovery;
pub(crate) mod ledger;
pub(crate) mod leftover_processes;
pub(crate) mod leftovers;
mod pods;
pub(crate) mod pool;
pub(crate) mod retention;
pub mod runner;
pub(crate) mod warm;

use crate::agents::AgentRegistry;
use crate::config::EngineConfig;
use crate::core::fanout::{Fanout, Subscription};
use crate::core::pool::Pool;
use crate::core::slots::{SlotCounts, Slots};
use legate_core::{Error, ErrorCode, Event, EventKind, Result, Task, TaskId, TaskState};
use legate_store::{Store, TaskFilter};
use legate_supervisor::Supervisor;
use runner::Runner;
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

/// The engine's shared state. Cheap to clone; every clone is the same engine.
#[derive(Debug, Clone)]
pub(crate) struct Core {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) config: EngineConfig,
    pub(crate) store: Store,
    pub(crate) runner: Runner,
    /// The agents' specs and backends: the one place a backend is looked up.
    pub(crate) agents: AgentRegistry,
    pub(crate) supervisor: Arc<dyn Supervisor>,
    /// The approval queue: where `ask` rulings wait for a supervisor.
    pub(crate) queue: Arc<crate::approvals::queue::Queue>,
    pub(crate) fanout: Fanout,
    pub(crate) pool: Pool,
    /// Sessions opened before any task (`[agents.NAME] warm`), handed to the next that fits.
    pub(crate) warm: crate::core::warm::WarmSet,
    /// Room promised to starting tasks, and the signal that some was freed.
    pub(crate) budget: Arc<crate::core::budget::Budget>,
    /// The running and queued places.
    pub(crate) slots: Slots,
    pub(crate) stops: Mutex<HashMap<TaskId, watch::Sender<Stop>>>,
    /// The tasks this engine took over from dead processes and follows (`adoption`):
    /// released, not canceled, at shutdown.
    pub(crate) adopted: Mutex<std::collections::HashSet<TaskId>>,
    pub(crate) contexts: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// One reply (or cancel) of a waiting task at a time in this process.
    pub(crate) waiting: Mutex<()>,
    tracker: TaskTracker,
    /// Raised by `shutdown`; a task launched after it is canceled at once (`launcher`).
    pub(crate) shutdown: watch::Sender<bool>,
    /// The role catalog, checked at start.
    pub(crate) roles: crate::roles::Roles,
    /// The groups this engine drives (`group`).
    pub(crate) groups: crate::group::Drivers,
    /// Held through each retention sweep, so that one runs at a time in this process; it
    /// keeps what the sweep at start removed until an asked-for sweep (`Reviews::cleanup`)
    /// reports it with its own (`review::cleanup`).
    pub(crate) sweeps: tokio::sync::Mutex<crate::review::Sweeps>,
}

impl Core {
    /// Opens the store, claims a runner identity, marks tasks of dead runners
    /// `SERVER_RESTARTED` (except the remote tasks it takes over: `adoption`), prunes what is
    /// past retention (`retention`), and starts the background loops. See
    /// [`crate::Engine::start`].
    pub(crate) fn open(
        config: EngineConfig,
        backends: legate_backend::Registry,
        supervisor: Arc<dyn Supervisor>,
    ) -> Result<Core> {
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
        let agents = AgentRegistry::new(config.agents.clone(), backends);
        // A remote task whose backend can follow it is left for `adopt_orphans` below.
        let recovered = runner::recover(&store, &paths, &|name| agents.reattaches(name))?;
        if recovered > 0 {
            tracing::info!(
                tasks = recovered,
                "marked tasks of stopped processes as failed"
            );
        }
        // What is past retention, now; then every `retention_interval` (`spawn_retention`).
        // A failed pass does not stop the engine: the next one tries again.
        if let Err(e) =
            crate::core::retention::pass(&store, &paths, config.retention, config.review.retention)
        {
            tracing::warn!(error = %e, "the task retention pass at start failed; the next one tries again");
        }
        pods::sweep_on_start(config.agents.values(), &paths);
        // A stopped engine's supervising-agent questions (`kill -9` skips their removal).
        crate::approvals::judge_dirs::sweep(&paths, Some(runner.id()));
        // A stopped engine's warm sessions that no task took (`kill -9` skips their removal).
        crate::core::warm::sweep(&store, &paths, runner.id());
        let (shutdown, _) = watch::channel(false);
        let core = Core {
            inner: Arc::new_cyclic(|weak| Inner {
                queue: Arc::new(crate::approvals::queue::Queue::new(
                    store.clone(),
                    &config.approvals,
                    WeakCore(weak.clone()),
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
                warm: crate::core::warm::WarmSet::default(),
                budget: Arc::default(),
                stops: Mutex::new(HashMap::new()),
                adopted: Mutex::default(),
                contexts: Mutex::new(HashMap::new()),
                waiting: Mutex::new(()),
                tracker: TaskTracker::new(),
                shutdown,
                groups: crate::group::Drivers::default(),
                sweeps: tokio::sync::Mutex::default(),
            }),
        };
        core.adopt_orphans();
        core.continue_groups();
        core.spawn_housekeeping();
        core.spawn_copy_sweeper();
        core.spawn_retention();
        core.spawn_warmer();
        Ok(core)
    }

    /// The store.
    pub(crate) fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The role catalog.
    pub(crate) fn roles(&self) -> &crate::roles::Roles {
        &self.inner.roles
    }

    /// The configuration.
    pub(crate) fn config(&self) -> &EngineConfig {
        &self.inner.config
    }

    /// This engine's runner id.
    pub(crate) fn runner_id(&self) -> &str {
        self.inner.runner.id()
    }

    /// The live sessions.
    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The process's budget of descriptors and processes.
    pub(crate) fn budget(&self) -> &Arc<crate::core::budget::Budget> {
        &self.inner.budget
    }

    /// The agent registry.
    pub(crate) fn agents(&self) -> &AgentRegistry {
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
    pub(crate) fn slot_counts(&self) -> SlotCounts {
        self.inner.slots.counts()
    }

    /// Runs `f` in the background; shutdown waits for it.
    pub(crate) fn track(&self, f: impl std::future::Future<Output = ()> + Send + 'static) {
        self.inner.tracker.spawn(f);
    }

    /// A task by id or unique prefix.
    pub(crate) fn task(&self, id: &str) -> Result<Task> {
        self.inner.store.find_task(id)
    }

    /// Tasks, newest first.
    pub(crate) fn tasks(&self, filter: &TaskFilter) -> Result<Vec<Task>> {
        self.inner.store.list_tasks(filter)
    }

    /// Follows a task's events from `after` (exclusive) until its terminal status.
    pub(crate) fn subscribe(&self, task_id: &TaskId, after: u64) -> Subscription {
        self.inner
            .fanout
            .subscribe(self.inner.store.clone(), task_id.clone(), after)
    }

    /// Every event this engine stores from now on, once stored (see
    /// [`crate::Engine::live_events`]).
    pub(crate) fn live_events(&self) -> tokio::sync::broadcast::Receiver<Event> {
        self.inner.fanout.all()
    }

    /// Waits until the task has ended or waits for input (`input-required`) after its latest
    /// submission (a submit or a reply), and returns it.
    pub(crate) async fn wait(&self, task_id: &TaskId) -> Result<Task> {
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

    /// Stops accepting work, cancels running tasks, waits for them to end, and stops every
    /// agent process.
    pub(crate) async fn shutdown(&self) {
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
        // The warmer opened nothing after the signal; what it kept ready goes now.
        self.stop_warm().await;
        // All at once: each may wait (boundedly) for its agent to answer `session/close`.
        futures::future::join_all(self.inner.pool.drain().into_iter().map(|s| async move {
            s.shutdown().await;
        }))
        .await;
    }

    fn spawn_housekeeping(&self) {
        let weak = self.downgrade();
        let mut shutdown = self.inner.shutdown.subscribe();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(250));
            let mut checkpoint_ticks: u64 = 0;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = shutdown.changed() => return,
                }
                let Some(core) = weak.upgrade() else { return };
                let inner = &core.inner;
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
                    core.adopt_orphans();
                    core.continue_groups();
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
    pub(crate) fn downgrade(&self) -> WeakCore {
        WeakCore(Arc::downgrade(&self.inner))
    }

    /// Changes to `true` when the engine shuts down.
    pub(crate) fn shutdown_signal(&self) -> watch::Receiver<bool> {
        self.inner.shutdown.subscribe()
    }
}

/// A weak handle on the core.
#[derive(Debug, Clone)]
pub(crate) struct WeakCore(std::sync::Weak<Inner>);

impl WeakCore {
    /// The core, while it lives.
    pub(crate) fn upgrade(&self) -> Option<Core> {
        self.0.upgrade().map(|inner| Core { inner })
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
                Error::caused_by(
                    ErrorCode::ConfigInvalid,
                    format!("could not create {}", dir.display()),
                    e,
                )
            })?;
    }
    let meta = std::fs::metadata(dir).map_err(|e| {
        Error::caused_by(
            ErrorCode::ConfigInvalid,
            format!("could not read {}", dir.display()),
            e,
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
