//! Warm sessions: agent sessions opened before any task (`[agents.NAME] warm = N`), each in a
//! fresh sandbox of its own, handed whole to the next task that fits and replaced in the
//! background.
//!
//! A warm session is opened exactly as a task's would be (the same `SessionRequest`, built by
//! `opening::request_for`, confined the same way), for a task that is not known yet: write mode,
//! the default role, no tool controls, no MCP servers, the agent's own model, no wire tap, a new
//! context. What it was opened with is kept as its [`Shape`]; a task is handed the session only
//! when the request the task would open with, in that sandbox, has the same shape, and only when
//! its context has no sandbox, session or live session yet (its first turn). Anything else opens
//! afresh: a warm session never serves another configuration, and never sees a second task (a
//! handed session is its context's, in the pool, like any other).
//!
//! A replacement is opened in the background once the turn that took a session ends, or two
//! seconds after the hand-over, whichever comes first: starting an agent takes a core for a
//! while, and the taking turn's first events are what the warm session was kept for.
//!
//! Warm sessions count against `max_idle_sessions` (with the idle sessions of contexts) and the
//! process's budget: one is opened only when both have room and no task waits for room, and
//! they are the first stopped when a task needs room or the idle cap is passed. A warm session
//! is not a task: nothing of it is in the store until a task takes it. Its sandbox is named
//! `warm-<runner>-XXXXXX` (`legate_workspace::warm_sandbox`); one never handed over is removed
//! when the session is stopped, or, after a `kill -9`, by the next start ([`sweep`]), which also
//! kills what the dead runner's warm agents left running.
//!
//! This module never fails a task: an agent that cannot be warmed is logged and tried again
//! with a growing delay, and the task opens its own session as if no warm session existed.

use crate::agents::preset_for;
use crate::config::Paths;
use crate::core::Core;
use crate::core::budget::Need;
use crate::core::opening::Opening;
use legate_backend::{AgentSession, EventSink, SessionRequest};
use legate_core::{
    AgentSpec, Boundary, EventKind, RoleBase, Task, TaskMode, Timestamp, WorkspaceKind,
};
use legate_store::Store;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// The most events kept of a warm session's opening (its confinement notice, its session):
/// replayed into the task that takes it.
const MAX_OPENING_EVENTS: usize = 32;
/// The first delay after an agent failed to warm; doubled per failure in a row.
const FIRST_BACKOFF: Duration = Duration::from_secs(1);
/// The longest delay between attempts to warm an agent that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(60);
/// How often the warmer looks again when nothing woke it (a backoff ended, room came back).
const TICK: Duration = Duration::from_millis(500);
/// How long after a hand-over the replacement waits, unless the turn that took the session
/// ends first: starting an agent takes a core for a second or so, and the turn's first
/// events are what the warm session was kept for.
const REPLACE_AFTER: Duration = Duration::from_secs(2);

/// What a session was opened with, its sandbox's path aside: equal shapes are
/// interchangeable sessions. Every field of the request that reaches the agent or its
/// confinement is here; the supervisor, the approval channel and the ledger are the engine's
/// own, the same for every session.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Shape {
    agent: AgentSpec,
    supervision: legate_supervisor::Supervision,
    channel: bool,
    resume: Option<String>,
    state_dir: Option<std::path::PathBuf>,
    blocked_dir: Option<std::path::PathBuf>,
    hidden: Vec<std::path::PathBuf>,
    mcp_servers: Vec<legate_core::McpServerSpec>,
    network: legate_supervisor::network::NetworkRules,
    /// The model the task names (`None`: the agent's own, what a warm session opens with).
    model: Option<String>,
    /// Whether the task records its protocol frames: a warm session's opening was not tapped.
    tapped: bool,
    /// The confinement the agent gets on this machine now.
    confinement: &'static str,
}

