//! How long a trivial delegated task takes end to end (`legate run --sandbox "run true"` on
//! the built-in `revisor`: the engine, the sandbox, the confined agent start with its
//! namespaces and, now, its egress listener and proxy, one turn, the stop), with and without a
//! `legate serve --mcp` listening on the same home, in one run.
//!
//! Before issue 27 a serve on the home put the Landlock port layer (65,535 rules) into every
//! agent it confined; with the network namespace there is no layer, so the two should cost
//! the same. `LEGATE_BASELINE_BIN=/path/to/older/legate` runs the same pairs with that binary
//! too (an older release build: `git worktree add ../base <commit>` and
//! `cargo build --release -p legate` there), so the comparison with today is in one run.
//!
//! Run: `cargo bench -p legate --bench agent_start` (env `AGENT_START_RUNS`, default 10; the
//! figures are medians, printed with their ratios). `cargo test --benches` runs it with 2.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

/// A `legate serve --mcp` on `home`, stopped on drop.
struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn serve(bin: &Path, home: &Path) -> Serve {
    let mut child = Command::new(bin)
        .args(["serve", "--mcp", "--port", "0"])
        .env("LEGATE_HOME", home)
        .env_remove("LEGATE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().starts_with("Ctrl-C stops") {
            break;
        }
    }
    std::thread::spawn(move || for _ in lines {});
    Serve(child)
}

/// One trivial task, timed.
fn task(bin: &Path, home: &Path) -> Duration {
    let start = Instant::now();
    let out = Command::new(bin)
        .args(["run", "--sandbox", "run true"])
        .env("LEGATE_HOME", home)
        .env_remove("LEGATE_LOG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let took = start.elapsed();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    took
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// One binary's two homes: one quiet, one with a serve listening.
struct Homes {
    bin: PathBuf,
    quiet: PathBuf,
    served: PathBuf,
    _serve: Serve,
    times: (Vec<Duration>, Vec<Duration>),
}

impl Homes {
    fn new(bin: PathBuf, dir: &Path, name: &str) -> Self {
        let quiet = dir.join(name).join("quiet");
        let served = dir.join(name).join("served");
        std::fs::create_dir_all(&quiet).unwrap();
        std::fs::create_dir_all(&served).unwrap();
        // Warm both homes (store created, the agent's state directory made).
        task(&bin, &quiet);
        let serve = serve(&bin, &served);
        task(&bin, &served);
        Self {
            bin,
            quiet,
            served,
            _serve: serve,
            times: (Vec::new(), Vec::new()),
        }
    }

    fn round(&mut self) {
        self.times.0.push(task(&self.bin, &self.quiet));
        self.times.1.push(task(&self.bin, &self.served));
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn main() {
    let runs: usize = std::env::var("AGENT_START_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            10
        } else {
            2
        });
    let dir = tempfile::tempdir().unwrap();
    let mut homes = vec![(
        "this build",
        Homes::new(PathBuf::from(LEGATE), dir.path(), "new"),
    )];
    if let Some(base) = std::env::var_os("LEGATE_BASELINE_BIN") {
        homes.push((
            "baseline",
            Homes::new(PathBuf::from(base), dir.path(), "base"),
        ));
    }
    println!("agent start: `legate run --sandbox \"run true\"` on revisor, medians of {runs}");
    // Rounds interleave every binary and home, so that load drifts hit all alike.
    for _ in 0..runs {
        for (_, h) in &mut homes {
            h.round();
        }
    }
    let mut rows = Vec::new();
    for (name, h) in homes {
        let (quiet, served) = (median(h.times.0), median(h.times.1));
        println!(
            "{name:>10}: without a serve {:7.1} ms, with a serve on the home {:7.1} ms: {:.2}x",
            ms(quiet),
            ms(served),
            ms(served) / ms(quiet)
        );
        rows.push((quiet, served));
    }
    if let [new, base] = rows.as_slice() {
        println!(
            "this build against the baseline: {:.2}x without a serve, {:.2}x with one",
            ms(new.0) / ms(base.0),
            ms(new.1) / ms(base.1)
        );
    }
}
