//! Live agent sessions, one per context, kept warm between turns and stopped when idle.
//!
//! A later task in the same context continues the same agent session. A session that has
//! been idle longer than the idle limit is shut down (its process group killed) unless a task
//! of its context is running or waiting for input.

use legate_backend::AgentSession;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Entry {
    agent: String,
    session: Arc<dyn AgentSession>,
    busy: bool,
    last_used: Instant,
}

/// The live sessions of this engine, by context id.
#[derive(Debug, Default, Clone)]
pub struct Pool {
    inner: Arc<Mutex<HashMap<String, Entry>>>,
}

impl Pool {
    /// Takes the live session of `context_id` for a turn, if it runs `agent` and is alive.
    /// A dead one is dropped from the pool.
    pub fn checkout(&self, context_id: &str, agent: &str) -> Option<Arc<dyn AgentSession>> {
        let mut map = self.lock();
        let usable = map
            .get(context_id)
            .is_some_and(|e| e.agent == agent && e.session.is_alive());
        if !usable {
            map.remove(context_id);
            return None;
        }
        let entry = map.get_mut(context_id)?;
        entry.busy = true;
        Some(entry.session.clone())
    }

    /// Records a freshly opened session as in use by `context_id`. Returns the session it
    /// replaced, which the caller must shut down.
    pub fn insert(
        &self,
        context_id: &str,
        agent: &str,
        session: Arc<dyn AgentSession>,
    ) -> Option<Arc<dyn AgentSession>> {
        self.lock()
            .insert(
                context_id.to_string(),
                Entry {
                    agent: agent.to_string(),
                    session,
                    busy: true,
                    last_used: Instant::now(),
                },
            )
            .map(|e| e.session)
    }

    /// Marks the context's session idle again (or waiting for input, which keeps it busy).
    pub fn release(&self, context_id: &str, keep_busy: bool) {
        if let Some(e) = self.lock().get_mut(context_id) {
            e.busy = keep_busy;
            e.last_used = Instant::now();
        }
    }

    /// Forgets the context's session (after it died or was killed).
    pub fn remove(&self, context_id: &str) -> Option<Arc<dyn AgentSession>> {
        self.lock().remove(context_id).map(|e| e.session)
    }

    /// Removes and returns the sessions idle for longer than `idle`.
    pub fn take_idle(&self, idle: Duration) -> Vec<Arc<dyn AgentSession>> {
        let mut map = self.lock();
        let now = Instant::now();
        let stale: Vec<String> = map
            .iter()
            .filter(|(_, e)| !e.busy && now.duration_since(e.last_used) >= idle)
            .map(|(k, _)| k.clone())
            .collect();
        stale
            .into_iter()
            .filter_map(|k| map.remove(&k).map(|e| e.session))
            .collect()
    }

    /// Removes and returns every session.
    pub fn drain(&self) -> Vec<Arc<dyn AgentSession>> {
        self.lock().drain().map(|(_, e)| e.session).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding this lock leaves only a map of handles behind; keep using it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}
