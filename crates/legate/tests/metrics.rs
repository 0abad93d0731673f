//! `GET /metrics` on `legate serve`: Prometheus text behind the A2A front's caller token,
//! parsed with a Prometheus text-format parser, its numbers moving with the work of a real
//! task on the built-in revisor agent; and a real Prometheus server (Debian's `prometheus`)
//! scraping it on 127.0.0.1 with a bearer token file, read back through its HTTP API.
//!
//! Prometheus is found on `PATH` (or `LEGATE_PROMETHEUS`); when it is not installed the
//! second test prints `SKIPPED` and passes, unless `LEGATE_REQUIRE_PROMETHEUS` or `CI` is set
//! (`.ci/run` installs it and sets the former): then it fails.
//!
//! `legate serve --mcp` alone serves the same document beside `/mcp`, behind the MCP front's
//! allowlist and caller token.
//!
//! With an OTLP endpoint in its environment, `legate serve` exports the same numbers as
//! OpenTelemetry metrics to the test kit's receiver on 127.0.0.1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::{CliHome, KillOnDrop};
use legate_frontkit::poll;
use legate_frontkit::served::{McpServed, Raw, Served, a2a_access, raw};
use legate_testkit::otlp::OtlpReceiver;
use prometheus_parse::{Scrape, Value};
use serde_json::json;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");
/// Switch that makes a missing Prometheus a failure (`.ci/run` sets it; `CI` counts too).
const REQUIRE_PROMETHEUS_ENV: &str = "LEGATE_REQUIRE_PROMETHEUS";

/// `legate serve` (A2A) on a fresh home, and what a client of it needs.
struct Legate {
    home: CliHome,
    served: Served,
    /// `127.0.0.1:PORT` of the A2A front.
    addr: String,
    /// `Bearer <a2a-token>`.
    bearer: String,
}

impl Legate {
    fn start() -> Legate {
        Self::start_in(CliHome::new(LEGATE))
    }

    fn start_in(home: CliHome) -> Legate {
        let served = home.serve(&["--port", "0"]);
        let (addr, bearer) = a2a_access(&served, &home.home());
        Legate {
            home,
            served,
            addr,
            bearer,
        }
    }

    fn token_file(&self, name: &str) -> PathBuf {
        self.home.home().join(name)
    }
}

fn get(served: &Legate, path: &str, auth: Option<&str>) -> Raw {
    let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
    raw(&served.addr, "GET", path, &served.addr, &headers, "")
}

fn scrape(served: &Legate) -> Scrape {
    let r = get(served, "/metrics", Some(&served.bearer));
    assert_eq!(r.status, 200, "{r:?}");
    assert!(
        r.head.contains("content-type: text/plain; version=0.0.4"),
        "{r:?}"
    );
    Scrape::parse(r.body.lines().map(|l| Ok(l.to_string()))).unwrap()
}

/// The value of the sample `name` whose labels include `labels` (0 when there is none).
fn value(s: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    s.samples
        .iter()
        .filter(|x| x.metric == name)
        .filter(|x| labels.iter().all(|(k, v)| x.labels.get(k) == Some(*v)))
        .map(|x| match &x.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => *v,
            other => panic!("{name} is not a single value: {other:?}"),
        })
        .sum()
}

/// Runs one task on revisor that writes a file (one permission decision, by the table).
fn run_task(served: &Legate, message_id: &str) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": {
        "messageId": message_id, "role": "ROLE_USER",
        "parts": [{"text": "write notes.txt: hello"}]}}});
    let r = raw(
        &served.addr,
        "POST",
        "/agents/revisor",
        &served.addr,
        &[
            ("Content-Type", "application/json"),
            ("A2A-Version", "1.0"),
            ("Authorization", &served.bearer),
        ],
        &body.to_string(),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let answer: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        answer["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{answer}"
    );
}

