//! The engine's metrics over OTLP, when the `OTEL_*` variables ask for it
//! (`legate_trace::export::choose` with `Signal::Metrics`: `OTEL_METRICS_EXPORTER=otlp`, or an
//! OTLP endpoint variable; off otherwise, with no exporter, no thread and no connection).
//!
//! The numbers are the ones `GET /metrics` renders, read from `engine.metrics().snapshot()` when
//! the SDK's periodic reader collects (every `OTEL_METRIC_EXPORT_INTERVAL`, 60 s by default,
//! and once more at shutdown): observable gauges and counters, named as on `/metrics` with a
//! counter's `_total` left to the Prometheus side (OpenTelemetry's naming). The queue-wait and
//! relay-lag histograms go as their sums and counts (OpenTelemetry has no observable
//! histogram).
//!
//! This module registers instruments and reads snapshots; it never computes a number or shapes
//! a label (the engine did both), and takes the snapshot on the runtime while the reader's own
//! thread waits for it.

use legate_engine::{Engine, MetricsSnapshot};
use opentelemetry::KeyValue;
use opentelemetry::metrics::{AsyncInstrument, Meter, MeterProvider as _};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long one snapshot serves the instruments: the callbacks of one collection run one
/// after another, and read one snapshot rather than one each.
const FRESH: Duration = Duration::from_millis(500);

/// How long a collection waits for the snapshot.
const SNAPSHOT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long the last export at shutdown may take.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The snapshot source the instruments' callbacks share.
struct Source {
    engine: Engine,
    runtime: tokio::runtime::Handle,
    last: Mutex<Option<(Instant, Arc<MetricsSnapshot>)>>,
}

impl Source {
    /// The numbers now (or as of at most [`FRESH`] ago); `None` when they could not be read.
    fn snapshot(&self) -> Option<Arc<MetricsSnapshot>> {
        let mut last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, s)) = last.as_ref()
            && at.elapsed() < FRESH
        {
            return Some(s.clone());
        }
        // The snapshot is taken on the runtime; this thread (the reader's own) waits for it.
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let engine = self.engine.clone();
        self.runtime.spawn(async move {
            let _ = tx.send(engine.metrics().snapshot().await);
        });
        let Ok(taken) = rx.recv_timeout(SNAPSHOT_TIMEOUT) else {
            tracing::warn!("an OTLP metrics collection found no snapshot in time");
            return None;
        };
        match taken {
            Ok(s) => {
                let s = Arc::new(s);
                *last = Some((Instant::now(), s.clone()));
                Some(s)
            }
            Err(e) => {
                tracing::warn!(code = e.code.as_str(), error = %e.detail(), "an OTLP metrics collection failed");
                None
            }
        }
    }
}

/// The OTLP metrics export while it runs; [`Exporting::shutdown`] sends the last numbers.
pub struct Exporting {
    provider: SdkMeterProvider,
}

impl Exporting {
    /// Collects and exports once more, then stops (within [`FLUSH_TIMEOUT`]).
    pub async fn shutdown(self) {
        let provider = self.provider;
        // The reader's thread calls back into the runtime for the snapshot: wait off its
        // workers.
        let done =
            tokio::task::spawn_blocking(move || provider.shutdown_with_timeout(FLUSH_TIMEOUT))
                .await;
        if let Ok(Err(e)) = done {
            eprintln!("warning: metrics not all sent: {e}");
        }
    }
}

/// Starts exporting `engine`'s metrics for `process` when the variables say so; `None` when
/// they do not (or the exporter could not be built, said on stderr). Call it inside the
/// runtime.
pub fn start(engine: &Engine, process: &'static str) -> Option<Exporting> {
    use legate_trace::export::{Signal, choose_from_env, metric_exporter, resource};
    let exporter = metric_exporter(choose_from_env(Signal::Metrics))?;
    let provider = SdkMeterProvider::builder()
        .with_periodic_exporter(exporter)
        .with_resource(resource(process))
        .build();
    let source = Arc::new(Source {
        engine: engine.clone(),
        runtime: tokio::runtime::Handle::current(),
        last: Mutex::new(None),
    });
    register(&provider.meter("legate"), &source);
    Some(Exporting { provider })
}

/// One point per agent that keeps warm sessions: `value` of its gauge, labelled by agent.
fn warm_points(
    s: &MetricsSnapshot,
    value: fn(&legate_engine::WarmGauge) -> u64,
) -> Vec<(u64, Vec<KeyValue>)> {
    s.warm
        .iter()
        .map(|w| (value(w), attrs(&[("agent", &w.agent)])))
        .collect()
}

/// An observer's attributes from (name, value) pairs.
fn attrs(pairs: &[(&'static str, &str)]) -> Vec<KeyValue> {
    pairs
        .iter()
        .map(|(k, v)| KeyValue::new(*k, (*v).to_string()))
        .collect()
}

/// One instrument's readings (value, attributes) from a snapshot.
type Points<T> = fn(&MetricsSnapshot) -> Vec<(T, Vec<KeyValue>)>;
/// An integer instrument's.
type U64Points = Points<u64>;
/// A float instrument's.
type F64Points = Points<f64>;

fn observe<T: Copy + 'static>(
    source: &Arc<Source>,
    points: Points<T>,
) -> impl Fn(&dyn AsyncInstrument<T>) + Send + Sync + 'static {
    let source = source.clone();
    move |observer: &dyn AsyncInstrument<T>| {
        if let Some(s) = source.snapshot() {
            for (value, attributes) in points(&s) {
                observer.observe(value, &attributes);
            }
        }
    }
}

