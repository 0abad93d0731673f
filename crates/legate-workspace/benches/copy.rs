//! Copy workspace figures on a generated repository of 10,000 files and 200 MiB:
//! Legate's copy (selection + secret scan + copy + baseline) against `cp -r` of the same files
//! and `git worktree add`, in the same run (nothing deleted between timed steps); the preview of a 100-file change; the integration
//! of 100 files. Prints the figures. The repository is generated once under
//! `$LEGATE_BENCH_DIR` (default `/work/bench-data`), never inside the project.
//!
//! `cargo bench -p legate-workspace --bench copy` (`LEGATE_BENCH_FILES`, `LEGATE_BENCH_MIB`
//! and `LEGATE_BENCH_RUNS` (4: each step comes first once) scale it down).
//!
//! With `LEGATE_BENCH_REFLINK=1` (root, `mkfs.xfs`) it then makes an xfs image with reflinks
//! on a loop device and times the same copy there, where Legate clones its files, against
//! `cp -r` (coreutils 9 clones too, by default), `cp -r --reflink=never` (the bytes written)
//! and `cp -r --reflink=always`, with the disk each one took (`LEGATE_BENCH_REFLINK=only`
//! skips the first part), and then a btrfs image, where a copy is a snapshot of the project's
//! base (`copy/btrfs.rs`; `LEGATE_BENCH_REFLINK=btrfs` runs it alone, and needs
//! `mkfs.btrfs`).
//!
//! On both file systems Legate's copy is timed twice per run: as a project's first copy (an
//! empty scan verdict cache: every file read and scanned, its verdict recorded) and as a
//! later one (the cache an untimed copy filled: unchanged files are not read), each against
//! `cp -r` and `cp -r --reflink=never` of the same run.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use legate_integration::{integrate, plan};
use legate_review::preview;
use legate_workspace::{
    Baseline, CopyLimits, CopyReport, ScanCache, SecretPatterns, make_copy, make_copy_cached,
    make_copy_with_baseline_cached, select,
};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../tests/common/reflink_fs.rs"]
mod reflink_fs;

#[path = "copy/btrfs.rs"]
mod btrfs;
#[path = "copy/text.rs"]
mod text;
use text::content;

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
    let reflink = std::env::var("LEGATE_BENCH_REFLINK").unwrap_or_default();
    if reflink != "only" && reflink != "btrfs" {
        on_this_file_system(&base, files, mib, runs);
    }
    if !reflink.is_empty() && reflink != "btrfs" {
        on_a_reflink_file_system(files, mib, runs);
    }
    if !reflink.is_empty() {
        btrfs::on_btrfs(files, mib, runs);
    }
}

/// One untimed copy of `repo` under `scratch`: the project's files, git and its pack index
/// are then in memory for every timed step alike, and the verdict cache the later copies use
/// (`scratch/verdicts`) is filled. The selection it made.
fn warm(repo: &Path, scratch: &Path) -> legate_workspace::Selection {
    let limits = CopyLimits::default();
    let secrets = SecretPatterns::default();
    let sel = select(repo, &[], &secrets, &limits).unwrap();
    let cache = ScanCache::open(&scratch.join("verdicts"), &sel.root, &secrets);
    make_copy_with_baseline_cached(
        &sel,
        &scratch.join("warm/copy"),
        &scratch.join("warm/baseline"),
        &limits,
        Some(&cache),
    )
    .unwrap();
    sel
}

/// What the engine does: the selection, the project's verdict cache under `verdicts` read,
/// then the copy with its baseline, into `home`. How long the selection took, how long all
/// of it took, and the copy's report.
fn legate_copy(
    repo: &Path,
    home: &Path,
    verdicts: &Path,
    files: u64,
) -> (Duration, Duration, CopyReport) {
    let limits = CopyLimits::default();
    let secrets = SecretPatterns::default();
    let t = Instant::now();
    let sel = select(repo, &[], &secrets, &limits).unwrap();
    let selected = t.elapsed();
    let cache = ScanCache::open(verdicts, &sel.root, &secrets);
    let (report, _) = make_copy_with_baseline_cached(
        &sel,
        &home.join("copies/t"),
        &home.join("baselines/t"),
        &limits,
        Some(&cache),
    )
    .unwrap();
    let took = t.elapsed();
    // The generated text holds one run the crates.io token rule takes.
    assert_eq!(
        (report.included_files + report.blocked_files.len()) as u64,
        files
    );
    (selected, took, report)
}

