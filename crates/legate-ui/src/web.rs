//! The routes, and the checks every request passes before a page sees it, in this order:
//!
//! 1. the `Host`/`Origin` allowlist (`legate_token::guard`): 403 before anything else;
//! 2. who is asking (`authenticate`): the session cookie, or (for `GET` only) a bearer
//!    token; neither is 401. `/login` (which redeems a one-time code) and `/assets/` are
//!    the only paths served without one;
//! 3. on every `POST`: a cookie session and its CSRF token ([`Viewer::csrf_checked`]), else
//!    403; and for answering an approval, a supervisor session ([`Viewer::supervisor`]),
//!    else 403 with the sentence why.
//!
//! Every response carries a strict Content-Security-Policy (scripts and styles from this
//! server only, no inline script), `nosniff`, `Referrer-Policy: same-origin` (`no-referrer` on
//! the login's answer, so a one-time URL never leaks in a `Referer`; `no-referrer` everywhere
//! would make browsers send `Origin: null` on the dashboard's own POSTs) and, for pages,
//! `no-store`.
//!
//! This module never logs a header value, a cookie or a token.

use crate::auth::{COOKIE, LOGIN_PATH, Refused, Session};
use crate::{Dashboard, pages};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use legate_core::{Error, ErrorCode, Timestamp};
use legate_token::Audience;

/// The policy every response carries.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

/// The routes.
pub(crate) fn router(ui: Dashboard) -> axum::Router {
    let router = axum::Router::new()
        .route("/", get(|| async { Redirect::to("/tasks") }))
        .route(LOGIN_PATH, get(login))
        .route("/logout", post(logout))
        .route("/tasks", get(pages::tasks::page))
        .route("/tasks/live", get(crate::live::tasks))
        .route("/tasks/{id}", get(pages::task::page))
        .route("/tasks/{id}/events", get(crate::live::task_events))
        .route("/tasks/{id}/cancel", post(pages::actions::cancel))
        .route("/tasks/{id}/discard", post(pages::actions::discard))
        .route("/tasks/{id}/verify", post(pages::actions::verify))
        .route("/tasks/{id}/integrate", post(pages::actions::integrate))
        .route("/approvals", get(pages::approvals::page))
        .route("/approvals/live", get(crate::live::approvals))
        .route("/approvals/{id}/answer", post(pages::actions::answer))
        .route("/usage", get(pages::usage::page))
        .route("/assets/{name}", get(crate::assets::serve))
        .fallback(|| async {
            PageError::new(StatusCode::NOT_FOUND, "NOT_FOUND", "There is no such page.")
        })
        .layer(middleware::from_fn_with_state(ui.clone(), authenticate))
        .layer(middleware::from_fn(headers))
        .with_state(ui.clone());
    // Outermost: the allowlist runs before anything else.
    legate_token::guard::allowlisted(router, ui.inner.allowlist.clone())
}

/// Who is looking at a page, put in the request's extensions by `authenticate`.
#[derive(Debug, Clone)]
pub struct Viewer {
    /// Whose token signed them in.
    pub audience: Audience,
    /// The cookie session, when there is one (a bearer-token `GET` has none).
    pub session: Option<Session>,
    /// The session's CSRF token, for forms.
    pub csrf: Option<String>,
}

impl Viewer {
    /// The session of a state-changing request whose form carried `presented`: 403 without a
    /// cookie session or with a wrong token.
    pub fn csrf_checked(&self, ui: &Dashboard, presented: Option<&str>) -> Result<(), PageError> {
        let Some(session) = &self.session else {
            return Err(PageError::forbidden(
                "CSRF_REQUIRED",
                "A change is made from a dashboard session (open a one-time URL from `legate ui --print-url`), with its form's CSRF token.",
            ));
        };
        match presented {
            Some(p) if ui.inner.auth.csrf_ok(session, p) => Ok(()),
            _ => {
                tracing::info!("refused a dashboard POST: missing or wrong CSRF token");
                Err(PageError::forbidden(
                    "CSRF_REJECTED",
                    "This form's CSRF token is missing or not this session's; reload the page and try again.",
                ))
            }
        }
    }

    /// 403 unless this is a supervisor's session.
    pub fn supervisor(&self) -> Result<(), PageError> {
        if self.audience == Audience::Supervisor {
            return Ok(());
        }
        Err(PageError::forbidden(
            "SUPERVISOR_REQUIRED",
            "Only the supervisor answers approvals: this session was opened with the caller's token. Open a one-time URL minted with the supervisor token: run `legate ui` at a terminal, or with LEGATE_SUPERVISOR_TOKEN set to the supervisor token.",
        ))
    }
}