#[test]
fn metrics_need_the_caller_token_parse_as_prometheus_text_and_move_with_work() {
    let served = Legate::start();
    let printed = &served.served.printed;
    assert!(
        printed.iter().any(|l| l.starts_with("metrics: http://")),
        "{printed:?}"
    );

    // No token, a wrong one, and the supervisor's: 401, and nothing of the numbers.
    let none = get(&served, "/metrics", None);
    assert_eq!(none.status, 401, "{none:?}");
    assert!(none.head.contains("www-authenticate: bearer"), "{none:?}");
    assert!(!none.body.contains("legate_"), "{none:?}");
    let wrong = get(
        &served,
        "/metrics",
        Some(&format!("Bearer {}", "f".repeat(64))),
    );
    assert_eq!(wrong.status, 401, "{wrong:?}");
    let supervisor_token = std::fs::read_to_string(served.token_file("supervisor-token")).unwrap();
    let supervisor = format!("Bearer {}", supervisor_token.trim());
    let refused = get(&served, "/metrics", Some(&supervisor));
    assert_eq!(refused.status, 401, "{refused:?}");
    assert!(
        refused.body.contains("supervisor token is refused"),
        "{refused:?}"
    );
    // A foreign Host is refused before the token, as on every other path of the front.
    let foreign = raw(
        &served.addr,
        "GET",
        "/metrics",
        "evil.example",
        &[("Authorization", &served.bearer)],
        "",
    );
    assert_eq!(foreign.status, 403, "{foreign:?}");

    let before = scrape(&served);
    for family in [
        "legate_tasks",
        "legate_permission_decisions_total",
        "legate_approvals_pending",
        "legate_queue_wait_seconds",
        "legate_relay_lag_seconds",
        "legate_events_relayed_total",
        "legate_workspace_disk_bytes",
        "legate_task_tokens",
    ] {
        assert!(before.docs.contains_key(family), "no HELP for {family}");
    }
    let completed = [("agent", "revisor"), ("state", "completed")];
    let allowed = [("decider", "table"), ("outcome", "allow")];
    let tasks0 = value(&before, "legate_tasks", &completed);
    let events0 = value(&before, "legate_events_relayed_total", &[]);
    let decisions0 = value(&before, "legate_permission_decisions_total", &allowed);
    let waits0 = wait_count(&before);
    let (lags0, _) = histogram(&before, "legate_relay_lag_seconds");

    run_task(&served, "m-metrics-1");
    let after = scrape(&served);
    assert_eq!(value(&after, "legate_tasks", &completed), tasks0 + 1.0);
    assert!(
        value(&after, "legate_events_relayed_total", &[]) > events0,
        "events relayed did not grow"
    );
    assert_eq!(
        value(&after, "legate_permission_decisions_total", &allowed),
        decisions0 + 1.0
    );
    assert_eq!(wait_count(&after), waits0 + 1);
    // The agent's events were relayed in batches, each observed once, within the buckets.
    let (lags, lag_buckets) = histogram(&after, "legate_relay_lag_seconds");
    assert!(
        lags > lags0,
        "the relay lag saw no batch: {lags0} then {lags}"
    );
    assert!(
        lag_buckets.first().is_some_and(|(le, _)| *le == 0.001),
        "{lag_buckets:?}"
    );
    assert!(
        lag_buckets.windows(2).all(|w| w[0].1 <= w[1].1),
        "not cumulative: {lag_buckets:?}"
    );
    let lag_sum = value(&after, "legate_relay_lag_seconds_sum", &[]);
    assert!(
        lag_sum > 0.0 && lag_sum < 60.0 * lags as f64,
        "sum {lag_sum} over {lags} batches"
    );
    assert_eq!(value(&after, "legate_approvals_pending", &[]), 0.0);
    assert_eq!(value(&after, "legate_queue_depth", &[]), 0.0);

    // A second scrape with no work between counts nothing twice.
    let again = scrape(&served);
    assert_eq!(
        value(&again, "legate_permission_decisions_total", &allowed),
        decisions0 + 1.0
    );
}