impl Shape {
    fn of(
        request: &SessionRequest,
        model: Option<String>,
        tapped: bool,
        confinement: &'static str,
    ) -> Shape {
        let mut supervision = request.supervision.clone();
        supervision.boundary.root = std::path::PathBuf::new();
        Shape {
            agent: request.agent.clone(),
            supervision,
            channel: request.channel.is_some(),
            resume: request.resume_session_id.clone(),
            state_dir: request.state_dir.clone(),
            blocked_dir: request.blocked_dir.clone(),
            hidden: request.hidden.clone(),
            mcp_servers: request.mcp_servers.clone(),
            network: (*request.network).clone(),
            model,
            tapped,
            confinement,
        }
    }
}

/// A warm session ready to be handed over.
#[derive(Debug)]
struct Ready {
    agent: String,
    shape: Shape,
    session: Arc<dyn AgentSession>,
    boundary: Boundary,
    opening: Vec<EventKind>,
    opened_at: Timestamp,
    opened: Instant,
}

/// A warm session taken by a task: the caller records its sandbox as the context's and hands
/// the session to the turn (`turn::session_for`).
#[derive(Debug)]
pub(crate) struct Handed {
    pub(crate) session: Arc<dyn AgentSession>,
    pub(crate) boundary: Boundary,
    /// What the backend sent while opening it (its confinement notice, its session).
    pub(crate) opening: Vec<EventKind>,
    pub(crate) opened_at: Timestamp,
    /// How long it waited, ready, before this task took it.
    pub(crate) waited: Duration,
    /// Holds the replacement back while the turn starts ([`REPLACE_AFTER`]).
    pub(crate) hold: Option<Hold>,
}

/// Holds every replacement back until dropped (at the end of the turn that took a warm
/// session) or [`REPLACE_AFTER`] has passed, whichever comes first.
#[derive(Debug)]
pub(crate) struct Hold(Arc<HoldInner>);

#[derive(Debug)]
struct HoldInner {
    released: std::sync::atomic::AtomicBool,
    holds: Arc<AtomicUsize>,
    changed: Arc<Notify>,
}

impl HoldInner {
    fn release(&self) {
        if !self.released.swap(true, Ordering::SeqCst) {
            self.holds.fetch_sub(1, Ordering::SeqCst);
            self.changed.notify_one();
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.0.release();
    }
}

#[derive(Debug, Default)]
struct State {
    ready: Vec<Ready>,
    /// Sessions being opened, by agent.
    opening: BTreeMap<String, usize>,
    /// Failures in a row, and when the next attempt may start, by agent.
    backoff: BTreeMap<String, (u32, Instant)>,
    /// Set at shutdown: nothing more is opened or kept.
    closed: bool,
}

/// The engine's warm sessions.
#[derive(Debug, Default)]
pub(crate) struct WarmSet {
    state: Mutex<State>,
    /// Something changed that may let the warmer open one (a session taken, stopped, freed).
    changed: Arc<Notify>,
    /// Tasks waiting for room: while any does, nothing is warmed.
    pressure: AtomicUsize,
    /// Turns that just took a warm session and are starting ([`Hold`]).
    holds: Arc<AtomicUsize>,
}

/// Held while a task waits for room: the warmer opens nothing meanwhile.
#[derive(Debug)]
pub(crate) struct Pressure<'a>(&'a WarmSet);

impl Drop for Pressure<'_> {
    fn drop(&mut self) {
        self.0.pressure.fetch_sub(1, Ordering::SeqCst);
        self.0.changed.notify_one();
    }
}

impl WarmSet {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Only handles and counters behind it: a panic elsewhere leaves them consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Warm sessions ready or being opened.
    pub(crate) fn count(&self) -> usize {
        let s = self.lock();
        s.ready.len() + s.opening.values().sum::<usize>()
    }

    /// Warm sessions of every agent ready to be handed over.
    pub(crate) fn ready_total(&self) -> usize {
        self.lock().ready.len()
    }

