//! What clearing a clean file costs: the content scan of texts no rule fires on, by the
//! scanner as it is (one combined pass over the patterns, and a pass of its own for each rule
//! marked `alone` in `rules.toml`) against the baseline of one combined pass over every
//! content pattern (how it cleared before `alone`; a text that pass does not clear goes on to
//! the full scan, as it did), in one run. Two texts: the copy benchmark's lower-case text
//! (from its one definition, `legate-workspace/benches/copy/text.rs`; 2,000 files of about
//! 20 KiB) and this workspace's own Rust sources.
//!
//! `cargo bench -p legate-credentials --bench clearing`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use legate_credentials::scan_content;
use regex::bytes::{RegexSet, RegexSetBuilder};
use std::path::Path;

/// The copy benchmark's text, from its own definition.
#[path = "../../legate-workspace/benches/copy/text.rs"]
mod text;

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<Vec<u8>>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            out.push(std::fs::read(&path).unwrap());
        }
    }
}

/// Every content pattern of the shipped table in one set, built as the scanner builds its
/// combined pass.
fn every_pattern() -> RegexSet {
    #[derive(serde::Deserialize)]
    struct File {
        contents: Vec<Rule>,
    }
    #[derive(serde::Deserialize)]
    struct Rule {
        regex: String,
    }
    let file: toml::Value = toml::from_str(include_str!("../src/rules.toml")).unwrap();
    let file: File = file.try_into().unwrap();
    RegexSetBuilder::new(file.contents.iter().map(|r| r.regex.as_str()))
        .unicode(false)
        .size_limit(64 << 20)
        .dfa_size_limit(64 << 20)
        .build()
        .unwrap()
}

fn clearing(c: &mut Criterion) {
    let per = 20_971;
    let lower: Vec<Vec<u8>> = (0..2_000u64)
        .map(|i| text::content(i, if i % 2 == 0 { per / 2 } else { per + per / 2 }))
        .collect();
    let mut code = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join(".."), &mut code);
    let baseline = every_pattern();
    for (label, texts) in [
        ("lower-case text", &lower),
        ("this workspace's Rust", &code),
    ] {
        let bytes: usize = texts.iter().map(Vec::len).sum();
        // Both scanners must agree on every file; count what each finds.
        let found = |f: &dyn Fn(&[u8]) -> Option<&'static str>| {
            texts.iter().filter(|t| f(t).is_some()).count()
        };
        let old = |t: &[u8]| {
            if baseline.is_match(t) {
                scan_content(t)
            } else {
                None
            }
        };
        let expected = found(&scan_content);
        assert_eq!(found(&old), expected);
        eprintln!(
            "{label}: {} files, {bytes} bytes, {expected} with a finding",
            texts.len()
        );
        let mut g = c.benchmark_group(format!("clearing {label}"));
        g.sample_size(10);
        g.throughput(Throughput::Bytes(bytes as u64));
        g.bench_function("baseline, one pass over every pattern", |b| {
            b.iter(|| assert_eq!(found(&old), expected))
        });
        g.bench_function("as scanned, rules run alone apart", |b| {
            b.iter(|| assert_eq!(found(&scan_content), expected))
        });
        g.finish();
    }
}

criterion_group!(benches, clearing);
criterion_main!(benches);
