//! Traces, end to end (issue 34): real `legate` processes exporting OTLP/HTTP to a real
//! receiver on 127.0.0.1 that decodes the official OpenTelemetry protobufs
//! (`legate_testkit::otlp`). A task sent through a front to a remote Legate is one trace
//! whose spans come from both processes, continuing the caller's own trace; with no `OTEL_*`
//! variable nothing is exported and nothing connects (neither spans from a run nor metrics
//! from `legate serve`); over OTLP/gRPC (the receiver's tonic
//! `TraceService`) a task's spans arrive as over HTTP. A task keeps its trace: a reply into
//! it, sent in another caller trace, and a remote task re-attached after the front's `kill -9`
//! continue the trace the task began in.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use legate_frontkit::fleet::Fleet;
use legate_frontkit::fleet::{GATED, open_gate, wait_gate};
use legate_frontkit::poll;
use legate_frontkit::served::{A2aServed, raw};
use legate_frontkit::sse::frame_state;
use legate_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use serde_json::json;
use std::collections::HashSet;
use std::time::Duration;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// Held by each test that takes OTLP/HTTP's default port (4318) on 127.0.0.1: one at a time.
static DEFAULT_PORT: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The receiver on 4318, once no other test of this file holds it.
fn on_default_port() -> (std::sync::MutexGuard<'static, ()>, OtlpReceiver) {
    let held = DEFAULT_PORT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    // The previous holder's listener may close a moment after its test gave the port back.
    let receiver = poll::until(
        Duration::from_secs(20),
        "port 4318 (OTLP/HTTP's default) free for this test",
        || OtlpReceiver::bind("127.0.0.1:4318").ok(),
    );
    (held, receiver)
}

/// The caller's own trace and span (W3C `traceparent` it sends to the front).
const CALLER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const CALLER_SPAN: &str = "b7ad6b7169203331";

/// A home whose commands see none of the test runner's `OTEL_*` variables.
fn without_otel(mut cli: CliHome) -> CliHome {
    for (k, _) in std::env::vars() {
        if k.starts_with("OTEL_") {
            cli = cli.env_remove(&k);
        }
    }
    cli
}

fn named<'a>(spans: &'a [ReceivedSpan], service: &str, name: &str) -> Vec<&'a ReceivedSpan> {
    spans
        .iter()
        .filter(|s| s.service == service && s.name == name)
        .collect()
}

/// `start` and each of its parents that was received, `start` first.
fn ancestry<'a>(spans: &'a [ReceivedSpan], start: &'a ReceivedSpan) -> Vec<&'a ReceivedSpan> {
    let mut up = vec![start];
    while let Some(parent) = spans
        .iter()
        .find(|s| s.span_id == up[up.len() - 1].parent_span_id)
    {
        if up.len() > spans.len() {
            break;
        }
        up.push(parent);
    }
    up
}

/// Whether every span the cross-process test walks has arrived. Each process sends its spans
/// in batches, and a request span ends a moment after its task span: it may come in the
/// next batch.
fn whole_trace(spans: &[ReceivedSpan]) -> bool {
    let first = |service, name| named(spans, service, name).first().copied();
    let (Some(front), Some(back), Some(permission), Some(_)) = (
        first("legate-front", "legate.task"),
        first("legate-back", "legate.task"),
        first("legate-back", "legate.permission"),
        first("legate-back", "legate.tool_call"),
    ) else {
        return false;
    };
    ancestry(spans, front)
        .last()
        .is_some_and(|root| root.parent_span_id == CALLER_SPAN)
        && ancestry(spans, back)
            .iter()
            .any(|s| s.service == "legate-front")
        && spans.iter().any(|s| s.span_id == permission.parent_span_id)
}

