//! The connections a front holds open, and who gets dropped when there are too many.
//!
//! A connection counts as *unauthenticated* until a request on it passed the front's checks
//! (the `Host`/`Origin` allowlist and, when the front has one, the bearer token): the front's
//! guard calls [`mark_authenticated`]. When the cap is reached, the unauthenticated connection
//! that was active least recently is closed to admit the new one, but never one younger than
//! [`GRACE`]: a client that holds the token gets that long to send its first request, however
//! fast a flood opens connections. When no connection may be closed (every one authenticated,
//! or too young), the new one is refused (the caller answers it 503). So a flood of idle or
//! token-less connections cannot close a token holder's connection, neither once its first
//! request passed nor during its first second; what a flood can still do is keep *new*
//! connections refused while it opens a cap's worth of them every second.
//!
//! This module only counts and picks; it never reads a socket and never sees a header value.

use axum::http::Extensions;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long a new connection is safe from eviction: the time a client has to send its first
/// request.
pub(crate) const GRACE: Duration = Duration::from_secs(1);

/// One open connection, shared by its serving task, its requests (as a [`Connection`]
/// extension) and the registry.
#[derive(Debug)]
pub(crate) struct Conn {
    id: u64,
    epoch: Instant,
    authenticated: AtomicBool,
    /// When it was accepted.
    born: Instant,
    /// Milliseconds since `epoch` of the last sign of life (accept, or a request's head).
    last_active: AtomicU64,
    /// Cancelled to close the connection at once (eviction).
    pub(crate) kill: CancellationToken,
    /// The request body being read and when it must be complete: `(generation, deadline)`.
    body: Mutex<Option<(u64, Instant)>>,
    /// Told whenever a body starts, so the serving task re-reads the deadline.
    pub(crate) body_changed: Notify,
    generation: AtomicU64,
}

impl Conn {
    fn new(id: u64, epoch: Instant) -> Self {
        let conn = Self {
            id,
            epoch,
            authenticated: AtomicBool::new(false),
            born: Instant::now(),
            last_active: AtomicU64::new(0),
            kill: CancellationToken::new(),
            body: Mutex::new(None),
            body_changed: Notify::new(),
            generation: AtomicU64::new(0),
        };
        conn.touch();
        conn
    }

    /// Records a sign of life now.
    pub(crate) fn touch(&self) {
        let ms = u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_active.store(ms, Ordering::Relaxed);
    }

    pub(crate) fn is_authenticated(&self) -> bool {
        self.authenticated.load(Ordering::Relaxed)
    }

    fn body_slot(&self) -> MutexGuard<'_, Option<(u64, Instant)>> {
        // A poisoned lock only means a panic elsewhere while holding it; the value (a plain
        // deadline) is still meaningful.
        self.body.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A request body started: it must be complete within `limit`. Returns its generation.
    pub(crate) fn body_started(&self, limit: Duration) -> u64 {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *self.body_slot() = Some((generation, Instant::now() + limit));
        self.body_changed.notify_one();
        generation
    }

    /// The body of `generation` ended (read to its end, failed, or dropped). The serving task
    /// is not woken: its timer, when it fires, finds no deadline (or a later one) and goes on.
    pub(crate) fn body_ended(&self, generation: u64) {
        let mut slot = self.body_slot();
        if slot.is_some_and(|(g, _)| g == generation) {
            *slot = None;
        }
    }

    /// When the body being read must be complete, if one is being read.
    pub(crate) fn body_deadline(&self) -> Option<Instant> {
        self.body_slot().map(|(_, d)| d)
    }
}

/// The connection a request arrived on, in the request's extensions.
#[derive(Debug, Clone)]
pub struct Connection(pub(crate) Arc<Conn>);

impl Connection {
    /// Whether a request on this connection already passed the front's checks.
    pub fn is_authenticated(&self) -> bool {
        self.0.is_authenticated()
    }
}

/// Marks the connection a request arrived on as authenticated: called by a front's guard once
/// the request passed its checks. Without a [`Connection`] (a router served some other way),
/// it does nothing.
pub fn mark_authenticated(extensions: &Extensions) {
    if let Some(c) = extensions.get::<Connection>() {
        c.0.authenticated.store(true, Ordering::Relaxed);
    }
}

/// What [`Registry::admit`] decided.
#[derive(Debug)]
pub(crate) enum Admission {
    /// Admitted; `evicted` is whether an unauthenticated connection was closed for it.
    Admitted { conn: Arc<Conn>, evicted: bool },
    /// The cap is reached and no connection may be closed (every one is authenticated, or
    /// younger than the grace).
    Full,
}

