//! One remote agent, connected: the token read, the card fetched and its interface chosen,
//! the token checked, and an `a2a-client` client on that one interface carrying the token.
//! The card fetch and the token check are the opening task's frames: recorded on its wire tap
//! when it is tapped (the connection's [`TapRoute`], routed to the task's sink while it
//! connects).
//!
//! This module owns building the connection and the calls' timeouts. It never retries a
//! call that could have changed the remote (a send or a cancel is made once).

use crate::card::{self, Found};
use crate::errors::{excerpt, from_a2a};
use crate::tap::TapRoute;
use crate::token::{self, Bearer};
use crate::wire::{BoundedFactory, Limits};
use a2a_client::auth::AuthInterceptor;
use a2a_client::{A2AClient, A2AClientFactory, Transport};
use legate_backend::EventSink;
use legate_core::{AgentSpec, Error, ErrorCode, RemoteEndpoint, Result};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// How long connecting to the remote may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a call that is not a stream (card, get, cancel, send) may take.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// A connected remote agent.
pub struct Remote {
    /// The configured agent's name.
    pub agent: String,
    /// Its endpoint as configured.
    pub endpoint: RemoteEndpoint,
    /// What its card said.
    pub found: Found,
    /// The official client, on the chosen interface, its answers bounded by
    /// [`crate::wire::MAX_ANSWER_BYTES`].
    pub client: A2AClient<Box<dyn Transport>>,
    /// The same, with room in an answer for a copy task's patch of up to the agent's
    /// `max_transfer_bytes` (only the `GetTask` that brings the patch back uses it).
    pub transfer: A2AClient<Box<dyn Transport>>,
    /// Where both clients' requests and answers go while a tapped task's turn runs.
    pub tap: TapRoute,
}

impl fmt::Debug for Remote {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Remote")
            .field("agent", &self.agent)
            .field("url", &self.found.interface.url)
            .field("binding", &self.found.interface.protocol_binding)
            .field("supervised", &self.found.supervised)
            .finish_non_exhaustive()
    }
}

/// The HTTP client every call of one connection to `endpoint` (of the agent `agent`) uses:
/// no redirects, its TLS from `crate::tls` (its files read off the runtime's threads), and
/// `https://` only when the url is (a card cannot move the calls to plain HTTP). A plain
/// `http://` url is connected to directly, never through a proxy the environment names: the
/// rule that lets a token travel in clear to this machine's loopback holds only then.
async fn http(agent: &str, endpoint: &RemoteEndpoint) -> Result<reqwest::Client> {
    let https = reqwest::Url::parse(&endpoint.url).is_ok_and(|u| u.scheme() == "https");
    let (name, e) = (agent.to_string(), endpoint.clone());
    let tls = tokio::task::spawn_blocking(move || crate::tls::client_config(&name, &e))
        .await
        .map_err(|e| Error::quoting(ErrorCode::Internal, "reading the TLS settings failed", e))??;
    let mut builder = reqwest::Client::builder()
        .connect_timeout(CONNECT_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .tls_backend_preconfigured(tls)
        .https_only(https);
    if !https {
        builder = builder.no_proxy();
    }
    builder
        .build()
        .map_err(|e| Error::quoting(ErrorCode::Internal, "could not build an HTTP client", e))
}

/// The official client on `found`'s chosen interface only (so it cannot pick another), on
/// Legate's bounded transport with `limits`, carrying `bearer`.
async fn client_on(
    found: &Found,
    http: &reqwest::Client,
    bearer: Option<&Bearer>,
    limits: Limits,
    tap: &TapRoute,
) -> Result<A2AClient<Box<dyn Transport>>> {
    let mut one = found.card.clone();
    one.supported_interfaces = vec![found.interface.clone()];
    let mut factory = A2AClientFactory::builder()
        .no_defaults()
        .register(Arc::new(BoundedFactory::json_rpc(
            http.clone(),
            limits,
            tap.clone(),
        )))
        .register(Arc::new(BoundedFactory::rest(
            http.clone(),
            limits,
            tap.clone(),
        )));
    if let Some(b) = bearer {
        factory = factory.with_interceptor(Arc::new(AuthInterceptor::bearer(b.expose())));
    }
    factory
        .build()
        .create_from_card(&one)
        .await
        .map_err(|e| from_a2a(&found.interface.url, "connecting", &e))
}

/// Runs `call` with [`CALL_TIMEOUT`]: `REMOTE_UNREACHABLE` when it takes longer.
pub async fn timed<T>(
    url: &str,
    what: &str,
    call: impl std::future::Future<Output = std::result::Result<T, a2a::A2AError>>,
) -> Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(from_a2a(url, what, &e)),
        Err(_) => Err(Error::new(
            ErrorCode::RemoteUnreachable,
            format!(
                "{what} at {}: no answer within {}s",
                excerpt(url),
                CALL_TIMEOUT.as_secs()
            ),
        )),
    }
}

