//! The tasks page: every task, newest first, with its state, agent, role, workspace kind,
//! duration, tokens and error code; filtered by state, agent and context; paginated by keyset
//! (`created_at`, then `id`, both descending), so a page costs the same over 10 tasks or
//! 100,000.
//!
//! The keyset cursor is `<created_at ms>_<task id>`. The engine's filter pages on
//! `created_at` alone (strictly before), so this page asks for `created_at <= cursor` and
//! skips the rows at the cursor's instant that the previous page already showed, asking for
//! more rows only when many tasks share that millisecond. It never counts every task.

use crate::Dashboard;
use crate::pages::layout::{self, Nav};
use crate::web::{PageError, Viewer};
use axum::Extension;
use axum::extract::{Query, State};
use legate_core::{Task, TaskState, Timestamp};
use legate_engine::TaskFilter;
use maud::{Markup, html};

/// How many tasks a page shows.
pub const PAGE_SIZE: usize = 50;
/// The most rows one page may read to step over tasks sharing the cursor's millisecond.
const MAX_SCAN: usize = 100_000;

/// The page's query: filters and the cursor.
#[derive(Debug, Default, Clone, serde::Deserialize)]
pub struct TasksQuery {
    /// A task state (`working`, `completed`, …); empty for all.
    #[serde(default)]
    pub state: Option<String>,
    /// An agent name; empty for all.
    #[serde(default)]
    pub agent: Option<String>,
    /// A context id; empty for all.
    #[serde(default)]
    pub context: Option<String>,
    /// The keyset cursor: the last task of the previous page.
    #[serde(default)]
    pub before: Option<String>,
    /// Tasks per page (1 to [`MAX_PAGE_SIZE`]; default [`PAGE_SIZE`]).
    #[serde(default)]
    pub limit: Option<usize>,
}

/// The most tasks a page may show.
pub const MAX_PAGE_SIZE: usize = 500;

fn size_of(q: &TasksQuery) -> usize {
    q.limit.unwrap_or(PAGE_SIZE).clamp(1, MAX_PAGE_SIZE)
}

