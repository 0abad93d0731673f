//! `GET /metrics` on `legate serve`'s A2A and MCP fronts: the engine's numbers
//! (`engine.metrics().snapshot()`) rendered in the Prometheus text format, the same document
//! on either. On the A2A front it is behind the same caller token as the front's other
//! endpoints (the guard here; the `Host`/`Origin` allowlist is applied around the whole router
//! by `crate::a2a`); on the MCP front [`routes`] is mounted beside `/mcp`, behind legate-mcp's
//! own allowlist and caller guard (`crate::mcp`).
//!
//! This module renders and guards; it never computes a number or shapes a label value (the
//! engine did both) and never logs a token.

pub mod exposition;
pub mod otlp;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use exposition::{Exposition, Kind};
use legate_engine::{Engine, HistogramSnapshot, MetricsSnapshot};
use legate_token::guard::refusal;
use legate_token::{Denied, Gate};
use std::sync::Arc;

/// The path metrics are served at.
pub const PATH: &str = "/metrics";

/// `GET /metrics` with no guard of its own: for a front that puts its own in front of it.
pub fn routes(engine: Engine) -> axum::Router {
    axum::Router::new().route(
        PATH,
        axum::routing::get(move || {
            let engine = engine.clone();
            async move { scrape(&engine).await }
        }),
    )
}

/// `GET /metrics` on the A2A front, behind `gate` (none: the front serves without a token,
/// and so does this).
pub fn router(engine: Engine, gate: Option<Gate>) -> axum::Router {
    routes(engine).layer(axum::middleware::from_fn_with_state(
        gate.map(Arc::new),
        guard,
    ))
}

async fn guard(State(gate): State<Option<Arc<Gate>>>, request: Request, next: Next) -> Response {
    if let Some(gate) = gate {
        let authorization = request
            .headers()
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or(""));
        if let Err(denied) = gate.check(authorization) {
            tracing::info!(
                token_present = denied != Denied::Missing,
                "refused a metrics scrape: no valid bearer token"
            );
            let mut response = refusal(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                &format!(
                    "{}; see $LEGATE_HOME/a2a-token",
                    denied.message(gate.audience())
                ),
            );
            response.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"legate\""),
            );
            return response;
        }
    }
    if !legate_token::serve::mark_authenticated(request.extensions()) {
        return legate_token::serve::no_room();
    }
    next.run(request).await
}

async fn scrape(engine: &Engine) -> Response {
    match engine.metrics().snapshot().await {
        Ok(snapshot) => {
            let mut response = render(&snapshot).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(exposition::CONTENT_TYPE),
            );
            response
        }
        Err(e) => {
            tracing::warn!(code = e.code.as_str(), error = %e.detail(), "a metrics scrape failed");
            refusal(
                StatusCode::INTERNAL_SERVER_ERROR,
                e.code.as_str(),
                &e.message,
            )
        }
    }
}

