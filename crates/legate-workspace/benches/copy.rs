//! Copy workspace figures on a generated repository of 10,000 files and 200 MiB:
//! Legate's copy (selection + secret scan + copy + baseline) against `cp -r` of the same files
//! and `git worktree add`, in the same run (nothing deleted between timed steps); the preview of a 100-file change; the integration
//! of 100 files. Prints the figures. The repository is generated once under
//! `$LEGATE_BENCH_DIR` (default `/work/bench-data`), never inside the project.
//!
//! `cargo bench -p legate-workspace --bench copy` (`LEGATE_BENCH_FILES`, `LEGATE_BENCH_MIB`
//! and `LEGATE_BENCH_RUNS` (4: each step comes first once) scale it down).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_integration::{integrate, plan};
use legate_review::preview;
use legate_workspace::{
    Baseline, CopyLimits, SecretPatterns, make_copy, make_copy_with_baseline, select,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Writes back what earlier steps left dirty, so that no timed step pays for another's
/// writeback.
fn settle() {
    let _ = Command::new("sync").status();
}

/// The load averages, as `uptime` prints them.
fn load() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split(' ').take(3).collect::<Vec<_>>().join(", "))
        .unwrap_or_default()
}

fn env_num(key: &str, default: u64) -> u64 {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_AUTHOR_NAME", "b")
        .env("GIT_AUTHOR_EMAIL", "b@b")
        .env("GIT_COMMITTER_NAME", "b")
        .env("GIT_COMMITTER_EMAIL", "b@b")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Deterministic lower-case text with spaces and newlines (no credential pattern can match).
fn content(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = (x % 29) as u8;
        out.push(match b {
            26 | 27 => b' ',
            28 => b'\n',
            c => b'a' + c,
        });
    }
    out
}

fn generate(root: &Path, files: u64, mib: u64) {
    let marker = root.join(".legate-bench-complete");
    let want = format!("v2 {files} {mib}");
    if fs::read_to_string(&marker).ok().as_deref() == Some(want.as_str()) {
        return;
    }
    let _ = fs::remove_dir_all(root);
    fs::create_dir_all(root).unwrap();
    let total = mib * 1024 * 1024;
    let per = (total / files) as usize;
    // `files` in all: the data files and `.gitignore`.
    for i in 0..files - 1 {
        let dir = root.join(format!("d{:03}", i % 100));
        fs::create_dir_all(&dir).unwrap();
        // Sizes vary around the mean; the sum stays `total` within a file's size.
        let len = if i % 2 == 0 { per / 2 } else { per + per / 2 };
        fs::write(dir.join(format!("f{i:05}.txt")), content(i, len)).unwrap();
    }
    fs::write(root.join(".gitignore"), "target/\n").unwrap();
    git(root, &["init", "-q"]);
    git(root, &["add", "-A"]);
    git(root, &["commit", "-q", "-m", "bench"]);
    fs::write(&marker, want).unwrap();
    git(root, &["update-index", "--refresh"]);
    fs::write(root.join(".git/info/exclude"), ".legate-bench-complete\n").unwrap();
}

