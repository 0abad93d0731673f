//! A selected test's one way out of its network namespace: Legate's egress proxy, served on
//! the listener the namespace handed back for as long as the command runs, each connection
//! decided by the gate the caller passed (the engine's, over `[network]`, rules only) and
//! kept as evidence of the run.
//!
//! This module owns serving and stopping the proxy around one command and collecting its
//! records; it never decides a connection (the gate does) and never outlives the command:
//! [`Serving::finish`] (or dropping it) stops the proxy, whose listener goes with it.

use legate_core::ConnectionEvent;
use legate_egress::{ConnectRequest, Decided, Gate};
use std::collections::HashMap;
use std::ffi::OsString;
use std::net::IpAddr;
#[cfg(test)]
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, mpsc};
use std::time::{Duration, Instant};

/// What a test whose selection grants the network needs to reach it through the proxy.
#[derive(Clone)]
pub struct TestEgress {
    /// Decides each connection and sees each record (the engine's gate over its `[network]`
    /// rules; an `ask` is refused there, a test having no supervisor to wait on).
    pub gate: Arc<dyn Gate>,
    /// The variables pointing the command at the proxy (`legate_egress::proxy_env` of the
    /// same rules); set only when the namespace holds a listener.
    pub env: Vec<(OsString, OsString)>,
}

impl std::fmt::Debug for TestEgress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestEgress")
            .field("gate", &self.gate)
            .field("env", &self.env.len())
            .finish()
    }
}

/// How long in-flight connections get to close and be recorded once the command ended.
const GRACE: Duration = Duration::from_secs(2);

/// How many connections a test's evidence keeps: the first ones, the rest only counted. A
/// command looping on refused `CONNECT`s makes thousands a second for up to its timeout,
/// and each kept record is held in Legate's memory, then stored in the test's evidence.
pub(crate) const KEPT: usize = 1_000;

/// A request decided and not yet recorded.
#[derive(Debug)]
struct Open {
    destination: String,
    method: String,
    decided: Decided,
}

#[derive(Debug, Default)]
struct Kept {
    open: HashMap<String, Open>,
    records: Vec<ConnectionEvent>,
    /// Records past [`KEPT`], counted and not kept.
    not_kept: u64,
}

impl Kept {
    /// Keeps `record` within [`KEPT`]; past it, counts it.
    fn keep(&mut self, record: ConnectionEvent) {
        if self.records.len() < KEPT {
            self.records.push(record);
        } else {
            self.not_kept += 1;
        }
    }
}

/// The caller's gate, keeping every record (and every request still open) as evidence.
#[derive(Debug)]
struct Recording {
    inner: Arc<dyn Gate>,
    kept: Mutex<Kept>,
}

impl Recording {
    fn kept(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait::async_trait]
impl Gate for Recording {
    async fn decide(&self, request: &ConnectRequest) -> Decided {
        let decided = self.inner.decide(request).await;
        self.kept().open.insert(
            request.id.clone(),
            Open {
                destination: request.destination.to_string(),
                method: request.method.as_str().to_string(),
                decided: decided.clone(),
            },
        );
        decided
    }

    fn names_exactly(&self, addr: IpAddr, port: u16) -> bool {
        self.inner.names_exactly(addr, port)
    }

    fn denies_address(&self, addr: IpAddr, port: u16) -> Option<String> {
        self.inner.denies_address(addr, port)
    }

    fn record(&self, record: ConnectionEvent) {
        {
            let mut kept = self.kept();
            kept.open.remove(&record.id);
            kept.keep(record.clone());
        }
        self.inner.record(record);
    }
}

/// The proxy serving one test's namespace; stopped by [`Serving::finish`] or when dropped.
#[derive(Debug)]
pub(crate) struct Serving {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    stopped: mpsc::Receiver<()>,
    recording: Arc<Recording>,
}

impl Serving {
    /// Takes the listener `handoff` carries (after the command was spawned) and serves the
    /// proxy on it with `gate`: on the current Tokio runtime when there is one (the engine
    /// runs tests in `spawn_blocking`), else on a runtime of its own, on a thread of its own.
    pub(crate) fn start(
        handoff: legate_confine::EgressHandoff,
        gate: Arc<dyn Gate>,
    ) -> std::io::Result<Self> {
        let listener = handoff.receive()?;
        let recording = Arc::new(Recording {
            inner: gate,
            kept: Mutex::new(Kept::default()),
        });
        let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (done, stopped) = mpsc::channel();
        let serve = {
            let gate = Arc::clone(&recording) as Arc<dyn Gate>;
            move |listener: tokio::net::TcpListener| async move {
                legate_egress::serve(
                    listener,
                    gate,
                    legate_egress::Limits::default(),
                    async move {
                        let _ = stop_rx.await;
                    },
                )
                .await;
                let _ = done.send(());
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let _entered = runtime.enter();
                let listener = tokio::net::TcpListener::from_std(listener)?;
                runtime.spawn(serve(listener));
            }
            Err(_) => {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                let listener = {
                    let _entered = runtime.enter();
                    tokio::net::TcpListener::from_std(listener)?
                };
                std::thread::Builder::new()
                    .name("legate-test-egress".into())
                    .spawn(move || runtime.block_on(serve(listener)))?;
            }
        }
        Ok(Self {
            stop: Some(stop),
            stopped,
            recording,
        })
    }