    /// Warm sessions of `agent` ready to be handed over.
    pub(crate) fn ready(&self, agent: &str) -> usize {
        self.lock()
            .ready
            .iter()
            .filter(|r| r.agent == agent)
            .count()
    }

    /// Holds replacements back until the guard goes or [`REPLACE_AFTER`] has passed.
    fn hold(&self) -> Hold {
        self.holds.fetch_add(1, Ordering::SeqCst);
        let inner = Arc::new(HoldInner {
            released: std::sync::atomic::AtomicBool::new(false),
            holds: self.holds.clone(),
            changed: self.changed.clone(),
        });
        if tokio::runtime::Handle::try_current().is_ok() {
            let timer = Arc::downgrade(&inner);
            tokio::spawn(async move {
                tokio::time::sleep(REPLACE_AFTER).await;
                if let Some(inner) = timer.upgrade() {
                    inner.release();
                }
            });
        }
        Hold(inner)
    }

    /// Marks a task waiting for room until the guard goes.
    pub(crate) fn press(&self) -> Pressure<'_> {
        self.pressure.fetch_add(1, Ordering::SeqCst);
        Pressure(self)
    }
}

impl Core {
    /// The engine's warm sessions.
    pub(crate) fn warm(&self) -> &WarmSet {
        &self.inner.warm
    }

    /// The shape `task`'s session would have on `agent`, or `None` when the task could never
    /// take a warm session (not a sandbox, not its context's first turn, an agent without a
    /// local live session).
    fn task_shape(&self, task: &Task, agent: &AgentSpec) -> Option<Shape> {
        if task.workspace != WorkspaceKind::Sandbox
            || self.config().warm.get(&agent.name).is_none_or(|n| *n == 0)
            || task.controls.continued_from.is_some()
            || self.pool().holds(&task.context_id)
        {
            return None;
        }
        match self.store().context(&task.context_id) {
            Ok(None) => {}
            Ok(Some(r)) if r.sandbox_root.is_none() && r.session_id.is_none() => {}
            Ok(Some(_)) => return None,
            Err(e) => {
                tracing::warn!(task = %task.id, error = %e, "could not read the task's context; no warm session");
                return None;
            }
        }
        let (_, capabilities) = self.agents().backend(agent).ok()?;
        let confinement = self.confinement(&agent.name).ok()?;
        let boundary = Boundary {
            root: std::path::PathBuf::new(),
            owned: true,
            allow_execute: agent.allow_execute,
        };
        let preset = preset_for(agent, &capabilities);
        let request = self.session_request(task, agent, boundary, preset, None);
        Some(Shape::of(
            &request,
            task.model.clone(),
            task.controls.tap,
            confinement.as_str(),
        ))
    }

    /// Whether a warm session that fits `task` is ready now (admission then promises no room
    /// for a new session).
    pub(crate) fn warm_fits(&self, task: &Task, agent: &AgentSpec) -> bool {
        let Some(shape) = self.task_shape(task, agent) else {
            return false;
        };
        self.warm()
            .lock()
            .ready
            .iter()
            .any(|r| r.agent == agent.name && r.shape == shape && r.session.is_alive())
    }

    /// Takes a warm session that fits `task` exactly, if one is ready; the warmer replaces it.
    pub(crate) fn take_warm(&self, task: &Task, agent: &AgentSpec) -> Option<Handed> {
        let shape = self.task_shape(task, agent)?;
        let taken = {
            let mut s = self.warm().lock();
            let at = s
                .ready
                .iter()
                .position(|r| r.agent == agent.name && r.shape == shape && r.session.is_alive());
            at.map(|i| s.ready.remove(i))
        };
        let Some(ready) = taken else {
            if self.warm().ready(&agent.name) > 0 {
                tracing::info!(task = %task.id, agent = %agent.name, "a warm session is ready but was opened for another configuration; opening the task's own");
            }
            return None;
        };
        tracing::info!(task = %task.id, agent = %agent.name, session = ready.session.session_id(), "a warm session handed to a task");
        Some(Handed {
            session: ready.session,
            boundary: ready.boundary,
            opening: ready.opening,
            opened_at: ready.opened_at,
            waited: ready.opened.elapsed(),
            hold: Some(self.warm().hold()),
        })
    }

