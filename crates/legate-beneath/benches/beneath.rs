//! The file service's cost: reading and writing a small file (1 KiB, three directories deep)
//! through [`legate_beneath::Root`] (openat2, and the per-component walk) against what the
//! file service did before issue 11 (`containment::resolve_within`, then `std::fs` by path:
//! metadata and read; create_dir_all, resolve again, metadata and write), in the same run.
//!
//! `cargo bench -p legate-beneath --bench beneath`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, criterion_group, criterion_main};
use legate_beneath::{Resolver, Root};
use legate_supervisor::containment::resolve_within;
use std::hint::black_box;
use std::path::{Path, PathBuf};

const CONTENT: [u8; 1024] = [b'x'; 1024];

fn setup() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap().join("root");
    std::fs::create_dir_all(root.join("a/b/c")).unwrap();
    std::fs::write(root.join("a/b/c/file.txt"), CONTENT).unwrap();
    (tmp, root)
}

/// The read before issue 11, without its tokio::fs hops.
fn read_by_path(root: &Path, abs: &Path) -> Vec<u8> {
    let path = resolve_within(root, abs).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert!(meta.is_file() && meta.len() < 1 << 26);
    std::fs::read(&path).unwrap()
}

/// The write before issue 11, without its tokio::fs hops.
fn write_by_path(root: &Path, abs: &Path, bytes: &[u8]) {
    let path = resolve_within(root, abs).unwrap();
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let path = resolve_within(root, abs).unwrap();
    assert!(!std::fs::metadata(&path).is_ok_and(|m| m.is_dir()));
    std::fs::write(&path, bytes).unwrap();
}

fn bench(c: &mut Criterion) {
    let (_tmp, root) = setup();
    let abs = root.join("a/b/c/file.txt");
    let openat2 = Root::open_with(&root, Resolver::Openat2).unwrap();
    let walk = Root::open_with(&root, Resolver::Walk).unwrap();

    let mut read = c.benchmark_group("read 1 KiB");
    read.bench_function("today: resolve_within + std::fs", |b| {
        b.iter(|| black_box(read_by_path(&root, black_box(&abs))));
    });
    for (name, held) in [("beneath: openat2", &openat2), ("beneath: walk", &walk)] {
        read.bench_function(name, |b| {
            b.iter(|| {
                let rel = held.relative(black_box(&abs)).unwrap();
                black_box(held.read(&rel, 1 << 26).unwrap())
            });
        });
    }
    read.finish();

    let mut write = c.benchmark_group("write 1 KiB");
    write.bench_function("today: resolve_within + std::fs", |b| {
        b.iter(|| write_by_path(&root, black_box(&abs), &CONTENT));
    });
    for (name, held) in [("beneath: openat2", &openat2), ("beneath: walk", &walk)] {
        write.bench_function(name, |b| {
            b.iter(|| {
                let rel = held.relative(black_box(&abs)).unwrap();
                held.write(&rel, &CONTENT, true).unwrap();
            });
        });
    }
    write.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
