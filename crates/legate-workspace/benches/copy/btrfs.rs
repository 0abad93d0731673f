//! The copy on a btrfs image (a loop device), where a copy is a snapshot of the project's
//! base (`legate_workspace::select_and_copy`, as the engine makes it): a later copy of the
//! unchanged project, and
//! a project's first (its base made), against `cp -r` (which clones), `cp -r
//! --reflink=never` and `cp -r --reflink=always` of the same run, with the disk each step
//! took; and, for the breakdown, the selection alone and a later copy as it is made where
//! there is no base (each file cloned, on the cache's verdicts).

use crate::{cp_r, generate, load, median, mib_of, ms, settle};
use legate_workspace::{
    CopyLimits, CopyPlaces, CopyReport, ScanCache, SecretPatterns, make_copy_with_baseline_cached,
    select, select_and_copy,
};
use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

/// The engine's copy into `home` (its copies, baselines, bases and verdicts all there), as
/// task `name`: with a base, as the engine makes it (`select_and_copy`: the base snapshotted
/// while the selection runs), then the selection alone once more (untimed in the step, for
/// the breakdown); without, the selection then the copy with the verdict cache. How long the
/// selection took, how long the step took, and the report.
fn copy(repo: &Path, home: &Path, name: &str, base: bool) -> (Duration, Duration, CopyReport) {
    let limits = CopyLimits::default();
    let secrets = SecretPatterns::default();
    let (copy, baseline) = (
        home.join("copies").join(name),
        home.join("baselines").join(name),
    );
    if base {
        let (verdicts, bases) = (home.join("verdicts"), home.join("bases"));
        let places = CopyPlaces {
            copy_dir: &copy,
            baseline_dir: &baseline,
            verdicts: &verdicts,
            bases: &bases,
        };
        let t = Instant::now();
        let (report, _) = select_and_copy(repo, &[], &secrets, &limits, places).unwrap();
        let took = t.elapsed();
        let t = Instant::now();
        select(repo, &[], &secrets, &limits).unwrap();
        return (t.elapsed(), took, report);
    }
    let t = Instant::now();
    let sel = select(repo, &[], &secrets, &limits).unwrap();
    let selected = t.elapsed();
    let cache = ScanCache::open(&home.join("verdicts"), &sel.root, &secrets);
    let (report, _) =
        make_copy_with_baseline_cached(&sel, &copy, &baseline, &limits, Some(&cache)).unwrap();
    (selected, t.elapsed(), report)
}