    /// The notice a task taken by a warm session starts its session with.
    pub(crate) fn warm_notice(agent: &str, handed: &Handed) -> EventKind {
        EventKind::Notice {
            message: format!(
                "agent `{agent}` was ready: its session was opened before the task, in a fresh sandbox"
            ),
            detail: serde_json::json!({
                "event": "agent.warm",
                "sessionId": handed.session.session_id(),
                "openedAt": handed.opened_at,
                "waitedMs": handed.waited.as_millis() as u64,
            }),
        }
    }

    /// Stops a warm session that was taken but could not be used, and removes its sandbox.
    pub(crate) async fn discard_handed(&self, handed: Handed) {
        self.discard(handed.session, &handed.boundary).await;
    }

    /// Stops up to `n` warm sessions, oldest first, and removes their sandboxes; returns how
    /// many were stopped.
    pub(crate) async fn evict_warm(&self, n: usize) -> usize {
        let taken: Vec<Ready> = {
            let mut s = self.warm().lock();
            let k = n.min(s.ready.len());
            s.ready.drain(..k).collect()
        };
        let count = taken.len();
        futures::future::join_all(taken.into_iter().map(|r| async move {
            tracing::info!(agent = %r.agent, session = r.session.session_id(), "stopping a warm agent session to make room");
            self.discard(r.session, &r.boundary).await;
        }))
        .await;
        count
    }

    /// At shutdown: opens nothing more and stops every warm session.
    pub(crate) async fn stop_warm(&self) {
        let taken: Vec<Ready> = {
            let mut s = self.warm().lock();
            s.closed = true;
            std::mem::take(&mut s.ready)
        };
        futures::future::join_all(
            taken
                .into_iter()
                .map(|r| async move { self.discard(r.session, &r.boundary).await }),
        )
        .await;
    }

    async fn discard(&self, session: Arc<dyn AgentSession>, boundary: &Boundary) {
        session.shutdown().await;
        drop(session);
        let paths = &self.config().paths;
        if let Err(e) =
            legate_workspace::remove_owned_dir(paths.home(), &paths.sandboxes(), &boundary.root)
        {
            tracing::warn!(dir = %boundary.root.display(), error = %e, "could not remove a warm session's sandbox; the next start removes it");
        }
        self.budget().freed();
        self.warm().changed.notify_one();
    }

    /// Starts the warmer: it keeps each agent's `warm` sessions ready while there is room.
    pub(crate) fn spawn_warmer(&self) {
        if self.config().warm.values().all(|n| *n == 0) {
            return;
        }
        let weak = self.downgrade();
        let mut shutdown = self.shutdown_signal();
        tokio::spawn(async move {
            loop {
                let Some(core) = weak.upgrade() else { return };
                if *shutdown.borrow() {
                    return;
                }
                core.top_up();
                // A wake-up sent meanwhile is kept as a permit (`notify_one`).
                let changed = core.warm().changed.clone();
                drop(core);
                tokio::select! {
                    _ = changed.notified() => {}
                    _ = tokio::time::sleep(TICK) => {}
                    _ = shutdown.changed() => return,
                }
            }
        });
    }

