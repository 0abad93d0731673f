//! The task page: what was asked and by whom, the event stream (stored events, then live
//! through `/tasks/{id}/events`), and for a copy task its review: the patch (u2's
//! [`diff`] view), the verification, the test evidence, and the integrate,
//! discard and cancel actions (forms that POST with the session's CSRF token; the engine's
//! checks decide and its errors are shown as they come).
//!
//! Everything shown that came from an agent (answer, events, paths, test output) is escaped.

use crate::Dashboard;
use crate::pages::layout::{self, Nav};
use crate::pages::tasks::{encode, task_duration, task_tokens};
use crate::pages::{diff, events};
use crate::web::{PageError, Viewer};
use axum::Extension;
use axum::extract::{Path, Query, State};
use legate_core::{Task, TaskState, Timestamp, WorkspaceKind};
use legate_engine::{CopyStatus, PreviewReport};
use maud::{Markup, html};

/// The most stored events a page renders at once; later ones arrive through the stream.
pub const MAX_EVENTS: usize = 5000;

/// `GET /tasks/{id}`.
pub async fn page(
    State(ui): State<Dashboard>,
    Extension(viewer): Extension<Viewer>,
    Path(id): Path<String>,
    Query(q): Query<diff::DiffQuery>,
) -> Result<Markup, PageError> {
    let engine = &ui.inner.engine;
    let task = engine.task(&id)?;
    let stored = engine.events(&task.id, 0, MAX_EVENTS)?;
    let last = stored.last().map_or(0, |e| e.seq);
    let review = if task.workspace == WorkspaceKind::Copy {
        Some(review(&ui, &viewer, &task, q.diff_page.unwrap_or(0)).await)
    } else {
        None
    };
    let href = format!("/tasks/{}", encode(task.id.as_str()));
    Ok(layout::page(
        &format!("Task {}", crate::pages::tasks::short(task.id.as_str())),
        Some(&viewer),
        Nav::Tasks,
        html! {
            h1 { "Task " code { (task.id.as_str()) } }
            (summary(&task))
            @if !task.state.is_terminal() {
                form.action method="post" action={ (href) "/cancel" } {
                    (layout::csrf_field(&viewer))
                    button type="submit" { "Cancel task" }
                }
            }
            @if let Some(r) = &task.result {
                section aria-labelledby="answer-h" {
                    h2 id="answer-h" { "Answer" }
                    pre.answer { (r.text) }
                }
            }
            @if let Some(review) = review { (review) }
            section aria-labelledby="events-h" {
                h2 id="events-h" { "Events" }
                @if stored.len() == MAX_EVENTS {
                    p.note { "The first " (MAX_EVENTS) " events are shown; the rest arrive through the live stream (JavaScript)." }
                }
                p.live-status aria-live="polite" data-live-status="" {}
                ol.events id="events" data-stream={ (href) "/events?after=" (last) } data-last-seq=(last) {
                    @for e in &stored { (events::item(e)) }
                }
            }
        },
    ))
}

fn summary(t: &Task) -> Markup {
    html! {
        dl.summary {
            dt { "State" } dd { span class={ "state state-" (t.state.as_str()) } { (t.state.as_str()) }
                @if let Some(m) = &t.status_message { " — " (m) } }
            dt { "Agent" } dd { (t.agent) @if let Some(m) = &t.model { " (" (m) ")" } }
            dt { "Role" } dd { (t.role.as_ref().map(|r| r.name.as_str()).unwrap_or("—")) }
            dt { "Mode" } dd { (t.mode.as_str()) }
            dt { "Workspace" } dd { (t.workspace.as_str())
                @if let Some(root) = &t.root { " " code { (root.display().to_string()) } } }
            dt { "Context" } dd { a href={ "/tasks?context=" (encode(&t.context_id)) } { code { (t.context_id) } } }
            dt { "Created" } dd { (layout::time(t.created_at)) }
            dt { "Duration" } dd { (layout::duration(task_duration(t, Timestamp::now()))) }
            dt { "Tokens" } dd { (layout::tokens(task_tokens(t))) }
            @if let Some(e) = &t.error {
                dt { "Error" } dd.error { code { (e.code.as_str()) } " " (e.detail()) }
            }
            dt { "Prompt" } dd { pre.prompt { (t.prompt) } }
            @if !t.controls.memory.is_empty() {
                dt { "Memory" } dd { ul.memory {
                    @for m in &t.controls.memory {
                        li { code { (m.specialist) } " sha256 " code { (m.sha256) } " (" (m.bytes) " bytes)" }
                    }
                } }
            }
        }
    }
}

