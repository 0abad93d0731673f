//! The warmer: the background task that keeps each agent's warm sessions ready, opening what
//! is missing while the idle cap and the budget have room (no task waiting for room), backing
//! off an agent that fails to warm, and stopping the dead.
//!
//! It never fails or delays a task: a task that finds no warm session opens its own.

use super::{FIRST_BACKOFF, MAX_BACKOFF, MAX_OPENING_EVENTS, Ready, Shape, TICK};
use crate::agents::preset_for;
use crate::core::Core;
use crate::core::budget::Need;
use crate::core::opening::Opening;
use legate_backend::EventSink;
use legate_core::{RoleBase, TaskMode, Timestamp, WorkspaceKind};
use std::sync::atomic::Ordering;
use std::time::Instant;

impl Core {
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
        let failed = s.failed.entry(agent.to_string()).or_default();
        *failed = failed.saturating_add(1);
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
