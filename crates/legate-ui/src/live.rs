//! The live streams, server-sent events fed by the engine's subscriptions, never by a
//! polling loop of this front's own:
//!
//! - `GET /tasks/{id}/events`: the task's events from the store after the cursor, then live
//!   ([`Engine::subscribe`](legate_engine::Engine::subscribe): store first, then live, as the
//!   other fronts follow). Each SSE event is `event: event`, `id: <seq>`, and the event's
//!   `<li>` as the task page renders it; the stream ends with `event: end` after the task's
//!   terminal status. The cursor is `Last-Event-ID` when the browser reconnects (after a
//!   restart of the server too: the seq is the store's), else `?after=`.
//! - `GET /approvals/live`: the pending list, rendered again whenever the engine's queue
//!   changes (`engine.approvals().changes()`, [`Approvals::changes`](legate_engine::Approvals::changes)), as
//!   `event: approvals`.
//!
//! - `GET /tasks/live?state=&agent=&context=`: the first page of the tasks list, rendered
//!   again whenever a task of this engine changes state
//!   ([`Engine::live_events`](legate_engine::Engine::live_events), status events only), as
//!   `event: tasks`.
//!
//! Every fragment is HTML this crate rendered with maud (agent data escaped); a carriage
//! return is written as `&#13;` so that no agent byte can end an SSE line and forge a field.
//! Streams end when the server stops.

use crate::Dashboard;
use crate::pages::{approvals, events};
use crate::web::{PageError, Viewer};
use axum::Extension;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event as Sse_, KeepAlive, Sse};
use futures::Stream;
use std::convert::Infallible;

/// The query of a task's stream.
#[derive(Debug, Default, serde::Deserialize)]
pub struct AfterQuery {
    /// The seq of the last event the page has.
    #[serde(default)]
    pub after: Option<u64>,
}

/// SSE data: HTML whose carriage returns cannot split an SSE line, with every character a
/// reader does not see as itself shown ([`layout::shown`](crate::pages::layout::shown)).
pub fn sse_safe(html: String) -> String {
    let html = crate::pages::layout::shown(maud::PreEscaped(html)).0;
    if html.contains('\r') {
        html.replace('\r', "&#13;")
    } else {
        html
    }
}

/// The resume point: `Last-Event-ID` (a reconnecting browser), else `after`, else 0.
pub fn resume_point(headers: &HeaderMap, after: Option<u64>) -> u64 {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or(after)
        .unwrap_or(0)
}

type Events = axum::response::Response;

fn sse<S>(stream: S) -> Events
where
    S: Stream<Item = Result<Sse_, Infallible>> + Send + 'static,
{
    use axum::response::IntoResponse;
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `GET /tasks/{id}/events`.
pub async fn task_events(
    State(ui): State<Dashboard>,
    Extension(_viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Query(q): Query<AfterQuery>,
    headers: HeaderMap,
) -> Result<Events, PageError> {
    let task = ui.inner.engine.task(&id)?;
    let after = resume_point(&headers, q.after);
    let sub = ui.inner.engine.subscribe(&task.id, after);
    let shutdown = ui.inner.shutdown.clone();
    tracing::debug!(task_id = %task.id, after, "a dashboard page follows a task");
    let stream = futures::stream::unfold(Some(sub), move |state| {
        let shutdown = shutdown.clone();
        async move {
            let mut sub = state?;
            let next = tokio::select! {
                () = shutdown.cancelled() => return None,
                next = sub.next() => next,
            };
            let event = match next {
                Ok(Some(e)) => {
                    let html = sse_safe(events::item(&e).into_string());
                    return Some((
                        Ok(Sse_::default()
                            .event("event")
                            .id(e.seq.to_string())
                            .data(html)),
                        Some(sub),
                    ));
                }
                Ok(None) => Sse_::default().event("end").data("end"),
                Err(e) => Sse_::default().event("failure").data(sse_safe(
                    maud::html! { (e.code.as_str()) " " (e.detail()) }.into_string(),
                )),
            };
            Some((Ok(event), None))
        }
    });
    Ok(sse(stream))
}

/// `GET /approvals/live`.
pub async fn approvals(
    State(ui): State<Dashboard>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Events, PageError> {
    let changes = ui.inner.engine.approvals().changes();
    let shutdown = ui.inner.shutdown.clone();
    let stream = futures::stream::unfold((changes, true), move |(mut changes, first)| {
        let (ui, viewer, shutdown) = (ui.clone(), viewer.clone(), shutdown.clone());
        async move {
            if !first {
                tokio::select! {
                    () = shutdown.cancelled() => return None,
                    changed = changes.changed() => changed.ok()?,
                }
            }
            changes.borrow_and_update();
            let html = match approvals::pending(&ui, &viewer) {
                Ok(m) => m.into_string(),
                Err(e) => {
                    maud::html! { p.error { code { (e.code) } " " (e.message) } }.into_string()
                }
            };
            Some((
                Ok(Sse_::default().event("approvals").data(sse_safe(html))),
                (changes, false),
            ))
        }
    });
    Ok(sse(stream))
}

/// `GET /tasks/live`.
pub async fn tasks(
    State(ui): State<Dashboard>,
    Extension(_viewer): Extension<Viewer>,
    Query(q): Query<crate::pages::tasks::TasksQuery>,
) -> Result<Events, PageError> {
    crate::pages::tasks::filter_of(&q)?;
    let rx = ui.inner.engine.live_events();
    let shutdown = ui.inner.shutdown.clone();
    let stream = futures::stream::unfold(rx, move |mut rx| {
        let (ui, q, shutdown) = (ui.clone(), q.clone(), shutdown.clone());
        async move {
            use tokio::sync::broadcast::error::{RecvError, TryRecvError};
            // Wait for a state change; then take whatever else is already there, so that a
            // burst is one redraw.
            loop {
                let got = tokio::select! {
                    () = shutdown.cancelled() => return None,
                    got = rx.recv() => got,
                };
                match got {
                    Ok(e) if matches!(e.kind, legate_core::EventKind::Status { .. }) => break,
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return None,
                }
            }
            while let Ok(_) | Err(TryRecvError::Lagged(_)) = rx.try_recv() {}
            let html = match crate::pages::tasks::first_page(&ui, &q) {
                Ok(m) => m.into_string(),
                Err(e) => {
                    maud::html! { p.error { code { (e.code) } " " (e.message) } }.into_string()
                }
            };
            Some((Ok(Sse_::default().event("tasks").data(sse_safe(html))), rx))
        }
    });
    Ok(sse(stream))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn no_carriage_return_survives(s in ".{0,100}") {
            prop_assert!(!sse_safe(s).contains('\r'));
        }

        #[test]
        fn hostile_last_event_ids_never_panic(s in "[ -~]{0,40}") {
            let mut h = HeaderMap::new();
            if let Ok(v) = axum::http::HeaderValue::from_str(&s) {
                h.insert("last-event-id", v);
            }
            let _ = resume_point(&h, Some(3));
        }
    }
}