    /// Opens what is missing of each agent's warm sessions, within the caps; stops the dead.
    fn top_up(&self) {
        let dead: Vec<Ready> = {
            let mut s = self.warm().lock();
            let (alive, dead) = std::mem::take(&mut s.ready)
                .into_iter()
                .partition(|r| r.session.is_alive());
            s.ready = alive;
            dead
        };
        for r in dead {
            tracing::warn!(agent = %r.agent, "a warm agent session died before a task took it; replacing it");
            self.failed_to_warm(&r.agent);
            let core = self.clone();
            self.track(async move { core.discard(r.session, &r.boundary).await });
        }
        for (agent, want) in &self.config().warm {
            loop {
                let Some(room) = self.room_to_warm(agent, *want) else {
                    break;
                };
                let core = self.clone();
                let agent = agent.clone();
                self.track(async move { core.open_warm(agent, room).await });
            }
        }
    }

    /// Room for one more warm session of `agent` (counted as opening), or `None`.
    fn room_to_warm(&self, agent: &str, want: usize) -> Option<crate::core::budget::Reservation> {
        if self.warm().pressure.load(Ordering::SeqCst) > 0
            || self.warm().holds.load(Ordering::SeqCst) > 0
            || *self.shutdown_signal().borrow()
        {
            return None;
        }
        let (_, idle) = self.pool().counts();
        let mut s = self.warm().lock();
        let mine = s.ready.iter().filter(|r| r.agent == agent).count()
            + s.opening.get(agent).copied().unwrap_or(0);
        let all = s.ready.len() + s.opening.values().sum::<usize>();
        let waiting = s
            .backoff
            .get(agent)
            .is_some_and(|(_, next)| Instant::now() < *next);
        if s.closed || mine >= want || waiting || idle + all >= self.config().max_idle_sessions {
            return None;
        }
        let room = self
            .budget()
            .try_reserve(Need::for_task(true, false), false)
            .ok()?;
        *s.opening.entry(agent.to_string()).or_default() += 1;
        Some(room)
    }

    fn failed_to_warm(&self, agent: &str) {
        let mut s = self.warm().lock();
        let entry = s
            .backoff
            .entry(agent.to_string())
            .or_insert((0, Instant::now()));
        entry.0 = entry.0.saturating_add(1);
        let delay = FIRST_BACKOFF
            .saturating_mul(1u32 << entry.0.saturating_sub(1).min(6))
            .min(MAX_BACKOFF);
        entry.1 = Instant::now() + delay;
    }

    /// Opens one warm session of `agent` in a new sandbox; on success it is ready, on failure
    /// the agent waits before the next attempt. Never fails anything else.
    async fn open_warm(&self, agent: String, room: crate::core::budget::Reservation) {
        let outcome = self.try_open_warm(&agent).await;
        drop(room);
        let mut keep = None;
        {
            let mut s = self.warm().lock();
            if let Some(n) = s.opening.get_mut(&agent) {
                *n = n.saturating_sub(1);
            }
            match outcome {
                Ok(Some(ready)) if !s.closed => {
                    s.backoff.remove(&agent);
                    s.ready.push(ready);
                }
                Ok(Some(ready)) => keep = Some(ready),
                Ok(None) => {}
                Err(_) => {}
            }
        }
        if let Some(r) = keep {
            self.discard(r.session, &r.boundary).await;
        }
        self.budget().freed();
    }

    /// `Ok(None)` when the engine began shutting down meanwhile; an error is logged here and
    /// delays the agent's next attempt.
    async fn try_open_warm(&self, agent: &str) -> Result<Option<Ready>, ()> {
        let opened = self.open_warm_session(agent).await;
        match opened {
            Ok(ready) => Ok(ready),
            Err(e) => {
                self.failed_to_warm(agent);
                let e = crate::core::redaction::hide_error(e);
                tracing::warn!(agent, code = %e.code, error = %e.detail(), "could not open a warm agent session; trying again later");
                Err(())
            }
        }
    }

