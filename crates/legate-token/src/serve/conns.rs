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
//! **Room for the supervisor.** An authenticated connection is a *caller's* or a
//! *supervisor's* (a supervisor-token request, a dashboard supervisor session:
//! [`mark_supervisor`]). Callers may hold at most the cap; `reserve` more connections are
//! admitted beyond it, and a caller's request on one of them is refused
//! ([`mark_authenticated`] answers `false`: the front answers 503 and closes it), so a caller
//! holding the cap's worth of event streams leaves room for the supervisor to answer.
//!
//! This module only counts and picks; it never reads a socket and never sees a header value.

use axum::http::Extensions;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// How long a new connection is safe from eviction: the time a client has to send its first
/// request.
pub(crate) const GRACE: Duration = Duration::from_secs(1);

/// No request on the connection passed the front's checks yet.
const UNAUTHENTICATED: u8 = 0;
/// A caller's request passed on it.
const CALLER: u8 = 1;
/// A supervisor's request passed on it.
const SUPERVISOR: u8 = 2;

/// How many connections callers may hold, and how many they hold.
#[derive(Debug)]
struct CallerQuota {
    cap: usize,
    held: AtomicUsize,
}

/// One open connection, shared by its serving task, its requests (as a [`Connection`]
/// extension) and the registry.
#[derive(Debug)]
pub(crate) struct Conn {
    id: u64,
    epoch: Instant,
    /// [`UNAUTHENTICATED`], [`CALLER`] or [`SUPERVISOR`].
    class: AtomicU8,
    quota: Arc<CallerQuota>,
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
    fn new(id: u64, epoch: Instant, quota: Arc<CallerQuota>) -> Self {
        let conn = Self {
            id,
            epoch,
            class: AtomicU8::new(UNAUTHENTICATED),
            quota,
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
        self.class.load(Ordering::Acquire) != UNAUTHENTICATED
    }

    /// Marks it a caller's, if callers hold fewer connections than their cap (or it already
    /// is authenticated); `false` when there is no room for another caller's connection.
    fn mark_caller(&self) -> bool {
        if self.is_authenticated() {
            return true;
        }
        let quota = &self.quota;
        let took = quota
            .held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < quota.cap).then_some(n + 1)
            })
            .is_ok();
        if took
            && self
                .class
                .compare_exchange(UNAUTHENTICATED, CALLER, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
        {
            // Marked meanwhile by another request: give the slot back.
            quota.held.fetch_sub(1, Ordering::AcqRel);
        }
        took
    }

    /// Marks it a supervisor's (a caller's connection stays a caller's).
    fn mark_supervisor(&self) {
        let _ = self.class.compare_exchange(
            UNAUTHENTICATED,
            SUPERVISOR,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    /// It closed: a caller's gives its slot back, once.
    fn closed(&self) {
        if self.class.swap(UNAUTHENTICATED, Ordering::AcqRel) == CALLER {
            self.quota.held.fetch_sub(1, Ordering::AcqRel);
        }
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

/// Marks the connection a request arrived on as a caller's: called by a front's guard once
/// the request passed its checks. `false` when callers already hold the cap's worth of
/// connections and this one is in the room kept for the supervisor: the front answers
/// [`no_room`](super::no_room) instead of serving it. Without a [`Connection`] (a router
/// served some other way), it does nothing and answers `true`.
pub fn mark_authenticated(extensions: &Extensions) -> bool {
    extensions
        .get::<Connection>()
        .is_none_or(|c| c.0.mark_caller())
}

/// Marks the connection a request arrived on as the supervisor's (a request with the
/// supervisor's token, a dashboard supervisor session): it may use the room kept beyond the
/// callers' cap, and like any authenticated connection it is never closed for a newcomer.
pub fn mark_supervisor(extensions: &Extensions) {
    if let Some(c) = extensions.get::<Connection>() {
        c.0.mark_supervisor();
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
    /// How many may be open at once: the callers' cap plus the supervisor's reserve.
    cap: usize,
    quota: Arc<CallerQuota>,
    /// How long a new connection is spared when one must be closed for a newcomer.
    grace: Duration,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<HashMap<u64, Arc<Conn>>>,
    /// Told whenever a connection leaves.
    pub(crate) released: Notify,
}

impl Registry {
    /// Callers may hold `cap` connections; `reserve` more are admitted for the supervisor.
    pub(crate) fn new(cap: usize, reserve: usize, grace: Duration) -> Self {
        Self {
            cap: cap.max(1) + reserve,
            quota: Arc::new(CallerQuota {
                cap: cap.max(1),
                held: AtomicUsize::new(0),
            }),
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
        let conn = Arc::new(Conn::new(id, self.epoch, self.quota.clone()));
        open.insert(id, conn.clone());
        Admission::Admitted { conn, evicted }
    }

    /// The connection `conn` closed.
    pub(crate) fn release(&self, conn: &Conn) {
        conn.closed();
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
        let r = Registry::new(3, 0, Duration::ZERO);
        let (a, _) = admitted(r.admit());
        let (b, _) = admitted(r.admit());
        let (c, _) = admitted(r.admit());
        assert!(b.mark_caller());
        // Full: the oldest unauthenticated (a) makes room.
        let (d, evicted) = admitted(r.admit());
        assert!(evicted);
        assert!(a.kill.is_cancelled());
        assert!(!b.kill.is_cancelled() && !c.kill.is_cancelled());
        assert_eq!(r.len(), 3);
        assert!(c.mark_caller());
        assert!(d.mark_caller());
        assert!(matches!(r.admit(), Admission::Full));
        assert!(!r.evict_one());
        r.release(&b);
        let (_, evicted) = admitted(r.admit());
        assert!(!evicted);
    }

    #[test]
    fn a_body_deadline_is_cleared_only_by_its_own_generation() {
        let quota = Arc::new(CallerQuota {
            cap: 1,
            held: AtomicUsize::new(0),
        });
        let c = Conn::new(1, Instant::now(), quota);
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
        let r = Registry::new(1, 0, Duration::ZERO);
        let (conn, _) = admitted(r.admit());
        let mut ext = Extensions::new();
        ext.insert(Connection(conn.clone()));
        assert!(mark_authenticated(&ext));
        assert!(conn.is_authenticated());
    }

    /// Callers hold at most the cap; the reserve beyond it admits connections, on which a
    /// caller is refused and the supervisor served. A caller's slot comes back when its
    /// connection closes, once (issue 29, finding 8).
    #[test]
    fn callers_at_their_cap_leave_the_reserve_to_the_supervisor() {
        let r = Registry::new(2, 1, Duration::from_secs(60));
        let callers: Vec<Arc<Conn>> = (0..2).map(|_| admitted(r.admit()).0).collect();
        assert!(callers.iter().all(|c| c.mark_caller()));
        let (spare, evicted) = admitted(r.admit());
        assert!(!evicted);
        assert!(
            !spare.mark_caller(),
            "a third caller's connection took the reserve"
        );
        spare.mark_supervisor();
        assert!(spare.is_authenticated());
        assert!(matches!(r.admit(), Admission::Full));
        r.release(&callers[0]);
        r.release(&callers[0]);
        let (next, _) = admitted(r.admit());
        assert!(next.mark_caller());
        assert!(matches!(r.admit(), Admission::Full));
    }
}
