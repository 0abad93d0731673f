//! Plan updates against the plan's length (issue 33): a revisor task of N `think:` lines sends
//! its whole plan (one entry per line) twice per line, so kept and relayed whole, the store and
//! the time grow with the square of N. Measured for N and 2N on the back alone (store size and
//! time), and for N through one federation hop (time), on this build and, in the same run, on
//! a baseline binary (`PLAN_BASELINE_BIN`, e.g. main's release `legate`), each on a fresh
//! fleet (the front kit's two `legate serve` processes on 127.0.0.1).
//!
//! The store size is the back's `legate.db` once the back is killed and a CLI command closed
//! the database (which folds the write-ahead log into it): every event of the task.
//!
//! Run: `PLAN_BASELINE_BIN=/path/to/main/legate cargo bench -p legate --bench plan_steps`
//! (env `PLAN_STEPS`, default 400; `PLAN_ROUNDS`, default 1). Figures go in
//! `docs/BENCHMARKS.md`. `cargo test --benches` runs it with 20 steps, this build only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use legate_frontkit::fleet::{Fleet, Node};
use legate_frontkit::sse::{frame_kind, frame_state};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One streamed task of `steps` thoughts on `agent` of `node`: its time, client to end.
fn one_task(node: &Node, agent: &str, steps: usize) -> Duration {
    let prompt: String = (0..steps)
        .map(|i| format!("think: thought {i}\n"))
        .collect();
    let started = Instant::now();
    let mut stream = node.stream(agent, &format!("plan-{agent}-{steps}"), &prompt);
    let mut thoughts = 0usize;
    let mut plans = 0usize;
    for frame in stream.by_ref() {
        match frame_kind(&frame) {
            Some("thought") => thoughts += 1,
            Some("plan") => plans += 1,
            _ => {}
        }
    }
    let took = started.elapsed();
    let last = stream.frames.last().unwrap();
    assert_eq!(frame_state(last), Some("TASK_STATE_COMPLETED"), "{last}");
    if thoughts < steps {
        // Past the task's output limits (`[output]`) the agent's events are dropped.
        println!(
            "  ({agent}, {steps} steps: {thoughts} thought and {plans} plan frames of {steps} and {})",
            2 * steps + 3
        );
    }
    took
}

/// The back's store, in bytes, with its write-ahead log folded in.
fn store_bytes(back: &mut Node) -> u64 {
    back.kill_9();
    let out = back.cli(&["tasks"]);
    assert!(out.status.success(), "{out:?}");
    let home = back.home();
    ["legate.db", "legate.db-wal"]
        .iter()
        .map(|f| std::fs::metadata(home.join(f)).map_or(0, |m| m.len()))
        .sum()
}

/// On a fresh fleet of `bin`: (store bytes, time) of `steps` on the back alone.
fn alone(bin: &Path, steps: usize) -> (u64, Duration) {
    let mut fleet = Fleet::start(bin, "");
    let took = one_task(&fleet.back, "revisor", steps);
    (store_bytes(&mut fleet.back), took)
}

/// On a fresh fleet of `bin`: the time of `steps` through the front.
fn hop(bin: &Path, steps: usize) -> Duration {
    let fleet = Fleet::start(bin, "");
    one_task(&fleet.front, "back", steps)
}

fn mb(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let testing =
        std::env::args().any(|a| a == "--test") || !std::env::args().any(|a| a == "--bench");
    let steps = if testing {
        20
    } else {
        env_or("PLAN_STEPS", 400)
    };
    let rounds = if testing { 1 } else { env_or("PLAN_ROUNDS", 1) };
    let this = PathBuf::from(env!("CARGO_BIN_EXE_legate"));
    let mut bins = vec![("this build", this)];
    if !testing && let Ok(base) = std::env::var("PLAN_BASELINE_BIN") {
        bins.insert(0, ("baseline", PathBuf::from(base)));
    }
    println!(
        "plan steps: revisor tasks of {steps} and {} `think:` lines, {rounds} round(s), fresh fleet each",
        steps * 2
    );
    let mut rows = vec![Vec::new(); bins.len()];
    // Interleaved, so load on the machine weighs on every binary alike.
    for _ in 0..rounds {
        for (i, (_, bin)) in bins.iter().enumerate() {
            let (small_bytes, small) = alone(bin, steps);
            let (large_bytes, large) = alone(bin, steps * 2);
            let through = hop(bin, steps);
            rows[i].push((small_bytes, small, large_bytes, large, through));
        }
    }
    for ((name, _), runs) in bins.iter().zip(rows) {
        let small_bytes = runs.iter().map(|r| r.0).max().unwrap();
        let large_bytes = runs.iter().map(|r| r.2).max().unwrap();
        let small = median(runs.iter().map(|r| r.1).collect());
        let large = median(runs.iter().map(|r| r.3).collect());
        let through = median(runs.iter().map(|r| r.4).collect());
        println!("{name}:");
        println!(
            "  {steps:>5} steps: store {:8.2} MB, task {:8.1} ms",
            mb(small_bytes),
            small.as_secs_f64() * 1000.0
        );
        println!(
            "  {:>5} steps: store {:8.2} MB, task {:8.1} ms  ({:.2}x the store, {:.2}x the time)",
            steps * 2,
            mb(large_bytes),
            large.as_secs_f64() * 1000.0,
            large_bytes as f64 / small_bytes as f64,
            large.as_secs_f64() / small.as_secs_f64()
        );
        println!(
            "  {steps:>5} steps through one hop: task {:8.1} ms  ({:.2}x the back alone)",
            through.as_secs_f64() * 1000.0,
            through.as_secs_f64() / small.as_secs_f64()
        );
    }
}