/// Finds who is asking; 401 when nobody is.
async fn authenticate(State(ui): State<Dashboard>, mut request: Request, next: Next) -> Response {
    let path = request.uri().path();
    if path == LOGIN_PATH || path.starts_with("/assets/") {
        return next.run(request).await;
    }
    let now = Timestamp::now().0;
    let headers = request.headers();
    let cookie = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| crate::auth::cookie(v, COOKIE));
    let session = cookie.map(|c| ui.inner.auth.session(c, now));
    let viewer = match session {
        Some(Ok(session)) => Viewer {
            audience: session.audience,
            csrf: Some(ui.inner.auth.csrf(&session)),
            session: Some(session),
        },
        _ => {
            let bearer = headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(legate_token::bearer::presented)
                .and_then(|t| ui.inner.auth.bearer(t));
            match bearer {
                Some(audience) if request.method() == Method::GET => Viewer {
                    audience,
                    session: None,
                    csrf: None,
                },
                Some(_) => {
                    return PageError::forbidden(
                        "CSRF_REQUIRED",
                        "A change is made from a dashboard session with its CSRF token; a bearer token only reads.",
                    )
                    .into_response();
                }
                None => {
                    tracing::info!(
                        cookie_present = cookie.is_some(),
                        "refused a dashboard request: no session"
                    );
                    return PageError::new(
                        StatusCode::UNAUTHORIZED,
                        "UNAUTHORIZED",
                        "Sign in first: `legate ui` opens the dashboard with a one-time URL (`legate ui --print-url` prints one).",
                    )
                    .into_response();
                }
            }
        }
    };
    // A supervisor's session may use the room kept beyond the callers' connection cap.
    if viewer.audience == Audience::Supervisor {
        legate_token::serve::mark_supervisor(request.extensions());
    } else if !legate_token::serve::mark_authenticated(request.extensions()) {
        return legate_token::serve::no_room();
    }
    request.extensions_mut().insert(viewer);
    next.run(request).await
}

/// The security headers of every response.
async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    // `same-origin`, not `no-referrer`: under `no-referrer` a browser sends `Origin: null` on
    // the dashboard's own form POSTs, which the allowlist refuses. The login response keeps
    // `no-referrer` (set there), so the one-time URL never leaves in a `Referer`.
    if !h.contains_key(header::REFERRER_POLICY) {
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static("same-origin"),
        );
    }
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !h.contains_key(header::CACHE_CONTROL) {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

#[derive(Debug, serde::Deserialize)]
pub(crate) struct LoginQuery {
    code: Option<String>,
}

/// `GET /login?code=…`: redeems a one-time code, sets the session cookie, and sends the
/// browser to the tasks page (so the code leaves the address bar).
async fn login(State(ui): State<Dashboard>, Query(q): Query<LoginQuery>) -> Response {
    let code = q.code.unwrap_or_default();
    match ui.inner.auth.redeem(&code, Timestamp::now().0) {
        Ok(session) => {
            tracing::info!(
                audience = session.audience.as_str(),
                "dashboard session opened"
            );
            let mut response = Redirect::to("/tasks").into_response();
            response.headers_mut().insert(
                header::REFERRER_POLICY,
                HeaderValue::from_static("no-referrer"),
            );
            if let Ok(v) = HeaderValue::from_str(&ui.inner.auth.set_cookie(&session)) {
                response.headers_mut().insert(header::SET_COOKIE, v);
            }
            response
        }
        Err(refused) => {
            tracing::info!(reason = ?refused, "refused a one-time code");
            let status = if refused == Refused::NoRandom {
                StatusCode::INTERNAL_SERVER_ERROR
            } else if refused == Refused::Unrecorded {
                StatusCode::SERVICE_UNAVAILABLE
            } else {
                StatusCode::UNAUTHORIZED
            };
            PageError::new(status, "UNAUTHORIZED", &refused.to_string()).into_response()
        }
    }
}

/// `POST /logout` (CSRF-checked): ends the session on this server (its cookie is refused
/// from now on, wherever it was copied) and clears the cookie.
async fn logout(
    State(ui): State<Dashboard>,
    axum::Extension(viewer): axum::Extension<Viewer>,
    axum::Form(fields): axum::Form<std::collections::HashMap<String, String>>,
) -> Result<Response, PageError> {
    viewer.csrf_checked(&ui, fields.get(crate::auth::CSRF_FIELD).map(String::as_str))?;
    if let Some(session) = &viewer.session {
        ui.auth()
            .sign_out(session, legate_core::Timestamp::now().0)
            .map_err(|refused| {
                PageError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "UNAVAILABLE",
                    &refused.to_string(),
                )
            })?;
    }
    let mut response = pages::layout::page(
        "Signed out",
        None,
        pages::layout::Nav::None,
        maud::html! { h1 { "Signed out" } p { "`legate ui` opens a new session." } },
    )
    .into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("legate_session=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"),
    );
    Ok(response)
}

/// An error page: status, a stable code, and one sentence (the engine's own, for its errors).
#[derive(Debug, Clone)]
pub struct PageError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The stable code (an engine `ErrorCode`, or one of this front's refusals).
    pub code: String,
    /// What happened, for a person.
    pub message: String,
}

impl PageError {
    /// An error of this front.
    pub fn new(status: StatusCode, code: &str, message: &str) -> Self {
        Self {
            status,
            code: code.to_string(),
            message: message.to_string(),
        }
    }

    /// 403 with `code`.
    pub fn forbidden(code: &str, message: &str) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }
}

impl From<Error> for PageError {
    fn from(e: Error) -> Self {
        let status = match e.code {
            ErrorCode::TaskNotFound
            | ErrorCode::ApprovalNotFound
            | ErrorCode::ContextNotFound
            | ErrorCode::AgentNotFound => StatusCode::NOT_FOUND,
            ErrorCode::InvalidInput => StatusCode::BAD_REQUEST,
            ErrorCode::Internal | ErrorCode::StoreError => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::CONFLICT,
        };
        Self {
            status,
            code: e.code.as_str().to_string(),
            message: e.detail(),
        }
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        let body = pages::layout::error_page(&self);
        (self.status, body).into_response()
    }
}
