//! Admission against the process's budget: a task that would start an agent waits, still
//! `submitted`, until the process has the file descriptors and processes for it, and a start
//! that fails for want of them waits and tries again (a bounded number of times) instead of
//! failing the task.
//!
//! This module owns the waiting, the stopping of idle sessions to make room (least recently
//! used first), the event that says why a task waits, and the idle-session cap applied when
//! a turn gives its session back. It never fails a task for the budget and never stops a
//! session that a turn is using or that waits for input; the arithmetic is `budget`'s.

use crate::core::Core;
use crate::core::Stop;
use crate::core::budget::{self, Need, Reservation, Shortage};
use legate_backend::{AgentSession, Backend, EventSink, SessionRequest};
use legate_core::{AgentSpec, EventKind, Result, Task, TaskState, WorkspaceKind};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// After stopping idle sessions, how long before more are stopped for the same shortage:
/// their descriptors close a moment after their processes die, and counting too early would
/// stop sessions for nothing.
const EVICTION_SETTLE: Duration = Duration::from_secs(1);

impl Core {
    /// What `task`'s start needs: a new session's worth unless its context's session goes on
    /// or a warm session fits it (a copy task always starts a new one, and makes its copy).
    pub(crate) fn start_need(&self, task: &Task, agent: &AgentSpec) -> Need {
        let copy = task.workspace == WorkspaceKind::Copy;
        let new_session = copy
            || !(self.pool().has_usable(&task.context_id, &agent.name)
                || self.warm_fits(task, agent));
        Need::for_task(new_session, copy)
    }

    /// Waits until the process has room for `task`'s start and promises it. The first time it
    /// must wait, the task's status message and a `submitted` status event say why. `None`
    /// when the task was canceled (or the engine stops) meanwhile.
    pub(crate) async fn admit(
        &self,
        task: &Task,
        agent: &AgentSpec,
        stop: &mut watch::Receiver<Stop>,
    ) -> Option<Reservation> {
        let need = self.start_need(task, agent);
        self.wait_for_room(need, stop, false, |short| self.tell_waiting(task, short))
            .await
    }

    /// Waits for room for `need`: stops idle sessions when short, then waits for something to
    /// be freed. `evict_first` stops one idle session before measuring (a start just failed
    /// for want of room the measure did not see). `on_wait` is told of the first shortage.
    pub(crate) async fn wait_for_room(
        &self,
        need: Need,
        stop: &mut watch::Receiver<Stop>,
        evict_first: bool,
        on_wait: impl FnOnce(&Shortage),
    ) -> Option<Reservation> {
        let mut on_wait = Some(on_wait);
        let mut evicted_at: Option<Instant> = None;
        // Once short, the warmer opens nothing until this task has its room.
        let mut _pressure = None;
        if evict_first && self.evict(1).await > 0 {
            evicted_at = Some(Instant::now());
        }
        loop {
            if *stop.borrow() != Stop::None {
                return None;
            }
            let alone = self.pool().counts().0 == 0 && self.warm().count() == 0;
            let short = match self.budget().try_reserve(need, alone) {
                Ok(room) => return Some(room),
                Err(short) => short,
            };
            if _pressure.is_none() {
                _pressure = Some(self.warm().press());
            }
            let settled = evicted_at.is_none_or(|t| t.elapsed() >= EVICTION_SETTLE);
            if settled {
                let over = (short.used + short.needed + short.reserve).saturating_sub(short.limit);
                let per = if short.what == "processes" {
                    budget::PROCS_PER_SESSION
                } else {
                    budget::FDS_PER_SESSION
                };
                if self.evict(over.div_ceil(per).max(1) as usize).await > 0 {
                    evicted_at = Some(Instant::now());
                    continue;
                }
            }
            if let Some(tell) = on_wait.take() {
                tracing::info!(
                    need_fds = need.fds,
                    need_procs = need.procs,
                    used = short.used,
                    limit = short.limit,
                    what = short.what,
                    "a task waits for room to start its agent"
                );
                tell(&short);
            }
            tokio::select! {
                biased;
                _ = stop.wait_for(|s| *s != Stop::None) => return None,
                _ = self.budget().changed() => {}
            }
        }
    }

    /// Stops up to `n` idle sessions, warm sessions first (they hold no conversation), then
    /// contexts' least recently used first; returns how many.
    async fn evict(&self, n: usize) -> usize {
        let warm = self.evict_warm(n).await;
        let sessions = self.pool().evict_idle(n - warm);
        let count = sessions.len() + warm;
        // All at once: each may wait (boundedly) for its agent to answer `session/close`.
        futures::future::join_all(sessions.into_iter().map(|session| async move {
            tracing::info!(
                session = session.session_id(),
                "stopping an idle agent session to make room"
            );
            session.shutdown().await;
        }))
        .await;
        if count > 0 {
            self.budget().freed();
        }
        count
    }

