//! What a pod costs: a trivial revisor task's start in a pod against a local process, and 8
//! tasks at once on 8 pods against 8 local ones, on the same machine, in one run.
//!
//! Needs the local cluster (`scripts/k8s-local.sh up`, then export the `KUBECONFIG` line it
//! prints); without one it says so and measures nothing. The image is made from this very
//! binary (`legate_testkit::cluster`), the pods in a namespace of the bench's own.
//!
//! Run: `cargo bench -p legate --bench kubernetes` (env `K8S_BENCH_RUNS`, default 5; the
//! figures are medians, printed with their ratios). `cargo test --benches` runs it with 1.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_testkit::cluster::LocalCluster;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const LEGATE: &str = env!("CARGO_BIN_EXE_legate");

fn task(home: &Path) -> std::process::Child {
    Command::new(LEGATE)
        .args(["run", "--sandbox", "write a.txt: x"])
        .env("LEGATE_HOME", home)
        .env_remove("LEGATE_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `n` tasks at once on `home`, timed from the first start to the last end.
fn batch(home: &Path, n: usize) -> Duration {
    let start = Instant::now();
    let children: Vec<_> = (0..n).map(|_| task(home)).collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    start.elapsed()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    let Some(cluster) = LocalCluster::from_env() else {
        println!(
            "kubernetes bench: no cluster (scripts/k8s-local.sh up; export KUBECONFIG=...), nothing measured"
        );
        return;
    };
    let quick = std::env::args().any(|a| a == "--test");
    let runs: usize = if quick {
        1
    } else {
        std::env::var("K8S_BENCH_RUNS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(5)
    };
    let ns = cluster.namespace("lt-bench");
    let (tag, inside) = cluster.image(Path::new(LEGATE));
    let base = tempfile::tempdir().unwrap();
    let (local, pod) = (base.path().join("local"), base.path().join("pod"));
    std::fs::create_dir_all(&local).unwrap();
    std::fs::create_dir_all(&pod).unwrap();
    std::fs::write(
        pod.join("legate.toml"),
        format!(
            "max_running = 8\n[kubernetes]\nkubeconfig = {:?}\nnamespace = {:?}\nimage_pull_policy = \"Never\"\n\n[agents.revisor]\nruntime = \"kubernetes\"\nimage = {tag:?}\npod_command = [{:?}, \"agent\", \"revisor\"]\n",
            cluster.kubeconfig.display().to_string(),
            ns.name,
            inside.display().to_string()
        ),
    )
    .unwrap();
    std::fs::write(local.join("legate.toml"), "max_running = 8\n").unwrap();
    let (mut one_local, mut one_pod, mut eight_local, mut eight_pod) =
        (vec![], vec![], vec![], vec![]);
    for _ in 0..runs {
        one_local.push(batch(&local, 1));
        one_pod.push(batch(&pod, 1));
        eight_local.push(batch(&local, 8));
        eight_pod.push(batch(&pod, 8));
    }
    let (a, b, c, d) = (
        median(one_local),
        median(one_pod),
        median(eight_local),
        median(eight_pod),
    );
    let ratio = |x: Duration, y: Duration| x.as_secs_f64() / y.as_secs_f64();
    println!("kubernetes bench ({runs} runs, medians)");
    println!(
        "  one task, local process : {:>8.0} ms",
        a.as_secs_f64() * 1e3
    );
    println!(
        "  one task, pod           : {:>8.0} ms  ({:.1}x local)",
        b.as_secs_f64() * 1e3,
        ratio(b, a)
    );
    println!(
        "  8 at once, local        : {:>8.0} ms",
        c.as_secs_f64() * 1e3
    );
    println!(
        "  8 at once, pods         : {:>8.0} ms  ({:.1}x local)",
        d.as_secs_f64() * 1e3,
        ratio(d, c)
    );
}
