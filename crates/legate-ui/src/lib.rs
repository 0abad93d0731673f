//! Legate's dashboard: a front over the engine, like MCP and A2A, that a person opens in a
//! browser. Server-side HTML (maud), a little plain JavaScript for live updates (server-sent
//! events), assets embedded in the binary.
//!
//! It owns: the routes and pages ([`pages`]), who is looking ([`auth`]: one-time codes,
//! the session cookie, CSRF; [`web`]: the middleware that applies them), the live streams
//! ([`live`]) and the embedded assets ([`assets`]).
//!
//! It must never decide anything: every rule (who may integrate, what an answer means, when
//! a task may be canceled) is the engine's, and the dashboard shows the engine's own errors.
//! It never renders agent data unescaped (maud escapes; `PreEscaped` is used only on HTML
//! this crate rendered itself), never changes state on a `GET`, and never logs a token, a
//! code, a cookie or a CSRF token.

pub mod assets;
pub mod auth;
pub mod live;
pub mod pages;
pub mod web;

pub use auth::{Auth, CODE_TTL, COOKIE, CSRF_FIELD, LOGIN_PATH, login_url, mint_code};
pub use legate_token::serve::ServeOptions;
pub use legate_token::{Allowlist, Audience, Token};

use legate_engine::Engine;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The port `legate serve --ui` listens on by default.
pub const DEFAULT_PORT: u16 = 8733;

/// Who may use the dashboard.
#[derive(Debug, Clone)]
pub struct UiOptions {
    /// The caller's token: its sessions see everything and may cancel, discard and
    /// integrate, but never answer an approval.
    pub caller: Token,
    /// The supervisor's token: its sessions may also answer approvals.
    pub supervisor: Token,
    /// The `Host` and `Origin` values the dashboard answers to.
    pub allowlist: Allowlist,
}

/// The dashboard over one engine: what every handler shares.
#[derive(Debug, Clone)]
pub struct Dashboard {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) engine: Engine,
    pub(crate) auth: Auth,
    pub(crate) allowlist: Allowlist,
    /// Cancelled when the server stops: live streams end so that it can.
    pub(crate) shutdown: CancellationToken,
}

impl Dashboard {
    /// The dashboard over `engine`; its live streams end when `shutdown` is cancelled.
    pub fn new(engine: Engine, options: UiOptions, shutdown: CancellationToken) -> Self {
        // Redeemed codes and signed-out sessions are kept in the store too: a restart
        // forgets neither.
        let auth = Auth::new(options.caller, options.supervisor).remembering(engine.clone());
        Self {
            inner: Arc::new(Inner {
                engine,
                auth,
                allowlist: options.allowlist,
                shutdown,
            }),
        }
    }

    /// The keys sessions are checked with (to mint a one-time code in-process).
    pub fn auth(&self) -> &Auth {
        &self.inner.auth
    }

    /// A fresh one-time URL for `audience` on the server at `base`.
    pub fn one_time_url(&self, base: &str, audience: Audience) -> Result<String, auth::Refused> {
        let code = self
            .inner
            .auth
            .mint(audience, legate_core::Timestamp::now().0)?;
        Ok(login_url(base, &code))
    }

    /// The HTTP application: every route behind the allowlist, then the session.
    pub fn router(&self) -> axum::Router {
        web::router(self.clone())
    }
}

/// Serves `router` on `listener` with `options` until `shutdown` is cancelled.
pub async fn serve_with(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    options: ServeOptions,
    shutdown: CancellationToken,
) {
    legate_token::serve::serve(listener, router, options, "ui", shutdown).await;
}
