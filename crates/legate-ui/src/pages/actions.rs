//! The state-changing requests, each a `POST` with the session's CSRF token: cancel,
//! verify, discard and integrate a task (any session), and answer an approval (a supervisor's
//! session only). Each calls one engine method and shows the engine's own error; on success
//! the browser is sent back to the page it came from (303).
//!
//! Nothing here checks a rule of the engine's (whether a task may be canceled, whether a
//! patch may be integrated): the engine does, and says why not.

use crate::Dashboard;
use crate::auth::CSRF_FIELD;
use crate::pages::tasks::encode;
use crate::web::{PageError, Viewer};
use axum::Extension;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::response::{IntoResponse, Redirect, Response};
use legate_engine::{Answer, ApprovalAnswer};
use std::collections::HashMap;

/// A form's fields (`csrf` and the action's own); unknown fields are ignored.
pub type Fields = axum::Form<HashMap<String, String>>;

fn csrf(fields: &HashMap<String, String>) -> Option<&str> {
    fields.get(CSRF_FIELD).map(String::as_str)
}

/// An action's request, taken apart alike for every action: the dashboard, who asks, the
/// `{id}` of its path and its form, whose CSRF token is checked before the action sees it.
#[derive(Debug)]
pub struct Action {
    ui: Dashboard,
    viewer: Viewer,
    id: String,
    fields: HashMap<String, String>,
}

impl FromRequest<Dashboard> for Action {
    type Rejection = Response;

    async fn from_request(request: Request, ui: &Dashboard) -> Result<Self, Response> {
        let (mut parts, body) = request.into_parts();
        let Extension(viewer) = Extension::<Viewer>::from_request_parts(&mut parts, ui)
            .await
            .map_err(IntoResponse::into_response)?;
        let Path(id) = Path::<String>::from_request_parts(&mut parts, ui)
            .await
            .map_err(IntoResponse::into_response)?;
        let axum::Form(fields) = Fields::from_request(Request::from_parts(parts, body), ui)
            .await
            .map_err(IntoResponse::into_response)?;
        viewer
            .csrf_checked(ui, csrf(&fields))
            .map_err(IntoResponse::into_response)?;
        Ok(Self {
            ui: ui.clone(),
            viewer,
            id,
            fields,
        })
    }
}

impl Action {
    /// The form's field `name`, if it was sent.
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }
}

fn back(id: &str) -> Redirect {
    Redirect::to(&format!("/tasks/{}", encode(id)))
}

/// `POST /tasks/{id}/cancel`.
pub async fn cancel(Action { ui, viewer, id, .. }: Action) -> Result<Redirect, PageError> {
    let task = ui.inner.engine.cancel(&id)?;
    tracing::info!(task_id = %task.id, audience = viewer.audience.as_str(), "canceled from the dashboard");
    Ok(back(task.id.as_str()))
}

/// `POST /tasks/{id}/discard`.
pub async fn discard(Action { ui, viewer, id, .. }: Action) -> Result<Redirect, PageError> {
    ui.inner.engine.reviews().discard(&id).await?;
    tracing::info!(task_id = %id, audience = viewer.audience.as_str(), "discarded from the dashboard");
    Ok(back(&id))
}

/// `POST /tasks/{id}/verify`, bound to the patch the page showed (`sha256`), with no
/// reviewer's reviews: the engine checks the task's criteria that need none (its `check`s)
/// and answers with its own error for a criterion that needs a review with a citation
/// (which a reviewing agent gives, through MCP or `legate verify`).
pub async fn verify(action: Action) -> Result<Redirect, PageError> {
    let (id, sha) = (&action.id, action.field("sha256").unwrap_or(""));
    let reviews = action.ui.inner.engine.reviews();
    let v = reviews.verify(id, sha, Vec::new()).await?;
    tracing::info!(task_id = %id, passed = v.passed, audience = action.viewer.audience.as_str(), "verified from the dashboard");
    Ok(back(id))
}

/// `POST /tasks/{id}/integrate`, always bound to the patch the page showed (`sha256`): a form
/// without it is `INVALID_INPUT` and nothing changes (a person integrates what they saw,
/// never whatever the copy holds by then); a patch that changed since is the engine's
/// `PATCH_CHANGED`. No confirmer is passed: in approval mode `ask` the engine answers
/// `INTEGRATION_DECLINED`, shown as it comes.
pub async fn integrate(action: Action) -> Result<Redirect, PageError> {
    let id = &action.id;
    let sha = action.field("sha256").filter(|s| !s.trim().is_empty());
    let Some(sha) = sha else {
        return Err(legate_core::Error::invalid_input(
            "integrating from the dashboard needs the sha256 of the patch its page showed (the form's sha256 field): open the task's page again and integrate from it",
        )
        .into());
    };
    let reviews = action.ui.inner.engine.reviews();
    reviews.integrate(id, Some(sha), None).await?;
    tracing::info!(task_id = %id, audience = action.viewer.audience.as_str(), "integrated from the dashboard");
    Ok(back(id))
}

/// `POST /approvals/{id}/answer` with `answer` = `allow`, `allow-for-task` or `deny`: CSRF
/// first, then the supervisor's session, then the engine's answer (`APPROVAL_CLOSED` when
/// someone answered first).
pub async fn answer(action: Action) -> Result<Redirect, PageError> {
    action.viewer.supervisor()?;
    let given = action.field("answer").unwrap_or("");
    let answer = Answer::parse(given).ok_or_else(|| {
        PageError::from(legate_core::Error::invalid_input(
            "answer is allow, allow-for-task or deny",
        ))
    })?;
    let reason = action
        .field("reason")
        .map(|r| r.trim().to_string())
        .filter(|r| !r.is_empty());
    let desk = legate_engine::ApprovalDesk::Engine(action.ui.inner.engine.clone());
    let approval = desk.answer(
        &action.id,
        ApprovalAnswer {
            answer,
            reason,
            channel: "dashboard".into(),
        },
    )?;
    tracing::info!(approval_id = %approval.id, answer = answer.as_str(), "answered from the dashboard");
    Ok(Redirect::to("/approvals"))
}