impl Remote {
    /// Connects to the remote agent `spec` names, for the task whose events go to `sink`
    /// (its wire tap records the card fetch and the token check, when it is tapped).
    pub async fn connect(spec: &AgentSpec, sink: &EventSink) -> Result<Remote> {
        let endpoint = spec.remote().cloned().ok_or_else(|| {
            Error::new(
                ErrorCode::AgentStartFailed,
                format!(
                    "agent `{}` is of kind {} but has no url",
                    spec.name, spec.kind
                ),
            )
        })?;
        crate::tls::refuse_credentials_in_url(&spec.name, &endpoint)?;
        crate::tls::refuse_token_in_clear(&spec.name, &endpoint)?;
        let bearer: Option<Bearer> = endpoint
            .token
            .as_ref()
            .map(|t| token::read(&spec.name, t))
            .transpose()?;
        let http = http(&spec.name, &endpoint).await?;
        let tap = TapRoute::default();
        let _connecting = tap.route(sink);
        let found = tokio::time::timeout(
            CALL_TIMEOUT,
            card::fetch(
                &http,
                &endpoint.url,
                endpoint.agent.as_deref(),
                bearer.as_ref(),
                &tap,
            ),
        )
        .await
        .map_err(|_| {
            Error::new(
                ErrorCode::RemoteUnreachable,
                format!(
                    "the agent card of `{}` did not come within {}s",
                    spec.name,
                    CALL_TIMEOUT.as_secs()
                ),
            )
        })??;
        tokio::time::timeout(
            CALL_TIMEOUT,
            card::check_token(&http, &found, bearer.as_ref(), &tap),
        )
        .await
        .map_err(|_| {
            Error::new(
                ErrorCode::RemoteUnreachable,
                format!(
                    "agent `{}` did not answer the token check within {}s",
                    spec.name,
                    CALL_TIMEOUT.as_secs()
                ),
            )
        })??;
        // The official client on Legate's bounded transport (the SDK's own transports read
        // whole bodies into memory however large, see `wire`): one client for every call, and
        // one with room for a copy task's patch, for the `GetTask` that brings it back.
        let make = |limits| client_on(&found, &http, bearer.as_ref(), limits, &tap);
        let client = make(Limits::default()).await?;
        let transfer = make(Limits::for_transfer(endpoint.max_transfer_bytes())).await?;
        tracing::info!(agent = %spec.name, url = %found.interface.url, binding = %found.interface.protocol_binding, supervised = found.supervised, streaming = found.streaming, "remote agent connected");
        Ok(Remote {
            agent: spec.name.clone(),
            endpoint,
            found,
            client,
            transfer,
            tap,
        })
    }

    /// The interface's URL.
    pub fn url(&self) -> &str {
        &self.found.interface.url
    }

    /// The interface's binding.
    pub fn binding(&self) -> &str {
        &self.found.interface.protocol_binding
    }
}
