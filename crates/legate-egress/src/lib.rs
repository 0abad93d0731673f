//! Legate's HTTP egress proxy: the one way out of a confined agent's network namespace.
//!
//! Each agent runs in a network namespace with only loopback. Legate holds a listening socket
//! inside it (`127.0.0.1:`[`PROXY_PORT`] there; the agent's `HTTPS_PROXY`, `HTTP_PROXY` and
//! `ALL_PROXY` point at it) and [`serve`]s it from its own process, on the host network. Each
//! accepted connection carries one request: `CONNECT host:port` (for TLS) or an absolute-form
//! `http://` request. The [`Gate`] decides it (the network policy, and the approval queue for
//! an `ask`) and records it: destination, decision, who decided, bytes each way, duration.
//!
//! What the proxy guarantees whatever the gate says:
//! * a special address (loopback, private, link-local and cloud metadata, …; see
//!   [`legate_supervisor::network::special`]) is never connected to unless an allow rule names
//!   that exact address ([`Gate::names_exactly`]), whether the agent wrote it or a name
//!   resolved to it;
//! * a name is resolved once, here, and the address checked is the address connected to
//!   (no DNS rebinding between the check and the connection);
//! * a refusal is recorded before the agent is told of it;
//! * header values and bodies are never logged above debug level.
//!
//! This crate never decides a policy itself, never listens anywhere it was not handed a
//! listener, and never reads or writes a file.
//!
//! ```no_run
//! use legate_egress::{ConnectRequest, ConnectionEvent, Decided, Gate, Limits};
//! use legate_core::{Decider, Decision};
//! use legate_supervisor::network::NetworkRules;
//! use std::sync::Arc;
//!
//! #[derive(Debug)]
//! struct RulesGate(NetworkRules);
//!
//! #[async_trait::async_trait]
//! impl Gate for RulesGate {
//!     async fn decide(&self, request: &ConnectRequest) -> Decided {
//!         let ruling = self.0.decide(&request.destination);
//!         let decision = match ruling.decision {
//!             Decision::Allow => Decision::Allow,
//!             _ => Decision::Deny, // no approval queue here: an ask is refused
//!         };
//!         Decided { decision, decider: Decider::Policy, rule_id: ruling.rule_id, reason: ruling.reason }
//!     }
//!     fn names_exactly(&self, addr: std::net::IpAddr, port: u16) -> bool {
//!         self.0.names_exactly(addr, port)
//!     }
//!     fn record(&self, record: ConnectionEvent) {
//!         println!("{record:?}");
//!     }
//! }
//!
//! # async fn run() -> std::io::Result<()> {
//! let policy = NetworkRules::default().with_preset("claude");
//! let listener = tokio::net::TcpListener::bind(("127.0.0.1", legate_egress::PROXY_PORT)).await?;
//! let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
//! let server = tokio::spawn(legate_egress::serve(
//!     listener,
//!     Arc::new(RulesGate(policy)),
//!     Limits::default(),
//!     async move { let _ = stopped.await; },
//! ));
//! // … the agent runs …
//! let _ = stop.send(());
//! let _ = server.await;
//! # Ok(())
//! # }
//! ```

mod conn;
mod credentials;
#[cfg(test)]
mod credentials_tests;
mod dial;
mod env;
mod head;
mod intercept;
mod lookups;
mod respond;
mod serve;
#[cfg(target_os = "linux")]
mod splice;

pub use credentials::{Credentials, PLACEHOLDER_PREFIX};
pub use env::{env_value, point_at_proxy, proxy_env, proxy_url};
pub use intercept::{Authority, InterceptError, Interception};
pub use serve::serve;

use legate_core::{Decider, Decision};
use legate_supervisor::network::Destination;
use serde::{Deserialize, Serialize};
use std::net::IpAddr;
use std::time::Duration;

/// One connection's record, as a task's `connection` event and a test's evidence carry it.
pub use legate_core::ConnectionEvent;

/// The port the proxy listens on inside each namespace.
pub const PROXY_PORT: u16 = 3128;

/// Decides and records one agent's connections (implemented by the backend over the
/// supervisor and the approval queue).
#[async_trait::async_trait]
pub trait Gate: Send + Sync + std::fmt::Debug + 'static {
    /// The policy's ruling for `request`, after any `ask` was answered (a person, the
    /// supervising agent, or the deadline). Never returns `Ask` (the proxy refuses one).
    async fn decide(&self, request: &ConnectRequest) -> Decided;

    /// Whether an allow rule names exactly this address and port (special addresses need
    /// one).
    fn names_exactly(&self, addr: IpAddr, port: u16) -> bool;

    /// The deny rule (its id) that names exactly this address and port, if one does: a name
    /// that resolves only to denied addresses is refused like them. None by default.
    fn denies_address(&self, addr: IpAddr, port: u16) -> Option<String> {
        let _ = (addr, port);
        None
    }

    /// One connection's record, durable before the agent is told of a refusal; called once
    /// per request, at refusal or when an allowed connection closes.
    fn record(&self, connection: ConnectionEvent);

    /// The credentials the proxy sets itself on connections one rule allows (the agent holds
    /// placeholders): see [`Credentials`]. `None` (the default): every request goes as the
    /// agent wrote it.
    fn credentials(&self) -> Option<&Credentials> {
        None
    }
}

/// One request to connect, as the gate sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectRequest {
    /// Where the agent asked to go.
    pub destination: Destination,
    /// How it asked.
    pub method: Method,
    /// A fresh id (`net-<uuid v4>`), the record's too.
    pub id: String,
}

/// How a connection was asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Method {
    /// `CONNECT host:port`: a tunnel (TLS, usually).
    Connect,
    /// An absolute-form plain HTTP request (`GET http://host/path`).
    Http {
        /// The request's method (`GET`, `POST`, …).
        method: String,
    },
}

impl Method {
    /// Its name in a record: `CONNECT`, or the HTTP method.
    pub fn as_str(&self) -> &str {
        match self {
            Method::Connect => "CONNECT",
            Method::Http { method } => method,
        }
    }
}

/// The gate's answer for one request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decided {
    /// Allow or deny (an `Ask` is refused).
    pub decision: Decision,
    /// Who decided.
    pub decider: Decider,
    /// The rule that decided, when one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule_id: Option<String>,
    /// One sentence saying why.
    pub reason: String,
}

/// Bounds on one [`serve`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Connections served at once; beyond that, `503`. Each open one holds six of Legate's
    /// descriptors (two sockets, a pipe each way), so this bounds what one agent can take
    /// from every other task.
    pub max_connections: usize,
    /// Longest request head, in bytes; beyond that, `431`.
    pub head_bytes: usize,
    /// How long a request head may take to arrive; beyond that, `408`.
    pub head_timeout: Duration,
    /// How long each attempt to connect to an address may take.
    pub connect_timeout: Duration,
    /// How long resolving a name may take.
    pub resolve_timeout: Duration,
    /// Name lookups of this proxy's at once. A lookup the resolver never answers holds a
    /// blocking thread past `resolve_timeout`, for as long as the resolver retries; beyond
    /// this many, a request waits for one to end (within its `resolve_timeout`).
    pub max_lookups: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Self {
            max_connections: 32,
            head_bytes: 16 * 1024,
            head_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            resolve_timeout: Duration::from_secs(10),
            max_lookups: 8,
        }
    }
}