/// Warm sessions in the metrics: each agent configured to keep some has its ready and wanted
/// gauges and its hand-over and failure counters, labelled by agent; one whose adapter cannot
/// start counts failures and never has a session ready. None of the families is shown when
/// no agent keeps warm sessions.
#[test]
fn warm_sessions_are_counted_by_agent() {
    let cold = Legate::start();
    assert!(
        !scrape(&cold)
            .samples
            .iter()
            .any(|x| x.metric.starts_with("legate_warm_")),
        "no agent keeps warm sessions"
    );
    drop(cold);
    let served = Legate::start_in(CliHome::with_config(
        LEGATE,
        "[agents.revisor]\nwarm = 1\n[agents.gone]\ncommand = \"/nonexistent/legate-metrics-agent\"\nwarm = 1\n",
    ));
    let s = poll::until(
        Duration::from_secs(60),
        "a warm revisor and a failure to warm gone",
        || {
            let s = scrape(&served);
            (value(&s, "legate_warm_sessions", &[("agent", "revisor")]) == 1.0
                && value(&s, "legate_warm_failures_total", &[("agent", "gone")]) >= 1.0)
                .then_some(s)
        },
    );
    let sampled = |name: &str, agent: &str| {
        s.samples
            .iter()
            .any(|x| x.metric == name && x.labels.get("agent") == Some(agent))
    };
    for name in [
        "legate_warm_sessions",
        "legate_warm_sessions_wanted",
        "legate_warm_handovers_total",
        "legate_warm_failures_total",
    ] {
        for agent in ["revisor", "gone"] {
            assert!(sampled(name, agent), "{name} {agent}");
        }
    }
    for agent in ["revisor", "gone"] {
        assert_eq!(
            value(&s, "legate_warm_sessions_wanted", &[("agent", agent)]),
            1.0
        );
        assert_eq!(
            value(&s, "legate_warm_handovers_total", &[("agent", agent)]),
            0.0
        );
    }
    assert_eq!(value(&s, "legate_warm_sessions", &[("agent", "gone")]), 0.0);
    assert_eq!(
        value(&s, "legate_warm_failures_total", &[("agent", "revisor")]),
        0.0
    );
}

#[test]
fn with_the_mcp_front_alone_metrics_are_served_beside_mcp_behind_its_token() {
    let home = CliHome::new(LEGATE);
    let mut mcp = McpServed::start(&home, &["--mcp", "--port", "0"]);
    let printed = &mcp.served.printed;
    assert!(
        !printed.iter().any(|l| l.starts_with("Legate A2A server")),
        "{printed:?}"
    );
    let metrics_url = legate_frontkit::served::url_on(printed, "metrics: ");
    assert_eq!(metrics_url, format!("http://{}/metrics", mcp.addr));
    let addr = mcp.addr.clone();
    let get = |host: &str, auth: Option<&str>| {
        let headers: Vec<(&str, &str)> = auth.map(|a| ("Authorization", a)).into_iter().collect();
        raw(&addr, "GET", "/metrics", host, &headers, "")
    };
    let bearer = format!("Bearer {}", mcp.token);

    // No token, a wrong one, another front's, the supervisor's: 401 and none of the numbers.
    let none = get(&addr, None);
    assert_eq!(none.status, 401, "{none:?}");
    assert!(none.head.contains("www-authenticate: bearer"), "{none:?}");
    assert!(!none.body.contains("legate_"), "{none:?}");
    let wrong = get(&addr, Some(&format!("Bearer {}", "f".repeat(64))));
    assert_eq!(wrong.status, 401, "{wrong:?}");
    assert!(!wrong.body.contains("legate_"), "{wrong:?}");
    let supervisor_token = std::fs::read_to_string(home.home().join("supervisor-token")).unwrap();
    let refused = get(&addr, Some(&format!("Bearer {}", supervisor_token.trim())));
    assert_eq!(refused.status, 401, "{refused:?}");
    assert!(
        refused.body.contains("supervisor token is refused"),
        "{refused:?}"
    );
    // A foreign Host is refused before the token, as for `/mcp`.
    let foreign = get("evil.example", Some(&bearer));
    assert_eq!(foreign.status, 403, "{foreign:?}");
    assert!(!foreign.body.contains("legate_"), "{foreign:?}");

    let parse = |r: &Raw| {
        assert_eq!(r.status, 200, "{r:?}");
        assert!(
            r.head.contains("content-type: text/plain; version=0.0.4"),
            "{r:?}"
        );
        Scrape::parse(r.body.lines().map(|l| Ok(l.to_string()))).unwrap()
    };
    let before = parse(&get(&addr, Some(&bearer)));
    for family in [
        "legate_tasks",
        "legate_relay_lag_seconds",
        "legate_events_relayed_total",
    ] {
        assert!(before.docs.contains_key(family), "no HELP for {family}");
    }
    // A task run by another process of the home shows in the store's numbers.
    let completed = [("agent", "revisor"), ("state", "completed")];
    let tasks0 = value(&before, "legate_tasks", &completed);
    let out = home.run(&["run", "write notes.txt: hello"]);
    assert!(out.status.success(), "{}", legate_frontkit::cli::text(&out));
    let after = parse(&get(&addr, Some(&bearer)));
    assert_eq!(value(&after, "legate_tasks", &completed), tasks0 + 1.0);
    // The MCP endpoint itself still answers as before; an unknown path names both.
    let unknown = raw(
        &addr,
        "GET",
        "/nothing",
        &addr,
        &[("Authorization", &bearer)],
        "",
    );
    assert_eq!(unknown.status, 404, "{unknown:?}");
    assert!(unknown.body.contains("/metrics"), "{unknown:?}");
    mcp.served.stop();
}