/// The review section of a copy task: its state, the patch, verification, tests, actions.
async fn review(ui: &Dashboard, viewer: &Viewer, task: &Task, diff_page: usize) -> Markup {
    let engine = &ui.inner.engine;
    let copy = engine.reviews().current_copy(task.id.as_str());
    let report = engine.reviews().preview(task.id.as_str()).await;
    let href = format!("/tasks/{}", encode(task.id.as_str()));
    let ended = task.state.is_terminal() || task.state == TaskState::InputRequired;
    html! {
        section aria-labelledby="review-h" {
            h2 id="review-h" { "Review of the copy" }
            @match &copy {
                Ok(c) => p { "The copy is " strong { (c.status.as_str()) } "." },
                Err(e) => p.error { code { (e.code.as_str()) } " " (e.detail()) },
            }
            @match &report {
                Ok(report) => {
                    (diff::view(engine, task, report, diff_page).await)
                    (verification(report))
                    (tests(report))
                    @if ended && copy.as_ref().is_ok_and(|c| c.status == CopyStatus::Open) {
                        div.actions {
                            form.action method="post" action={ (href) "/verify" } {
                                (layout::csrf_field(viewer))
                                input type="hidden" name="sha256" value=(report.patch.sha256);
                                button type="submit" { "Verify the patch" }
                            }
                            form.action method="post" action={ (href) "/integrate" } {
                                (layout::csrf_field(viewer))
                                input type="hidden" name="sha256" value=(report.patch.sha256);
                                button type="submit" { "Integrate into the project" }
                            }
                            form.action method="post" action={ (href) "/discard" } {
                                (layout::csrf_field(viewer))
                                button type="submit" { "Discard the copy" }
                            }
                        }
                    }
                }
                Err(e) => p.error { "No patch: " code { (e.code.as_str()) } " " (e.detail()) },
            }
        }
    }
}

fn verification(report: &PreviewReport) -> Markup {
    html! {
        h3 { "Verification" }
        @match &report.verification {
            None => p { "Not verified." },
            Some(v) => {
                p {
                    @if v.passed { "Passed" } @else { "Not passed" }
                    " for patch " code { (crate::pages::tasks::short(&v.sha256)) }
                    @if let Some(s) = &report.stale { " — stale: " (s) }
                }
                ul { @for c in &v.criteria {
                    li { code { (c.criterion_id) } ": " @if c.passed { "passed" } @else { "failed" } }
                } }
            }
        }
    }
}

fn tests(report: &PreviewReport) -> Markup {
    html! {
        h3 { "Test evidence" }
        @if report.tests.is_empty() { p { "No test was run or reported." } }
        @for t in &report.tests {
            details {
                summary {
                    code { (t.evidence.command.executable) @for a in &t.evidence.command.args { " " (a) } }
                    " — " @if t.evidence.passed { "passed" } @else { "failed" }
                    @if t.stale { " (stale: the patch changed since)" }
                }
                @if !t.evidence.stdout.is_empty() { h4 { "stdout" } pre { (t.evidence.stdout) } }
                @if !t.evidence.stderr.is_empty() { h4 { "stderr" } pre { (t.evidence.stderr) } }
            }
        }
        @if let Some(i) = &report.integration {
            p { "Integrated at " (layout::time(i.integrated_at)) "." }
        }
    }
}
