//! The cost of keeping agents away from Legate's ports, against today's confinement, in one
//! criterion run:
//!
//! * `prepare/today`: the write ruleset alone (no Legate port registered, so no port layer);
//! * `prepare/port-layer-built`: the first prepare for a new port set, which builds the
//!   65,535-rule port layer;
//! * `prepare/port-layer-cached`: a prepare whose port layer is cached (a `dup` of its fd);
//! * `spawn/today` and `spawn/port-layer`: fork, confine and exec `/bin/true`, and wait for it,
//!   without and with the port layer (its `landlock_restrict_self` in the child).
//!
//! `cargo bench -p legate-confine --bench reach`. On a kernel without Landlock ABI 4 the
//! port-layer figures equal today's (there is no layer to build), and it says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use legate_confine::{Confinement, LegatePorts, Requirement, ports};
use std::process::Command;

fn confinement(dir: &std::path::Path) -> Confinement {
    Confinement::new().allow_write(dir)
}

fn spawn_true(dir: &std::path::Path) {
    let prepared = confinement(dir).prepare(Requirement::BestEffort).unwrap();
    let mut cmd = Command::new("/bin/true");
    legate_confine::confine_command(&mut cmd, prepared);
    assert!(cmd.status().unwrap().success());
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let probe = confinement(dir).prepare(Requirement::BestEffort).unwrap();
    eprintln!(
        "landlock: {}, Legate's ports: {} (with a port registered: {})",
        probe.enforcement(),
        probe.legate_ports(),
        {
            let _p = ports::register(&[1]).unwrap();
            let p = confinement(dir).prepare(Requirement::BestEffort).unwrap();
            if p.legate_ports() == LegatePorts::Unreachable && !p.blocked_ports().is_empty() {
                "a port layer"
            } else {
                "no port layer on this kernel"
            }
        }
    );
    drop(probe);

    let mut g = c.benchmark_group("prepare");
    g.sample_size(20);
    g.bench_function("today", |b| {
        b.iter(|| confinement(dir).prepare(Requirement::BestEffort).unwrap())
    });
    // A port never used before each time: the cache misses and the layer is built.
    let mut next: u16 = 10_000;
    g.bench_function("port-layer-built", |b| {
        b.iter_batched(
            || {
                next = next.wrapping_add(1);
                ports::register(&[next]).unwrap()
            },
            |held| {
                let p = confinement(dir).prepare(Requirement::BestEffort).unwrap();
                (p, held)
            },
            BatchSize::PerIteration,
        )
    });
    {
        let _held = ports::register(&[8731]).unwrap();
        drop(confinement(dir).prepare(Requirement::BestEffort).unwrap());
        g.bench_function("port-layer-cached", |b| {
            b.iter(|| confinement(dir).prepare(Requirement::BestEffort).unwrap())
        });
    }
    g.finish();

    let mut g = c.benchmark_group("spawn");
    g.sample_size(30);
    g.bench_function("today", |b| b.iter(|| spawn_true(dir)));
    {
        let _held = ports::register(&[8731]).unwrap();
        g.bench_function("port-layer", |b| b.iter(|| spawn_true(dir)));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
