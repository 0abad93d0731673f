//! The approvals page: the pending permission requests with a countdown to their deadline
//! and the approve / deny / allow-for-task forms (a supervisor session's only), kept current
//! by the live stream `/approvals/live`; and the audit trail of decisions below.
//!
//! The pending list is one fragment ([`pending`]) that the page and the stream both render.
//! Tool titles, commands, paths and reasons are agent data and are escaped. A command that
//! is not one plain command is shown as sent (`runs …`, whole, line breaks kept), next to the
//! title the agent chose: a person decides on what runs, never on the agent's own words.

use crate::Dashboard;
use crate::pages::events::decision;
use crate::pages::layout::{self, Nav};
use crate::pages::tasks::{encode, short};
use crate::web::{PageError, Viewer};
use axum::Extension;
use axum::extract::State;
use legate_core::Timestamp;
use legate_engine::{Approval, ApprovalFilter, AuditFilter, ToolCallSummary, seconds_left};
use legate_token::Audience;
use maud::{Markup, html};

/// How many pending approvals and audit entries the page shows.
pub const LIMIT: usize = 100;

/// `GET /approvals`.
pub async fn page(
    State(ui): State<Dashboard>,
    Extension(viewer): Extension<Viewer>,
) -> Result<Markup, PageError> {
    let list = pending(&ui, &viewer)?;
    let audit = ui.inner.engine.approvals().audit(&AuditFilter {
        task_id: None,
        since: None,
        limit: LIMIT,
    })?;
    Ok(layout::page(
        "Approvals",
        Some(&viewer),
        Nav::Approvals,
        html! {
            h1 { "Approvals" }
            @if viewer.audience == Audience::Caller {
                p.note { "This session was opened with the caller's token: it shows the queue but cannot answer. Answering needs a supervisor session: run " code { "legate ui" } " at a terminal, or with " code { "LEGATE_SUPERVISOR_TOKEN" } " set to the supervisor token." }
            }
            section aria-labelledby="pending-h" {
                h2 id="pending-h" { "Waiting for an answer" }
                p.live-status aria-live="polite" data-live-status="" {}
                div id="pending" data-replace-stream="/approvals/live" data-replace-event="approvals" { (list) }
            }
            section aria-labelledby="audit-h" {
                h2 id="audit-h" { "Audit trail" }
                @if audit.is_empty() { p { "No decision yet." } } @else {
                    div.scroll { table {
                        thead { tr { th scope="col" { "When" } th scope="col" { "Task" } th scope="col" { "Agent" }
                            th scope="col" { "Tool" } th scope="col" { "Decision" } th scope="col" { "By" } th scope="col" { "Reason" } } }
                        tbody { @for a in &audit { tr {
                            td { (layout::time(a.at)) }
                            td { a href={ "/tasks/" (encode(a.task_id.as_str())) } { code { (short(a.task_id.as_str())) } } }
                            td { (a.agent) }
                            td { (tool(&a.tool)) }
                            td { strong class={ "decision-" (decision(a.decision)) } { (decision(a.decision)) } }
                            td { (a.decider.as_str()) @if let Some(c) = &a.channel { " (" (c) ")" } }
                            td { (a.reason) }
                        } } }
                    } }
                }
            }
        },
    ))
}

/// The pending approvals, newest first, as the page and the live stream render them.
pub fn pending(ui: &Dashboard, viewer: &Viewer) -> Result<Markup, PageError> {
    let list = ui.inner.engine.approvals().list(&ApprovalFilter {
        task_id: None,
        pending_only: true,
        limit: LIMIT,
    })?;
    let now = Timestamp::now();
    Ok(html! {
        @if list.is_empty() { p { "Nothing is waiting." } }
        ul.approvals { @for a in &list { (item(a, viewer, now)) } }
    })
}

fn item(a: &Approval, viewer: &Viewer, now: Timestamp) -> Markup {
    let left = seconds_left(a, now).unwrap_or(0);
    let action = format!("/approvals/{}/answer", encode(&a.id));
    html! {
        li.approval id={ "a-" (a.id) } {
            p {
                strong { (tool(&a.tool)) }
                " — task " a href={ "/tasks/" (encode(a.task_id.as_str())) } { code { (short(a.task_id.as_str())) } }
                " (" (a.agent) ", " (a.role) ")"
            }
            p { (a.reason) @if let Some(r) = &a.rule_id { " (rule " code { (r) } ")" } }
            p { "Deadline in " span.countdown data-deadline=(a.deadline.0) { (left) " s" } }
            @if viewer.audience == Audience::Supervisor {
                form.answer method="post" action=(action) {
                    (layout::csrf_field(viewer))
                    label { "Reason (optional) " input type="text" name="reason" maxlength="4096"; }
                    button type="submit" name="answer" value="allow" { "Approve" }
                    button type="submit" name="answer" value="allow-for-task" { "Allow for this task" }
                    button type="submit" name="answer" value="deny" { "Deny" }
                }
            }
        }
    }
}

/// A tool call: its title, command (as sent, when it is not one plain command) and paths.
fn tool(t: &ToolCallSummary) -> Markup {
    html! {
        span { (t.title) " (" (t.kind.as_str()) ")" }
        @if let Some(cmd) = &t.command { " " code { (cmd.join(" ")) } }
        @if let Some(script) = &t.script { " runs " code.sent { (script) } }
        @if let Some(d) = &t.destination { " connects to " code { (d) } }
        @for p in &t.paths { " " code { (p.display().to_string()) } }
    }
}