/// How many tasks the queue-wait histogram has seen.
fn wait_count(s: &Scrape) -> u64 {
    histogram(s, "legate_queue_wait_seconds").0
}

/// The histogram `name`: its count (the `+Inf` bucket) and its finite buckets (`le`, count).
fn histogram(s: &Scrape, name: &str) -> (u64, Vec<(f64, u64)>) {
    let h = s
        .samples
        .iter()
        .find(|x| x.metric == name)
        .unwrap_or_else(|| panic!("no histogram {name} in {:?}", s.samples));
    match &h.value {
        Value::Histogram(buckets) => {
            let inf = buckets.iter().find(|b| b.less_than.is_infinite()).unwrap();
            let finite = buckets
                .iter()
                .filter(|b| b.less_than.is_finite())
                .map(|b| (b.less_than, b.count as u64))
                .collect();
            (inf.count as u64, finite)
        }
        other => panic!("{name} is not a histogram: {other:?}"),
    }
}

fn switched_on(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| {
        let v = v.to_string_lossy().trim().to_ascii_lowercase();
        !v.is_empty() && v != "0" && v != "false"
    })
}

/// The Prometheus binary, or `None` (after printing `SKIPPED: …`) when it is not installed
/// and not required.
fn prometheus() -> Option<PathBuf> {
    let found = std::env::var_os("LEGATE_PROMETHEUS")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join("prometheus"))
                .find(|p| p.is_file())
        });
    if found.is_none() {
        assert!(
            !(switched_on(REQUIRE_PROMETHEUS_ENV) || switched_on("CI")),
            "prometheus is not installed, and {REQUIRE_PROMETHEUS_ENV} or CI is set, so the scrape test may not be skipped: apt-get install prometheus"
        );
        eprintln!(
            "SKIPPED: prometheus is not installed, so the real scrape of /metrics cannot run (apt-get install prometheus; set {REQUIRE_PROMETHEUS_ENV}=1 to make that a failure)"
        );
    }
    found
}

/// A port on 127.0.0.1 that was free a moment ago (Prometheus's `--web.listen-address`
/// takes no port 0 it would tell us).
fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// One query through Prometheus's HTTP API; the first result's value, if any.
fn query(prometheus: &str, promql: &str) -> Option<f64> {
    let encoded: String = promql
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect();
    let path = format!("/api/v1/query?query={encoded}");
    let r = std::panic::catch_unwind(|| raw(prometheus, "GET", &path, prometheus, &[], "")).ok()?;
    if r.status != 200 {
        return None;
    }
    let body: serde_json::Value = serde_json::from_str(&r.body).ok()?;
    let sample = body["data"]["result"].get(0)?;
    sample["value"][1].as_str()?.parse().ok()
}

