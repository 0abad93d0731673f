//! Scheduling overhead of a group: a graph of N revisor tasks run as one group (`group_create`,
//! `group_start`, `group_wait`) against the same N tasks submitted by hand, in one run, on one
//! engine.
//!
//! "By hand" is the best a caller can do without groups: it submits every node whose
//! dependencies have ended, as a copy task of the same project with the same prompt, and
//! submits the next ones the moment a task ends (it follows each task's events, no polling).
//! The group does more for each node on purpose (records its admission, frames its
//! predecessors' results into its prompt, takes a checkpoint of its tree, patch and result):
//! that work is what is being measured.
//!
//! Two shapes, each of N nodes: `fan` (one plan, N-2 nodes after it, one synthesis after all
//! of them: admission of many ready nodes at once, under the queue's limits) and `chain`
//! (each node after the previous one: the latency of one edge, N-1 times). Each round runs
//! both ways, in alternating order. For every edge the *gap* is how long after the last
//! dependency's task ended the dependent's task was submitted, from the stored events'
//! timestamps (milliseconds).
//!
//! Run: `cargo bench -p legate-testkit --bench workflow` (env `WORKFLOW_NODES`, default 50;
//! `WORKFLOW_ROUNDS`, default 3; `WORKFLOW_RUNNING`, the engine's `max_running`, default 4;
//! `WORKFLOW_SHAPES`, `fan`, `chain` or both, the default, to profile one shape alone).
//! Figures go in `docs/BENCHMARKS.md`. `cargo test --benches` runs it with 6 nodes, once.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use legate_core::TaskId;
use legate_engine::{Engine, GroupDefinition, GroupState, NodeDef};
use legate_testkit::harness::{EngineHarness, span};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The longest a single run may take before the benchmark gives up.
const LIMIT: Duration = Duration::from_secs(900);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Shape {
    Fan,
    Chain,
}

impl Shape {
    fn name(self) -> &'static str {
        match self {
            Shape::Fan => "fan",
            Shape::Chain => "chain",
        }
    }

    /// Each node's dependencies, by index; every index is before its dependents'.
    fn deps(self, n: usize) -> Vec<Vec<usize>> {
        match self {
            Shape::Chain => (0..n)
                .map(|i| if i == 0 { vec![] } else { vec![i - 1] })
                .collect(),
            Shape::Fan => (0..n)
                .map(|i| match i {
                    0 => vec![],
                    i if i == n - 1 => (1..n - 1).collect(),
                    _ => vec![0],
                })
                .collect(),
        }
    }
}

fn prompt(i: usize) -> String {
    format!("write n{i}.txt: node {i}\\n")
}

/// One run: how long it took, each edge's gap and each task's own time (submitted to
/// ended), in milliseconds.
struct Run {
    wall: Duration,
    gaps: Vec<i64>,
    tasks: Vec<i64>,
}

fn measured(engine: &Engine, wall: Duration, deps: &[Vec<usize>], tasks: &[TaskId]) -> Run {
    let spans: Vec<(i64, i64)> = tasks.iter().map(|t| span(engine, t)).collect();
    let gaps = deps
        .iter()
        .enumerate()
        .filter(|(_, d)| !d.is_empty())
        .map(|(i, d)| {
            let ready = d.iter().map(|&x| spans[x].1).max().unwrap();
            spans[i].0 - ready
        })
        .collect();
    Run {
        wall,
        gaps,
        tasks: spans.iter().map(|(a, b)| b - a).collect(),
    }
}

async fn by_hand(h: &EngineHarness, deps: &[Vec<usize>]) -> Run {
    let n = deps.len();
    let started = Instant::now();
    let mut tasks: Vec<Option<TaskId>> = vec![None; n];
    let mut done = vec![false; n];
    let mut running = FuturesUnordered::new();
    loop {
        for i in 0..n {
            if tasks[i].is_none() && deps[i].iter().all(|&d| done[d]) {
                let task = h.engine.submit(h.on_copy(&prompt(i))).unwrap();
                tasks[i] = Some(task.id.clone());
                let engine = h.engine.clone();
                running.push(async move { (i, engine.wait(&task.id).await) });
            }
        }
        let Some((i, ended)) = running.next().await else {
            break;
        };
        let ended = ended.unwrap();
        assert!(ended.is_terminal(), "node {i} ended {:?}", ended.state);
        assert_eq!(ended.state, legate_core::TaskState::Completed, "node {i}");
        done[i] = true;
    }
    let wall = started.elapsed();
    let tasks: Vec<TaskId> = tasks.into_iter().map(Option::unwrap).collect();
    measured(&h.engine, wall, deps, &tasks)
}

