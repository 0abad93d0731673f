//! The proxy's name lookups: the system resolver, run on a blocking thread, at most
//! [`Limits::max_lookups`](crate::Limits::max_lookups) of one proxy's at once.
//!
//! A lookup the resolver never answers cannot be cancelled: its thread runs on after the
//! request's deadline, for as long as the resolver retries. Without a bound, an agent asking
//! for names whose server never answers would pile up threads until the runtime's blocking
//! pool, shared by every task, was full. Here a lookup's place is released when its thread
//! ends, not when its request gives up, so one agent holds at most its own places and a
//! request past them waits for one within its deadline. The threads of a proxy that
//! stopped run on too, so the process holds at most [`MAX_ALL_LOOKUPS`] of every proxy's
//! together (many short sessions add up otherwise).
//!
//! This module never screens or connects to an address ([`crate::dial`] does).

use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::Semaphore;

/// Name lookups of every proxy of this process at once.
pub(crate) const MAX_ALL_LOOKUPS: usize = 64;

/// The places every proxy of this process shares.
fn all_places() -> Arc<Semaphore> {
    static ALL: OnceLock<Arc<Semaphore>> = OnceLock::new();
    Arc::clone(ALL.get_or_init(|| Arc::new(Semaphore::new(MAX_ALL_LOOKUPS))))
}

/// The name lookups of one proxy.
#[derive(Debug, Clone)]
pub(crate) struct Lookups {
    places: Arc<Semaphore>,
    max: usize,
    /// The process's places, shared by every proxy.
    all: Arc<Semaphore>,
}

impl Lookups {
    /// At most `max` lookups at once (at least one).
    pub(crate) fn new(max: usize) -> Self {
        Self::sharing(max, all_places())
    }

    /// At most `max` lookups at once, and no more than `all` has places for.
    fn sharing(max: usize, all: Arc<Semaphore>) -> Self {
        let max = max.max(1);
        Self {
            places: Arc::new(Semaphore::new(max)),
            max,
            all,
        }
    }

    /// The addresses of `name` and `port` from the system resolver, or why not, within
    /// `timeout` (waiting for a place included).
    pub(crate) async fn resolve(
        &self,
        name: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<Vec<SocketAddr>, String> {
        self.resolve_with(name, port, timeout, |name, port| {
            (name.as_str(), port)
                .to_socket_addrs()
                .map(Iterator::collect)
        })
        .await
    }

    /// [`Lookups::resolve`] through `lookup` (the system resolver but in tests).
    async fn resolve_with<F>(
        &self,
        name: &str,
        port: u16,
        timeout: Duration,
        lookup: F,
    ) -> Result<Vec<SocketAddr>, String>
    where
        F: FnOnce(String, u16) -> io::Result<Vec<SocketAddr>> + Send + 'static,
    {
        let deadline = tokio::time::Instant::now() + timeout;
        let place =
            match tokio::time::timeout_at(deadline, Arc::clone(&self.places).acquire_owned()).await
            {
                Ok(Ok(place)) => place,
                // The semaphore is never closed; a closed one is reported all the same.
                Ok(Err(_)) => return Err("the proxy's name lookups are closed".into()),
                Err(_) => {
                    return Err(format!(
                        "{} earlier lookups of this agent's are still unanswered after {timeout:?}",
                        self.max
                    ));
                }
            };
        let shared = match tokio::time::timeout_at(deadline, Arc::clone(&self.all).acquire_owned())
            .await
        {
            Ok(Ok(shared)) => shared,
            Ok(Err(_)) => return Err("the proxy's name lookups are closed".into()),
            Err(_) => {
                return Err(format!(
                    "{MAX_ALL_LOOKUPS} lookups of all agents' are still unanswered after {timeout:?}"
                ));
            }
        };
        let name = name.to_owned();
        let thread = tokio::task::spawn_blocking(move || {
            let found = lookup(name, port);
            drop((place, shared));
            found
        });
        match tokio::time::timeout_at(deadline, thread).await {
            Err(_) => Err(format!("no answer within {timeout:?}")),
            Ok(Err(joined)) => Err(format!("the lookup stopped: {joined}")),
            Ok(Ok(Err(error))) => Err(error.to_string()),
            Ok(Ok(Ok(addrs))) => Ok(addrs),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::mpsc;

    #[tokio::test]
    async fn an_unanswered_lookup_keeps_its_place_past_its_deadline() {
        let lookups = Lookups::new(2);
        let started = Arc::new(AtomicUsize::new(0));
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        let hanging = |started: Arc<AtomicUsize>,
                       held: Arc<std::sync::Mutex<mpsc::Receiver<()>>>| {
            move |_: String, _: u16| {
                started.fetch_add(1, Ordering::SeqCst);
                let _ = held.lock().unwrap().recv();
                Err(io::Error::other("released"))
            }
        };
        let short = Duration::from_millis(50);
        // Two lookups the resolver never answers: each gives up at its deadline…
        for _ in 0..2 {
            let why = lookups
                .resolve_with(
                    "a.example",
                    443,
                    short,
                    hanging(started.clone(), held.clone()),
                )
                .await
                .unwrap_err();
            assert!(why.starts_with("no answer within"), "{why}");
        }
        // …but their threads still run, so a third starts no thread and says why.
        let why = lookups
            .resolve_with(
                "b.example",
                443,
                short,
                hanging(started.clone(), held.clone()),
            )
            .await
            .unwrap_err();
        assert!(why.contains("2 earlier lookups"), "{why}");
        assert!(started.load(Ordering::SeqCst) <= 2);
        // Once the resolver answers the first two, a lookup runs again.
        release.send(()).unwrap();
        release.send(()).unwrap();
        let found = lookups
            .resolve_with("c.example", 443, Duration::from_secs(5), |_, port| {
                Ok(vec![SocketAddr::from(([192, 0, 2, 1], port))])
            })
            .await
            .unwrap();
        assert_eq!(found, vec![SocketAddr::from(([192, 0, 2, 1], 443))]);
    }

    #[tokio::test]
    async fn every_proxy_of_the_process_shares_a_bound() {
        let all = Arc::new(Semaphore::new(3));
        let (first, second) = (
            Lookups::sharing(2, Arc::clone(&all)),
            Lookups::sharing(2, Arc::clone(&all)),
        );
        let (release, held) = mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        let hang = |held: Arc<std::sync::Mutex<mpsc::Receiver<()>>>| {
            move |_: String, _: u16| {
                let _ = held.lock().unwrap().recv();
                Err(io::Error::other("released"))
            }
        };
        let short = Duration::from_millis(50);
        for l in [&first, &first, &second] {
            let why = l
                .resolve_with("a.example", 443, short, hang(held.clone()))
                .await
                .unwrap_err();
            assert!(why.starts_with("no answer within"), "{why}");
        }
        // The second proxy has a place of its own left, but the process has none.
        let why = second
            .resolve_with("b.example", 443, short, hang(held.clone()))
            .await
            .unwrap_err();
        assert!(why.contains("lookups of all agents'"), "{why}");
        for _ in 0..3 {
            release.send(()).unwrap();
        }
        let found = second
            .resolve_with("c.example", 80, Duration::from_secs(5), |_, port| {
                Ok(vec![SocketAddr::from(([192, 0, 2, 1], port))])
            })
            .await
            .unwrap();
        assert_eq!(found.len(), 1);
    }
}