#[test]
fn a_task_sent_to_a_remote_legate_is_one_trace_across_both_processes() {
    let receiver = OtlpReceiver::start();
    let endpoint = receiver.endpoint();
    let otel = |service: &'static str| {
        [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.clone()),
            ("OTEL_SERVICE_NAME", service.to_owned()),
            // Spans go out a tenth of a second after they end, not five seconds.
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_owned()),
        ]
    };
    let (back_env, front_env) = (otel("legate-back"), otel("legate-front"));
    let back: Vec<(&str, &str)> = back_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let front: Vec<(&str, &str)> = front_env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let fleet = Fleet::start_with_env(LEGATE, "", &back, &front);

    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let message = json!({"message": {"messageId": "traced-1", "role": "ROLE_USER",
        "parts": [{"text": "write notes.md: # Secret notes\nread notes.md"}]}});
    let mut caller = fleet.front.call_stream_with(
        "back",
        "SendStreamingMessage",
        message,
        &[("traceparent", traceparent.as_str())],
    );
    caller.drain();
    assert_eq!(
        frame_state(caller.frames.last().unwrap()),
        Some("TASK_STATE_COMPLETED"),
        "{:?}",
        caller.frames
    );

    // Both processes' task spans arrive (each exports once its span ends).
    let spans = poll::until(
        Duration::from_secs(60),
        "both nodes' task and tool spans at the receiver, and the spans above them",
        || {
            let spans = receiver.spans();
            whole_trace(&spans).then_some(spans)
        },
    );
    let names: Vec<(&str, &str)> = spans
        .iter()
        .map(|s| (s.service.as_str(), s.name.as_str()))
        .collect();

    // One trace: the caller's, for every span of the task in both processes (a request span
    // may also be the front's probe of the back at boot, in a trace of its own).
    for s in spans.iter().filter(|s| s.name != "legate.a2a.request") {
        assert_eq!(s.trace_id, CALLER_TRACE, "{s:?} in {names:?}");
    }
    let ids: HashSet<&str> = spans.iter().map(|s| s.span_id.as_str()).collect();
    let by_id = |id: &str| spans.iter().find(|s| s.span_id == id);

    // The front's request span is the caller's span's child, and the task its descendant.
    let front_task = named(&spans, "legate-front", "legate.task")[0];
    let mut hops = vec![front_task];
    while let Some(parent) = by_id(&hops.last().unwrap().parent_span_id) {
        hops.push(parent);
    }
    let root = hops.last().unwrap();
    assert_eq!(root.name, "legate.a2a.request", "{hops:?}");
    assert_eq!(root.parent_span_id, CALLER_SPAN, "{hops:?}");

    // The back's task span descends from a span of the front (the hop over A2A): walking up
    // from it leaves the back for a front span.
    let back_task = named(&spans, "legate-back", "legate.task")[0];
    let mut up = back_task;
    let crossed = loop {
        let parent = by_id(&up.parent_span_id)
            .unwrap_or_else(|| panic!("{up:?}'s parent was not received: {names:?}"));
        if parent.service == "legate-front" {
            break parent;
        }
        up = parent;
    };
    assert_eq!(up.name, "legate.a2a.request", "the back's hop span: {up:?}");
    assert_eq!(
        up.attributes
            .get("legate.caller.traced")
            .map(String::as_str),
        Some("true")
    );
    assert!(
        ["legate.turn", "legate.task"].contains(&crossed.name.as_str()),
        "the front span that called the back: {crossed:?}"
    );
    assert_eq!(back_task.attributes["legate.agent"], "revisor");
    assert_eq!(front_task.attributes["legate.agent"], "back");
    assert_eq!(front_task.attributes["legate.task.state"], "completed");

    // The back's tool calls and its supervisor's decisions are spans of its turn.
    let permission = named(&spans, "legate-back", "legate.permission")[0];
    assert!(ids.contains(permission.parent_span_id.as_str()));
    assert!(!permission.attributes["legate.permission.decider"].is_empty());
    assert_eq!(permission.attributes["legate.permission.decision"], "allow");

    // Sizes and ids only: the prompt is in no attribute.
    for s in &spans {
        for (k, v) in &s.attributes {
            assert!(
                !v.contains("Secret notes") && !v.contains("notes.md"),
                "{k}={v} in {s:?}"
            );
        }
    }
}