async fn as_group(h: &EngineHarness, deps: &[Vec<usize>]) -> Run {
    let nodes = deps
        .iter()
        .enumerate()
        .map(|(i, d)| NodeDef {
            id: format!("n{i}"),
            role: None,
            agent: None,
            model: None,
            prompt: prompt(i),
            depends_on: d.iter().map(|x| format!("n{x}")).collect(),
            file_sources: None,
            mode: None,
            criteria: vec![],
            ..NodeDef::default()
        })
        .collect();
    let definition = GroupDefinition {
        working_directory: h.project(),
        title: Some("bench".into()),
        nodes,
        peer_routes: vec![],
        budget: None,
        workflow: None,
    };
    let started = Instant::now();
    let created = h.engine.groups().create(None, definition).unwrap();
    h.engine
        .groups()
        .start(&created.group_id, &created.definition_sha256)
        .await
        .unwrap();
    let w = h
        .engine
        .groups()
        .wait(&created.group_id, LIMIT)
        .await
        .unwrap();
    let wall = started.elapsed();
    assert!(w.ready, "the group did not settle");
    assert_eq!(w.status.state, GroupState::Completed, "{:?}", w.status);
    let by_id: BTreeMap<String, TaskId> = w
        .status
        .nodes
        .iter()
        .map(|n| {
            assert_eq!(n.task_ids.len(), 1, "{n:?}");
            (n.id.clone(), n.task_ids[0].clone())
        })
        .collect();
    let tasks: Vec<TaskId> = (0..deps.len())
        .map(|i| by_id[&format!("n{i}")].clone())
        .collect();
    measured(&h.engine, wall, deps, &tasks)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn quantile(mut v: Vec<i64>, q: f64) -> i64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: run small then.
    let quick = !std::env::args().any(|a| a == "--bench");
    let n = env_usize("WORKFLOW_NODES", if quick { 6 } else { 50 }).max(3);
    let rounds = env_usize("WORKFLOW_ROUNDS", if quick { 1 } else { 3 });
    let running = env_usize("WORKFLOW_RUNNING", 4);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let h = EngineHarness::builder()
            .project(&[("a.txt", "alpha\n"), ("src/lib.rs", "pub fn f() {}\n")])
            .config(move |c| {
                c.max_running = running;
                c.max_queued = 2 * n;
                c.max_group_nodes = n.max(legate_engine::DEFAULT_MAX_NODES);
                c.retention = 100_000;
            })
            .start();
        println!(
            "workflow: {n} revisor tasks on copies, max_running {running}, {rounds} round(s) each way"
        );
        let only = std::env::var("WORKFLOW_SHAPES").unwrap_or_default();
        for shape in [Shape::Fan, Shape::Chain] {
            if !only.is_empty() && !only.split(',').any(|s| s.trim() == shape.name()) {
                continue;
            }
            let deps = shape.deps(n);
            let (mut hand, mut group) = (Vec::new(), Vec::new());
            for r in 0..rounds {
                if r % 2 == 0 {
                    hand.push(by_hand(&h, &deps).await);
                    group.push(as_group(&h, &deps).await);
                } else {
                    group.push(as_group(&h, &deps).await);
                    hand.push(by_hand(&h, &deps).await);
                }
            }
            let wall = |runs: &[Run]| {
                median(runs.iter().map(|r| r.wall.as_secs_f64() * 1e3).collect())
            };
            let (hw, gw) = (wall(&hand), wall(&group));
            println!("{} ({} edges):", shape.name(), hand[0].gaps.len());
            for (label, runs, w) in [("by hand:", &hand, hw), ("group:  ", &group, gw)] {
                let gaps: Vec<i64> = runs.iter().flat_map(|r| r.gaps.clone()).collect();
                let tasks: Vec<i64> = runs.iter().flat_map(|r| r.tasks.clone()).collect();
                println!(
                    "  {label} {w:>8.0} ms (median), task p50 {:>4} ms, gap p50 {:>4} ms, p90 {:>4} ms, max {:>4} ms",
                    quantile(tasks, 0.5),
                    quantile(gaps.clone(), 0.5),
                    quantile(gaps.clone(), 0.9),
                    quantile(gaps, 1.0)
                );
            }
            println!(
                "  overhead: {:+.0} ms ({:+.1}%) for the whole graph, {:+.1} ms per node",
                gw - hw,
                (gw / hw - 1.0) * 100.0,
                (gw - hw) / n as f64
            );
            // Each round's own ratio: the machine's speed moves between rounds more than
            // within one (a round runs both ways back to back).
            let per_round: Vec<f64> = hand
                .iter()
                .zip(&group)
                .map(|(h, g)| (g.wall.as_secs_f64() / h.wall.as_secs_f64() - 1.0) * 100.0)
                .collect();
            let shown: Vec<String> = per_round.iter().map(|p| format!("{p:+.1}%")).collect();
            println!(
                "  overhead in each round: {} (median {:+.1}%)",
                shown.join(", "),
                median(per_round)
            );
        }
    });
}