fn register(meter: &Meter, source: &Arc<Source>) {
    let gauges: [(&'static str, &'static str, &'static str, U64Points); 10] = [
        (
            "legate_tasks",
            "Tasks the store keeps, by agent and state.",
            "{task}",
            |s| {
                s.tasks
                    .iter()
                    .map(|t| (t.count, attrs(&[("agent", &t.agent), ("state", &t.state)])))
                    .collect()
            },
        ),
        (
            "legate_approvals_pending",
            "Permission requests waiting in the approval queue.",
            "{request}",
            |s| vec![(s.approvals_pending, vec![])],
        ),
        (
            "legate_queue_depth",
            "Tasks waiting for a running place.",
            "{task}",
            |s| vec![(s.queued, vec![])],
        ),
        (
            "legate_tasks_running",
            "Tasks running a turn in this process.",
            "{task}",
            |s| vec![(s.running, vec![])],
        ),
        ("legate_copies", "Copy workspaces on disk.", "{copy}", |s| {
            vec![(s.disk.copies.workspaces, vec![])]
        }),
        (
            "legate_workspace_disk_bytes",
            "Bytes allocated by the copies and their baselines (a lower bound when the walk was cut).",
            "By",
            |s| {
                vec![
                    (s.disk.copies.bytes, attrs(&[("dir", "copies")])),
                    (s.disk.baselines.bytes, attrs(&[("dir", "baselines")])),
                ]
            },
        ),
        (
            "legate_workspace_disk_complete",
            "1 when the last disk walk saw every entry, 0 when it stopped at its bound.",
            "1",
            |s| {
                vec![
                    (
                        u64::from(s.disk.copies.complete),
                        attrs(&[("dir", "copies")]),
                    ),
                    (
                        u64::from(s.disk.baselines.complete),
                        attrs(&[("dir", "baselines")]),
                    ),
                ]
            },
        ),
        (
            "legate_task_tokens",
            "Tokens the agents reported on the tasks the store keeps, by agent, model and kind.",
            "{token}",
            |s| {
                s.tokens
                    .iter()
                    .map(|t| {
                        let kv = [
                            ("agent", t.agent.as_str()),
                            ("model", &t.model),
                            ("kind", t.kind),
                        ];
                        (t.tokens, attrs(&kv))
                    })
                    .collect()
            },
        ),
        (
            "legate_warm_sessions",
            "Warm sessions ready to be handed to a task, by agent.",
            "{session}",
            |s| warm_points(s, |w| w.ready),
        ),
        (
            "legate_warm_sessions_wanted",
            "Warm sessions each agent is configured to keep ready ([agents.NAME] warm).",
            "{session}",
            |s| warm_points(s, |w| w.wanted),
        ),
    ];
    for (name, help, unit, points) in gauges {
        meter
            .u64_observable_gauge(name)
            .with_description(help)
            .with_unit(unit)
            .with_callback(observe(source, points))
            .build();
    }
    let counters: [(&'static str, &'static str, &'static str, U64Points); 6] = [
        (
            "legate_permission_decisions",
            "Permission decisions sent to agents, by who decided and the outcome.",
            "{decision}",
            |s| {
                s.decisions
                    .iter()
                    .map(|d| {
                        let kv = [("decider", d.decider.as_str()), ("outcome", &d.outcome)];
                        (d.count, attrs(&kv))
                    })
                    .collect()
            },
        ),
        (
            "legate_events_relayed",
            "Stored task events this process announced to its subscribers.",
            "{event}",
            |s| vec![(s.events_relayed, vec![])],
        ),
        (
            "legate_queue_wait_seconds_count",
            "How many tasks that started waited for a running place.",
            "{task}",
            |s| vec![(s.queue_wait.count, vec![])],
        ),
        (
            "legate_relay_lag_seconds_count",
            "Batches of agents' events stored and announced (the relay-lag observations).",
            "{batch}",
            |s| vec![(s.relay_lag.count, vec![])],
        ),
        (
            "legate_warm_handovers",
            "Warm sessions handed to tasks since the process started, by agent.",
            "{session}",
            |s| warm_points(s, |w| w.handed),
        ),
        (
            "legate_warm_failures",
            "Warm sessions that failed to open or died while ready, since the process started, by agent.",
            "{attempt}",
            |s| warm_points(s, |w| w.failed),
        ),
    ];
    for (name, help, unit, points) in counters {
        meter
            .u64_observable_counter(name)
            .with_description(help)
            .with_unit(unit)
            .with_callback(observe(source, points))
            .build();
    }
    let age: F64Points = |s| vec![(s.oldest_approval_age_secs, vec![])];
    meter
        .f64_observable_gauge("legate_approvals_oldest_age_seconds")
        .with_description("How long the oldest pending approval has waited (0 when none waits).")
        .with_unit("s")
        .with_callback(observe(source, age))
        .build();
    let sums: [(&'static str, &'static str, F64Points); 2] = [
        (
            "legate_queue_wait_seconds_sum",
            "How long the tasks that started waited for a running place, in all.",
            |s| vec![(s.queue_wait.sum_secs, vec![])],
        ),
        (
            "legate_relay_lag_seconds_sum",
            "The relay lags of every batch of agents' events stored and announced, in all.",
            |s| vec![(s.relay_lag.sum_secs, vec![])],
        ),
    ];
    for (name, help, points) in sums {
        meter
            .f64_observable_counter(name)
            .with_description(help)
            .with_unit("s")
            .with_callback(observe(source, points))
            .build();
    }
}
