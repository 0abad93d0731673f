//! One hop of federation against the same work on the back alone, measured in the same run:
//! two real `legate serve` processes on 127.0.0.1 (the front kit's `fleet`), the front's
//! `back` agent being the back's revisor over A2A.
//!
//! - Task overhead: a small revisor task (`What is in this workspace?`) sent with a blocking
//!   `SendMessage`, N times in a row, to the back's revisor directly (the baseline) and to the
//!   front's `back` (one hop). Median and p90 wall time per task, client to answer.
//! - Event relay: one task whose turn emits E thoughts (`think: …` lines), streamed with
//!   `SendStreamingMessage`; events per second from the first content frame to the last, and
//!   the whole task's time, on the back alone and through the front.
//!
//! Run: `cargo bench -p legate --bench federation` (env `FED_TASKS`, default 20; `FED_EVENTS`,
//! default 200; `FED_ROUNDS`, default 3). Figures go in `docs/BENCHMARKS.md`. The relay's cost
//! grows with the square of `FED_EVENTS`: revisor re-sends its whole plan (one entry per
//! thought) twice per thought, so keep it in the hundreds.
//! `cargo test --benches` runs it with 2 tasks, 50 events, 1 round.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use legate_frontkit::fleet::{Fleet, Node};
use legate_frontkit::sse::{frame_kind, frame_state};
use serde_json::json;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// The value at fraction `q` of sorted `v`.
fn quantile(v: &mut [Duration], q: f64) -> Duration {
    v.sort();
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i]
}

/// One blocking task on `agent` of `node`; its wall time.
fn one_task(node: &Node, agent: &str, n: usize) -> Duration {
    let started = Instant::now();
    let answer = node.call(
        agent,
        "SendMessage",
        json!({"message": {"messageId": format!("bench-{agent}-{n}"), "role": "ROLE_USER",
            "parts": [{"text": "What is in this workspace?"}]}}),
    );
    let took = started.elapsed();
    let state = &answer["result"]["task"]["status"]["state"];
    assert_eq!(state, "TASK_STATE_COMPLETED", "{answer}");
    took
}

/// One streamed task of `events` thoughts on `agent`: (events/s over the content frames,
/// whole task time, content frames seen).
fn one_stream(node: &Node, agent: &str, events: usize, n: usize) -> (f64, Duration, usize) {
    let prompt: String = (0..events)
        .map(|i| format!("think: thought {i}\n"))
        .collect();
    let started = Instant::now();
    let mut stream = node.stream(agent, &format!("relay-{agent}-{n}"), &prompt);
    let mut first = None;
    let mut last = started;
    let mut seen = 0usize;
    for frame in stream.by_ref() {
        if frame_kind(&frame) == Some("thought") {
            let now = Instant::now();
            first.get_or_insert(now);
            last = now;
            seen += 1;
        }
    }
    let took = started.elapsed();
    assert_eq!(
        frame_state(stream.frames.last().unwrap()),
        Some("TASK_STATE_COMPLETED")
    );
    assert!(seen >= events, "{seen} thoughts of {events}");
    let span = last - first.unwrap_or(started);
    (seen as f64 / span.as_secs_f64().max(1e-9), took, seen)
}

fn main() {
    let testing =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let tasks = if testing { 2 } else { env_or("FED_TASKS", 20) };
    let events = if testing {
        50
    } else {
        env_or("FED_EVENTS", 200)
    };
    let rounds = if testing { 1 } else { env_or("FED_ROUNDS", 3) };

    let fleet = Fleet::start(env!("CARGO_BIN_EXE_legate"), "");
    let (back, front) = (&fleet.back, &fleet.front);
    println!(
        "federation: {tasks} tasks and {rounds} x {events}-event streams each way, one hop over 127.0.0.1"
    );

    // Warm both paths once (the back's revisor session, the front's card fetch).
    one_task(back, "revisor", 0);
    one_task(front, "back", 0);

    let mut alone = Vec::new();
    let mut hop = Vec::new();
    // Interleaved, so load on the machine weighs on both alike.
    for n in 1..=tasks {
        alone.push(one_task(back, "revisor", n));
        hop.push(one_task(front, "back", n));
    }
    let (a50, a90) = (quantile(&mut alone, 0.5), quantile(&mut alone, 0.9));
    let (h50, h90) = (quantile(&mut hop, 0.5), quantile(&mut hop, 0.9));
    println!("task overhead (blocking SendMessage, `What is in this workspace?`):");
    println!(
        "  back alone:        p50 {:7.1} ms, p90 {:7.1} ms",
        ms(a50),
        ms(a90)
    );
    println!(
        "  through the front: p50 {:7.1} ms, p90 {:7.1} ms  (one hop adds {:+.1} ms at p50)",
        ms(h50),
        ms(h90),
        ms(h50) - ms(a50)
    );

    let mut alone_rates = Vec::new();
    let mut hop_rates = Vec::new();
    let mut alone_times = Vec::new();
    let mut hop_times = Vec::new();
    for n in 1..=rounds {
        let (r, t, _) = one_stream(back, "revisor", events, n);
        alone_rates.push(r);
        alone_times.push(t);
        let (r, t, _) = one_stream(front, "back", events, n);
        hop_rates.push(r);
        hop_times.push(t);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    println!("event relay ({events} thoughts per task, streamed):");
    println!(
        "  back alone:        {:8.0} events/s (median), task {:7.1} ms (median)",
        median(&mut alone_rates),
        ms(quantile(&mut alone_times, 0.5))
    );
    println!(
        "  through the front: {:8.0} events/s (median), task {:7.1} ms (median)",
        median(&mut hop_rates),
        ms(quantile(&mut hop_times, 0.5))
    );
    drop(fleet);
}