    /// Once the command ended: lets the connections still open close and be recorded (for
    /// at most a grace period), stops the proxy, waits for it to end (its listener closed),
    /// and returns the connections in the order recorded, the first [`KEPT`] of them, and
    /// how many more there were. A connection still open after the grace period is cut and
    /// listed with its decision and no byte counts, past the bound too.
    pub(crate) fn finish(mut self) -> (Vec<ConnectionEvent>, u64) {
        let until = Instant::now() + GRACE;
        while !self.recording.kept().open.is_empty() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if self.stopped.recv_timeout(GRACE).is_err() {
            tracing::warn!("the test's egress proxy did not stop in time");
        }
        let mut kept = self.recording.kept();
        let mut open: Vec<(String, Open)> = kept.open.drain().collect();
        open.sort_by(|a, b| a.0.cmp(&b.0));
        // Cut connections are kept past the bound (at most the proxy's 32 at once): the
        // tunnels held to the end are the evidence most worth keeping.
        for (id, o) in open {
            kept.records.push(ConnectionEvent {
                id,
                destination: o.destination,
                address: None,
                method: o.method,
                decision: o.decided.decision,
                decider: o.decided.decider,
                rule_id: o.decided.rule_id,
                reason: format!(
                    "{}; still open when the command ended, cut (bytes not counted)",
                    o.decided.reason
                ),
                sent: 0,
                received: 0,
                duration_ms: 0,
                credentials_injected: false,
            });
        }
        (std::mem::take(&mut kept.records), kept.not_kept)
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::{TestCommand, TestConfinement, run_test_in};
    use legate_confine::{Confinement, Requirement};
    use legate_core::{Decider, Decision};
    use legate_supervisor::network::NetworkRules;
    use std::io::{Read, Write};
    use std::net::TcpListener;

    /// A gate over `rules` that refuses what its rules do not allow (as the engine's).
    #[derive(Debug)]
    struct Rules(NetworkRules);

    #[async_trait::async_trait]
    impl Gate for Rules {
        async fn decide(&self, request: &ConnectRequest) -> Decided {
            let r = self.0.decide(&request.destination);
            Decided {
                decision: if r.decision == Decision::Allow {
                    Decision::Allow
                } else {
                    Decision::Deny
                },
                decider: Decider::Policy,
                rule_id: r.rule_id,
                reason: r.reason,
            }
        }
        fn names_exactly(&self, addr: IpAddr, port: u16) -> bool {
            self.0.names_exactly(addr, port)
        }
        fn record(&self, _: ConnectionEvent) {}
    }

    /// A loopback HTTP origin answering every request with `hello`; counts what it served.
    fn origin() -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let served = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = Arc::clone(&served);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut s) = stream else { continue };
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf);
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = s.write_all(
                    b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                );
            }
        });
        (port, served)
    }

    /// Fetches each URL with urllib as the environment says (HTTP_PROXY, NO_PROXY), then
    /// tries the namespace's proxy port by hand; prints one line each.
    const FETCH: &str = r#"