    /// Says on the task why it waits: its status message and a `submitted` status event.
    fn tell_waiting(&self, task: &Task, short: &Shortage) {
        let message = short.to_string();
        let stored = self.store().task(&task.id).and_then(|t| {
            let Some(mut t) = t.filter(|t| t.state == TaskState::Submitted) else {
                return Ok(Vec::new());
            };
            t.status_message = Some(message.clone());
            self.store().update_task(
                &t,
                &[EventKind::Status {
                    state: TaskState::Submitted,
                    message: Some(message.clone()),
                    error: None,
                }],
            )
        });
        match stored {
            Ok(events) => self.publish(&events),
            Err(e) => {
                tracing::warn!(task = %task.id, error = %e, "could not store why a task waits")
            }
        }
    }

    /// Opens a session on `backend`; a start that fails for want of descriptors or processes
    /// waits for room (stopping idle sessions) and is tried again, [`budget::START_RETRIES`]
    /// times at most, each retry announced on `sink`. `room` is the promise made at admission,
    /// given back once the session is open. `Ok(None)` when the task was canceled meanwhile.
    pub(crate) async fn open_with_retries(
        &self,
        backend: &Arc<dyn Backend>,
        request: SessionRequest,
        sink: &EventSink,
        stop: &mut watch::Receiver<Stop>,
        room: Reservation,
    ) -> Result<Option<Arc<dyn AgentSession>>> {
        let mut room = Some(room);
        let mut attempt = 0;
        loop {
            let opened = tokio::select! {
                r = backend.open(request.clone(), sink.clone()) => r,
                _ = stop.wait_for(|s| *s == Stop::Cancel) => return Ok(None),
            };
            match opened {
                Err(e) if budget::is_exhaustion(&e) && attempt < budget::START_RETRIES => {
                    attempt += 1;
                    drop(room.take());
                    tracing::warn!(attempt, error = %e, "the agent could not start for want of descriptors or processes; waiting to try again");
                    sink.send(EventKind::Notice {
                        message: format!(
                            "the agent could not start ({}); waiting for room to try again ({attempt} of {})",
                            e.message,
                            budget::START_RETRIES
                        ),
                        detail: serde_json::json!({
                            "event": "agent.start-retry",
                            "attempt": attempt,
                            "retries": budget::START_RETRIES,
                            "error": e,
                        }),
                    });
                    let need = Need::for_task(true, false);
                    match self.wait_for_room(need, stop, true, |_| {}).await {
                        Some(r) => room = Some(r),
                        None => return Ok(None),
                    }
                }
                other => return other.map(Some),
            }
        }
    }

    /// Takes the context's turn (`context_lock::claim`); when its lock file cannot be opened for want
    /// of descriptors, stops an idle session, waits for something to be freed and tries again,
    /// [`budget::START_RETRIES`] times at most.
    pub(crate) async fn claim_turn(
        &self,
        context_id: &str,
    ) -> Result<crate::core::context_lock::ContextTurn> {
        let run_dir = self.config().paths.run();
        let mut attempt = 0;
        loop {
            match crate::core::context_lock::claim(&run_dir, context_id).await {
                Err(e) if budget::is_exhaustion(&e) && attempt < budget::START_RETRIES => {
                    attempt += 1;
                    tracing::warn!(attempt, error = %e, "the context's turn lock could not be opened for want of descriptors; waiting to try again");
                    self.evict(1).await;
                    self.budget().changed().await;
                }
                other => return other,
            }
        }
    }

    /// Gives the context's session back after a turn (`keep_busy` while its task waits for
    /// input) and stops the idle sessions beyond `max_idle_sessions` (warm sessions count, and
    /// go first), least recently used first, in the background.
    pub(crate) fn release_session(&self, context_id: &str, keep_busy: bool) {
        let cap = self.config().max_idle_sessions;
        let _ = self.pool().release(context_id, keep_busy, usize::MAX);
        let (_, idle) = self.pool().counts();
        let excess = (idle + self.warm().count()).saturating_sub(cap);
        let warm_over = excess.min(self.warm().ready_total());
        let over = self.pool().evict_idle(excess - warm_over);
        if over.is_empty() && warm_over == 0 {
            return;
        }
        if tokio::runtime::Handle::try_current().is_err() {
            // Outside a runtime (never in practice): dropping the last handle kills the
            // agent's process (`kill_on_drop`).
            tracing::warn!(
                sessions = over.len(),
                "idle sessions over the cap dropped outside a runtime"
            );
            return;
        }
        let engine = self.clone();
        self.track(async move {
            engine.evict_warm(warm_over).await;
            futures::future::join_all(over.into_iter().map(|session| async move {
                tracing::info!(
                    session = session.session_id(),
                    max_idle_sessions = cap,
                    "stopping the least recently used idle agent session"
                );
                session.shutdown().await;
            }))
            .await;
            engine.budget().freed();
        });
    }
}