/// The open connections of one front.
#[derive(Debug)]
pub(crate) struct Registry {
    cap: usize,
    /// How long a new connection is spared when one must be closed for a newcomer.
    grace: Duration,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    /// Told whenever a connection leaves.
    pub(crate) released: Notify,
}

impl Registry {
    pub(crate) fn new(cap: usize, grace: Duration) -> Self {
        Self {
            cap: cap.max(1),
            grace,
            epoch: Instant::now(),
            next_id: AtomicU64::new(1),
            open: Mutex::new(HashMap::new()),
            released: Notify::new(),
        }
    }

    fn open(&self) -> MutexGuard<'_, HashMap<u64, Arc<Conn>>> {
        // See `Conn::body_slot`: the map stays consistent across a panic elsewhere.
        self.open.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// How many connections are open (evicted ones no longer count).
    pub(crate) fn len(&self) -> usize {
        self.open().len()
    }

    /// Closes the unauthenticated connection active least recently, if there is one (with
    /// `spare`, only among those older than that grace).
    fn evict_locked(open: &mut HashMap<u64, Arc<Conn>>, spare: Option<Duration>) -> bool {
        let victim = open
            .values()
            .filter(|c| !c.is_authenticated())
            .filter(|c| spare.is_none_or(|grace| c.born.elapsed() >= grace))
            .min_by_key(|c| (c.last_active.load(Ordering::Relaxed), c.id))
            .map(|c| c.id);
        match victim.and_then(|id| open.remove(&id)) {
            Some(c) => {
                c.kill.cancel();
                true
            }
            None => false,
        }
    }

    /// Closes the idlest unauthenticated connection (to free a descriptor when accepting
    /// fails for want of one). Returns whether there was one.
    pub(crate) fn evict_one(&self) -> bool {
        // Out of descriptors, any unauthenticated connection may go: the listener needs one.
        Self::evict_locked(&mut self.open(), None)
    }

    /// Admits a new connection, closing an unauthenticated one first when the cap is reached.
    pub(crate) fn admit(&self) -> Admission {
        let mut open = self.open();
        let mut evicted = false;
        if open.len() >= self.cap {
            if !Self::evict_locked(&mut open, Some(self.grace)) {
                return Admission::Full;
            }
            evicted = true;
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let conn = Arc::new(Conn::new(id, self.epoch));
        open.insert(id, conn.clone());
        Admission::Admitted { conn, evicted }
    }

    /// The connection `conn` closed.
    pub(crate) fn release(&self, conn: &Conn) {
        self.open().remove(&conn.id);
        self.released.notify_waiters();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn admitted(a: Admission) -> (Arc<Conn>, bool) {
        match a {
            Admission::Admitted { conn, evicted } => (conn, evicted),
            Admission::Full => panic!("refused"),
        }
    }

    #[test]
    fn the_unauthenticated_go_first_and_a_full_house_of_authenticated_refuses() {
        let r = Registry::new(3, Duration::ZERO);
        let (a, _) = admitted(r.admit());
        let (b, _) = admitted(r.admit());
        let (c, _) = admitted(r.admit());
        b.authenticated.store(true, Ordering::Relaxed);
        // Full: the oldest unauthenticated (a) makes room.
        let (d, evicted) = admitted(r.admit());
        assert!(evicted);
        assert!(a.kill.is_cancelled());
        assert!(!b.kill.is_cancelled() && !c.kill.is_cancelled());
        assert_eq!(r.len(), 3);
        c.authenticated.store(true, Ordering::Relaxed);
        d.authenticated.store(true, Ordering::Relaxed);
        assert!(matches!(r.admit(), Admission::Full));
        assert!(!r.evict_one());
        r.release(&b);
        let (_, evicted) = admitted(r.admit());
        assert!(!evicted);
    }

    #[test]
    fn a_body_deadline_is_cleared_only_by_its_own_generation() {
        let c = Conn::new(1, Instant::now());
        let first = c.body_started(Duration::from_secs(5));
        let second = c.body_started(Duration::from_secs(5));
        c.body_ended(first);
        assert!(c.body_deadline().is_some());
        c.body_ended(second);
        assert!(c.body_deadline().is_none());
    }

    #[test]
    fn marking_without_a_connection_does_nothing() {
        mark_authenticated(&Extensions::new());
        let r = Registry::new(1, Duration::ZERO);
        let (conn, _) = admitted(r.admit());
        let mut ext = Extensions::new();
        ext.insert(Connection(conn.clone()));
        mark_authenticated(&ext);
        assert!(conn.is_authenticated());
    }
}
