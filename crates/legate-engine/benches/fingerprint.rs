//! The silent-turn check's cost: fingerprinting an owned root before and after a turn
//! (`legate_engine::silent::Fingerprint`), against the least any change check must do in
//! the same run: walk the tree and stat every entry, hashing nothing.
//!
//! `cargo bench -p legate-engine --bench fingerprint`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use legate_engine::silent::{Fingerprint, MAX_ENTRIES};
use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

/// `files` files of 100 bytes, 100 to a directory.
fn tree(root: &Path, files: usize) {
    for i in 0..files {
        let dir = root.join(format!("d{:03}", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir).unwrap();
        }
        std::fs::write(dir.join(format!("f{i}.txt")), [b'x'; 100]).unwrap();
    }
}

/// The baseline: every entry stat'ed, nothing hashed or sorted.
fn stat_walk(root: &Path) -> usize {
    let mut stack = vec![root.to_path_buf()];
    let mut n = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let meta = std::fs::symlink_metadata(entry.path()).unwrap();
            n += 1;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    n
}

fn bench(c: &mut Criterion) {
    for files in [1_000, 19_000] {
        let tmp = tempfile::tempdir().unwrap();
        tree(tmp.path(), files);
        let mut group = c.benchmark_group(format!("{files} files"));
        group
            .sample_size(10)
            .measurement_time(Duration::from_secs(3));
        group.bench_function("baseline: stat walk", |b| {
            b.iter(|| black_box(stat_walk(black_box(tmp.path()))));
        });
        group.bench_function("Fingerprint::of", |b| {
            b.iter(|| black_box(Fingerprint::of(black_box(tmp.path()), MAX_ENTRIES).unwrap()));
        });
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