/// `cp -r` of the generated repository's files (its 100 directories and `.gitignore`) into
/// `dest`, with `extra` arguments; how long it took.
fn cp_r(repo: &Path, files: u64, dest: &Path, extra: &[&str]) -> Duration {
    fs::create_dir_all(dest).unwrap();
    let mut cmd = Command::new("cp");
    cmd.arg("-r").args(extra);
    for d in 0..100.min(files - 1) {
        cmd.arg(repo.join(format!("d{d:03}")));
    }
    cmd.arg(repo.join(".gitignore")).arg(dest);
    let t = Instant::now();
    assert!(cmd.status().unwrap().success());
    t.elapsed()
}

fn mib_of(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The same copy on an xfs image with reflinks (a loop device): Legate's copy with its
/// baseline against `cp -r` three ways, each step's time and the disk it took (free space
/// before and after, each after a `sync`), in an order rotated from run to run.
fn on_a_reflink_file_system(files: u64, mib: u64, runs: usize) {
    // The repository, Legate's copies (a few MiB each) and three `cp -r` a run, one of them
    // every byte: sparse, so only what is written takes room.
    let Some(xfs) = reflink_fs::ReflinkFs::mount(mib * (runs as u64 + 2) + 2048) else {
        println!("reflink: no xfs image could be made; skipped");
        return;
    };
    let repo = xfs.path().join("repo");
    let t = Instant::now();
    generate(&repo, files, mib);
    println!(
        "reflink: {files} files, {mib} MiB on an xfs image with reflink=1 (ready in {})",
        ms(t.elapsed())
    );
    let limits = CopyLimits::default();
    let scratch = xfs.path().join("scratch");
    // One untimed copy first, as on the first file system.
    let sel = warm(&repo, &scratch);
    println!("load average at start: {}", load());
    let steps = ["legate", "cp", "never", "always", "plain", "again"];
    let mut select_t = vec![];
    let mut times: Vec<Vec<Duration>> = vec![vec![]; steps.len()];
    let mut disk: Vec<Vec<u64>> = vec![vec![]; steps.len()];
    let mut reflinked = 0;
    let mut again_report = None;
    for run in 0..runs {
        for k in 0..steps.len() {
            let step = (k + run) % steps.len();
            settle();
            let free = xfs.free_bytes();
            let took = match steps[step] {
                "legate" => {
                    let home = scratch.join(format!("home{run}"));
                    let (sel_took, took, report) =
                        legate_copy(&repo, &home, &home.join("verdicts"), files);
                    select_t.push(sel_took);
                    reflinked = report.reflinked_files;
                    took
                }
                "again" => {
                    let home = scratch.join(format!("again{run}"));
                    let (_, took, report) =
                        legate_copy(&repo, &home, &scratch.join("verdicts"), files);
                    again_report = Some(report);
                    took
                }
                "cp" => cp_r(&repo, files, &scratch.join(format!("cp{run}")), &[]),
                "plain" => {
                    // For the breakdown: the copy and scan alone.
                    let t = Instant::now();
                    make_copy(&sel, &scratch.join(format!("plain{run}")), &limits).unwrap();
                    t.elapsed()
                }
                "never" => cp_r(
                    &repo,
                    files,
                    &scratch.join(format!("never{run}")),
                    &["--reflink=never"],
                ),
                _ => cp_r(
                    &repo,
                    files,
                    &scratch.join(format!("always{run}")),
                    &["--reflink=always"],
                ),
            };
            times[step].push(took);
            disk[step].push(free.saturating_sub(xfs.free_bytes()));
        }
        println!(
            "  run {run}: legate first {}, again {}, cp -r {}, cp -r --reflink=never {}, --reflink=always {}, copy alone {}",
            ms(times[0][run]),
            ms(times[5][run]),
            ms(times[1][run]),
            ms(times[2][run]),
            ms(times[3][run]),
            ms(times[4][run])
        );
    }
    let again_never: Vec<String> = times[5]
        .iter()
        .zip(&times[2])
        .map(|(l, c)| format!("{:.2}x", l.as_secs_f64() / c.as_secs_f64()))
        .collect();
    let again_cp: Vec<String> = times[5]
        .iter()
        .zip(&times[1])
        .map(|(l, c)| format!("{:.2}x", l.as_secs_f64() / c.as_secs_f64()))
        .collect();
    let never: Vec<String> = times[0]
        .iter()
        .zip(&times[2])
        .map(|(l, c)| format!("{:.2}x", l.as_secs_f64() / c.as_secs_f64()))
        .collect();
    let disk_max = |i: usize| disk[i].iter().copied().max().unwrap_or(0);
    let med: Vec<Duration> = times.into_iter().map(median).collect();
    println!("reflink copy (median of {runs}; disk: the most free space one step took):");
    println!(
        "  legate copy, first        {} ({reflinked} of {files} files reflinked), disk {}",
        ms(med[0]),
        mib_of(disk_max(0))
    );
    let again = again_report.unwrap();
    println!(
        "  legate copy, again        {} ({} trusted from the cache, {} scanned, {} reflinked), disk {}",
        ms(med[5]),
        again.trusted_files,
        again.scanned_files,
        again.reflinked_files,
        mib_of(disk_max(5))
    );
    println!(
        "    of which selection {}; copy + secret scan alone {}, disk {}",
        ms(median(select_t)),
        ms(med[4]),
        mib_of(disk_max(4))
    );
    for (i, name) in [
        (1, "cp -r"),
        (2, "cp -r --reflink=never"),
        (3, "cp -r --reflink=always"),
    ] {
        println!("  {name:<26} {}, disk {}", ms(med[i]), mib_of(disk_max(i)));
    }
    println!(
        "  legate / cp -r --reflink=never = {:.2}x, legate / cp -r = {:.2}x, legate / cp -r --reflink=always = {:.2}x",
        med[0].as_secs_f64() / med[2].as_secs_f64(),
        med[0].as_secs_f64() / med[1].as_secs_f64(),
        med[0].as_secs_f64() / med[3].as_secs_f64()
    );
    println!(
        "  again / cp -r --reflink=never = {:.2}x, again / cp -r = {:.2}x, again / cp -r --reflink=always = {:.2}x",
        med[5].as_secs_f64() / med[2].as_secs_f64(),
        med[5].as_secs_f64() / med[1].as_secs_f64(),
        med[5].as_secs_f64() / med[3].as_secs_f64()
    );
    println!(
        "  legate / cp -r --reflink=never in each run: {}",
        never.join(", ")
    );
    println!(
        "  again / cp -r --reflink=never in each run: {}; again / cp -r: {}",
        again_never.join(", "),
        again_cp.join(", ")
    );
    println!("load average at end: {}", load());
}

/// The copy, its preview and its integration on the file system `base` is on.
fn on_this_file_system(base: &Path, files: u64, mib: u64, runs: usize) {
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
    let sel = warm(&repo, &scratch);
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
    let (mut again, mut never, mut again_report) = (vec![], vec![], None);
    // The steps of a run, in an order rotated from one run to the next, so that no step
    // always comes first (or right after the same other step).
    let steps = [
        "legate",
        "cp",
        "plain",
        "worktree",
        "again",
        "never",
        "again-alone",
    ];
    let mut again_alone = vec![];
    let secrets_cache = ScanCache::open(&scratch.join("verdicts"), &sel.root, &secrets);
    for run in 0..runs {
        let home = scratch.join(format!("home{run}"));
        for k in 0..steps.len() {
            settle();
            match steps[(k + run) % steps.len()] {
                "legate" => {
                    let (sel_took, took, _) =
                        legate_copy(&repo, &home, &home.join("verdicts"), files);
                    sel_t.push(sel_took);
                    base_t.push(took - sel_took);
                    legate.push(took);
                }
                "again" => {
                    let (_, took, report) = legate_copy(
                        &repo,
                        &scratch.join(format!("again{run}")),
                        &scratch.join("verdicts"),
                        files,
                    );
                    again.push(took);
                    again_report = Some(report);
                }
                "never" => never.push(cp_r(
                    &repo,
                    files,
                    &scratch.join(format!("never{run}")),
                    &["--reflink=never"],
                )),
                "plain" => {
                    // For the breakdown: the copy and scan alone.
                    let t = Instant::now();
                    make_copy(&sel, &home.join("copies/plain"), &limits).unwrap();
                    copy_t.push(t.elapsed());
                }
                "again-alone" => {
                    // For the breakdown: a later copy alone, on the verdicts the untimed
                    // copy recorded (read before, as the engine reads them before it copies).
                    let t = Instant::now();
                    let r = make_copy_cached(
                        &sel,
                        &home.join("copies/again-alone"),
                        &limits,
                        Some(&secrets_cache),
                    )
                    .unwrap();
                    again_alone.push(t.elapsed());
                    assert_eq!(r.scanned_files, 0);
                }
                "cp" => cp.push(cp_r(&repo, files, &scratch.join(format!("cp{run}")), &[])),
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
            "  run {run}: legate first {}, again {}, cp -r {}, cp -r --reflink=never {}, copy alone {}, worktree {}",
            ms(legate[run]),
            ms(again[run]),
            ms(cp[run]),
            ms(never[run]),
            ms(copy_t[run]),
            ms(wt[run])
        );
    }
    let again_ratios: Vec<String> = again
        .iter()
        .zip(&cp)
        .map(|(l, c)| format!("{:.2}x", l.as_secs_f64() / c.as_secs_f64()))
        .collect();
    // Each run's own ratio too: the machine's speed changes between runs, not within one.
    let ratios: Vec<String> = legate
        .iter()
        .zip(&cp)
        .map(|(l, c)| format!("{:.2}x", l.as_secs_f64() / c.as_secs_f64()))
        .collect();
    let (l, c, w) = (median(legate), median(cp), median(wt));
    let (a, n) = (median(again), median(never));
    println!("copy (median of {runs}):");
    let copy_alone = median(copy_t);
    println!(
        "  legate first     {} (selection {}, copy + secret scan + baseline {}; copy + secret scan alone {})",
        ms(l),
        ms(median(sel_t)),
        ms(median(base_t)),
        ms(copy_alone)
    );
    let again_report = again_report.unwrap();
    println!(
        "  legate again     {} ({} trusted from the cache, {} scanned)",
        ms(a),
        again_report.trusted_files,
        again_report.scanned_files
    );
    println!(
        "    of which the copy alone (no selection, no baseline) {}",
        ms(median(again_alone))
    );
    println!("  cp -r            {}", ms(c));
    println!("  cp -r --reflink=never {}", ms(n));
    println!("  git worktree add {}", ms(w));
    println!(
        "  legate / cp -r = {:.2}x, copy + secret scan alone / cp -r = {:.2}x",
        l.as_secs_f64() / c.as_secs_f64(),
        copy_alone.as_secs_f64() / c.as_secs_f64()
    );
    println!(
        "  again / cp -r = {:.2}x, legate / cp -r --reflink=never = {:.2}x, again / cp -r --reflink=never = {:.2}x",
        a.as_secs_f64() / c.as_secs_f64(),
        l.as_secs_f64() / n.as_secs_f64(),
        a.as_secs_f64() / n.as_secs_f64()
    );
    println!("  legate / cp -r in each run: {}", ratios.join(", "));
    println!("  again / cp -r in each run: {}", again_ratios.join(", "));

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
