//! The cost of the egress listener on a process start, in one criterion run: fork, confine
//! (mount, PID and network namespaces, `lo` brought up) and exec `/bin/true`, and wait for
//! it, without and with an egress listener created in its namespace and received here.
//! (The cost of the namespaces themselves is in the `spawn` bench.)
//!
//! `cargo bench -p legate-confine --bench reach`. Where this process may not create a network
//! namespace both figures are the same (there is no listener), and it says so.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use legate_confine::{Confinement, Requirement};
use std::process::Command;

fn spawn_true(dir: &std::path::Path, egress: bool) {
    let mut c = Confinement::new().allow_write(dir);
    if egress {
        c = c.egress(3128);
    }
    let mut prepared = c.prepare(Requirement::BestEffort).unwrap();
    let handoff = prepared.take_egress();
    let mut cmd = Command::new("/bin/true");
    legate_confine::confine_command(&mut cmd, prepared);
    let mut child = cmd.spawn().unwrap();
    if let Some(h) = handoff {
        drop(h.receive().unwrap());
    }
    assert!(child.wait().unwrap().success());
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    if !Confinement::probe_network_namespace() {
        eprintln!("no network namespaces here: no egress listener to measure");
    }
    let mut g = c.benchmark_group("spawn");
    g.sample_size(30);
    g.bench_function("isolated", |b| b.iter(|| spawn_true(dir, false)));
    g.bench_function("isolated-with-egress", |b| b.iter(|| spawn_true(dir, true)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