/// The snapshot as a Prometheus text document.
pub fn render(s: &MetricsSnapshot) -> String {
    let mut e = Exposition::default();
    e.family(
        "legate_tasks",
        Kind::Gauge,
        "Tasks the store keeps, by agent and state.",
    );
    for t in &s.tasks {
        e.count(
            "legate_tasks",
            &[("agent", &t.agent), ("state", &t.state)],
            t.count,
        );
    }
    e.family(
        "legate_permission_decisions_total",
        Kind::Counter,
        "Permission decisions sent to agents, by who decided and the outcome.",
    );
    for d in &s.decisions {
        e.count(
            "legate_permission_decisions_total",
            &[("decider", &d.decider), ("outcome", &d.outcome)],
            d.count,
        );
    }
    // The metrics of one sample without labels.
    let single: [(&str, Kind, &str, f64); 6] = [
        (
            "legate_approvals_pending",
            Kind::Gauge,
            "Permission requests waiting in the approval queue.",
            s.approvals_pending as f64,
        ),
        (
            "legate_approvals_oldest_age_seconds",
            Kind::Gauge,
            "How long the oldest pending approval has waited (0 when none waits).",
            s.oldest_approval_age_secs,
        ),
        (
            "legate_queue_depth",
            Kind::Gauge,
            "Tasks waiting for a running place.",
            s.queued as f64,
        ),
        (
            "legate_tasks_running",
            Kind::Gauge,
            "Tasks running a turn in this process.",
            s.running as f64,
        ),
        (
            "legate_events_relayed_total",
            Kind::Counter,
            "Stored task events this process announced to its subscribers.",
            s.events_relayed as f64,
        ),
        (
            "legate_copies",
            Kind::Gauge,
            "Copy workspaces on disk.",
            s.disk.copies.workspaces as f64,
        ),
    ];
    for (name, kind, help, value) in single {
        e.family(name, kind, help);
        e.sample(name, &[], value);
    }
    histogram(
        &mut e,
        "legate_queue_wait_seconds",
        "How long tasks that started waited for a running place.",
        &s.queue_wait,
    );
    histogram(
        &mut e,
        "legate_relay_lag_seconds",
        "For each batch of an agent's events stored and announced, how long since the backend reported its oldest.",
        &s.relay_lag,
    );
    e.family(
        "legate_workspace_disk_bytes",
        Kind::Gauge,
        "Bytes allocated by the copies and their baselines (a lower bound when the walk was cut).",
    );
    let dirs = [("copies", s.disk.copies), ("baselines", s.disk.baselines)];
    for (dir, usage) in dirs {
        e.count("legate_workspace_disk_bytes", &[("dir", dir)], usage.bytes);
    }
    e.family(
        "legate_workspace_disk_complete",
        Kind::Gauge,
        "1 when the last disk walk saw every entry, 0 when it stopped at its bound.",
    );
    for (dir, usage) in dirs {
        e.count(
            "legate_workspace_disk_complete",
            &[("dir", dir)],
            u64::from(usage.complete),
        );
    }
    e.family(
        "legate_task_tokens",
        Kind::Gauge,
        "Tokens the agents reported on the tasks the store keeps, by agent, model and kind.",
    );
    for t in &s.tokens {
        e.count(
            "legate_task_tokens",
            &[("agent", &t.agent), ("model", &t.model), ("kind", t.kind)],
            t.tokens,
        );
    }
    let warm: [(&str, Kind, &str, WarmValue); 4] = [
        (
            "legate_warm_sessions",
            Kind::Gauge,
            "Warm sessions ready to be handed to a task, by agent.",
            |w| w.ready,
        ),
        (
            "legate_warm_sessions_wanted",
            Kind::Gauge,
            "Warm sessions each agent is configured to keep ready ([agents.NAME] warm).",
            |w| w.wanted,
        ),
        (
            "legate_warm_handovers_total",
            Kind::Counter,
            "Warm sessions handed to tasks since the process started, by agent.",
            |w| w.handed,
        ),
        (
            "legate_warm_failures_total",
            Kind::Counter,
            "Warm sessions that failed to open or died while ready, since the process started, by agent.",
            |w| w.failed,
        ),
    ];
    // Only when an agent keeps warm sessions: a family with no sample says nothing.
    if !s.warm.is_empty() {
        for (name, kind, help, value) in warm {
            e.family(name, kind, help);
            for w in &s.warm {
                e.count(name, &[("agent", &w.agent)], value(w));
            }
        }
    }
    e.finish()
}

/// Which number of an agent's warm sessions a family shows.
type WarmValue = fn(&legate_engine::WarmGauge) -> u64;

fn histogram(e: &mut Exposition, name: &str, help: &str, h: &HistogramSnapshot) {
    e.family(name, Kind::Histogram, help);
    let bucket = format!("{name}_bucket");
    for (bound, n) in &h.buckets {
        e.count(&bucket, &[("le", &bound.to_string())], *n);
    }
    e.count(&bucket, &[("le", "+Inf")], h.count);
    e.sample(&format!("{name}_sum"), &[], h.sum_secs);
    e.count(&format!("{name}_count"), &[], h.count);
}