#[test]
fn with_no_otel_variable_nothing_is_exported_and_nothing_connects() {
    // The receiver takes the OTLP/HTTP default port: an exporter left on would come here.
    let (_held, receiver) = on_default_port();
    let home = without_otel(CliHome::new(LEGATE));
    let out = home.run(&["run", "write hello.md: # Hello", "read hello.md"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The process has exited: whatever it would have exported was flushed before that.
    assert_eq!(receiver.connections(), 0);
    assert!(receiver.requests().is_empty());

    // The same run asking for OTLP (and no endpoint) does reach the default port: the
    // receiver would have seen an exporter.
    let out = home.run_with(
        &["run", "write hello.md: # Hello", "read hello.md"],
        &[
            ("OTEL_TRACES_EXPORTER", "otlp"),
            ("OTEL_SERVICE_NAME", "legate-cli"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let spans = receiver.spans();
    assert!(
        spans
            .iter()
            .any(|s| s.name == "legate.task" && s.service == "legate-cli"),
        "{spans:?}"
    );
}

#[test]
fn with_no_otel_variable_legate_serve_sends_no_metrics() {
    let (_held, receiver) = on_default_port();
    // Serving, a task run, then stopped: a metrics exporter left on would have sent at its
    // shutdown at the latest (it collects once more when the server stops).
    let mut served = A2aServed::start(without_otel(CliHome::new(LEGATE)), &["--port", "0"]);
    let task = served.send("no-otel-1", "write hello.md: # Hello", None);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert!(served.served.stop().is_some_and(|s| s.success()));
    assert_eq!(receiver.connections(), 0);
    assert!(receiver.metric_requests().is_empty());

    // Asked for (and no endpoint), the same server's metrics reach the default port: the
    // receiver would have seen an exporter.
    let home = without_otel(CliHome::new(LEGATE))
        .env("OTEL_METRICS_EXPORTER", "otlp")
        .env("OTEL_SERVICE_NAME", "legate-metrics-on");
    let mut served = A2aServed::start(home, &["--port", "0"]);
    let task = served.send("otel-on-1", "write hello.md: # Hello", None);
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{task}");
    assert!(served.served.stop().is_some_and(|s| s.success()));
    let points = receiver.points();
    assert!(
        points
            .iter()
            .any(|p| p.metric == "legate_tasks" && p.service == "legate-metrics-on"),
        "{points:?}"
    );
    // Metrics only: traces stayed off.
    assert!(receiver.requests().is_empty());
}

#[test]
fn over_grpc_a_tasks_spans_reach_the_collector() {
    // A gRPC receiver on a port the kernel picks (never 4318, the port the test above takes,
    // nor 4317): the exporter is pointed at it, so no default port is involved.
    let receiver = OtlpReceiver::start_grpc();
    let endpoint = receiver.endpoint();
    let home = without_otel(CliHome::new(LEGATE));
    let out = home.run_with(
        &["run", "write hello.md: # Hello", "read hello.md"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "legate-grpc"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The process has exited: its spans were flushed over gRPC before that.
    let spans = receiver.spans();
    let task = named(&spans, "legate-grpc", "legate.task");
    assert_eq!(task.len(), 1, "{spans:?}");
    assert_eq!(task[0].attributes["legate.task.state"], "completed");
    assert!(
        !named(&spans, "legate-grpc", "legate.tool_call").is_empty(),
        "{spans:?}"
    );
    assert!(receiver.connections() >= 1);
}

/// A blocking `SendMessage` to `served`'s default agent in the caller trace `traceparent`
/// (into task `task_id`, if given); the task it answers.
fn send_traced(
    served: &A2aServed,
    message_id: &str,
    task_id: Option<&str>,
    traceparent: &str,
) -> serde_json::Value {
    let mut message =
        json!({"messageId": message_id, "role": "ROLE_USER", "parts": [{"text": "go"}]});
    if let Some(id) = task_id {
        message["taskId"] = json!(id);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "SendMessage",
        "params": {"message": message}});
    let r = raw(
        &served.addr,
        "POST",
        "/",
        &served.addr,
        &[
            ("Content-Type", "application/json"),
            ("A2A-Version", "1.0"),
            ("Authorization", &served.bearer),
            ("traceparent", traceparent),
        ],
        &body.to_string(),
    );
    assert_eq!(r.status, 200, "{r:?}");
    let answer: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    answer["result"]["task"].clone()
}

#[test]
fn a_reply_into_a_waiting_task_continues_the_tasks_trace() {
    let receiver = OtlpReceiver::start();
    let home = without_otel(CliHome::with_config(
        LEGATE,
        "default_agent = \"tck\"\n\n[agents.tck]\n",
    ))
    .env("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint())
    .env("OTEL_SERVICE_NAME", "legate-reply")
    .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    let served = A2aServed::start(home, &["--port", "0"]);
    // The task begins in the caller's trace and waits for input; the reply comes from
    // another trace (another caller, or the same one later).
    let asked = send_traced(
        &served,
        "tck-input-required-trace",
        None,
        &format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01"),
    );
    assert_eq!(
        asked["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{asked}"
    );
    let id = asked["id"].as_str().unwrap().to_owned();
    let other_trace = "5bf92f3577b34da6a3ce929d0e0e4736";
    let done = send_traced(
        &served,
        "tck-complete-task-trace",
        Some(&id),
        &format!("00-{other_trace}-00f067aa0ba902b7-01"),
    );
    assert_eq!(done["status"]["state"], "TASK_STATE_COMPLETED", "{done}");

    let tasks = poll::until(
        Duration::from_secs(60),
        "both turns' task spans at the receiver",
        || {
            let spans = receiver.spans();
            let tasks: Vec<ReceivedSpan> = named(&spans, "legate-reply", "legate.task")
                .into_iter()
                .filter(|s| s.attributes["legate.task.id"] == id)
                .cloned()
                .collect();
            // The reply's request span may come in a batch after its turn's.
            let request = spans
                .iter()
                .any(|s| s.name == "legate.a2a.request" && s.trace_id == other_trace);
            (tasks.len() == 2 && request).then_some(tasks)
        },
    );
    let entry = |e: &str| {
        tasks
            .iter()
            .find(|s| s.attributes["legate.turn.entry"] == e)
            .unwrap_or_else(|| panic!("no {e} turn in {tasks:?}"))
    };
    let (first, reply) = (entry("new"), entry("reply"));
    assert_eq!(first.trace_id, CALLER_TRACE, "{first:?}");
    // The reply's turn is in the task's trace, under its first turn, not the reply's caller's.
    assert_eq!(reply.trace_id, CALLER_TRACE, "{reply:?}");
    assert_eq!(reply.parent_span_id, first.span_id, "{reply:?}");
    // The reply's own request is in its caller's trace still, and the reply's turn links to it.
    let spans = receiver.spans();
    assert!(
        spans
            .iter()
            .any(|s| s.name == "legate.a2a.request" && s.trace_id == other_trace),
        "{spans:?}"
    );
    assert!(
        reply.links.iter().any(|(trace, _)| trace == other_trace),
        "the reply's turn does not link to the trace that brought it: {reply:?}"
    );
    assert!(first.links.is_empty(), "{first:?}");
}

#[test]
fn a_remote_task_re_attached_after_a_restart_continues_its_trace() {
    let receiver = OtlpReceiver::start();
    let endpoint = receiver.endpoint();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
        ("OTEL_SERVICE_NAME", "legate-front"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
    ];
    let mut fleet = Fleet::start_with_env(LEGATE, "", &[], &env);
    let message = json!({"message": {"messageId": "traced-kill", "role": "ROLE_USER",
        "parts": [{"text": GATED}]}});
    let traceparent = format!("00-{CALLER_TRACE}-{CALLER_SPAN}-01");
    let mut caller = fleet.front.call_stream_with(
        "back",
        "SendStreamingMessage",
        message,
        &[("traceparent", traceparent.as_str())],
    );
    let first = caller.next().expect("an empty stream");
    let id = first["task"]["id"].as_str().unwrap().to_owned();
    wait_gate(&fleet.back);
    poll::until(
        Duration::from_secs(60),
        "the front to record the remote task",
        || {
            fleet.front.show(&id)["remote"]["taskId"]
                .as_str()
                .map(str::to_owned)
        },
    );
    // The front dies with the turn's spans unsent; the restarted one follows the task.
    fleet.front.kill_9();
    drop(caller);
    fleet.front.restart();
    open_gate(&fleet.back, "after-restart");
    fleet.front.follow(&id);
    assert_eq!(fleet.front.show(&id)["state"], "completed");

    let reattached = poll::until(
        Duration::from_secs(60),
        "the re-attached turn's task span at the receiver",
        || {
            named(&receiver.spans(), "legate-front", "legate.task")
                .into_iter()
                .find(|s| {
                    s.attributes["legate.task.id"] == id
                        && s.attributes["legate.turn.entry"] == "reattach"
                })
                .cloned()
        },
    );
    // The caller's trace, the one the task began in.
    assert_eq!(reattached.trace_id, CALLER_TRACE, "{reattached:?}");
    assert_eq!(reattached.attributes["legate.task.state"], "completed");
}
