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
//! kills what the dead runner's warm agents left running. The background opening is
//! `warmer`'s.
//!
//! This module never fails a task: an agent that cannot be warmed is logged and tried again
//! with a growing delay, and the task opens its own session as if no warm session existed.

mod sweep;
mod warmer;

pub(crate) use sweep::sweep;

use crate::agents::preset_for;
use crate::core::Core;
use legate_backend::{AgentSession, SessionRequest};
use legate_core::{AgentSpec, Boundary, EventKind, Task, Timestamp, WorkspaceKind};
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
    /// Sessions handed to tasks since the engine started, by agent.
    handed: BTreeMap<String, u64>,
    /// Warm sessions that failed to open or were found dead while ready since the engine
    /// started, by agent.
    failed: BTreeMap<String, u64>,
}

/// One agent's warm sessions as the metrics count them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Ready to be handed over now.
    pub(crate) ready: u64,
    /// Handed to tasks since the engine started.
    pub(crate) handed: u64,
    /// Failed to open, or found dead while ready, since the engine started.
    pub(crate) failed: u64,
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

    /// `agent`'s warm sessions: ready now (alive), handed over, and failed (to open, or
    /// found dead while ready) so far.
    pub(crate) fn tally(&self, agent: &str) -> Tally {
        let s = self.lock();
        Tally {
            // As a task would find them: a session that died is not ready.
            ready: s
                .ready
                .iter()
                .filter(|r| r.agent == agent && r.session.is_alive())
                .count() as u64,
            handed: s.handed.get(agent).copied().unwrap_or(0),
            failed: s.failed.get(agent).copied().unwrap_or(0),
        }
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
            let taken = at.map(|i| s.ready.remove(i));
            if taken.is_some() {
                let handed = s.handed.entry(agent.name.clone()).or_default();
                *handed = handed.saturating_add(1);
            }
            taken
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
}