/// The median; of an even count, the mean of the middle two.
fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    let n = v.len();
    if n.is_multiple_of(2) {
        (v[n / 2 - 1] + v[n / 2]) / 2
    } else {
        v[n / 2]
    }
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing: skip the big run.
    if !std::env::args().any(|a| a == "--bench") {
        println!("copy bench: run with `cargo bench -p legate-workspace --bench copy`");
        return;
    }
    let files = env_num("LEGATE_BENCH_FILES", 10_000);
    let mib = env_num("LEGATE_BENCH_MIB", 200);
    let runs = env_num("LEGATE_BENCH_RUNS", 4) as usize;
    let base = PathBuf::from(
        std::env::var("LEGATE_BENCH_DIR").unwrap_or_else(|_| "/work/bench-data".into()),
    );
    let repo = base.join("repo");
    let t = Instant::now();
    generate(&repo, files, mib);
    println!(
        "repository: {files} files, {mib} MiB at {} (ready in {})",
        repo.display(),
        ms(t.elapsed())
    );
    let scratch = base.join("scratch");
    let _ = fs::remove_dir_all(&scratch);
    fs::create_dir_all(&scratch).unwrap();
    let limits = CopyLimits::default();
    let secrets = SecretPatterns::default();
    // One untimed copy first: the project's files, git and its pack index are then in memory
    // for every timed step alike.
    let sel = select(&repo, &[], &secrets, &limits).unwrap();
    make_copy_with_baseline(
        &sel,
        &scratch.join("warm/copy"),
        &scratch.join("warm/baseline"),
        &limits,
    )
    .unwrap();
    // ext4 without a journal passes over inodes freed in the last minute (five while their
    // block is unwritten) when it makes new ones: right after 10,000 deletions, making
    // 10,000 files costs several times more. So nothing is deleted between timed steps,
    // everything made is removed at the end, and timing starts a minute after any clean-up
    // (this one's, or the last run's).
    settle();
    std::thread::sleep(Duration::from_secs(65));
    println!("load average at start: {}", load());

    let (mut legate, mut sel_t, mut copy_t, mut base_t, mut cp, mut wt) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    // The steps of a run, in an order rotated from one run to the next, so that no step
    // always comes first (or right after the same other step).
    let steps = ["legate", "cp", "plain", "worktree"];
    for run in 0..runs {
        let home = scratch.join(format!("home{run}"));
        for k in 0..steps.len() {
            settle();
            match steps[(k + run) % steps.len()] {
                "legate" => {
                    let t0 = Instant::now();
                    let sel = select(&repo, &[], &secrets, &limits).unwrap();
                    let t1 = Instant::now();
                    // What the engine does: the copy, with its baseline.
                    let (report, _) = make_copy_with_baseline(
                        &sel,
                        &home.join("copies/t"),
                        &home.join("baselines/t"),
                        &limits,
                    )
                    .unwrap();
                    let t2 = Instant::now();
                    assert_eq!(report.included_files as u64, files);
                    sel_t.push(t1 - t0);
                    base_t.push(t2 - t1);
                    legate.push(t2 - t0);
                }
                "plain" => {
                    // For the breakdown: the copy and scan alone.
                    let t = Instant::now();
                    make_copy(&sel, &home.join("copies/plain"), &limits).unwrap();
                    copy_t.push(t.elapsed());
                }
                "cp" => {
                    let dest = scratch.join(format!("cp{run}"));
                    fs::create_dir_all(&dest).unwrap();
                    let mut cmd = Command::new("cp");
                    cmd.arg("-r");
                    for d in 0..100.min(files - 1) {
                        cmd.arg(repo.join(format!("d{d:03}")));
                    }
                    cmd.arg(repo.join(".gitignore")).arg(&dest);
                    let t = Instant::now();
                    assert!(cmd.status().unwrap().success());
                    cp.push(t.elapsed());
                }
                _ => {
                    let wdest = scratch.join(format!("wt{run}"));
                    let t = Instant::now();
                    git(
                        &repo,
                        &[
                            "worktree",
                            "add",
                            "-q",
                            "--detach",
                            wdest.to_str().unwrap(),
                            "HEAD",
                        ],
                    );
                    wt.push(t.elapsed());
                }
            }
        }
        println!(
            "  run {run}: legate {}, cp -r {}, copy alone {}, worktree {}",
            ms(legate[run]),
            ms(cp[run]),
            ms(copy_t[run]),
            ms(wt[run])
        );
    }
    // Each run's own ratio too: the machine's speed changes between runs, not within one.
    let ratios: Vec<String> = legate
        .iter()
        .zip(&cp)
        .map(|(l, c)| format!("{:.2}x", l.as_secs_f64() / c.as_secs_f64()))
        .collect();
    let (l, c, w) = (median(legate), median(cp), median(wt));
    println!("copy (median of {runs}):");
    let copy_alone = median(copy_t);
    println!(
        "  legate copy      {} (selection {}, copy + secret scan + baseline {}; copy + secret scan alone {})",
        ms(l),
        ms(median(sel_t)),
        ms(median(base_t)),
        ms(copy_alone)
    );
    println!("  cp -r            {}", ms(c));
    println!("  git worktree add {}", ms(w));
    println!(
        "  legate / cp -r = {:.2}x, copy + secret scan alone / cp -r = {:.2}x",
        l.as_secs_f64() / c.as_secs_f64(),
        copy_alone.as_secs_f64() / c.as_secs_f64()
    );
    println!("  legate / cp -r in each run: {}", ratios.join(", "));

    // Preview and integrate of a 100-file change, on the first copy.
    let home = scratch.join("home0");
    let copy = home.join("copies/t");
    let baseline = Baseline::open(&home.join("baselines/t"), &copy).unwrap();
    for i in 0..100u64 {
        let p = copy.join(format!("d{:03}/f{:05}.txt", i % 100, i));
        let mut bytes = fs::read(&p).unwrap();
        bytes.extend_from_slice(b"\nan added line\n");
        fs::write(&p, bytes).unwrap();
    }
    let mut pv = vec![];
    let mut last = None;
    for _ in 0..runs.max(5) {
        let t = Instant::now();
        let p = preview(&baseline, &secrets, &limits).unwrap();
        pv.push(t.elapsed());
        last = Some(p);
    }
    let p = last.unwrap();
    assert_eq!(p.files.len(), 100);
    println!(
        "preview of a 100-file change: {} (median of {}, patch {} bytes)",
        ms(median(pv)),
        runs.max(5),
        p.patch_length
    );
    let mut it = vec![];
    let mut planned = vec![];
    for _ in 0..runs.max(5) {
        let t = Instant::now();
        let changes = plan(&baseline, &p).unwrap();
        let t_plan = t.elapsed();
        let t = Instant::now();
        let journal = scratch.join("run/integrations/bench");
        let r = integrate(&repo, &changes, &journal, serde_json::Value::Null).unwrap();
        it.push(t.elapsed());
        assert_eq!(r.integrated.files.len(), 100);
        r.finish();
        planned.push(t_plan);
        git(&repo, &["checkout", "-q", "--", "."]);
    }
    println!(
        "integrate of 100 files: {} (median of {}; reading the 200 blobs from the baseline adds {})",
        ms(median(it)),
        runs.max(5),
        ms(median(planned))
    );
    println!("load average at end: {}", load());
    for run in 0..runs {
        let wdest = scratch.join(format!("wt{run}"));
        git(
            &repo,
            &["worktree", "remove", "--force", wdest.to_str().unwrap()],
        );
    }
    let _ = fs::remove_dir_all(&scratch);
}