pub(crate) fn on_btrfs(files: u64, mib: u64, runs: usize) {
    let Some(img) = crate::reflink_fs::ReflinkFs::mount_btrfs(mib * (runs as u64 + 3) + 2048)
    else {
        println!("btrfs: no btrfs image could be made; skipped");
        return;
    };
    let repo = img.path().join("repo");
    let t = Instant::now();
    generate(&repo, files, mib);
    println!(
        "btrfs: {files} files, {mib} MiB on a btrfs image (ready in {})",
        ms(t.elapsed())
    );
    // Old enough for their verdicts to be recorded, so that the base gets its manifest.
    std::thread::sleep(Duration::from_millis(1200));
    let home = img.path().join("home");
    let (_, made, first) = copy(&repo, &home, "warm", true);
    assert!(first.snapshot, "{first:?}");
    println!("  the base made (untimed for the medians) in {}", ms(made));
    println!("load average at start: {}", load());
    let steps = ["snapshot", "first", "cp", "never", "always", "clones"];
    let mut times: Vec<Vec<Duration>> = vec![vec![]; steps.len()];
    let mut disk: Vec<Vec<u64>> = vec![vec![]; steps.len()];
    let mut select_t = vec![];
    let mut later = None;
    for run in 0..runs {
        for k in 0..steps.len() {
            let step = (k + run) % steps.len();
            settle();
            let free = img.free_bytes();
            let took = match steps[step] {
                "snapshot" => {
                    let (s, took, r) = copy(&repo, &home, &format!("s{run}"), true);
                    assert!(r.snapshot && r.scanned_files == 0, "{r:?}");
                    select_t.push(s);
                    later = Some(r);
                    took
                }
                "first" => {
                    // Another home: no base and no verdicts yet.
                    let other = img.path().join(format!("first{run}"));
                    let (_, took, r) = copy(&repo, &other, "f", true);
                    assert!(r.snapshot && r.scanned_files > 0, "{r:?}");
                    took
                }
                "clones" => {
                    // The same home's verdicts, without the base: each file cloned.
                    let other = img.path().join(format!("clones{run}"));
                    std::fs::create_dir_all(&other).unwrap();
                    let verdicts = home.join("verdicts");
                    let link = other.join("verdicts");
                    if !link.exists() {
                        copy_dir(&verdicts, &link);
                    }
                    let (_, took, r) = copy(&repo, &other, "c", false);
                    assert!(!r.snapshot && r.scanned_files == 0, "{r:?}");
                    took
                }
                "cp" => cp_r(&repo, files, &img.path().join(format!("cp{run}")), &[]),
                "never" => cp_r(
                    &repo,
                    files,
                    &img.path().join(format!("never{run}")),
                    &["--reflink=never"],
                ),
                _ => cp_r(
                    &repo,
                    files,
                    &img.path().join(format!("always{run}")),
                    &["--reflink=always"],
                ),
            };
            times[step].push(took);
            disk[step].push(free.saturating_sub(img.free_bytes()));
        }
        println!(
            "  run {run}: snapshot {}, first {}, cp -r {}, --reflink=never {}, --reflink=always {}, clones {}",
            ms(times[0][run]),
            ms(times[1][run]),
            ms(times[2][run]),
            ms(times[3][run]),
            ms(times[4][run]),
            ms(times[5][run])
        );
    }
    let per_run: Vec<String> = times[0]
        .iter()
        .zip(&times[2])
        .map(|(l, c)| format!("{:.3}x", l.as_secs_f64() / c.as_secs_f64()))
        .collect();
    let disk_max = |i: usize| disk[i].iter().copied().max().unwrap_or(0);
    let med: Vec<Duration> = times.into_iter().map(median).collect();
    let later = later.unwrap();
    println!("btrfs copy (median of {runs}; disk: the most free space one step took):");
    println!(
        "  legate, later copy (a snapshot)  {}, disk {} ({} files, {} scanned, {} trusted)",
        ms(med[0]),
        mib_of(disk_max(0)),
        later.included_files,
        later.scanned_files,
        later.trusted_files
    );
    println!(
        "    the selection alone (made beside the snapshots in the step) {}",
        ms(median(select_t))
    );
    println!(
        "  legate, first copy (base made)   {}, disk {}",
        ms(med[1]),
        mib_of(disk_max(1))
    );
    println!(
        "  legate, later copy without base  {}, disk {}",
        ms(med[5]),
        mib_of(disk_max(5))
    );
    for (i, name) in [
        (2, "cp -r"),
        (3, "cp -r --reflink=never"),
        (4, "cp -r --reflink=always"),
    ] {
        println!("  {name:<32} {}, disk {}", ms(med[i]), mib_of(disk_max(i)));
    }
    let ratio = |a: usize, b: usize| med[a].as_secs_f64() / med[b].as_secs_f64();
    println!(
        "  snapshot / cp -r = {:.3}x, snapshot / cp -r --reflink=never = {:.3}x, first / cp -r = {:.2}x, without base / cp -r = {:.2}x",
        ratio(0, 2),
        ratio(0, 3),
        ratio(1, 2),
        ratio(5, 2)
    );
    println!("  snapshot / cp -r in each run: {}", per_run.join(", "));
    println!("load average at end: {}", load());
}

/// Copies the files directly in `from` into `to` (made), as they are.
fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}
