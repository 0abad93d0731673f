//! A base's making stopped after each of its steps, as a `kill -9` there would stop it: the
//! next copy must hold the project as its rules select it now, never the older base under a
//! newer manifest, nor the newer base under an older one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../tests/common/reflink_fs.rs"]
pub(crate) mod reflink_fs;

use super::*;
use crate::secrets::SecretPatterns;
use std::process::Command;

fn git(dir: &Path, args: &[&str]) {
    let ok = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "t")
        .env("GIT_AUTHOR_EMAIL", "t@t")
        .env("GIT_COMMITTER_NAME", "t")
        .env("GIT_COMMITTER_EMAIL", "t@t")
        .status()
        .unwrap()
        .success();
    assert!(ok, "git {args:?}");
}

/// A settled project of a few files under `dir`.
pub(crate) fn project(dir: &Path) -> PathBuf {
    let p = dir.join("project");
    fs::create_dir_all(p.join("src")).unwrap();
    git(&p, &["init", "-q"]);
    for i in 0..20 {
        fs::write(p.join(format!("src/f{i:03}.txt")), format!("text {i}\n")).unwrap();
    }
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-q", "-m", "init"]);
    // Old enough for the verdicts (and the manifest) to be recorded.
    std::thread::sleep(crate::scan_cache::RACY_MARGIN + std::time::Duration::from_millis(200));
    fs::canonicalize(p).unwrap()
}

struct Copier {
    home: PathBuf,
    project: PathBuf,
    limits: CopyLimits,
}

impl Copier {
    fn rules(&self, excluding: bool) -> (Selection, ScanCache) {
        let secrets = if excluding {
            SecretPatterns::new(&["src/f001.txt".to_string()], &[]).unwrap()
        } else {
            SecretPatterns::default()
        };
        let sel = crate::select::select(&self.project, &[], &secrets, &self.limits).unwrap();
        let cache = ScanCache::open(&self.home.join("scan-verdicts"), &sel.root, &secrets);
        (sel, cache)
    }

    fn copy(&self, name: &str, excluding: bool) -> CopyReport {
        let (sel, cache) = self.rules(excluding);
        let (copies, baselines) = (self.home.join("copies"), self.home.join("baselines"));
        let bases = self.home.join("bases");
        assert!(usable(&copies, &baselines, &bases));
        let (copy, baseline) = (copies.join(name), baselines.join(name));
        copy_from_base(&sel, &copy, &baseline, &self.limits, &cache, &bases)
            .unwrap()
            .0
    }

    /// Makes the base under the default rules, stopped after `at`.
    fn make_stopped(&self, at: &Step) {
        let (sel, cache) = self.rules(false);
        let dir = base_dir(&self.home.join("bases"), &sel.root);
        let _lock = lock(&dir).unwrap();
        let c = conditions(&sel, &self.limits, &cache);
        let mut seen = Vec::new();
        let made = make(&dir, &sel, &self.limits, &cache, &c, &mut |s| {
            seen.push(s.clone());
            &s == at
        });
        assert!(made.is_err(), "not stopped at {at:?}: {seen:?}");
    }
}

#[test]
fn a_base_stopped_after_any_step_is_made_again_by_the_next_copy() {
    let Some(fs_) = reflink_fs::ReflinkFs::mount_btrfs(256) else {
        return;
    };
    let c = Copier {
        home: fs_.path().join("home"),
        project: project(fs_.path()),
        limits: CopyLimits::default(),
    };
    let dir = base_dir(&c.home.join("bases"), &c.project);
    let steps = [
        Step::Filled,
        Step::Removed(dir.join(TREE)),
        Step::Renamed(dir.join(TREE)),
        Step::Removed(dir.join(BASELINE)),
        Step::Renamed(dir.join(BASELINE)),
    ];
    for (i, at) in steps.iter().enumerate() {
        // The base as the stricter rules make it (without src/f001.txt), with its manifest.
        let older = c.copy(&format!("a{i}"), true);
        assert!(!older.copy_directory.join("src/f001.txt").exists());
        assert!(dir.join(MANIFEST).is_file());
        c.make_stopped(at);
        // The next copy under the stricter rules still leaves it out...
        let again = c.copy(&format!("c{i}"), true);
        assert!(
            !again.copy_directory.join("src/f001.txt").exists(),
            "after {at:?}"
        );
        assert_eq!(again.included_files, 19, "after {at:?}");
        // ... and, stopped once more, the next under the default rules holds it, and all
        // the others.
        c.make_stopped(at);
        let r = c.copy(&format!("b{i}"), false);
        assert!(
            r.copy_directory.join("src/f001.txt").is_file(),
            "after {at:?}"
        );
        assert_eq!(r.included_files, 20, "after {at:?}");
        for n in 0..20 {
            let name = format!("src/f{n:03}.txt");
            let held = fs::read_to_string(r.copy_directory.join(&name)).unwrap();
            assert_eq!(held, format!("text {n}\n"), "after {at:?}");
        }
    }
}
