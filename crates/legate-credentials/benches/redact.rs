//! What redaction costs on the event path: an agent's answer of 256 KiB streamed in
//! 64-byte chunks (prose and code, one GitHub token and one AWS key pair in it), relayed as
//! is (the baseline: each chunk copied out, what the pump did before redaction), through a
//! `StreamRedactor` (what the engine's pump does now), and redacted whole at once (the
//! stored answer), in one run.
//!
//! `cargo bench -p legate-credentials --bench redact`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use legate_credentials::{StreamRedactor, redact};

/// About `bytes` of an agent's answer: prose, a code block, and two credentials (fakes built
/// here, in the detector's formats).
fn answer(bytes: usize) -> String {
    let token = format!(
        "ghp_{}",
        "A1b2C3d4E5f6G7h8I9j0".repeat(2).get(..36).unwrap()
    );
    let key_id = format!("AKIA{}", "Q7ZX3M2P9L4K8J6H");
    let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    let mut text = String::new();
    let mut n = 0;
    while text.len() < bytes {
        n += 1;
        text.push_str("The function reads the configuration, checks each entry and returns ");
        text.push_str("the first error it meets; the caller retries once.\n");
        text.push_str(&format!(
            "```rust\nfn step_{n}(x: u64) -> u64 {{ x.wrapping_mul(31) + {n} }}\n```\n"
        ));
        if n == 200 {
            text.push_str(&format!("token: {token}\n"));
        }
        if n == 800 {
            text.push_str(&format!(
                "aws_access_key_id = {key_id}\naws_secret_access_key = {secret}\n"
            ));
        }
    }
    text
}

fn chunks(text: &str, size: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = size.min(rest.len());
        while !rest.is_char_boundary(cut) {
            cut += 1;
        }
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out
}

fn relay(c: &mut Criterion) {
    let text = answer(256 * 1024);
    let pieces = chunks(&text, 64);
    let mut g = c.benchmark_group("an agent's 256 KiB answer in 64-byte chunks");
    g.throughput(Throughput::Bytes(text.len() as u64));
    g.bench_function("relayed as is (baseline)", |b| {
        b.iter(|| {
            let out: Vec<String> = pieces.iter().map(|p| (*p).to_string()).collect();
            assert_eq!(out.len(), pieces.len());
        })
    });
    g.bench_function("through the stream redactor", |b| {
        b.iter(|| {
            let mut r = StreamRedactor::new();
            let mut out = Vec::new();
            for p in &pieces {
                out.extend(r.push(p));
            }
            out.extend(r.finish());
            assert!(out.concat().contains("[REDACTED:"));
        })
    });
    g.bench_function("redacted whole, once", |b| {
        b.iter(|| assert!(redact(&text).contains("[REDACTED:")))
    });
    g.finish();
}

criterion_group!(benches, relay);
criterion_main!(benches);
