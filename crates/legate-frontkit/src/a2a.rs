//! The A2A front served for a test: [`A2aFront`] boots `legate_a2a` over an engine from the
//! harness and serves it on 127.0.0.1 with the test token ([`TOKEN`]).
//!
//! Owns the setup every A2A suite shares; it never checks what boot served (a test asserts
//! on [`A2aFront::report`] itself).

use legate_a2a::{A2aOptions, BootReport, ServeOptions, Token};
use legate_engine::Engine;
use legate_testkit::EngineHarness;
use legate_testkit::raw_http::TOKEN;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How the front is served: which agents, how large a body, behind the `Host`/`Origin`
/// allowlist or not, and with which connection limits.
#[derive(Debug, Clone)]
pub struct A2aServe {
    /// The agents served; `None` serves every configured agent.
    pub agents: Option<Vec<String>>,
    /// Larger bodies are refused.
    pub max_body_bytes: usize,
    /// Behind the loopback `Host`/`Origin` allowlist, as `legate serve` builds it.
    pub allowlisted: bool,
    /// The server's limits; `None` serves with `legate_a2a::serve` (the defaults) and
    /// [`A2aFront::stop`] waits for the server to end.
    pub limits: Option<ServeOptions>,
}

impl Default for A2aServe {
    fn default() -> Self {
        Self {
            agents: None,
            max_body_bytes: 64 * 1024,
            allowlisted: false,
            limits: None,
        }
    }
}

impl A2aServe {
    /// Serves only `agents`.
    #[must_use]
    pub fn agents(mut self, agents: &[&str]) -> Self {
        self.agents = Some(agents.iter().map(|a| a.to_string()).collect());
        self
    }

    /// Refuses bodies larger than `bytes`.
    #[must_use]
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Behind the loopback allowlist, served with `limits`.
    #[must_use]
    pub fn edge(mut self, limits: ServeOptions) -> Self {
        self.allowlisted = true;
        self.limits = Some(limits);
        self
    }
}

/// `legate_a2a` booted over an engine and served on 127.0.0.1.
#[allow(missing_debug_implementations)] // the harness and the engine have none
pub struct A2aFront {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    /// Where the front listens.
    pub addr: SocketAddr,
    /// The engine the front serves.
    pub engine: Engine,
    /// What boot served and what it could not start.
    pub report: BootReport,
    /// The harness that owns the engine, when the front was served from one.
    pub kit: Option<EngineHarness>,
    stop: CancellationToken,
    handle: Option<tokio::task::JoinHandle<()>>,
}

impl A2aFront {
    /// Serves the engine of `kit` as `how` says, keeping the harness.
    pub async fn serve_kit(kit: EngineHarness, how: A2aServe) -> Self {
        let mut front = Self::serve(kit.engine.clone(), how).await;
        front.kit = Some(kit);
        front
    }

    /// Serves `engine` as `how` says.
    pub async fn serve(engine: Engine, how: A2aServe) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let url = format!("http://{addr}");
        let options = A2aOptions {
            token: Some(Token::configured(TOKEN).unwrap()),
            public_url: url.clone(),
            max_body_bytes: how.max_body_bytes,
            probe_limit: Duration::from_secs(20),
            copy_roots: Vec::new(),
            agents: how
                .agents
                .unwrap_or_else(|| engine.config().agents.keys().cloned().collect()),
        };
        let (mut router, report) = legate_a2a::boot(&engine, &options).await;
        if how.allowlisted {
            router =
                legate_token::guard::allowlisted(router, legate_token::Allowlist::loopback("a2a"));
        }
        let stop = CancellationToken::new();
        let handle = match how.limits {
            Some(limits) => {
                tokio::spawn(legate_a2a::serve_with(
                    listener,
                    router,
                    limits,
                    stop.clone(),
                ));
                None
            }
            None => {
                let s = stop.clone();
                Some(tokio::spawn(async move {
                    legate_a2a::serve(listener, router, s).await.unwrap();
                }))
            }
        };
        Self {
            url,
            addr,
            engine,
            report,
            kit: None,
            stop,
            handle,
        }
    }

    /// The base URL of the agent `name`: `<url>/agents/<name>`.
    pub fn agent(&self, name: &str) -> String {
        format!("{}/agents/{name}", self.url)
    }

    /// The copies the engine made (`$LEGATE_HOME/copies/*`).
    pub fn copies(&self) -> Vec<PathBuf> {
        std::fs::read_dir(self.engine.config().paths.copies())
            .map(|d| d.map(|e| e.unwrap().path()).collect())
            .unwrap_or_default()
    }

    /// Stops the server (waiting for it, when served without limits) and shuts the engine
    /// down.
    pub async fn stop(self) {
        self.stop.cancel();
        if let Some(handle) = self.handle {
            let _ = handle.await;
        }
        self.engine.shutdown().await;
    }
}