    async fn open_warm_session(&self, name: &str) -> legate_core::Result<Option<Ready>> {
        let agent = self.agents().spec(name)?.clone();
        let (backend, capabilities) = self.agents().backend(&agent)?;
        if !capabilities.local_process
            || capabilities.continuation != legate_backend::Continuation::LiveSession
            || agent.runtime.pod().is_some()
        {
            return Err(legate_core::Error::new(
                legate_core::ErrorCode::ConfigInvalid,
                format!("agent `{name}` keeps no live local session, so it cannot be warmed"),
            ));
        }
        let confinement = self.confinement(name)?;
        let paths = &self.config().paths;
        let mut boundary = legate_workspace::warm_sandbox(&paths.sandboxes(), self.runner_id())?;
        boundary.allow_execute = agent.allow_execute;
        let preset = preset_for(&agent, &capabilities);
        let opening = Opening {
            mode: TaskMode::default(),
            workspace: WorkspaceKind::Sandbox,
            role: RoleBase::Implementer.as_str().to_string(),
            tools: legate_supervisor::ToolControls::default(),
            mcp_servers: Vec::new(),
            task: None,
        };
        let request = self.request_for(&agent, boundary.clone(), preset, None, opening);
        let shape = Shape::of(&request, None, false, confinement.as_str());
        let (sink, mut stream) = EventSink::channel();
        let mut shutdown = self.shutdown_signal();
        let started = Instant::now();
        let opened = tokio::select! {
            r = backend.open(request, sink) => Some(r),
            // Dropping the opening kills the agent's process group.
            _ = shutdown.wait_for(|s| *s) => None,
        };
        let session = match opened {
            Some(Ok(s)) => s,
            other => {
                let paths = &self.config().paths;
                let _ = legate_workspace::remove_owned_dir(
                    paths.home(),
                    &paths.sandboxes(),
                    &boundary.root,
                );
                return match other {
                    Some(Err(e)) => Err(e),
                    _ => Ok(None),
                };
            }
        };
        let mut opening_events = Vec::new();
        while let Ok(e) = stream.try_recv() {
            if opening_events.len() < MAX_OPENING_EVENTS {
                opening_events.push(e);
            }
        }
        tracing::info!(
            agent = name,
            session = session.session_id(),
            took_ms = started.elapsed().as_millis() as u64,
            "a warm agent session is ready"
        );
        Ok(Some(Ready {
            agent: name.to_string(),
            shape,
            session,
            boundary,
            opening: opening_events,
            opened_at: Timestamp::now(),
            opened: Instant::now(),
        }))
    }
}

/// Removes the warm sandboxes of runners that are no longer alive (`own` is the caller's,
/// never touched) that no context took, after killing what those runners left running.
/// Returns how many sandboxes were removed. A sandbox a context records was handed to a task:
/// it is that context's now and stays.
pub(crate) fn sweep(store: &Store, paths: &Paths, own: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(paths.sandboxes()) else {
        return 0;
    };
    let run_dir = paths.run();
    let mut killed_for = std::collections::BTreeSet::new();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(runner) = name.to_str().and_then(legate_workspace::warm_runner) else {
            continue;
        };
        if runner == own || crate::core::runner::is_alive(&run_dir, runner) {
            continue;
        }
        if killed_for.insert(runner.to_string()) {
            let killed = crate::core::runner::kill_leftovers(runner);
            if killed > 0 {
                tracing::warn!(
                    runner,
                    processes = killed,
                    "killed warm agent processes left by a stopped Legate"
                );
            }
        }
        let path = entry.path();
        match store.sandbox_in_use(&path) {
            Ok(false) => {}
            Ok(true) => continue,
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "could not tell whether a warm sandbox was handed over; left");
                continue;
            }
        }
        match legate_workspace::remove_owned_dir(paths.home(), &paths.sandboxes(), &path) {
            Ok(true) => removed += 1,
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(dir = %path.display(), error = %e, "could not remove a stopped Legate's warm sandbox");
            }
        }
    }
    if removed > 0 {
        tracing::info!(
            sandboxes = removed,
            "removed warm sandboxes of stopped Legate processes"
        );
    }
    removed
}
