//! Traces, end to end (issue 34): real `legate` processes exporting OTLP/HTTP to a real
//! receiver on 127.0.0.1 that decodes the official OpenTelemetry protobufs
//! (`legate_testkit::otlp`). A task sent through a front to a remote Legate is one trace
//! whose spans come from both processes, continuing the caller's own trace; with no `OTEL_*`
//! variable nothing is exported and nothing connects; over OTLP/gRPC (the receiver's tonic
//! `TraceService`) a task's spans arrive as over HTTP.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_frontkit::cli::CliHome;
use legate_frontkit::fleet::Fleet;
use legate_frontkit::poll;
use legate_frontkit::sse::frame_state;
use legate_testkit::otlp::{OtlpReceiver, ReceivedSpan};
use serde_json::json;
use std::collections::HashSet;
use std::time::Duration;

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

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
        "both nodes' task and tool spans at the receiver",
        || {
            let spans = receiver.spans();
            let done = !named(&spans, "legate-front", "legate.task").is_empty()
                && !named(&spans, "legate-back", "legate.task").is_empty()
                && !named(&spans, "legate-back", "legate.permission").is_empty()
                && !named(&spans, "legate-back", "legate.tool_call").is_empty();
            done.then_some(spans)
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
    let receiver = OtlpReceiver::bind("127.0.0.1:4318")
        .expect("port 4318 (OTLP/HTTP's default) must be free for this test");
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
