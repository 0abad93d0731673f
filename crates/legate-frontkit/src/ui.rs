//! The dashboard served for a test: a real engine (the test kit's harness, revisor as the
//! agent) behind the real router, served by the real HTTP server on 127.0.0.1, and a `reqwest`
//! client that does NOT follow redirects (so tests see the login's 303 and its cookie).
//!
//! `UiFront::start()` for the defaults; `UiFront::with(builder)` for a harness of the test's
//! own (a policy, a project for copy tasks). `login(Audience)` redeems a fresh one-time code
//! and returns a `Session` holding its cookie and CSRF token. Owns the setup; it never checks
//! a page's content beyond what signing in needs.

use legate_testkit::harness::{EngineHarness, HarnessBuilder};
use legate_ui::{Allowlist, Audience, Dashboard, Token, UiOptions};
use reqwest::header;
use tokio_util::sync::CancellationToken;

/// A running dashboard over a real engine.
#[allow(missing_debug_implementations)] // the harness and the engine have none
pub struct UiFront {
    pub h: EngineHarness,
    pub ui: Dashboard,
    /// `http://127.0.0.1:<port>`.
    pub base: String,
    pub caller: Token,
    pub supervisor: Token,
    pub client: reqwest::Client,
    shutdown: CancellationToken,
    served: Option<tokio::task::JoinHandle<()>>,
}

/// A signed-in browser: its cookie header value and its CSRF token.
#[derive(Debug, Clone)]
pub struct Session {
    pub cookie: String,
    pub csrf: String,
    pub set_cookie: String,
}

impl UiFront {
    pub async fn start() -> Self {
        Self::with(EngineHarness::builder()).await
    }

    pub async fn with(builder: HarnessBuilder) -> Self {
        let h = builder.start();
        let caller = Token::random().unwrap();
        let supervisor = Token::random().unwrap();
        let shutdown = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bound = listener.local_addr().unwrap();
        let base = format!("http://{bound}");
        let ui = Dashboard::new(
            h.engine.clone(),
            UiOptions {
                caller: caller.clone(),
                supervisor: supervisor.clone(),
                // As `legate serve --ui` does: its own origin only.
                allowlist: Allowlist::loopback("ui").pinned_to(bound.port()),
            },
            shutdown.clone(),
        );
        let router = ui.router();
        let stop = shutdown.clone();
        let served = tokio::spawn(legate_ui::serve_with(
            listener,
            router,
            legate_ui::ServeOptions::default(),
            stop,
        ));
        legate_testkit::tls::install_provider();
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        Self {
            h,
            ui,
            base,
            caller,
            supervisor,
            client,
            shutdown,
            served: Some(served),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A fresh one-time URL for `audience`.
    pub fn one_time_url(&self, audience: Audience) -> String {
        self.ui.one_time_url(&self.base, audience).unwrap()
    }

    /// Opens a one-time URL and returns the session it set.
    pub async fn login(&self, audience: Audience) -> Session {
        let r = self
            .client
            .get(self.one_time_url(audience))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 303, "login should redirect");
        let set_cookie = r
            .headers()
            .get(header::SET_COOKIE)
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let cookie = set_cookie.split(';').next().unwrap().to_string();
        // The CSRF token: read from a page's form, as a browser would.
        let page = self
            .get_with(&cookie, "/approvals")
            .await
            .text()
            .await
            .unwrap();
        let csrf = field(&page, "csrf").unwrap_or_default();
        Session {
            cookie,
            csrf,
            set_cookie,
        }
    }

    pub async fn get_with(&self, cookie: &str, path: &str) -> reqwest::Response {
        self.client
            .get(self.url(path))
            .header(header::COOKIE, cookie)
            .send()
            .await
            .unwrap()
    }

    /// A form POST as a browser on this origin sends it.
    pub async fn post_form(
        &self,
        cookie: Option<&str>,
        path: &str,
        fields: &[(&str, &str)],
    ) -> reqwest::Response {
        let body = fields
            .iter()
            .map(|(k, v)| {
                format!(
                    "{}={}",
                    legate_ui::pages::tasks::encode(k),
                    legate_ui::pages::tasks::encode(v)
                )
            })
            .collect::<Vec<_>>()
            .join("&");
        let mut req = self
            .client
            .post(self.url(path))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(header::ORIGIN, &self.base)
            .body(body);
        if let Some(c) = cookie {
            req = req.header(header::COOKIE, c);
        }
        req.send().await.unwrap()
    }

    /// Stops the server and waits for it.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        if let Some(s) = self.served.take() {
            s.await.unwrap();
        }
    }
}

impl Drop for UiFront {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

/// The value of the first `<input name="NAME" value="…">` in `html`.
pub fn field(html: &str, name: &str) -> Option<String> {
    let at = html.find(&format!("name=\"{name}\""))?;
    let rest = &html[at..];
    let v = rest.find("value=\"")? + 7;
    let end = rest[v..].find('"')?;
    Some(rest[v..v + end].to_string())
}