#[test]
fn a_real_prometheus_scrapes_metrics_with_a_bearer_token_file() {
    let Some(binary) = prometheus() else {
        return;
    };
    let served = Legate::start();
    run_task(&served, "m-prometheus-1");

    let dir = tempfile::tempdir().unwrap();
    // Prometheus reads the token from a file of its own (trimmed), never from its config.
    let token_file = dir.path().join("legate-token");
    std::fs::copy(served.token_file("a2a-token"), &token_file).unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n\
             scrape_configs:\n  - job_name: legate\n    metrics_path: /metrics\n    scheme: http\n\
             \x20   authorization:\n      type: Bearer\n      credentials_file: {}\n\
             \x20   static_configs:\n      - targets: ['{}']\n",
            token_file.display(),
            served.addr
        ),
    )
    .unwrap();
    let web = format!("127.0.0.1:{}", free_port());
    let _prometheus = KillOnDrop(
        Command::new(&binary)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={web}"))
            .arg("--log.level=warn")
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start prometheus"),
    );

    // The scrape succeeded with the token (`up` is 1), and a series of Legate's own is there.
    poll::until(
        Duration::from_secs(90),
        "Prometheus scraping Legate",
        || (query(&web, "up{job=\"legate\"}")? == 1.0).then_some(()),
    );
    let completed = poll::until(
        Duration::from_secs(30),
        "the completed revisor task in Prometheus",
        || {
            query(
                &web,
                "legate_tasks{job=\"legate\",agent=\"revisor\",state=\"completed\"}",
            )
        },
    );
    assert_eq!(completed, 1.0);
    let relayed = poll::until(Duration::from_secs(30), "events relayed", || {
        query(&web, "legate_events_relayed_total")
    });
    assert!(relayed > 0.0, "{relayed}");
}

#[test]
fn with_an_otlp_endpoint_the_same_numbers_are_exported_as_opentelemetry_metrics() {
    let receiver = OtlpReceiver::start();
    // Revisor kept warm: the warm sessions' gauges and counters are exported too.
    let mut home = CliHome::with_config(LEGATE, "[agents.revisor]\nwarm = 1\n");
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") {
            home = home.env_remove(&k);
        }
    }
    // On through the spec's default (an endpoint), metrics only, collected every 200 ms.
    let home = home
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint())
        .env("OTEL_TRACES_EXPORTER", "none")
        .env("OTEL_METRIC_EXPORT_INTERVAL", "200")
        .env("OTEL_SERVICE_NAME", "legate-metrics");
    let mut served = Legate::start_in(home);
    run_task(&served, "otlp-metrics-1");
    let completed = value(
        &scrape(&served),
        "legate_tasks",
        &[("agent", "revisor"), ("state", "completed")],
    );
    assert_eq!(completed, 1.0);

    let points = poll::until(
        Duration::from_secs(30),
        "legate_tasks{agent=revisor,state=completed} at the receiver",
        || {
            let points = receiver.points();
            points
                .iter()
                .any(|p| {
                    p.metric == "legate_tasks"
                        && p.attributes.get("agent").map(String::as_str) == Some("revisor")
                        && p.attributes.get("state").map(String::as_str) == Some("completed")
                        && p.value == completed
                })
                .then_some(points)
        },
    );
    let last = |metric: &str| {
        points
            .iter()
            .rev()
            .find(|p| p.metric == metric)
            .unwrap_or_else(|| panic!("no {metric} in {points:?}"))
    };
    let tasks = last("legate_tasks");
    assert_eq!(
        (tasks.kind, tasks.service.as_str()),
        ("gauge", "legate-metrics")
    );
    // A counter goes as a monotonic sum, named without Prometheus' `_total`.
    let decisions = last("legate_permission_decisions");
    assert_eq!((decisions.kind, decisions.monotonic), ("sum", true));
    assert!(decisions.value >= 1.0, "{decisions:?}");
    assert_eq!(last("legate_queue_depth").value, 0.0);
    assert!(last("legate_events_relayed").monotonic);
    // The relay lag, as its count and sum: the task's batches were observed.
    let lags = last("legate_relay_lag_seconds_count");
    assert!(lags.monotonic && lags.value >= 1.0, "{lags:?}");
    assert!(last("legate_relay_lag_seconds_sum").value > 0.0);
    let wanted = last("legate_warm_sessions_wanted");
    assert_eq!(
        (
            wanted.kind,
            wanted.value,
            wanted.attributes.get("agent").map(String::as_str)
        ),
        ("gauge", 1.0, Some("revisor")),
        "{wanted:?}"
    );
    assert_eq!(last("legate_warm_sessions").kind, "gauge");
    for counter in ["legate_warm_handovers", "legate_warm_failures"] {
        let c = last(counter);
        assert_eq!((c.kind, c.monotonic), ("sum", true), "{c:?}");
    }
    assert!(
        points.iter().all(|p| p.service == "legate-metrics"),
        "{points:?}"
    );
    // Traces were turned off by their own variable: none arrived.
    assert!(receiver.requests().is_empty());
    served.served.stop();
}
