//! The cost of confinement on a process start: spawning and waiting for `/bin/true`
//! unconfined, under Landlock only (the confinement before isolation), and under the full
//! confinement (Landlock, mount and PID namespaces with a hidden home, the init, the
//! capability drop), in one run.
//!
//! `cargo bench -p legate-confine --bench spawn`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use legate_confine::{Confinement, Requirement, confine_command};
use std::process::{Command, Stdio};

fn true_cmd(dir: &std::path::Path) -> Command {
    let mut cmd = Command::new("/bin/true");
    cmd.current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

fn spawn(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let home = dir.path().canonicalize().unwrap().join("home");
    let root = home.join("sandboxes/s");
    std::fs::create_dir_all(&root).unwrap();
    let confinement = Confinement::new().allow_write(&root).hide(&home);
    if !Confinement::probe_namespaces() {
        eprintln!("namespaces unavailable: the isolated figure falls back to Landlock only");
    }
    let mut g = c.benchmark_group("spawn /bin/true");
    g.bench_function("unconfined", |b| {
        b.iter(|| assert!(true_cmd(&root).status().unwrap().success()))
    });
    g.bench_function("landlock only", |b| {
        b.iter(|| {
            let mut cmd = true_cmd(&root);
            let p = confinement
                .clone()
                .landlock_only()
                .prepare(Requirement::BestEffort)
                .unwrap();
            confine_command(&mut cmd, p);
            assert!(cmd.status().unwrap().success());
        })
    });
    g.bench_function("landlock + namespaces + init", |b| {
        b.iter(|| {
            let mut cmd = true_cmd(&root);
            let p = confinement
                .clone()
                .prepare(Requirement::BestEffort)
                .unwrap();
            confine_command(&mut cmd, p);
            assert!(cmd.status().unwrap().success());
        })
    });
    g.finish();
}

criterion_group!(benches, spawn);
criterion_main!(benches);