import sys, urllib.request, urllib.error
def fetch(opener, url):
    try:
        r = opener.open(url, timeout=10)
        print("OK", url, r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print("HTTP", url, e.code)
    except Exception as e:
        print("ERR", url, type(e).__name__)
for url in sys.argv[1:]:
    fetch(urllib.request.build_opener(), url)
fetch(urllib.request.build_opener(urllib.request.ProxyHandler({"http": "http://127.0.0.1:3128"})), sys.argv[1])
"#;

    fn run(network: bool, egress: Option<&TestEgress>, urls: &[String]) -> crate::TestRun {
        let copy = tempfile::tempdir().unwrap();
        let scratch = tempfile::tempdir().unwrap();
        let mut args = vec!["-c".to_string(), FETCH.to_string()];
        args.extend(urls.iter().cloned());
        let sandbox = TestConfinement {
            read: Vec::new(),
            write: Vec::new(),
            network,
            children: true,
            max_output_chars: 4000,
        };
        run_test_in(
            copy.path(),
            scratch.path(),
            &TestCommand {
                executable: "/usr/bin/python3".into(),
                args,
            },
            Duration::from_secs(60),
            4000,
            Requirement::BestEffort,
            &[],
            Some(&sandbox),
            egress,
        )
        .unwrap()
    }

    /// A command that asks for more connections than the evidence keeps: the first
    /// [`KEPT`] are kept in order, the rest counted.
    #[test]
    fn past_the_kept_connections_the_rest_are_counted() {
        let event = |n: usize| ConnectionEvent {
            id: format!("c{n}"),
            destination: "example.com:1".into(),
            address: None,
            method: "CONNECT".into(),
            decision: Decision::Deny,
            decider: Decider::Policy,
            rule_id: None,
            reason: "refused".into(),
            sent: 0,
            received: 0,
            duration_ms: 0,
            credentials_injected: false,
        };
        let mut kept = Kept::default();
        for n in 0..KEPT + 10 {
            kept.keep(event(n));
        }
        assert_eq!(kept.records.len(), KEPT);
        assert_eq!(kept.records[KEPT - 1].id, format!("c{}", KEPT - 1));
        assert_eq!(kept.not_kept, 10);
    }

    #[test]
    fn a_granted_network_goes_through_the_proxy_and_every_connection_is_evidence() {
        if !Confinement::probe_network_namespace() || !Path::new("/usr/bin/python3").exists() {
            eprintln!("skipped: no network namespaces here, or no python3");
            return;
        }
        let (port, served) = origin();
        let (other, other_served) = origin();
        let rules = NetworkRules::default().with_allow(
            format!("127.0.0.1:{port}").parse().unwrap(),
            "network.allow[0]",
        );
        let egress = TestEgress {
            env: legate_egress::proxy_env(&rules),
            gate: Arc::new(Rules(rules)),
        };
        let allowed = format!("http://127.0.0.1:{port}/ok");
        let refused = format!("http://127.0.0.1:{other}/no");
        let r = run(true, Some(&egress), &[allowed.clone(), refused.clone()]);
        eprintln!("{r:#?}");
        assert_eq!(r.network, "proxy");
        assert!(r.passed(), "{}", r.stderr);
        assert!(
            r.stdout.contains(&format!("OK {allowed} 200 hello")),
            "{}",
            r.stdout
        );
        assert!(
            r.stdout.contains(&format!("HTTP {refused} 403")),
            "{}",
            r.stdout
        );
        assert_eq!(other_served.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(r.connections.len(), 3, "{:#?}", r.connections);
        assert_eq!(r.connections_not_kept, 0);
        let to = |dest: &str| {
            r.connections
                .iter()
                .filter(|c| c.destination == dest)
                .collect::<Vec<_>>()
        };
        let ok = to(&format!("127.0.0.1:{port}"));
        assert_eq!(ok.len(), 2);
        for c in ok {
            assert_eq!(c.decision, Decision::Allow);
            assert_eq!(c.rule_id.as_deref(), Some("network.allow[0]"));
            assert_eq!(c.method, "GET");
            assert_eq!(
                c.address.as_deref(),
                Some(format!("127.0.0.1:{port}").as_str())
            );
            assert!(c.sent > 0 && c.received > 0, "{c:?}");
        }
        let no = to(&format!("127.0.0.1:{other}"));
        assert_eq!(no.len(), 1);
        assert_eq!(no[0].decision, Decision::Deny);
        assert_eq!(no[0].address, None);

        // Without the network granted: no listener, no proxy, nothing reached.
        let r = run(false, Some(&egress), std::slice::from_ref(&allowed));
        eprintln!("{r:#?}");
        assert_ne!(r.network, "proxy");
        assert!(r.connections.is_empty());
        assert!(r.stdout.contains(&format!("ERR {allowed}")), "{}", r.stdout);
        assert!(!r.stdout.contains("OK "), "{}", r.stdout);
        assert_eq!(served.load(std::sync::atomic::Ordering::SeqCst), 2);
    }
}
