//! Live agent sessions, one per context, kept warm between turns and stopped when idle.
//!
//! A later task in the same context continues the same agent session. A session that has
//! been idle longer than the idle limit is shut down (its process group killed) unless a task
//! of its context is running or waiting for input. The number of idle sessions is capped
//! (`max_idle_sessions`): when one more would exceed it, the least recently used idle session
//! is handed back to be stopped. The engine also takes idle sessions back, least recently
//! used first, when the process runs short of file descriptors or processes (`budget`).
//!
//! This module only keeps handles; it never stops a session itself (the caller does, outside
//! the lock) and never evicts a busy one.

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

    /// Whether `context_id` has a live session of `agent` a turn could continue.
    pub fn has_usable(&self, context_id: &str, agent: &str) -> bool {
        self.lock()
            .get(context_id)
            .is_some_and(|e| e.agent == agent && e.session.is_alive())
    }

    /// Whether `context_id` has a session of any agent, alive or not, idle or busy.
    pub fn holds(&self, context_id: &str) -> bool {
        self.lock().contains_key(context_id)
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
    /// Returns the idle sessions beyond `max_idle`, least recently used first, removed from
    /// the pool: the caller must shut them down. The session just released is the most
    /// recently used, so it goes last (only when `max_idle` is 0).
    pub fn release(
        &self,
        context_id: &str,
        keep_busy: bool,
        max_idle: usize,
    ) -> Vec<Arc<dyn AgentSession>> {
        let mut map = self.lock();
        if let Some(e) = map.get_mut(context_id) {
            e.busy = keep_busy;
            e.last_used = Instant::now();
        }
        let idle = map.values().filter(|e| !e.busy).count();
        take_lru(&mut map, idle.saturating_sub(max_idle))
    }

    /// Removes and returns up to `n` idle sessions, least recently used first.
    pub fn evict_idle(&self, n: usize) -> Vec<Arc<dyn AgentSession>> {
        take_lru(&mut self.lock(), n)
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

    /// How many sessions the pool holds, and how many of them are idle.
    pub fn counts(&self) -> (usize, usize) {
        let map = self.lock();
        (map.len(), map.values().filter(|e| !e.busy).count())
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

/// Removes up to `n` idle entries of `map`, least recently used first.
fn take_lru(map: &mut HashMap<String, Entry>, n: usize) -> Vec<Arc<dyn AgentSession>> {
    if n == 0 {
        return Vec::new();
    }
    let mut idle: Vec<(Instant, String)> = map
        .iter()
        .filter(|(_, e)| !e.busy)
        .map(|(k, e)| (e.last_used, k.clone()))
        .collect();
    idle.sort();
    idle.into_iter()
        .take(n)
        .filter_map(|(_, k)| map.remove(&k).map(|e| e.session))
        .collect()
}