fn non_empty(v: &Option<String>) -> Option<String> {
    v.as_ref()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// Parses a cursor `<ms>_<id>`: `INVALID_INPUT` otherwise.
pub fn parse_cursor(text: &str) -> Result<(i64, String), PageError> {
    let bad = || {
        PageError::from(legate_core::Error::invalid_input(
            "the page cursor is not one this page made (`<ms>_<task id>`)",
        ))
    };
    let (ms, id) = text.split_once('_').ok_or_else(bad)?;
    let ms: i64 = ms.parse().map_err(|_| bad())?;
    if id.is_empty() || id.len() > 128 || ms < 0 {
        return Err(bad());
    }
    Ok((ms, id.to_string()))
}

/// The cursor after `task`.
pub fn cursor_of(task: &Task) -> String {
    format!("{}_{}", task.created_at.0, task.id.as_str())
}

/// One page of tasks under `base` (its `limit` and `before` ignored) after `cursor`, and
/// whether there are more.
pub fn page_of(
    ui: &Dashboard,
    base: &TaskFilter,
    cursor: Option<&(i64, String)>,
    size: usize,
) -> Result<(Vec<Task>, bool), PageError> {
    let mut limit = size + 1;
    loop {
        let filter = TaskFilter {
            limit,
            before: cursor.map(|(ms, _)| Timestamp(ms.saturating_add(1))),
            ..base.clone()
        };
        let got = ui.inner.engine.tasks(&filter)?;
        let full = got.len() == limit;
        let mut kept: Vec<Task> = got
            .into_iter()
            .filter(|t| {
                cursor.is_none_or(|(ms, id)| {
                    t.created_at.0 < *ms || (t.created_at.0 == *ms && t.id.as_str() < id.as_str())
                })
            })
            .collect();
        if kept.len() > size || !full || limit >= MAX_SCAN {
            let more = kept.len() > size;
            kept.truncate(size);
            return Ok((kept, more));
        }
        limit = (limit * 2).min(MAX_SCAN);
    }
}

/// The engine's filter for `q`: `INVALID_INPUT` for an unknown state.
pub fn filter_of(q: &TasksQuery) -> Result<TaskFilter, PageError> {
    let state = match non_empty(&q.state) {
        Some(s) => Some(TaskState::parse(&s).ok_or_else(|| {
            PageError::from(legate_core::Error::invalid_input(format!(
                "unknown task state {s:?}"
            )))
        })?),
        None => None,
    };
    Ok(TaskFilter {
        state,
        agent: non_empty(&q.agent),
        context_id: non_empty(&q.context),
        ..TaskFilter::default()
    })
}

/// The newest page under `q`'s filter, as the live stream redraws it.
pub fn first_page(ui: &Dashboard, q: &TasksQuery) -> Result<Markup, PageError> {
    let (tasks, _) = page_of(ui, &filter_of(q)?, None, size_of(q))?;
    Ok(listing(&tasks, Timestamp::now()))
}

fn listing(tasks: &[Task], now: Timestamp) -> Markup {
    html! {
        @if tasks.is_empty() {
            p { "No task matches." }
        } @else {
            (table(tasks, now))
        }
    }
}

/// `GET /tasks`.
pub async fn page(
    State(ui): State<Dashboard>,
    Extension(viewer): Extension<Viewer>,
    Query(q): Query<TasksQuery>,
) -> Result<Markup, PageError> {
    let base = filter_of(&q)?;
    let cursor = non_empty(&q.before).map(|c| parse_cursor(&c)).transpose()?;
    let (tasks, more) = page_of(&ui, &base, cursor.as_ref(), size_of(&q))?;
    let now = Timestamp::now();
    let next = more.then(|| tasks.last().map(cursor_of)).flatten();
    let live = link(&q, None).replacen("/tasks", "/tasks/live", 1);
    Ok(layout::page(
        "Tasks",
        Some(&viewer),
        Nav::Tasks,
        html! {
            h1 { "Tasks" }
            (filters(&q, base.state))
            section aria-label="Task list" {
                @if cursor.is_none() {
                    p.live-status aria-live="polite" data-live-status="" {}
                    div id="task-list" data-replace-stream=(live) data-replace-event="tasks" { (listing(&tasks, now)) }
                } @else {
                    (listing(&tasks, now))
                }
            }
            nav aria-label="Pages" {
                @if cursor.is_some() {
                    a href=(link(&q, None)) { "Newest" }
                    " "
                }
                @if let Some(next) = next {
                    a rel="next" href=(link(&q, Some(&next))) { "Older tasks" }
                }
            }
        },
    ))
}

/// The URL of this page with `q`'s filters and cursor `before`.
fn link(q: &TasksQuery, before: Option<&str>) -> String {
    let mut parts = Vec::new();
    let mut push = |k: &str, v: Option<String>| {
        if let Some(v) = v {
            parts.push(format!("{k}={}", encode(&v)));
        }
    };
    push("state", non_empty(&q.state));
    push("agent", non_empty(&q.agent));
    push("context", non_empty(&q.context));
    push(
        "limit",
        q.limit.map(|l| {
            size_of(&TasksQuery {
                limit: Some(l),
                ..TasksQuery::default()
            })
            .to_string()
        }),
    );
    push("before", before.map(str::to_string));
    if parts.is_empty() {
        "/tasks".to_string()
    } else {
        format!("/tasks?{}", parts.join("&"))
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn filters(q: &TasksQuery, state: Option<TaskState>) -> Markup {
    html! {
        form.filters method="get" action="/tasks" {
            label { "State "
                select name="state" {
                    option value="" selected[state.is_none()] { "any" }
                    @for s in TaskState::ALL {
                        option value=(s.as_str()) selected[state == Some(*s)] { (s.as_str()) }
                    }
                }
            }
            label { "Agent " input type="text" name="agent" value=(q.agent.clone().unwrap_or_default()); }
            label { "Context " input type="text" name="context" value=(q.context.clone().unwrap_or_default()); }
            button type="submit" { "Filter" }
        }
    }
}

/// Tokens a task counted: the total, or input plus output.
pub fn task_tokens(t: &Task) -> Option<u64> {
    let u = t.usage.as_ref()?;
    u.total_tokens.or(match (u.input_tokens, u.output_tokens) {
        (None, None) => None,
        (i, o) => Some(i.unwrap_or(0).saturating_add(o.unwrap_or(0))),
    })
}

/// How long a task ran (so far, for one still running).
pub fn task_duration(t: &Task, now: Timestamp) -> i64 {
    let end = if t.state.is_terminal() || t.state == TaskState::InputRequired {
        t.updated_at
    } else {
        now
    };
    end.0 - t.created_at.0
}

fn table(tasks: &[Task], now: Timestamp) -> Markup {
    html! {
        div.scroll {
            table.tasks {
                caption.visually-hidden { "Tasks, newest first" }
                thead { tr {
                    th scope="col" { "Task" } th scope="col" { "Created" } th scope="col" { "State" }
                    th scope="col" { "Agent" } th scope="col" { "Role" } th scope="col" { "Workspace" }
                    th scope="col" { "Duration" } th scope="col" { "Tokens" } th scope="col" { "Error" }
                } }
                tbody {
                    @for t in tasks {
                        tr {
                            td { a href={ "/tasks/" (encode(t.id.as_str())) } { code { (short(t.id.as_str())) } } }
                            td { (layout::time(t.created_at)) }
                            td { span class={ "state state-" (t.state.as_str()) } { (t.state.as_str()) } }
                            td { (t.agent) }
                            td { (t.role.as_ref().map(|r| r.name.as_str()).unwrap_or("—")) }
                            td { (t.workspace.as_str()) }
                            td { (layout::duration(task_duration(t, now))) }
                            td.num { (layout::tokens(task_tokens(t))) }
                            td { @if let Some(e) = &t.error { code { (e.code.as_str()) } } }
                        }
                    }
                }
            }
        }
    }
}

/// The first 8 characters of an id.
pub fn short(id: &str) -> &str {
    id.char_indices().nth(8).map_or(id, |(i, _)| &id[..i])
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever a client sends as a cursor, it parses or is INVALID_INPUT, never a panic.
        #[test]
        fn hostile_cursors(text in ".{0,200}") {
            if let Ok((ms, id)) = parse_cursor(&text) {
                prop_assert!(ms >= 0 && !id.is_empty());
            }
        }

        #[test]
        fn encoded_values_hold_no_separator(v in ".{0,60}") {
            let e = encode(&v);
            prop_assert!(!e.contains('&') && !e.contains('=') && !e.contains('#') && !e.contains(' '));
        }
    }

    /// A remote agent reports whatever counts it likes: the list must not overflow on them.
    #[test]
    fn huge_remote_counts_do_not_overflow() {
        let mut t = legate_core::Task::new("t", "c", "remote", "p");
        t.usage = Some(legate_core::Usage {
            input_tokens: Some(u64::MAX),
            output_tokens: Some(2),
            ..legate_core::Usage::default()
        });
        assert_eq!(task_tokens(&t), Some(u64::MAX));
    }

    #[test]
    fn short_ids() {
        assert_eq!(short("0123456789"), "01234567");
        assert_eq!(short("abc"), "abc");
    }
}
