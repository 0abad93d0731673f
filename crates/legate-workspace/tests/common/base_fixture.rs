//! What the tests of copies as snapshots of a project's base share: the engine's copy with
//! its verdict cache and bases, a settled project on a given file system, and checks of what
//! a copy holds.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use crate::common::{Fixture, files_under, write};
use crate::settled::{leak, settle};
use legate_review::preview;
use legate_workspace::*;
use std::fs;
use std::path::{Path, PathBuf};

/// A copy as the engine makes it (`select_and_copy`: the base snapshotted while the selection
/// runs), with the project's verdict cache and bases, as task `name`.
pub fn copy_with(project: &Path, home: &Path, name: &str, secrets: &SecretPatterns) -> CopyReport {
    copy_full(project, home, name, secrets).0
}

pub fn copy_full(
    project: &Path,
    home: &Path,
    name: &str,
    secrets: &SecretPatterns,
) -> (CopyReport, Baseline) {
    try_copy(project, home, name, secrets, &[]).unwrap()
}

/// [`copy_full`] with include paths, its error returned.
pub fn try_copy(
    project: &Path,
    home: &Path,
    name: &str,
    secrets: &SecretPatterns,
    include: &[&str],
) -> Result<(CopyReport, Baseline), legate_core::Error> {
    let include: Vec<String> = include.iter().map(|s| s.to_string()).collect();
    let (copy_dir, baseline_dir) = (
        home.join("copies").join(name),
        home.join("baselines").join(name),
    );
    let (verdicts, bases) = (home.join("scan-verdicts"), home.join("bases"));
    let places = CopyPlaces {
        copy_dir: &copy_dir,
        baseline_dir: &baseline_dir,
        verdicts: &verdicts,
        bases: &bases,
    };
    select_and_copy(project, &include, secrets, &CopyLimits::default(), places)
}

pub fn copy(f: &Fixture, name: &str) -> (CopyReport, Baseline) {
    copy_full(&f.project, &f.home, name, &SecretPatterns::default())
}

/// Deterministic bytes of no credential shape.
pub fn filler(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| b'a' + ((i * 7 + seed * 13) % 26) as u8)
        .collect()
}

/// A committed project on `dir`'s file system: `n` files under `src/`, 4 MiB of data, one
/// file holding a credential, one untracked file; settled.
pub fn project_in(dir: &Path, n: usize) -> Fixture {
    let texts: Vec<(String, Vec<u8>)> = (0..n)
        .map(|i| (format!("src/f{i:03}.txt"), filler(i, 100 + i)))
        .collect();
    let mut files: Vec<(&str, &[u8])> = texts
        .iter()
        .map(|(p, b)| (p.as_str(), b.as_slice()))
        .collect();
    let big = filler(7, 4 * 1024 * 1024);
    files.push(("data/big.bin", &big));
    let leaky = format!("key = {}\n", leak());
    files.push(("config/leak.txt", leaky.as_bytes()));
    let f = Fixture::new_in(dir, &files);
    f.commit_all();
    write(&f.project, "notes/untracked.txt", b"not committed yet\n");
    settle(&f.project);
    f
}

/// Every file of the copy holds the project's bytes, and the copy holds every file of the
/// project but `left_out` (and `.git`).
pub fn holds_the_project(copy: &Path, project: &Path, left_out: &[&str]) {
    let mut want = files_under(project);
    want.retain(|p| !left_out.contains(&p.as_str()));
    assert_eq!(files_under(copy), want, "the copy's files");
    for p in &want {
        assert_eq!(
            fs::read(copy.join(p)).unwrap(),
            fs::read(project.join(p)).unwrap(),
            "{p}"
        );
    }
}

/// The copy's preview (its change against its baseline).
pub fn look(b: &Baseline) -> legate_workspace::Preview {
    preview(b, &SecretPatterns::default(), &CopyLimits::default()).unwrap()
}

pub fn base_of(f: &Fixture) -> PathBuf {
    base_dir(
        &f.home.join("bases"),
        &fs::canonicalize(&f.project).unwrap(),
    )
}
